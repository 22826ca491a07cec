"""The one retry layer: backoff with jitter, retry-after, fallback models, one deadline.

Provider SDKs have their own retries turned off, so a failing request is tried
here at most `max_retries + 1` times per model. Nothing is retried once output
has streamed to the user: the reply would repeat itself.

One deadline (`requestDeadline`) covers every attempt, wait and fallback until the
model's reply begins; a server that accepts the connection and never answers is
given up on then, not after retries x the idle timeout. Once the reply has begun
(`ReplyStarted`) the idle timeout alone bounds it, so a long reply is never cut.

Spend caps are not this layer's: each provider of the chain may be a `metered.Metered`, which checks the caps around
its one attempt (so every retry and every fallback is checked, and a failed attempt is settled before the wait for
the next). An error marked `final` (a spend cap's `Capped`) ends the whole call: no retry, no fallback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from nanoagent.providers.base import (
    ChatRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    ReplyStarted,
    RetryNotice,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    UsageReport,
)

_OUTPUT = (TextDelta, ThinkingDelta, ToolCallReady)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_wait: float = 60.0  # a server asking for longer than this is not waited for
    deadline: float | None = 180.0  # seconds until the reply begins, over all attempts; None: no deadline

    def backoff(self, attempt: int) -> float:
        return min(self.max_delay, self.base_delay * 2**attempt) * random.uniform(0.5, 1.0)


class RetryingProvider:
    name = "retry"

    def __init__(
        self,
        chain: list[tuple[str, Provider]],
        policy: RetryPolicy,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.chain = chain
        self.policy = policy
        self.sleep = sleep

    def prepare(self) -> None:
        if self.chain:
            self.chain[0][1].prepare()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        clock = asyncio.get_running_loop().time
        deadline = None if self.policy.deadline is None else clock() + self.policy.deadline
        failures: list[str] = []
        reached = False  # some server in the chain took the request
        for position, (model, provider) in enumerate(self.chain):
            next_model = self.chain[position + 1][0] if position + 1 < len(self.chain) else ""
            attempt, last = 0, ""
            while True:
                streamed = started = False
                events = provider.stream(dataclasses.replace(request, model=model))
                try:
                    while (event := await _next(events, None if started else deadline)) is not None:
                        started = started or isinstance(event, ReplyStarted)
                        streamed = streamed or isinstance(event, _OUTPUT)
                        if isinstance(event, UsageReport):
                            event = dataclasses.replace(event, model=model)
                        yield event
                    return
                except _OutOfTime:
                    raise self._out_of_time(failures, model, attempt + 1, last) from None
                except ProviderError as e:
                    reached = reached or e.reached
                    if e.final:
                        raise
                    if streamed:
                        raise ProviderError(f"{model}: {e.message} (the reply was cut off mid-stream)",
                                            status=e.status) from e
                    if e.overflow:  # not a fallback's business: the loop makes room and sends it again
                        raise ProviderError(f"{model}: {e.message}", status=e.status, overflow=True) from e
                    wait, last = self._wait(e, attempt), e.message
                    if wait is None:
                        failures.append(f"{model}: {self._why_final(e, attempt)}")
                        if next_model:
                            yield RetryNotice(model, e.message, 0.0, next_model)
                        break
                    if deadline is not None and clock() + wait >= deadline:
                        raise self._out_of_time(failures, model, attempt + 1, last) from e
                    yield RetryNotice(model, e.message, wait, model)
                    await self.sleep(wait)
                    attempt += 1
                finally:  # the attempt's stream is closed here, also when the deadline ends it mid-wait
                    if isinstance(events, AsyncGenerator):
                        await events.aclose()
        raise ProviderError("; ".join(failures) or "no model configured", reached=reached)

    def _out_of_time(self, failures: list[str], model: str, attempts: int, last: str) -> ProviderError:
        tried = f"{attempts} attempt{'s' if attempts > 1 else ''}" + (f" (earlier: {last})" if last else "")
        return ProviderError("; ".join([*failures, f"{model}: no reply within {self.policy.deadline:g} s "
                                        f"(agents.defaults.requestDeadline; raise it for slow servers) after {tried}"]))

    def _wait(self, e: ProviderError, attempt: int) -> float | None:
        """Seconds to wait before retrying, or None when this model is done."""
        if not e.retryable or attempt >= self.policy.max_retries:
            return None
        if e.retry_after is not None:
            return None if e.retry_after > self.policy.max_retry_wait else e.retry_after
        return self.policy.backoff(attempt)

    def _why_final(self, e: ProviderError, attempt: int) -> str:
        if e.retryable and e.retry_after is not None and e.retry_after > self.policy.max_retry_wait:
            return (f"{e.message} (the server asked to wait {e.retry_after:.0f} s, more than maxRetryWait "
                    f"{self.policy.max_retry_wait:.0f} s)")
        if e.retryable:
            return f"{e.message} (after {attempt + 1} attempts)"
        return e.message


class _OutOfTime(Exception):
    """The request deadline passed before the reply began."""


async def _next(events: AsyncIterator[ProviderEvent], deadline: float | None) -> ProviderEvent | None:
    """The next event (None at the end), waiting no later than `deadline` (event-loop time) when one is given."""
    if deadline is None:
        return await anext(events, None)
    timeout = asyncio.timeout_at(deadline)
    try:
        async with timeout:
            return await anext(events, None)
    except TimeoutError:
        if timeout.expired():
            raise _OutOfTime from None
        raise
