"""Every provider that is neither Anthropic nor OpenAI-compatible goes through litellm.

litellm takes seconds to import, so it loads on the first call. Its own
retries are off; `retry.py` is the only retry layer.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from nanoagent.providers.base import (
    ChatRequest,
    ProviderError,
    ProviderEvent,
    classify_status,
    is_overflow,
    parse_retry_after,
)
from nanoagent.providers.openai_format import ChunkReader, stream_cut, to_openai_messages, to_openai_tools


def _import_litellm() -> Any:
    # Without this, importing litellm fetches a price table from the internet.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.drop_params = True
    return litellm


class LiteLLMProvider:
    name = "litellm"

    def __init__(self, api_key: str | None, api_base: str | None, idle_timeout: float):
        self.api_key = api_key
        self.api_base = api_base
        self.idle_timeout = idle_timeout

    def prepare(self) -> None:
        _import_litellm()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        litellm = _import_litellm()
        kwargs: dict[str, Any] = {
            "model": request.model.removeprefix("litellm/"),
            "messages": to_openai_messages(request),
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "num_retries": 0,
            "max_retries": 0,
            "timeout": self.idle_timeout,
        }
        if request.tools:
            kwargs["tools"] = to_openai_tools(request)
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if self.api_key:
            kwargs["api_key"] = self.api_key
        if self.api_base:
            kwargs["api_base"] = self.api_base
        try:
            stream = await litellm.acompletion(**kwargs)
            async for event in _translate(stream):
                yield event
        except ProviderError:
            raise
        except Exception as e:  # noqa: BLE001 - litellm raises many types; classify by status
            raise _classify(e, self.idle_timeout) from e


def _classify(e: Exception, idle_timeout: float) -> ProviderError:
    original = getattr(e, "original_exception", None)
    if type(e).__name__ == "MidStreamFallbackError" and isinstance(original, Exception):
        e = original  # litellm wraps a failure mid-stream (a read timeout) as a 500
    status = getattr(e, "status_code", None)
    status = status if isinstance(status, int) else None
    message = str(getattr(e, "message", "") or e)
    response = getattr(e, "response", None)
    headers = getattr(response, "headers", None) or getattr(e, "litellm_response_headers", None)
    name = type(e).__name__
    if "Timeout" in name or "Timeout" in type(e.__cause__ or e.__context__).__name__:
        return ProviderError(f"no data from the model for {idle_timeout:.0f} s", retryable=True)
    if status is None and "APIConnectionError" in name:
        return ProviderError(f"connection failed: {message}", retryable=True)
    overflow = name == "ContextWindowExceededError" or is_overflow(status, message)
    if status is None and ("BadRequest" in name or "NotFound" in name or "Authentication" in name or overflow):
        return ProviderError(message, retryable=False, overflow=overflow)
    return ProviderError(f"{status or ''} {message}".strip(), status=status, overflow=overflow,
                         retryable=classify_status(status, message) and not overflow,
                         retry_after=parse_retry_after(headers))


async def _translate(stream: Any) -> AsyncIterator[ProviderEvent]:
    reader = ChunkReader()
    async for chunk in stream:
        for event in reader.read(chunk):
            yield event
    # when the connection closes early litellm makes up a final "stop"; its own record says none was sent
    finish = reader.finish
    sent = getattr(stream, "received_finish_reason", finish) or getattr(stream, "intermittent_finish_reason", None)
    if finish is None or sent is None:
        raise stream_cut()
    for event in reader.end():
        yield event
