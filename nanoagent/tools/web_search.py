"""web_search's backends: Brave, Tavily, SearXNG and DuckDuckGo's HTML page, each over plain HTTP.

The backends are endpoints the user chose in config, so they are not put through the address
guard that web_fetch uses; the pages their results point at are, when fetched.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from nanoagent.config.schema import WebSearchConfig
from nanoagent.tools.base import ToolError
from nanoagent.tools.html_markdown import load_converter

if TYPE_CHECKING:
    import httpx

DEFAULT_BASES = {
    "brave": "https://api.search.brave.com",
    "tavily": "https://api.tavily.com",
    "duckduckgo": "https://html.duckduckgo.com",
}
KEY_VARIABLES = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
BROWSER_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"

NOT_CONFIGURED = (
    "Web search is not set up, so there are no results. The user can set tools.web.search.provider in "
    "config.json to duckduckgo (no key needed), brave (key in tools.web.search.apiKey or BRAVE_API_KEY), "
    "tavily (tools.web.search.apiKey or TAVILY_API_KEY) or searxng (their instance in tools.web.search.url). "
    "web_fetch still reads pages whose URL you know."
)


@dataclass(frozen=True)
class Hit:
    title: str
    url: str
    snippet: str


Send = Callable[["httpx.AsyncClient"], Awaitable["httpx.Response"]]


async def search(config: WebSearchConfig, query: str, count: int, timeout: float,
                 env: Mapping[str, str] | None = None) -> list[Hit]:
    """The provider's first `count` results for `query`. The provider must be set (see NOT_CONFIGURED)."""
    env = os.environ if env is None else env
    name = config.provider
    key = config.api_key or (env.get(KEY_VARIABLES[name]) if name in KEY_VARIABLES else None)
    if name in KEY_VARIABLES and not key:
        raise ToolError(f"{name} search needs an API key: set tools.web.search.apiKey in config.json or "
                        f"{KEY_VARIABLES[name]}, or use provider duckduckgo, which needs none.")
    base = (config.url or config.api_base) if name == "searxng" else (config.api_base or DEFAULT_BASES[name])
    if not base:
        raise ToolError("searxng search needs the instance to ask: set tools.web.search.url in config.json, "
                        "e.g. http://localhost:8888.")
    base = base.rstrip("/")
    backend = BACKENDS[name]
    try:
        async with asyncio.timeout(timeout):
            return (await backend(base, key or "", query, count, timeout))[:count]
    except TimeoutError:
        raise ToolError(f"{name} search did not answer within {timeout:g} s (tools.web.timeout); "
                        "try again later, or set another tools.web.search.provider.") from None


async def _request(name: str, base: str, send: Send, timeout: float) -> httpx.Response:
    """One request to a backend, with every failure turned into one line naming the backend and the fix."""
    import httpx

    async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client:
        try:
            response = await send(client)
            await response.aread()
        except httpx.TimeoutException:
            raise ToolError(f"{name} search did not answer within {timeout:g} s (tools.web.timeout); "
                            "try again later, or set another tools.web.search.provider.") from None
        except httpx.HTTPError as e:
            raise ToolError(f"{name} search failed: cannot reach {base} ({e or type(e).__name__}); check "
                            "tools.web.search.apiBase (or url) and the network.") from None
    status = response.status_code
    if status in (401, 403):
        fix = (f"check tools.web.search.apiKey or {KEY_VARIABLES[name]}" if name in KEY_VARIABLES
               else "check that the instance allows the json format (search.formats in its settings.yml)"
               if name == "searxng" else "wait a while, or set another tools.web.search.provider")
        raise ToolError(f"{name} search refused the request (HTTP {status}); {fix}.")
    if status == 429:
        raise ToolError(f"{name} search is rate limited (HTTP 429); wait before searching again, or set "
                        "another tools.web.search.provider.")
    if status >= 400:
        raise ToolError(f"{name} search failed with HTTP {status}: {response.text[:200]!r}; try again later, or "
                        "check tools.web.search.apiBase.")
    return response


def _json(name: str, response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        kind = response.headers.get("content-type", "no content type")
        raise ToolError(f"{name} search answered with something other than a JSON object ({kind}); check that "
                        "tools.web.search.apiBase (or url) points at the search API.")
    return data


def _hits(items: Any, snippet_key: str) -> list[Hit]:
    if not isinstance(items, list):
        return []
    return [Hit(str(item.get("title") or "").strip(), str(item["url"]), str(item.get(snippet_key) or "").strip())
            for item in items if isinstance(item, dict) and item.get("url")]


async def _brave(base: str, key: str, query: str, count: int, timeout: float) -> list[Hit]:
    response = await _request("brave", base, lambda client: client.get(
        f"{base}/res/v1/web/search", params={"q": query, "count": min(count, 20)},
        headers={"Accept": "application/json", "X-Subscription-Token": key}), timeout)
    web = _json("brave", response).get("web")
    return _hits(web.get("results") if isinstance(web, dict) else None, "description")


async def _tavily(base: str, key: str, query: str, count: int, timeout: float) -> list[Hit]:
    body = {"api_key": key, "query": query, "max_results": min(count, 20)}
    response = await _request("tavily", base, lambda client: client.post(
        f"{base}/search", json=body, headers={"Authorization": f"Bearer {key}"}), timeout)
    return _hits(_json("tavily", response).get("results"), "content")


async def _searxng(base: str, key: str, query: str, count: int, timeout: float) -> list[Hit]:
    response = await _request("searxng", base, lambda client: client.get(
        f"{base}/search", params={"q": query, "format": "json"}, headers={"Accept": "application/json"}), timeout)
    return _hits(_json("searxng", response).get("results"), "content")


async def _duckduckgo(base: str, key: str, query: str, count: int, timeout: float) -> list[Hit]:
    response = await _request("duckduckgo", base, lambda client: client.post(
        f"{base}/html/", data={"q": query}, headers={"User-Agent": BROWSER_AGENT}), timeout)
    if response.status_code == 202:  # DuckDuckGo's answer when it suspects a bot
        raise ToolError("duckduckgo search asked for a bot check instead of answering; wait a while before "
                        "searching again, or set another tools.web.search.provider.")
    return await asyncio.to_thread(parse_duckduckgo, response.text)


BACKENDS: dict[str, Callable[[str, str, str, int, float], Awaitable[list[Hit]]]] = {
    "brave": _brave, "tavily": _tavily, "searxng": _searxng, "duckduckgo": _duckduckgo,
}


def parse_duckduckgo(html: str) -> list[Hit]:
    """Results from DuckDuckGo's HTML page: each `a.result__a` and the `.result__snippet` after it; ads left out."""
    h2m = load_converter()
    collector = _DuckDuckGoResults()
    h2m.convert(html, h2m.ConversionOptions(extract_metadata=False), visitor=collector)
    return [Hit(title, url, snippet) for title, url, snippet in collector.hits
            if urlsplit(url).scheme in ("http", "https") and "duckduckgo.com/y.js" not in url]


_CONTINUE = {"type": "continue"}


class _DuckDuckGoResults:
    """An html-to-markdown visitor: it keeps the result links and snippets and renders bold as plain text."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str, str]] = []

    def visit_link(self, ctx: Any, href: str, text: str, title: str) -> dict[str, str]:
        classes = ctx.attributes().get("class", "").split()
        if "result__a" in classes:
            self.hits.append((text.strip(), unwrap_duckduckgo(href), ""))
        elif "result__snippet" in classes:
            self._snippet(text)
        return _CONTINUE

    def visit_element_end(self, ctx: Any, output: str) -> dict[str, str]:
        if ctx.tag_name != "a" and "result__snippet" in ctx.attributes().get("class", "").split():
            self._snippet(output)
        return _CONTINUE

    def visit_strong(self, ctx: Any, text: str) -> dict[str, str]:
        return {"type": "custom", "output": text}

    def visit_emphasis(self, ctx: Any, text: str) -> dict[str, str]:
        return {"type": "custom", "output": text}

    def _snippet(self, text: str) -> None:
        if self.hits and not self.hits[-1][2]:
            title, url, _ = self.hits[-1]
            self.hits[-1] = (title, url, " ".join(text.split()))


def unwrap_duckduckgo(href: str) -> str:
    """The target of DuckDuckGo's `/l/?uddg=<target>` redirect link; any other link as it is."""
    parts = urlsplit(href if "://" in href or not href.startswith("//") else "https:" + href)
    target = parse_qs(parts.query).get("uddg")
    if parts.path.startswith("/l/") and target:
        return target[0]
    return parts.geturl()
