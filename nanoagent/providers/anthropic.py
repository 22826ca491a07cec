"""Native Anthropic provider on the `anthropic` SDK (imported on first use).

Prompt caching: breakpoints on the tool list, the system prompt and the last two
user turns, so each request reads the previous request's whole prefix from cache.
The SDK's own retries are off; `retry.py` is the only retry layer.
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
    cannot_connect,
    refused,
)
from nanoagent.usage import Usage

CACHE = {"type": "ephemeral"}
BULK = ("messages", "system", "tools")  # parameters sent untransformed (see `stream`)


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, api_key: str, api_base: str | None, idle_timeout: float):
        self.api_key = api_key
        self.api_base = api_base
        self.idle_timeout = idle_timeout
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client is None:
            import anthropic
            import httpx

            self._client = anthropic.AsyncAnthropic(
                api_key=self.api_key,
                base_url=self.api_base or None,
                max_retries=0,
                timeout=httpx.Timeout(self.idle_timeout, connect=10.0),
            )
        return self._client

    def prepare(self) -> None:
        """Import the SDK ahead of the first call (it takes over a second)."""
        self._get_client()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        import anthropic
        import httpx

        try:
            params = build_params(request)
            # The SDK walks every parameter to transform it, which takes longer the longer the session; our blocks
            # need no transform (a test checks), so the bulky ones go as extra_body, which it sends as given.
            bulk = {name: params.pop(name) for name in BULK if name in params}
            raw = await self._get_client().messages.create(**params, messages=[], stream=True, extra_body=bulk)
            try:
                async for event in _translate(raw):
                    yield event
            finally:  # also when the retry layer gives up waiting: the connection is not left open
                await raw.close()
        except anthropic.APIStatusError as e:
            raise refused(e.status_code, error_message(e), provider="anthropic", url=self.url,
                          headers=e.response.headers) from e
        except (anthropic.APITimeoutError, httpx.TimeoutException) as e:
            raise ProviderError(f"no data from the model for {self.idle_timeout:.0f} s", retryable=True) from e
        except (anthropic.APIConnectionError, httpx.HTTPError) as e:
            raise cannot_connect(e, provider="anthropic", url=self.url) from e

    @property
    def url(self) -> str:
        return (self.api_base or "https://api.anthropic.com").rstrip("/")


def error_message(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(e, "message", e))


async def _translate(raw: Any) -> AsyncIterator[ProviderEvent]:
    blocks: dict[int, dict[str, Any]] = {}
    usage = Usage()
    stop_reason = "end_turn"
    finished = started = False
    async for ev in raw:
        kind = ev.type
        if kind == "message_start":
            u = ev.message.usage
            usage = Usage(
                input_tokens=u.input_tokens or 0,
                output_tokens=u.output_tokens or 0,
                cache_read_tokens=getattr(u, "cache_read_input_tokens", 0) or 0,
                cache_write_tokens=getattr(u, "cache_creation_input_tokens", 0) or 0,
            )
        elif kind == "content_block_start":
            if not started:
                started = True
                yield ReplyStarted()
            block = ev.content_block
            blocks[ev.index] = {"type": block.type, "id": getattr(block, "id", ""), "name": getattr(block, "name", ""),
                                "text": "", "json": "", "signature": "", "data": getattr(block, "data", "")}
        elif kind == "content_block_delta":
            state, delta = blocks[ev.index], ev.delta
            if delta.type == "text_delta":
                state["text"] += delta.text
                yield TextDelta(delta.text)
            elif delta.type == "input_json_delta":
                state["json"] += delta.partial_json
            elif delta.type == "thinking_delta":
                state["text"] += delta.thinking
                yield ThinkingDelta(delta.thinking)
            elif delta.type == "signature_delta":
                state["signature"] += delta.signature
        elif kind == "content_block_stop":
            state = blocks.pop(ev.index, {})
            if state.get("type") == "tool_use":
                yield ToolCallReady(ToolCall(state["id"], state["name"], state["json"] or "{}"))
            elif state.get("type") == "thinking":
                yield ThinkingBlock({"type": "thinking", "thinking": state["text"], "signature": state["signature"]})
            elif state.get("type") == "redacted_thinking":
                yield ThinkingBlock({"type": "redacted_thinking", "data": state["data"]})
        elif kind == "message_delta":
            stop_reason = ev.delta.stop_reason or stop_reason
            if ev.usage is not None and ev.usage.output_tokens is not None:
                usage = Usage(usage.input_tokens, ev.usage.output_tokens, usage.cache_read_tokens,
                              usage.cache_write_tokens)
        elif kind == "message_stop":
            finished = True
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
        params["max_tokens"] = max(request.max_tokens, request.thinking_budget + 1024)
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
    blocks: list[dict[str, Any]] = []
    if is_assistant(msg):
        blocks.extend(dict(b) for b in msg.get("thinking") or ())
    content = msg["content"]
    if isinstance(content, list):
        blocks.extend(_user_block(b) for b in content if b["type"] != "text" or b["text"])
    elif content:
        blocks.append({"type": "text", "text": content})
    for call in calls_of(msg):
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
