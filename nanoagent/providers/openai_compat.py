"""OpenAI-compatible Chat Completions over plain httpx.

Used for OpenAI, OpenRouter, Ollama, DeepSeek, Groq and any server with an
`apiBase`. Importing litellm costs about 5 s on a 2-core machine and the
openai SDK 1-1.5 s; httpx (which the native Anthropic provider uses too) keeps a
one-shot turn well under 2 s. Other providers go through litellm.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from nanoagent.providers.base import (
    ChatRequest,
    ProviderError,
    ProviderEvent,
    http_client,
    post_lines,
    refused,
)
from nanoagent.providers.openai_format import ChunkReader, stream_cut, to_openai_messages, to_openai_tools


class OpenAICompatProvider:
    def __init__(self, name: str, api_key: str | None, api_base: str, idle_timeout: float):
        self.name = name
        self.api_key = api_key
        self.api_base = api_base.rstrip("/")
        self.idle_timeout = idle_timeout
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client is None:
            self._client = http_client({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {},
                                       self.idle_timeout)
        return self._client

    def prepare(self) -> None:
        self._get_client()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        body: dict[str, Any] = {
            "model": request.model.split("/", 1)[1] if "/" in request.model else request.model,
            "messages": to_openai_messages(request),
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = to_openai_tools(request)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        async with post_lines(self._get_client(), f"{self.api_base}/chat/completions", body, provider=self.name,
                              base=self.api_base, idle_timeout=self.idle_timeout,
                              status_error=lambda status, text, headers: _status_error(
                                  status, text, headers, self.name, self.api_base)) as lines:
            async for event in _parse_stream(lines, self.name, self.api_base):
                yield event


def _status_error(status: int, text: str, headers: Any, provider: str, url: str) -> ProviderError:
    message, code = text[:300], ""
    try:
        err = json.loads(text).get("error")
        if isinstance(err, dict) and err.get("message"):
            message, code = str(err["message"]), str(err.get("code") or "")
        elif isinstance(err, str):
            message = err
    except (ValueError, AttributeError):
        pass
    return refused(status, message, provider=provider, url=url, headers=headers, code=code)


async def _parse_stream(lines: AsyncIterator[str], provider: str = "openai",
                        url: str = "the server") -> AsyncIterator[ProviderEvent]:
    reader = ChunkReader()
    done = False
    broken = None  # a data line that is not JSON: a cut when it is the last one, garbage when more follow
    async for line in lines:
        if not line.startswith("data:"):
            continue
        if broken is not None:
            raise ProviderError(f"the server sent a stream line that is not JSON: {broken[:80]!r}")
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            broken = data
            continue
        if isinstance(chunk, dict) and chunk.get("error"):
            raise _status_error(500, json.dumps(chunk), None, provider, url)
        for event in reader.read(chunk):
            yield event
    if broken is not None or (not done and reader.finish is None):
        raise stream_cut()
    for event in reader.end():
        yield event
