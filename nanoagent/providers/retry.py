"""The one retry layer: backoff with jitter, retry-after, fallback models, one deadline.

Provider SDKs have their own retries turned off, so a failing request is tried
here at most `max_retries + 1` times per model. Nothing is retried once output
has streamed to the user: the reply would repeat itself.

One deadline (`requestDeadline`) covers every attempt, wait and fallback until the
model's reply begins; a server that accepts the connection and never answers is
given up on then, not after retries x the idle timeout. Once the reply has begun
(`ReplyStarted`) the idle timeout alone bounds it, so a long reply is never cut.

Spend caps are checked here, before every attempt (each retry, each fallback): the `Meter` reserves the attempt's
worst case (its prompt's bound in, `max_output_tokens` out (max_tokens, raised for a thinking budget), at the model's price) or refuses it with `Capped`, which
ends the whole call. The prompt's bound is its bytes (`prompt_bound`), or, when the request is the one sent before
in its session to the same model plus messages appended to it, the prompt tokens the provider reported for that one
plus the appended messages' bytes (`PromptBounds`). An attempt is settled at what it used when that is known: it ended, or the server refused it
(an error status) or was never reached; otherwise (a timeout, a dropped connection, a cancel, a reply cut off) it
may have been billed, so its worst case stays spent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import random
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from nanoagent.messages import Message
from nanoagent.providers.base import (
    ChatRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    ReplyStarted,
    RetryNotice,
    SpendNotice,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    ToolSpec,
    UsageReport,
    max_output_tokens,
)
from nanoagent.spend import CapReached, Hold, Meter, current_scope
from nanoagent.spend.bounds import BoundsMemo, memo_for
from nanoagent.tokens import message_bound, token_bound
from nanoagent.usage import Usage

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
        meter: Meter | None = None,
    ):
        self.chain = chain
        self.policy = policy
        self.sleep = sleep
        self.meter = meter

    def prepare(self) -> None:
        if self.chain:
            self.chain[0][1].prepare()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        clock = asyncio.get_running_loop().time
        deadline = None if self.policy.deadline is None else clock() + self.policy.deadline
        failures: list[str] = []
        reached = False  # some server in the chain took the request
        bounds = PromptBounds(request, memo_for(self.meter.paths.spend_dir)) if self.meter is not None else None
        for position, (model, provider) in enumerate(self.chain):
            next_model = self.chain[position + 1][0] if position + 1 < len(self.chain) else ""
            attempt, last = 0, ""
            while True:
                streamed = started = refused = reported = False
                hold = self._reserve(model, bounds.bound(model) if bounds is not None else 0,
                                     max_output_tokens(request))
                for note in hold.notes if hold is not None else ():
                    yield SpendNotice(note)
                used = Usage()
                events = provider.stream(dataclasses.replace(request, model=model))
                try:
                    while (event := await _next(events, None if started else deadline)) is not None:
                        started = started or isinstance(event, ReplyStarted)
                        streamed = streamed or isinstance(event, _OUTPUT)
                        if isinstance(event, UsageReport):
                            used, reported = used + event.usage, True
                            event = dataclasses.replace(event, model=model)
                        yield event
                    for warning in self._settle(hold, used, known=reported):  # no usage said: the worst case
                        yield SpendNotice(warning)
                    if bounds is not None and reported:
                        bounds.remember(model, used.prompt_tokens)
                    return
                except _OutOfTime:
                    raise self._out_of_time(failures, model, attempt + 1, last) from None
                except ProviderError as e:
                    refused = e.status is not None or not e.reached  # nothing done: nothing to pay
                    self._settle(hold, used, known=refused and not streamed)  # before any wait for a retry
                    reached = reached or e.reached
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
                    self._settle(hold, used, known=refused and not streamed)  # a cancel, the deadline: worst case
                    if isinstance(events, AsyncGenerator):
                        await events.aclose()
        raise ProviderError("; ".join(failures) or "no model configured", reached=reached)

    def _reserve(self, model: str, prompt: int, max_tokens: int) -> Hold | None:
        """The attempt's reservation (None without a meter); `Capped` when its worst case could cross a cap."""
        if self.meter is None:
            return None
        try:
            return self.meter.reserve(model, prompt, max_tokens)
        except CapReached as e:
            raise Capped(e) from None

    def _settle(self, hold: Hold | None, used: Usage, known: bool) -> list[str]:
        """Settle the attempt's reservation (once; later calls do nothing): the warnings to give."""
        return self.meter.settle(hold, used, known) if hold is not None and self.meter is not None else []

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


class Capped(ProviderError, CapReached):
    """A call not made because its worst case could cross a spend cap: a ProviderError (so whatever goes on after a
    failed call, a summary or a flush, goes on) that is also the CapReached it came from. Never retried."""

    def __init__(self, reached: CapReached):
        Exception.__init__(self, reached.line)  # each base's own __init__ would call the other's with its arguments
        self.__dict__.update(vars(ProviderError(reached.line, reached=False)))
        self.cap, self.line, self.worst = reached.cap, reached.line, reached.worst


def prompt_bound(request: ChatRequest) -> int:
    """An upper bound on the request's prompt tokens, without a tokenizer (a token is at least one byte)."""
    return (token_bound(request.system) + sum(message_bound(m) for m in request.messages)
            + sum(_tool_bound(tool) for tool in request.tools))


SENT_KEPT = 256  # requests remembered (one per session, model and system prompt): a small LRU


@dataclass(frozen=True)
class _Sent:
    """A request a provider answered, as far as the next one's bound needs it: its system prompt and tools (by
    fingerprint), how many messages it had, its first and last (and the last's byte bound, should it be changed in
    place), and the prompt tokens the provider reported for it."""

    count: int
    first: Message
    last: Message
    last_bound: int
    tokens: int


_sent: OrderedDict[tuple[str | None, str, str], _Sent] = OrderedDict()


class PromptBounds:
    """The upper bound on one request's prompt tokens for each model of the chain, taken before any attempt.

    A session's next request is usually its last one with messages appended (a turn's next step, the next turn):
    then its bound is the prompt tokens the provider reported for the last one plus the byte bound of the appended
    messages alone, which is close to the real count and work that does not grow with the session. Anything else (a
    first call, a pruned, archived or rewritten conversation, a changed system prompt or tool list, another model,
    whose tokenizer differs) gets the byte bound of the whole prompt (`prompt_bound`). The check compares the system
    prompt's and tools' fingerprint (its key), the message count, and the first and last earlier messages (same object
    or equal, and the last of the same size); a conversation shortened in the middle only makes the bound higher than
    needed, never lower.

    With a `memo` (the spend folder's `spend/bounds.jsonl`, `spend/bounds.py`) a new process does the same: a request
    missing from this process's memory is matched against the file by hashes of its first and last earlier messages;
    and a request matching no session counts its fixed part (system prompt and tools) at the smaller of its bytes and
    the fewest prompt tokens reported for any request with that fixed part (messages cost at least nothing, so that
    is an upper bound on the fixed part's tokens), plus its messages' bytes."""

    def __init__(self, request: ChatRequest, memo: BoundsMemo | None = None):
        self.request = request
        self.memo = memo
        scope = current_scope.get()
        messages = request.messages
        self.session = scope.session if scope is not None else None
        self.private = scope is not None and scope.private
        self.count = len(messages)
        self.first = messages[0] if messages else None
        self.last = messages[-1] if messages else None
        self.fingerprint = _fingerprint(request)
        self._bytes: int | None = None

    def bound(self, model: str) -> int:
        """The request's prompt tokens for `model`, at most."""
        known = _sent.get((self.session, model, self.fingerprint))
        messages = self.request.messages
        if known is not None and 0 < known.count <= self.count:
            first, last = messages[0], messages[known.count - 1]
            if (first is known.first or first == known.first) and (last is known.last or last == known.last) \
                    and message_bound(last) == known.last_bound:
                return known.tokens + sum(message_bound(m) for m in messages[known.count:])
        if self.memo is not None:
            found = self._from_memo(model, self.memo)
            if found is not None:
                return found
        if self._bytes is None:
            self._bytes = prompt_bound(self.request)
        return self._bytes

    def _from_memo(self, model: str, memo: BoundsMemo) -> int | None:
        messages = self.request.messages
        known = memo.session(_memo_key(self.session, model, self.fingerprint)) if self.session is not None else None
        if known is not None and known[0] <= self.count:
            count, first, last, last_bound, tokens = known
            if message_bound(messages[count - 1]) == last_bound and _digest(messages[0]) == first \
                    and _digest(messages[count - 1]) == last:
                return int(tokens) + sum(message_bound(m) for m in messages[count:])
        fixed = memo.fixed_tokens(_memo_key(None, model, self.fingerprint))
        if fixed is None:
            return None
        own = token_bound(self.request.system) + sum(_tool_bound(tool) for tool in self.request.tools)
        return min(own, fixed) + sum(message_bound(m) for m in messages)

    def remember(self, model: str, tokens: int) -> None:
        """What `model`'s provider reported as the request's prompt tokens (input, cache reads and writes), for the
        next request of the session to build on."""
        if tokens <= 0 or self.first is None or self.last is None:
            return
        key = (self.session, model, self.fingerprint)
        _sent[key] = _Sent(self.count, self.first, self.last, message_bound(self.last), tokens)
        _sent.move_to_end(key)
        while len(_sent) > SENT_KEPT:
            _sent.popitem(last=False)
        if self.memo is not None:
            entry = None if self.session is None or self.private else [
                self.count, _digest(self.first), _digest(self.last), message_bound(self.last), tokens]
            self.memo.record(None if entry is None else _memo_key(self.session, model, self.fingerprint),
                             entry, _memo_key(None, model, self.fingerprint), tokens)


def _memo_key(session: str | None, model: str, fingerprint: str) -> str:
    return json.dumps([session, model, fingerprint])


def _digest(message: Message) -> str:
    """A hash of a message as sent, the same in every process."""
    text = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _fingerprint(request: ChatRequest) -> str:
    """A hash of the request's fixed part (system prompt and tools), the same in every process."""
    h = hashlib.sha256(request.system.encode("utf-8", "surrogatepass"))
    for tool in request.tools:
        _tool_bound(tool)
        h.update(_tool_bounds[id(tool)][2].encode())
    return h.hexdigest()[:32]


_tool_bounds: dict[int, tuple[ToolSpec, int, str]] = {}  # the registry keeps its specs: each is measured once


def _tool_bound(tool: ToolSpec) -> int:
    known = _tool_bounds.get(id(tool))
    if known is not None and known[0] is tool:
        return known[1]
    if len(_tool_bounds) > 10_000:
        _tool_bounds.clear()
    parameters = json.dumps(tool.parameters, sort_keys=True, default=str)
    bound = token_bound(tool.name) + token_bound(tool.description) + len(json.dumps(tool.parameters)) + 8
    digest = hashlib.sha256(json.dumps([tool.name, tool.description, parameters]).encode()).hexdigest()
    _tool_bounds[id(tool)] = (tool, bound, digest)
    return bound


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
