"""The Consolidator: keeps the prompt under budget by summarising old turns into history.jsonl.

Before a turn, it estimates the prompt (system prompt, tools, unconsolidated history). Over the budget
(`window - maxTokens - margin`, where the window is the smaller of `contextWindowTokens` and the model's own),
it archives the oldest messages until the estimate is under half of that budget, cutting only where a user
turn starts. Each archive is a model summary appended to history.jsonl, and only then does the session's
`last_consolidated` move. If the summary call fails (or is empty), a capped raw excerpt marked as raw is
archived instead. Before each archiving pass (and before `/new`'s), `before_archive` runs: the memory flush
(`agent/flush.py`), which writes what must outlast the cut and changes nothing about the archive that follows.

Old tool results before the session's `pruned` cursor are counted as requests send them, trimmed
(`messages.pruned`); `maybe_prune` is the step that moves the cursor (the rule is in `agent/budget.py`).

How the prompt is measured: the provider reports what each call's prompt held (a usage record with the stretch
of messages it sent). Character estimates scaled to match that figure measure the prompt from then on, so a
session near its budget costs no tokenizer and no recount per turn. Without such a figure (a new session, a
model switch), a byte bound answers first and the tokenizer (0.6 s to load) counts only when the prompt might
really be near the budget.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nanoagent.config.schema import AgentDefaults
from nanoagent.fsutil import uninterrupted
from nanoagent.memory.history import HistoryLog
from nanoagent.messages import (
    Message,
    calls_of,
    escape_untrusted,
    holds_untrusted,
    is_assistant,
    is_tool,
    is_user,
    prunable,
    pruned,
    shown_text,
    strip_runtime_context,
    text_of,
    truncate,
    unwrap_untrusted,
    wrap_untrusted,
)
from nanoagent.pricing import Window, effective_window
from nanoagent.providers.base import ProviderError
from nanoagent.session.store import Session, SessionStore
from nanoagent.spend import working_as
from nanoagent.templates import render
from nanoagent.tokens import count_message_tokens, count_tokens, estimate_tokens, token_bound
from nanoagent.usage import Usage, UsageRecord

MAX_MESSAGES_PER_ARCHIVE = 200
MAX_ROUNDS = 8
RAW_CAP_CHARS = 4000
MESSAGE_CAP_CHARS = 2000
TOOL_RESULT_CAP_CHARS = 500
TRANSCRIPT_CAP_CHARS = 60_000
# A provider's figure against our estimate of the same prompt outside this range is not believed (a server
# that reports no real usage); real tokenizers stay well within it.
SCALE_RANGE = (0.25, 4.0)

# (model, system, user) -> (text, usage, model that answered)
Complete = Callable[[str, str, str], Awaitable[tuple[str, Usage, str]]]

# Before messages[:end] of a session may be archived: (session, end, model). The memory flush (`agent/flush.py`);
# it never raises, and the archive that follows is the same with or without it.
BeforeArchive = Callable[[Session, int, str], Awaitable[None]]

Counter = Callable[[str], int]  # tokens of a text: exact, estimated or bounded
# Everything in the prompt but the session's history (system prompt and tools), measured by a counter.
FixedCost = Callable[[Counter], int]


@dataclass(frozen=True)
class Measure:
    """How one decision counts tokens: a counter per text, times a scale."""

    count: Counter
    scale: float = 1.0

    def __call__(self, tokens: int) -> int:
        return math.ceil(tokens * self.scale)


EXACT = Measure(count_tokens)


@dataclass
class _Counts:
    """Running token totals of one session's messages from `base` on: prefix[k] covers messages[base:base + k].
    Each message is counted once, ever."""

    measure: Callable[[Message], int]
    base: int
    pruned: int = 0  # messages before this index are counted as requests send them (`messages.pruned`)
    prefix: list[int] = field(default_factory=lambda: [0])

    def between(self, messages: list[Message], start: int, end: int) -> int:
        for index in range(self.base + len(self.prefix) - 1, end):
            message = messages[index]
            self.prefix.append(self.prefix[-1] + self.measure(pruned(message) if index < self.pruned else message))
        return self.prefix[end - self.base] - self.prefix[start - self.base]


class Consolidator:
    def __init__(self, history: HistoryLog, store: SessionStore, settings: AgentDefaults, complete: Complete,
                 before_archive: BeforeArchive | None = None):
        self.history = history
        self.store = store
        self.settings = settings
        self.complete = complete
        self.before_archive = before_archive  # once before each archiving pass (None: nothing)
        self._counts: dict[tuple[str, Counter], _Counts] = {}

    def window(self, model: str) -> Window:
        return effective_window(self.settings.context_window_tokens, model)

    def budget_for(self, model: str) -> int:
        """Tokens the prompt may hold for `model`: its window less the reply and a margin."""
        window = self.window(model).tokens
        margin = max(1024, window // 20)
        return max(1, window - self.settings.max_tokens - margin)

    @property
    def budget(self) -> int:
        """The budget for the configured model (agents.defaults.model)."""
        return self.budget_for(self.settings.model)

    def prompt_tokens(self, session: Session, fixed: FixedCost, model: str) -> int:
        """The prompt the next request would send (system prompt, tools, unarchived history), as consolidation
        measures it: from the provider's last figure when there is one, else counted."""
        return self._size(session, fixed, self._measure(session, fixed, model) or EXACT)

    def forget(self, key: str) -> None:
        """Drop the running counts of session `key`, which is no longer held in memory (`AgentLoop.forget_idle`)."""
        self._counts = {k: v for k, v in self._counts.items() if k[0] != key}

    def _tokens_between(self, session: Session, start: int, end: int, count: Counter) -> int:
        key = (session.key, count)
        counts = self._counts.get(key)
        if counts is None or start < counts.base or counts.pruned != session.meta.pruned:
            counts = self._counts[key] = _Counts(lambda m: count_message_tokens(m, count), start, session.meta.pruned)
        return counts.between(session.messages, start, end)

    def _size(self, session: Session, fixed: FixedCost, measure: Measure) -> int:
        history = self._tokens_between(session, session.last_consolidated, len(session.messages), measure.count)
        return measure(fixed(measure.count) + history)

    def _measure(self, session: Session, fixed: FixedCost, model: str) -> Measure | None:
        """Estimates scaled to the provider's figure for the last call's prompt, if it is usable; None when it is
        not (count instead)."""
        last = _last_turn_call(session, since=session.meta.pruned_calls)  # one sent as requests are sent now
        if last is None or last.window is None or last.model != model or last.window[1] > len(session.messages):
            return None
        start, end = last.window
        estimate = fixed(estimate_tokens) + self._tokens_between(session, start, end, estimate_tokens)
        scale = last.usage.prompt_tokens / max(1, estimate)
        return Measure(estimate_tokens, scale) if SCALE_RANGE[0] <= scale <= SCALE_RANGE[1] else None

    def _over(self, session: Session, fixed: FixedCost, limit: float, measure: Measure | None) -> tuple[int, Measure]:
        """How far the prompt is over `limit` tokens (<= 0: within), and the measure that said so. Without a
        provider figure the byte bound answers first, so the tokenizer is only needed near the limit."""
        if measure is None:
            bound = fixed(token_bound) + self._tokens_between(session, session.last_consolidated,
                                                              len(session.messages), token_bound)
            if bound <= limit:
                return 0, EXACT
            measure = EXACT
        return int(self._size(session, fixed, measure) - limit), measure

    async def maybe_consolidate(self, session: Session, fixed: FixedCost, model: str, threshold: float = 1.0) -> int:
        """Archive old turns when the prompt is over `threshold` x budget. Returns messages archived."""
        excess, measure = self._over(session, fixed, self.budget_for(model) * threshold,
                                     self._measure(session, fixed, model))
        if excess <= 0:
            return 0
        return await self._archive_down(session, fixed, model, measure)

    def maybe_prune(self, session: Session, fixed: FixedCost, model: str, over: float, keep_turns: int,
                    gain: float) -> bool:
        """The pruning step (`agent/budget.py`): when the prompt is over `over` x budget and trimming the long tool
        results before the last `keep_turns` user turns saves at least `gain` x budget, send them trimmed from now
        on (the session's `pruned`, moved forward only). Whether the step was taken."""
        budget = self.budget_for(model)
        excess, _ = self._over(session, fixed, budget * over, self._measure(session, fixed, model))
        if excess <= 0:
            return False
        cut, seen = session.last_consolidated, 0
        for index in range(len(session.messages) - 1, session.last_consolidated - 1, -1):  # the latest turns only
            seen += is_user(session.messages[index])
            if seen == keep_turns:
                cut = index
                break
        first = max(session.meta.pruned, session.last_consolidated)
        saved = sum(estimate_tokens(text_of(m)) - estimate_tokens(text_of(pruned(m)))
                    for m in session.messages[first:cut] if prunable(m))
        if cut <= session.meta.pruned or saved < budget * gain:
            return False
        self.store.set_pruned(session, cut)
        return True

    async def consolidate_overflow(self, session: Session, fixed: FixedCost, model: str) -> int:
        """The provider refused the prompt as too long, so whatever the estimate said, it filled the model's
        window: archive down to half the budget as if it had. Returns messages archived (0: nothing before the
        current turn is left to archive)."""
        measure = self._measure(session, fixed, model) or EXACT
        extra = max(1.0, self.window(model).tokens / max(1, self._size(session, fixed, measure)))
        return await self._archive_down(session, fixed, model, Measure(measure.count, measure.scale * extra))

    async def _archive_down(self, session: Session, fixed: FixedCost, model: str, measure: Measure) -> int:
        target = self.budget_for(model) // 2
        archived = 0
        for _ in range(MAX_ROUNDS):
            excess = self._size(session, fixed, measure) - target
            if excess <= 0:
                break
            end = self._cut_point(session, excess, measure)
            if end is None:
                break
            if not archived:  # everything before the latest turn may go in this pass's rounds
                await self._before_archive(session, _last_user(session), model)
            start = session.last_consolidated
            await self.archive(session, start, end, model)
            archived += end - start
        return archived

    def window_start(self, session: Session, fixed: FixedCost, model: str) -> int:
        """Where the prompt's history starts. Normally `last_consolidated`; when a backlog is still over the
        budget after this turn's bounded archiving (a switch to a smaller model, an imported session), the
        oldest unarchived turns are left out of this request, not dropped: they stay for later rounds."""
        start = min(session.last_consolidated, len(session.messages))
        excess, measure = self._over(session, fixed, self.budget_for(model), self._measure(session, fixed, model))
        if excess <= 0:
            return start
        for index in range(start + 1, len(session.messages)):
            if is_user(session.messages[index]) and measure(
                    self._tokens_between(session, start, index, measure.count)) >= excess:
                return index
        return start

    def _cut_point(self, session: Session, excess: int, measure: Measure) -> int | None:
        """The first user-turn start that archives at least `excess` tokens, within the per-round bound."""
        start = session.last_consolidated
        last_user = max((i for i in range(start, len(session.messages))
                         if is_user(session.messages[i])), default=start)
        limit = min(last_user, start + MAX_MESSAGES_PER_ARCHIVE)  # the latest turn always stays in the prompt
        best = None
        for index in range(start + 1, limit + 1):
            if not is_user(session.messages[index]):
                continue
            best = index
            if measure(self._tokens_between(session, start, index, measure.count)) >= excess:
                break
        return best

    async def archive(self, session: Session, start: int, end: int, model: str) -> None:
        """Summarise messages[start:end] into history, then advance last_consolidated to `end`."""
        chunk = session.messages[start:end]
        if not chunk:
            return
        if session.meta.incognito:  # a temporary chat is never archived: what it outgrows is dropped, unsummarised
            self.store.set_consolidated(session, end)
            return
        transcript = format_transcript(chunk)
        try:
            with working_as("summary", session.key):  # there is no summary setting of its own
                summary, usage, used = await self.complete(self.settings.background_model or model,
                                                           render("prompts/consolidate.md"), transcript)
            summary = summary.strip()
            failure = "" if summary else "the model returned an empty summary"
            self.store.add_usage(session, UsageRecord.now(used, usage, "consolidate"))
        except ProviderError as e:
            summary, failure = "", e.message
        if summary.upper() == "NOTHING":
            summary, failure = "", ""
        await uninterrupted(self._keep(session, chunk, summary, failure, end))

    async def _keep(self, session: Session, chunk: list[Message], summary: str, failure: str, end: int) -> None:
        """Write the summary (or a raw excerpt) to history and advance the session's cursor past it: both or,
        if the append fails, neither."""
        outside = any(map(from_outside, chunk))  # the summary may quote it: recalled as untrusted data
        if summary:  # history's lock may be held by another process: wait in a thread, not on the event loop
            await asyncio.to_thread(self.history.append, session.key, summary, outside=outside)
        elif failure:
            excerpt = format_transcript(chunk, RAW_CAP_CHARS)
            await asyncio.to_thread(self.history.append, session.key,
                                    f"[raw excerpt; no summary because {failure}]\n{excerpt}", raw=True,
                                    outside=outside)
        self.store.set_consolidated(session, end)

    async def _before_archive(self, session: Session, end: int, model: str) -> None:
        if self.before_archive is not None and not session.meta.incognito:  # a temporary chat leaves no notes
            await self.before_archive(session, end, model)

    async def archive_all(self, session: Session, model: str) -> None:
        if session.last_consolidated < len(session.messages):
            await self._before_archive(session, len(session.messages), model)
        while session.last_consolidated < len(session.messages):
            start = session.last_consolidated
            await self.archive(session, start, min(len(session.messages), start + MAX_MESSAGES_PER_ARCHIVE), model)


def _last_user(session: Session) -> int:
    return max((i for i in range(session.last_consolidated, len(session.messages)) if is_user(session.messages[i])),
               default=session.last_consolidated)


def _last_turn_call(session: Session, since: int = 0) -> UsageRecord | None:
    """The last turn call's usage among `session.usage[since:]`."""
    usage = session.usage
    return next((usage[i] for i in range(len(usage) - 1, since - 1, -1) if usage[i].purpose == "turn"), None)


def from_outside(message: Message) -> bool:
    """Whether a message carries text from outside: any tool result (its output is enveloped; an error may quote
    what a tool got, an MCP server's message say), or an untrusted-data envelope in the text a transcript takes
    (a voice note's transcript; the runtime block, whose recalled excerpts no summary sees, is left out)."""
    return is_tool(message) or holds_untrusted(strip_runtime_context(shown_text(message)))


def format_transcript(messages: list[Message], cap: int = TRANSCRIPT_CAP_CHARS) -> str:
    """The messages as text for a summary (or, capped smaller, as the raw excerpt archived when there is none).

    Tool results stay marked: each sits in an untrusted-data envelope that nothing in it can close, here and in
    history.jsonl. The cap drops whole lines from the middle, so an envelope is never cut in two."""
    lines = []
    for m in messages:
        if is_user(m):
            lines.append(f"[user] {_clean(strip_runtime_context(shown_text(m)), MESSAGE_CAP_CHARS)}")
        elif is_assistant(m):
            if m["content"]:
                lines.append(f"[assistant] {_clean(m['content'], MESSAGE_CAP_CHARS)}")
            for call in calls_of(m):
                lines.append(f"[tool call] {escape_untrusted(call['name'])} {_clean(call['arguments'], 300)}")
        elif is_tool(m):
            result = truncate(unwrap_untrusted(m["content"]), TOOL_RESULT_CAP_CHARS)
            lines.append(f"[tool result {escape_untrusted(m['name'])}] {wrap_untrusted(m['name'], result)}")
    return _middle_out(lines, cap)


def _clean(text: str, limit: int) -> str:
    return escape_untrusted(truncate(text, limit))


def _middle_out(lines: list[str], cap: int) -> str:
    """Whole lines from the start (two thirds of `cap`) and the end, with the number left out between them.
    Lines are bounded (MESSAGE_CAP_CHARS plus a label), so at least the first line fits a cap of 4,000."""
    text = "\n".join(lines)
    if len(text) <= cap:
        return text
    head: list[str] = []
    used = 0
    for line in lines:
        if head and used + len(line) > cap * 2 // 3:
            break
        head.append(line)
        used += len(line) + 1
    tail: list[str] = []
    for line in reversed(lines[len(head):]):
        if used + len(line) > cap:
            break
        tail.insert(0, line)
        used += len(line) + 1
    omitted = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[... {omitted} more lines left out ...]", *tail] if omitted else head + tail)
