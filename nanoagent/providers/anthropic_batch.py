"""Anthropic calls through the Message Batches API: half the price, minutes (up to a day) of latency.

Meant for work nobody waits on, such as `nanoagent dream --batch` from cron. Each call is a batch
holding one request; the provider polls until the batch ends, then yields the events the streaming
provider would, each content block whole. Nothing is retried here: a failed, expired or timed-out
batch is a ProviderError for `retry.py`, which sends a new batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from nanoagent.config.schema import Config
from nanoagent.errors import ConfigError
from nanoagent.providers.anthropic import ERROR_STATUS, AnthropicProvider, build_params
from nanoagent.providers.base import (
    ChatRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    StreamEnd,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolCallReady,
    UsageReport,
    cannot_connect,
    classify_status,
    refused,
)
from nanoagent.providers.registry import missing_key_message, provider_name, with_retries
from nanoagent.spend import Meter
from nanoagent.usage import Usage

T = TypeVar("T")

CUSTOM_ID = "nanoagent-request"  # every batch holds exactly one request, so a fixed id is unique within it
POLL_BACKOFF = 1.5  # each wait between polls is this much longer than the last, up to max_poll_interval
CANCEL_TIMEOUT = 10.0  # seconds a best-effort cancel may take before the original error is raised anyway

class AnthropicBatchProvider(AnthropicProvider):
    """The native provider's request body, sent as a one-request Message Batch through the anthropic SDK (its
    import takes over a second, which a batch that waits minutes does not notice)."""

    name = "anthropic-batch"

    def __init__(
        self,
        api_key: str,
        api_base: str | None,
        idle_timeout: float,
        *,
        poll_interval: float = 1.0,
        max_poll_interval: float = 30.0,
        timeout: float = 3600.0,
    ):
        super().__init__(api_key, api_base, idle_timeout)
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        self.timeout = timeout
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
        """Import the SDK ahead of the first call."""
        self._get_client()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        batches = self._get_client().messages.batches
        params = build_params(request)
        batch = await self._call(batches.create(requests=[{"custom_id": CUSTOM_ID, "params": params}]))
        try:
            batch = await self._wait_until_ended(batch)
        except BaseException:
            # A batch left running is still processed and billed: cancel it on timeout, on a failed
            # poll and when the caller's task is cancelled, then raise what happened.
            await self._cancel(batch.id)
            raise
        for event in _events(batch.id, await self._result(batch.id)):
            yield event

    async def _wait_until_ended(self, batch: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        interval = self.poll_interval
        while batch.processing_status != "ended":
            remaining = deadline - loop.time()
            if remaining <= 0:
                # Not retryable: the timeout is the whole budget for this call, not for one attempt.
                raise ProviderError(
                    f"batch {batch.id} did not finish within {self.timeout:g} s, so it was canceled: allow it "
                    "more time (the batch timeout) or run without --batch to call the model directly")
            await asyncio.sleep(min(interval, remaining))
            interval = min(self.max_poll_interval, interval * POLL_BACKOFF)
            batch = await self._call(self._get_client().messages.batches.retrieve(batch.id))
        return batch

    async def _cancel(self, batch_id: str) -> None:
        """Best effort: a failure here must not hide the error that made us cancel."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._get_client().messages.batches.cancel(batch_id), CANCEL_TIMEOUT)

    async def _result(self, batch_id: str) -> Any:
        batches = self._get_client().messages.batches

        async def read() -> Any:
            results = await batches.results(batch_id)
            try:
                async for line in results:
                    if line.custom_id == CUSTOM_ID:
                        return line.result
            finally:
                await results.close()
            return None

        result = await self._call(read())
        if result is None:
            raise ProviderError(f"batch {batch_id} ended without a result for its request", retryable=True)
        return result

    async def _call(self, pending: Awaitable[T]) -> T:
        """Await one Batches API call; its failures become ProviderErrors as in the streaming provider."""
        import anthropic
        import httpx

        try:
            return await pending
        except anthropic.APIStatusError as e:
            raise refused(e.status_code, error_message(e), provider="anthropic", url=self.url,
                          headers=e.response.headers) from e
        except (anthropic.APITimeoutError, httpx.TimeoutException) as e:
            raise ProviderError(f"no answer from the Batches API for {self.idle_timeout:.0f} s",
                                retryable=True) from e
        except (anthropic.APIConnectionError, httpx.HTTPError) as e:
            raise cannot_connect(e, provider="anthropic", url=self.url) from e


def error_message(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(e, "message", e))


def _events(batch_id: str, result: Any) -> list[ProviderEvent]:
    """The events for one batch result, or the ProviderError it stands for."""
    if result.type == "succeeded":
        return _message_events(result.message)
    if result.type == "errored":
        error = result.error.error
        kind = getattr(error, "type", "api_error")
        message = getattr(error, "message", "") or kind
        status = ERROR_STATUS.get(kind, 500)
        raise ProviderError(f"{status} {message} (batch {batch_id}: {kind})", status=status,
                            retryable=classify_status(status, message))
    if result.type == "expired":
        raise ProviderError(f"batch {batch_id} expired before Anthropic processed its request "
                            "(a batch has 24 hours)", retryable=True)
    if result.type == "canceled":
        raise ProviderError(f"batch {batch_id} was canceled (in the Console or through the API) before its "
                            "request ran", retryable=True)
    raise ProviderError(f"batch {batch_id} returned a result of unknown type '{result.type}': "
                        "upgrade nanoagent or run without --batch")


def _message_events(message: Any) -> list[ProviderEvent]:
    """A finished message as the streaming provider's events, one per content block."""
    events: list[ProviderEvent] = []
    for block in message.content:
        if block.type == "text" and block.text:
            events.append(TextDelta(block.text))
        elif block.type == "thinking":
            if block.thinking:
                events.append(ThinkingDelta(block.thinking))
            events.append(ThinkingBlock({"type": "thinking", "thinking": block.thinking,
                                         "signature": block.signature}))
        elif block.type == "redacted_thinking":
            events.append(ThinkingBlock({"type": "redacted_thinking", "data": block.data}))
        elif block.type == "tool_use":
            events.append(ToolCallReady(ToolCall(block.id, block.name, json.dumps(block.input))))
    u = message.usage
    usage = Usage(
        input_tokens=u.input_tokens or 0,
        output_tokens=u.output_tokens or 0,
        cache_read_tokens=getattr(u, "cache_read_input_tokens", 0) or 0,
        cache_write_tokens=getattr(u, "cache_creation_input_tokens", 0) or 0,
    )
    return [*events, UsageReport(usage), StreamEnd(message.stop_reason or "end_turn")]


def build_batch_provider(
    config: Config,
    model: str | None = None,
    *,
    poll_interval: float = 1.0,
    max_poll_interval: float = 30.0,
    timeout: float = 3600.0,
    meter: Meter | None = None,
) -> Provider | None:
    """`model` (default: the configured model) through the Batches API behind the retry layer (with `meter`'s spend
    check, its prices halved as Batches bill).

    None when the model is not served by the native Anthropic provider (another vendor, or forced
    through `litellm/`): the caller then calls the model directly with `build_provider`.
    """
    model = model or config.defaults.model
    if model.startswith("litellm/") or provider_name(model) != "anthropic":
        return None
    if poll_interval <= 0 or max_poll_interval <= 0 or timeout <= 0:
        raise ConfigError(f"Batch polling needs positive seconds (poll interval {poll_interval}, "
                          f"max poll interval {max_poll_interval}, timeout {timeout}): pass values above 0.")
    settings = config.provider("anthropic")
    if not settings.api_key:
        raise ConfigError(missing_key_message("anthropic"))
    provider = AnthropicBatchProvider(settings.api_key, settings.api_base, config.defaults.stream_idle_timeout,
                                      poll_interval=poll_interval, max_poll_interval=max_poll_interval,
                                      timeout=timeout)
    if meter is not None:
        meter = dataclasses.replace(meter, price_factor=0.5)
    return with_retries(config, [(model, provider)], deadline=False, meter=meter)
