"""Native Anthropic provider: the Messages API over plain httpx (the client the OpenAI-compatible path uses).

The anthropic SDK took 1.0-1.3 s of a 2.4 s one-shot just to import; this path needs only httpx. Only
`dream --batch` (`anthropic_batch.py`) still loads the SDK.

Prompt caching: breakpoints on the tool list, the system prompt and the last two
user turns, so each request reads the previous request's whole prefix from cache.
Nothing is retried here; `retry.py` is the only retry layer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from nanoagent.messages import Message, UserBlock, calls_of, image_label, is_assistant, is_tool
from nanoagent.providers.base import (
    ChatRequest,
    ProviderError,
    ProviderEvent,
    ReplyStarted,
    StreamEnd,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolCallReady,
    UsageReport,
    http_client,
    max_output_tokens,
    post_lines,
    refused,
)
from nanoagent.usage import Usage

CACHE = {"type": "ephemeral"}
API_VERSION = "2023-06-01"
# The HTTP status each Anthropic error type has on the Messages API: an `error` event inside a stream (it comes
# with status 200) and a batch's errored result classify as the same error answered as a status would.
ERROR_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "timeout_error": 504, "overloaded_error": 529,
}


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, api_key: str, api_base: str | None, idle_timeout: float):
        self.api_key = api_key
        self.api_base = api_base
        self.idle_timeout = idle_timeout
        self._http: Any = None

    def _get_http(self) -> Any:
        if self._http is None:
            from nanoagent import __version__

            self._http = http_client({"x-api-key": self.api_key, "anthropic-version": API_VERSION,
                                      "user-agent": f"nanoagent/{__version__}"}, self.idle_timeout)
        return self._http

    def prepare(self) -> None:
        """Load httpx and make the client ahead of the first call."""
        self._get_http()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        # The body goes as built (a test checks): no SDK walks every block of a long session to transform it.
        body = {**build_params(request), "stream": True}
        async with post_lines(self._get_http(), f"{self.url}/v1/messages", body, provider="anthropic", base=self.url,
                              idle_timeout=self.idle_timeout, status_error=self._status_error) as lines:
            async for event in _translate(_server_events(lines), self.url):
                yield event

    def _status_error(self, status: int, text: str, headers: Any) -> ProviderError:
        return refused(status, error_text(text), provider="anthropic", url=self.url, headers=headers)

    @property
    def url(self) -> str:
        return (self.api_base or "https://api.anthropic.com").rstrip("/")


def error_text(text: str) -> str:
    """The message of an Anthropic error body (`{"type": "error", "error": {"type", "message"}}`), else the
    start of the body as it came (a proxy's HTML page, say)."""
    try:
        err = json.loads(text).get("error")
    except (ValueError, AttributeError):
        err = None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    return " ".join(text.split())[:300] or "(no message)"  # one line, whatever the page held


async def _server_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """The JSON payloads of a server-sent event stream: `data:` lines joined up to each blank line. An event
    left without its blank line (the connection closed mid-event) is not an event."""
    data: list[str] = []
    async for line in lines:
        if line:
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            continue  # `event:`, `id:`, comments: each payload names its own type
        if not data:
            continue
        raw, data = "\n".join(data), []
        try:
            payload = json.loads(raw)
        except ValueError:
            raise ProviderError(f"the server sent a stream event that is not JSON: {raw[:80]!r}") from None
        if isinstance(payload, dict):
            yield payload


def _stream_error(payload: dict[str, Any], url: str) -> ProviderError:
    """An `error` event: the server failed after it had answered 200 (overloaded mid-stream, say). It is
    classified as the status its type has when it comes as an answer."""
    err = payload.get("error")
    kind = str(err.get("type") or "api_error") if isinstance(err, dict) else "api_error"
    message = str(err.get("message") or kind) if isinstance(err, dict) else kind
    return refused(ERROR_STATUS.get(kind, 500), message, provider="anthropic", url=url)


async def _translate(payloads: AsyncIterator[dict[str, Any]], url: str) -> AsyncIterator[ProviderEvent]:
    blocks: dict[int, dict[str, Any]] = {}
    usage = Usage()
    stop_reason = "end_turn"
    finished = started = False
    async for ev in payloads:
        kind = ev.get("type")
        if kind == "message_start":
            u = ev["message"].get("usage") or {}
            usage = Usage(
                input_tokens=u.get("input_tokens") or 0,
                output_tokens=u.get("output_tokens") or 0,
                cache_read_tokens=u.get("cache_read_input_tokens") or 0,
                cache_write_tokens=u.get("cache_creation_input_tokens") or 0,
            )
        elif kind == "content_block_start":
            if not started:
                started = True
                yield ReplyStarted()
            block = ev["content_block"]
            blocks[ev["index"]] = {"type": block.get("type"), "id": block.get("id", ""), "name": block.get("name", ""),
                                   "text": "", "json": "", "signature": "", "data": block.get("data", "")}
        elif kind == "content_block_delta":
            state, delta = blocks[ev["index"]], ev["delta"]
            dtype = delta.get("type")
            if dtype == "text_delta":
                state["text"] += delta["text"]
                yield TextDelta(delta["text"])
            elif dtype == "input_json_delta":
                state["json"] += delta["partial_json"]
            elif dtype == "thinking_delta":
                state["text"] += delta["thinking"]
                yield ThinkingDelta(delta["thinking"])
            elif dtype == "signature_delta":
                state["signature"] += delta["signature"]
        elif kind == "content_block_stop":
            state = blocks.pop(ev["index"], {})
            if state.get("type") == "tool_use":
                yield ToolCallReady(ToolCall(state["id"], state["name"], state["json"] or "{}"))
            elif state.get("type") == "thinking":
                yield ThinkingBlock({"type": "thinking", "thinking": state["text"], "signature": state["signature"]})
            elif state.get("type") == "redacted_thinking":
                yield ThinkingBlock({"type": "redacted_thinking", "data": state["data"]})
        elif kind == "message_delta":
            stop_reason = (ev.get("delta") or {}).get("stop_reason") or stop_reason
            out = (ev.get("usage") or {}).get("output_tokens")
            if out is not None:
                usage = Usage(usage.input_tokens, out, usage.cache_read_tokens, usage.cache_write_tokens)
        elif kind == "message_stop":
            finished = True
        elif kind == "error":
            raise _stream_error(ev, url)
    if not finished:
        raise ProviderError("the stream ended before the reply was complete", retryable=True)
    yield UsageReport(usage)
    yield StreamEnd(stop_reason)


def build_params(request: ChatRequest) -> dict[str, Any]:
    params: dict[str, Any] = {
        "model": request.model.removeprefix("anthropic/"),
        "max_tokens": request.max_tokens,
        "messages": to_anthropic_messages(request.messages),
    }
    if request.system:
        params["system"] = [{"type": "text", "text": request.system, "cache_control": CACHE}]
    if request.tools:
        tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools]
        tools[-1]["cache_control"] = CACHE
        params["tools"] = tools
    if request.thinking_budget > 0:
        params["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
        params["max_tokens"] = max_output_tokens(request)
    elif request.temperature is not None:
        params["temperature"] = request.temperature
    return params


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = "assistant" if is_assistant(msg) else "user"
        blocks = _blocks(msg)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)  # the API wants alternating roles
        else:
            out.append({"role": role, "content": blocks})
    user_turns = [m for m in out if m["role"] == "user"]
    for m in user_turns[-2:]:
        m["content"][-1] = {**m["content"][-1], "cache_control": CACHE}
    return out


def _blocks(msg: Message) -> list[dict[str, Any]]:
    if is_tool(msg):
        text = msg["content"] or "(empty)"
        images = [_user_block(b) for b in msg.get("images") or ()]  # a tool_result may hold image blocks itself
        return [{"type": "tool_result", "tool_use_id": msg["tool_call_id"],
                 "content": [{"type": "text", "text": text}, *images] if images else text,
                 **({"is_error": True} if msg.get("is_error") else {})}]
    content = msg["content"]
    thinking = msg.get("thinking") if is_assistant(msg) else None
    calls = calls_of(msg)
    if isinstance(content, str) and not thinking and not calls:  # most of a long session: once a turn each
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = [dict(b) for b in thinking or ()]
    if isinstance(content, list):
        blocks.extend(_user_block(b) for b in content if b["type"] != "text" or b["text"])
    elif content:
        blocks.append({"type": "text", "text": content})
    for call in calls:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": _as_object(call["arguments"])})
    return blocks


def _user_block(block: UserBlock) -> dict[str, Any]:
    if block["type"] == "image_data":
        return {"type": "image", "source": {"type": "base64", "media_type": block["media_type"], "data": block["data"]}}
    if block["type"] == "image":  # a reference nobody resolved: say so rather than fail the request
        return {"type": "text", "text": f"[image {image_label(block)} not loaded]"}
    return {"type": "text", "text": block["text"]}


def _as_object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
