"""Spend caps around one attempt: a provider wrapped in `Metered` reserves the attempt's worst case before it sends,
settles it at what the attempt used in its own `finally`, and learns the prompt's size for the next bound.

The worst case is the prompt's bound in and `max_output_tokens` out (max_tokens, raised for a thinking budget), at the
model's price; where it could cross a cap the attempt is not made: `Capped`, a final error that ends the whole call
(no retry, no fallback). The prompt's bound is its bytes (`prompt_bound`), or, when the request is the one sent before
in its session to the same model plus messages appended to it, the prompt tokens the provider reported for that one
plus the appended messages' bytes (`PromptBounds`). An attempt is settled at what it used when that is known: it
ended, or the server refused it (an error status) or was never reached; otherwise (a timeout, a dropped connection,
a cancel, a reply cut off) it may have been billed, so its worst case stays spent. The retry layer
(`providers/retry.py`) wraps each model of its chain once, so each retry and each fallback is checked, and a failed
attempt is settled before the wait for the next.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from nanoagent.messages import Message
from nanoagent.providers.base import (
    ChatRequest,
    Provider,
    ProviderError,
    ProviderEvent,
    SpendNotice,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    ToolSpec,
    UsageReport,
    max_output_tokens,
)
from nanoagent.spend import CapReached, Meter, current_scope
from nanoagent.spend.bounds import BoundsMemo, memo_for
from nanoagent.tokens import message_bound, token_bound
from nanoagent.usage import Usage

_OUTPUT = (TextDelta, ThinkingDelta, ToolCallReady)


class Metered:
    """`provider` with the spend caps checked around each of its attempts (one `stream` call is one attempt)."""

    name = "metered"

    def __init__(self, provider: Provider, meter: Meter):
        self.provider = provider
        self.meter = meter

    def prepare(self) -> None:
        self.provider.prepare()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        bounds = PromptBounds(request, memo_for(self.meter.paths.spend_dir))
        try:
            hold = self.meter.reserve(request.model, bounds.bound(request.model), max_output_tokens(request))
        except CapReached as e:
            raise Capped(e) from None
        for note in hold.notes:
            yield SpendNotice(note)
        used, reported, streamed, refused = Usage(), False, False, False
        events = self.provider.stream(request)
        try:
            async for event in events:
                streamed = streamed or isinstance(event, _OUTPUT)
                if isinstance(event, UsageReport):
                    used, reported = used + event.usage, True
                yield event
            for warning in self.meter.settle(hold, used, reported):  # no usage said: the worst case
                yield SpendNotice(warning)
            if reported:
                bounds.remember(request.model, used.prompt_tokens)
        except ProviderError as e:
            refused = e.status is not None or not e.reached  # nothing done: nothing to pay
            raise
        finally:  # once: an ended attempt was settled above; a cancel or a cut reply keeps its worst case
            self.meter.settle(hold, used, refused and not streamed)
            if isinstance(events, AsyncGenerator):
                await events.aclose()


class Capped(ProviderError, CapReached):
    """A call not made because its worst case could cross a spend cap: a ProviderError (so whatever goes on after a
    failed call, a summary or a flush, goes on) that is also the CapReached it came from. Never retried."""

    def __init__(self, reached: CapReached):
        Exception.__init__(self, reached.line)  # each base's own __init__ would call the other's with its arguments
        self.__dict__.update(vars(ProviderError(reached.line, reached=False, final=True)))
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
