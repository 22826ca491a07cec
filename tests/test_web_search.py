"""web_search against local stand-ins that answer in each backend's real shape, over real HTTP."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from nanoagent.config.schema import WebConfig, WebSearchConfig
from nanoagent.errors import ConfigError
from nanoagent.tools import ToolContext, ToolError
from nanoagent.tools.web import web_tools
from nanoagent.tools.web_search import unwrap_duckduckgo
from tests.web_server import WebServer, reply

BRAVE_ANSWER = {
    "type": "search",
    "query": {"original": "nanoagent"},
    "web": {"type": "search", "results": [
        {"title": "nanoagent on GitHub", "url": "https://github.com/example/nanoagent",
         "description": "A personal AI agent for the <strong>terminal</strong>.", "age": "2 days ago"},
        {"title": "Docs", "url": "https://nanoagent.example/docs", "description": "How to install it."},
    ]},
}
TAVILY_ANSWER = {
    "query": "nanoagent", "answer": None, "images": [], "response_time": 0.9,
    "results": [{"title": "nanoagent", "url": "https://nanoagent.example/", "content": "An agent you can read.",
                 "score": 0.93, "raw_content": None}],
}
SEARXNG_ANSWER = {
    "query": "nanoagent", "number_of_results": 0,
    "results": [{"title": "First", "url": "https://one.example/", "content": "one", "engine": "brave"},
                {"title": "Second", "url": "https://two.example/", "content": "two", "engine": "mojeek"},
                {"title": "Third", "url": "https://three.example/", "engine": "wikipedia"}],
    "answers": [], "suggestions": [], "unresponsive_engines": [],
}
DUCKDUCKGO_PAGE = """<!DOCTYPE html><html><head><title>nanoagent at DuckDuckGo</title></head><body>
<form action="/html/" method="post"><input name="q" value="nanoagent"></form>
<div class="serp__results"><div id="links" class="results">
<div class="result results_links results_links_deep result--ad "><div class="links_main links_deep result__body">
<h2 class="result__title"><a rel="nofollow" class="result__a" href="https://duckduckgo.com/y.js?ad_domain=ads.example&amp;u3=x">An advert</a></h2>
<a class="result__snippet" href="https://duckduckgo.com/y.js?ad_domain=ads.example">Buy now.</a></div></div>
<div class="result results_links results_links_deep web-result "><div class="links_main links_deep result__body">
<h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fgithub.com%2Fexample%2Fnanoagent%3Ftab%3Dreadme&amp;rut=4f2a">nanoagent: an <b>agent</b> for the terminal</a></h2>
<div class="result__extras"><div class="result__extras__url"><a class="result__url" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fgithub.com%2Fexample%2Fnanoagent&amp;rut=4f2a">github.com/example/nanoagent</a></div></div>
<a class="result__snippet" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fgithub.com%2Fexample%2Fnanoagent&amp;rut=4f2a">A personal <b>AI agent</b> you can read in an afternoon &amp; change.</a>
<div class="clear"></div></div></div>
<div class="result results_links results_links_deep web-result "><div class="links_main links_deep result__body">
<h2 class="result__title"><a rel="nofollow" class="result__a" href="https://nanoagent.example/docs">Docs</a></h2>
<a class="result__snippet" href="https://nanoagent.example/docs">Install and configure.</a></div></div>
</div></div></body></html>"""


def search(query: str, env: dict | None = None, count: int | None = None, timeout: float = 5.0, **search) -> str:
    _, web_search = web_tools(WebConfig(timeout=timeout, search=WebSearchConfig(**search)))
    arguments: dict = {"query": query} if count is None else {"query": query, "count": count}
    return asyncio.run(web_search.call(ToolContext(Path(".")), arguments))


def search_error(query: str, **kwargs) -> str:
    with pytest.raises(ToolError) as info:
        search(query, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def query_of(path: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(path).query)


def test_brave_sends_the_key_header_and_numbers_its_results():
    with WebServer({"/res/v1/web/search": reply(json.dumps(BRAVE_ANSWER), "application/json")}) as server:
        out = search("nanoagent", provider="brave", api_key="brave-key", api_base=server.url, count=3)
    seen = server.requests[0]
    assert (seen.method, seen.headers["X-Subscription-Token"]) == ("GET", "brave-key")
    assert query_of(seen.path) == {"q": ["nanoagent"], "count": ["3"]}
    assert out == ("2 results for 'nanoagent' from brave:\n"
                   "1. nanoagent on GitHub\n   https://github.com/example/nanoagent\n"
                   "   A personal AI agent for the <strong>terminal</strong>.\n"
                   "2. Docs\n   https://nanoagent.example/docs\n   How to install it.")


def test_the_brave_key_may_come_from_brave_api_key(monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", "from-env")
    with WebServer({"/res/v1/web/search": reply(json.dumps(BRAVE_ANSWER), "application/json")}) as server:
        assert "1. nanoagent on GitHub" in search("nanoagent", provider="brave", api_base=server.url)
    assert server.requests[0].headers["X-Subscription-Token"] == "from-env"


def test_tavily_posts_the_key_and_query_as_json(monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    with WebServer({"/search": reply(json.dumps(TAVILY_ANSWER), "application/json")}) as server:
        out = search("nanoagent", provider="tavily", api_base=server.url + "/", count=4)
    seen = server.requests[0]
    assert seen.method == "POST" and seen.headers["Authorization"] == "Bearer tvly-test"
    assert json.loads(seen.body) == {"api_key": "tvly-test", "query": "nanoagent", "max_results": 4}
    assert out == ("1 result for 'nanoagent' from tavily:\n"
                   "1. nanoagent\n   https://nanoagent.example/\n   An agent you can read.")


def test_searxng_asks_the_configured_instance_for_json_and_keeps_count_results():
    with WebServer({"/search": reply(json.dumps(SEARXNG_ANSWER), "application/json")}) as server:
        out = search("nanoagent", provider="searxng", url=server.url, count=2)
    assert query_of(server.requests[0].path) == {"q": ["nanoagent"], "format": ["json"]}
    assert out == ("2 results for 'nanoagent' from searxng:\n"
                   "1. First\n   https://one.example/\n   one\n2. Second\n   https://two.example/\n   two")


def test_duckduckgo_needs_no_key_and_its_redirect_links_are_unwrapped():
    with WebServer({"/html/": reply(DUCKDUCKGO_PAGE)}) as server:
        out = search("nanoagent", provider="duckduckgo", api_base=server.url)
    seen = server.requests[0]
    assert seen.method == "POST" and parse_qs(seen.body.decode()) == {"q": ["nanoagent"]}
    assert out == ("2 results for 'nanoagent' from duckduckgo:\n"
                   "1. nanoagent: an agent for the terminal\n   https://github.com/example/nanoagent?tab=readme\n"
                   "   A personal AI agent you can read in an afternoon & change.\n"
                   "2. Docs\n   https://nanoagent.example/docs\n   Install and configure.")


def test_duckduckgo_redirect_links_unwrap_to_their_target():
    assert unwrap_duckduckgo("//duckduckgo.com/l/?uddg=https%3A%2F%2Fa.example%2Fx%3Fy%3D1%26z%3D2&rut=9") == \
        "https://a.example/x?y=1&z=2"
    assert unwrap_duckduckgo("/l/?uddg=https%3A%2F%2Fb.example%2F") == "https://b.example/"
    assert unwrap_duckduckgo("https://c.example/page") == "https://c.example/page"


def test_a_duckduckgo_bot_check_is_a_clear_error():
    with WebServer({"/html/": reply("<html><body>anomaly</body></html>", status=202)}) as server:
        message = search_error("nanoagent", provider="duckduckgo", api_base=server.url)
    assert message.startswith("duckduckgo search asked for a bot check")


def test_no_provider_is_a_result_naming_the_config_key_and_the_no_key_option():
    out = search("anything")
    assert "tools.web.search.provider" in out and "duckduckgo (no key needed)" in out


def test_a_missing_key_names_the_config_key_and_the_variable():
    message = search_error("nanoagent", provider="tavily")
    assert message == ("tavily search needs an API key: set tools.web.search.apiKey in config.json or "
                       "TAVILY_API_KEY, or use provider duckduckgo, which needs none.")
    assert "tools.web.search.url" in search_error("nanoagent", provider="searxng")


def test_an_unknown_provider_is_a_config_error():
    with pytest.raises(ConfigError, match="`tools.web.search.provider` is 'google'; use one of brave, tavily"):
        WebSearchConfig(provider="google")


@pytest.mark.parametrize("route, expected", [
    (reply('{"error": "bad key"}', "application/json", status=401),
     "brave search refused the request (HTTP 401); check tools.web.search.apiKey or BRAVE_API_KEY."),
    (reply('{"error": "slow down"}', "application/json", status=429),
     "brave search is rate limited (HTTP 429); wait before searching again, or set another "
     "tools.web.search.provider."),
    (reply("<html>a login page</html>", "text/html"),
     "brave search answered with something other than a JSON object (text/html); check that "
     "tools.web.search.apiBase (or url) points at the search API."),
    (reply("upstream broke", "text/plain", status=502),
     "brave search failed with HTTP 502: 'upstream broke'; try again later, or check tools.web.search.apiBase."),
], ids=["unauthorized", "rate-limited", "not-json", "server-error"])
def test_backend_failures_are_one_line_errors_naming_the_backend_and_the_fix(route, expected):
    with WebServer({"/res/v1/web/search": route}) as server:
        assert search_error("q", provider="brave", api_key="k", api_base=server.url) == expected


def test_a_backend_that_does_not_answer_in_time_is_a_clear_error():
    server = WebServer({})
    server.routes["/search"] = lambda handler: server.closing.wait(30)
    with server:
        message = search_error("q", provider="searxng", url=server.url, timeout=0.5)
    assert message == ("searxng search did not answer within 0.5 s (tools.web.timeout); try again later, "
                       "or set another tools.web.search.provider.")


def test_an_unreachable_backend_names_the_setting_to_check():
    with WebServer({}) as server:
        base = server.url
    message = search_error("q", provider="searxng", url=base)
    assert message.startswith(f"searxng search failed: cannot reach {base}")
    assert "check tools.web.search.apiBase (or url)" in message


def test_a_searxng_instance_without_json_says_how_to_enable_it():
    with WebServer({"/search": reply("Forbidden", "text/plain", status=403)}) as server:
        message = search_error("q", provider="searxng", url=server.url)
    assert "search.formats in its settings.yml" in message
