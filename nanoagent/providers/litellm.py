"""Every provider that is neither Anthropic nor OpenAI-compatible goes through litellm.

litellm takes seconds to import, so it loads on the first call. Its own
retries are off; `retry.py` is the only retry layer.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from typing import Any

from nanoagent.providers.base import (
    ChatRequest,
    ProviderError,
    ProviderEvent,
    cannot_connect,
    classify_status,
    is_overflow,
    parse_retry_after,
    refused,
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

    def __init__(self, api_key: str | None, api_base: str | None, idle_timeout: float, provider: str = "litellm"):
        self.api_key = api_key
        self.api_base = api_base
        self.idle_timeout = idle_timeout
        self.provider = provider  # the model's provider, whose settings an error names

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
        if not self.api_key and not self.api_base:
            self._check_key(litellm, kwargs["model"])
        try:
            stream = await litellm.acompletion(**kwargs)
            async for event in _translate(stream):
                yield event
        except ProviderError:
            raise
        except Exception as e:  # noqa: BLE001 - litellm raises many types; classify by status
            raise self._classify(e) from e

    def _check_key(self, litellm: Any, model: str) -> None:
        """Fail before sending when the provider's hosted API needs a key no variable holds: without one the call
        fails in ways that look retryable. Only API-key variables count (cloud credentials may come from files)."""
        try:
            missing = list(litellm.validate_environment(model=model).get("missing_keys") or [])
        except Exception:  # noqa: BLE001 - a model litellm cannot place is left to the call to report
            return
        if missing and all(name.endswith("_API_KEY") for name in missing):
            raise ProviderError(f"No API key for {self.provider}: set {' or '.join(missing)} or "
                                f"providers.{self.provider}.apiKey in config.json "
                                f"(or run `nanoagent onboard --provider {self.provider}`)")

    def _classify(self, e: Exception) -> ProviderError:
        original = getattr(e, "original_exception", None)
        if type(e).__name__ == "MidStreamFallbackError" and isinstance(original, Exception):
            e = original  # litellm wraps a failure mid-stream (a read timeout) as a 500
        status = getattr(e, "status_code", None)
        status = status if isinstance(status, int) else None
        message = plain(str(getattr(e, "message", "") or e))
        response = getattr(e, "response", None)
        headers = getattr(response, "headers", None) or getattr(e, "litellm_response_headers", None)
        name = type(e).__name__
        url = self.api_base or f"the {self.provider} API"
        if "Timeout" in name or "Timeout" in type(e.__cause__ or e.__context__).__name__:
            return ProviderError(f"no data from the model for {self.idle_timeout:.0f} s", retryable=True)
        connection = "APIConnectionError" in name or "Connection error" in message
        if connection or ((status is None or status >= 500) and "Cannot connect" in message):
            return cannot_connect(e, provider=self.provider, url=url)  # litellm reports some as a 500
        overflow = name == "ContextWindowExceededError" or is_overflow(status, message)
        if status is None and ("BadRequest" in name or "NotFound" in name or "Authentication" in name or overflow):
            return ProviderError(message, retryable=False, overflow=overflow)
        if status is None:
            return ProviderError(message, retryable=classify_status(status, message) and not overflow,
                                 retry_after=parse_retry_after(headers))
        failure = refused(status, message, provider=self.provider, url=url, headers=headers)
        if overflow and not failure.overflow:
            failure.overflow, failure.retryable = True, False
        return failure


def plain(message: str) -> str:
    """litellm's message without the class names it puts in front ("litellm.NotFoundError: NotFoundError:
    OpenAIException - model not found" is "model not found")."""
    match = re.match(r"litellm\.\w+:\s*(?:\w+Error:\s*)?(?:\w+Exception\s*-\s*)?(.*)", message, re.S)
    return match.group(1) if match and match.group(1) else message


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
