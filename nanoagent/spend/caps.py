"""The caps config.json sets (`budget`), what each has spent, and the scope a model call counts against."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from nanoagent.config.schema import Config
from nanoagent.errors import NanoagentError
from nanoagent.keys import matches
from nanoagent.paths import Paths
from nanoagent.pricing import format_cost
from nanoagent.spend.ledger import Calendar, Ledger, Pair, Totals

# The kinds of work a ledger line names (`nanoagent usage --by source`): what a person or a schedule started, and the
# housekeeping those cause. "title" is kept for conversation titles; "other" is a call made outside any scope.
KINDS = {
    "turn": "a person's turn", "cron": "a cron job's run", "heartbeat": "the heartbeat", "dream": "Dream",
    "subagent": "a sub-agent's run", "transcription": "a voice note or audio file transcribed",
    "flush": "the memory flush before an archive", "summary": "summaries: archiving (/new, a full context) and a "
    "sub-agent's context", "embedding": "memory search's embeddings", "title": "a conversation's title",
    "other": "a call outside any of these", "mcp": "a question an MCP client asked (`nanoagent mcp serve`'s ask)",
}
SOURCES = ("turn", "mcp")  # the kinds a message sent to the gateway may count as (the gateway protocol's "source")


@dataclass(frozen=True)
class Scope:
    """What a model call's spend counts against: a session (every `budget.sessions` pattern matching its key), a
    kind of work (`KINDS`), a cron job and its per-run cap. `run` names one run, so a per-run cap counts that run's
    calls alone. Housekeeping a piece of work causes (`doing`) has a kind of its own and keeps `cause`, the kind of the
    work that caused it: the caps that count a kind (budget.heartbeat, budget.dream) count it under its cause."""

    session: str | None = None
    kind: str = "turn"
    job: str | None = None
    run_cap: float | None = None  # USD for one run of the job (`cron add --budget`)
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    private: bool = False  # an incognito chat: no hash of what was said is kept (`spend/bounds.jsonl`)
    cause: str | None = None  # the kind of the work that caused this housekeeping (None: it is that work)

    @property
    def capped_as(self) -> str:
        """The kind the caps count this scope's calls under: its cause's, else its own."""
        return self.cause or self.kind

    def doing(self, kind: str) -> Scope:
        """This scope's work causing housekeeping of `kind`: the same session, cron run and caps, its own kind."""
        return self if kind == self.kind else replace(self, kind=kind, cause=self.capped_as)

    def fields(self) -> dict[str, Any]:
        """The scope as a ledger line carries it."""
        found: dict[str, Any] = {"session": self.session, "kind": self.kind}
        if self.cause is not None:
            found["cause"] = self.cause
        if self.job is not None:
            found["job"] = self.job
        if self.run_cap is not None:
            found["run"] = self.run
        return found


# Set by whoever starts the work (a turn, a cron run, the heartbeat, Dream); tasks started inside it (sub-agents,
# the memory flush, consolidation) inherit it, so their calls count against the session that caused them.
current_scope: ContextVar[Scope | None] = ContextVar("current_scope", default=None)


@contextmanager
def working_as(kind: str, session: str | None = None) -> Iterator[Scope]:
    """The calls made inside count as `kind` (a flush, a summary, an embedding) against the work that caused them
    (`Scope.doing`), or, outside any work, against `session`."""
    outer = current_scope.get()
    scope = outer.doing(kind) if outer is not None else Scope(session, kind)
    token = current_scope.set(scope)
    try:
        yield scope
    finally:
        current_scope.reset(token)


@dataclass
class CapStatus:
    """One cap and what it has spent in its period now."""

    name: str  # "daily", "monthly", "sessions telegram:*", "heartbeat", "dream", "cron <job id> (per run)"
    period: str  # "day" | "month" | "run"
    limit: float
    spent: float
    reserved: float  # calls under way (or whose process died before they settled)
    resets_at: datetime | None  # in the user's time zone; None for a run's cap
    forecast: float | None  # the period's spend at the rate so far; None for a run's cap
    setting: str = ""  # where to raise it: "budget.daily", "budget.sessions.\"telegram:*\"", ...

    @property
    def used(self) -> float:
        return self.spent + self.reserved

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "period": self.period, "limit": self.limit, "spent": round(self.spent, 6),
                "reserved": round(self.reserved, 6),
                "resets_at": self.resets_at.isoformat(timespec="seconds") if self.resets_at else None,
                "forecast": None if self.forecast is None else round(self.forecast, 6), "setting": self.setting}


class CapReached(NanoagentError):
    """A model call was not made: its worst case could cross `cap`. `line` is what the user is told."""

    def __init__(self, cap: CapStatus, line: str, worst: float = 0.0):
        super().__init__(line)
        self.cap, self.line, self.worst = cap, line, worst


@dataclass(frozen=True)
class Cap:
    """A configured cap: where its spend is read from the totals."""

    name: str
    period: str
    limit: float
    setting: str
    bucket: str  # "all" | "session" | "kind" | "run"
    key: str = ""  # the pattern, the kind or the run

    def use(self, totals: Totals, calendar: Calendar, now: float) -> Pair:
        if self.bucket == "run":
            return list(totals.runs.get(self.key, [0.0, 0.0]))
        if self.period == "month":
            return list(totals.months.get(calendar.day(now)[:7], [0.0, 0.0]))
        day = totals.days.get(calendar.day(now))
        if day is None:
            return [0.0, 0.0]
        if self.bucket == "all":
            return list(day["all"])
        if self.bucket == "kind":
            return list(day["kinds"].get(self.key, [0.0, 0.0]))
        found = [0.0, 0.0]
        sessions = day["sessions"]
        for session in _matching(self.key, sessions):
            pair = sessions[session]
            found[0] += pair[0]
            found[1] += pair[1]
        return found

    def period_key(self, calendar: Calendar, now: float) -> str:
        """Names the period a warning was given in: the day, the month or the run."""
        return self.key if self.period == "run" else calendar.day(now)[: 7 if self.period == "month" else 10]

    def status(self, totals: Totals, calendar: Calendar, now: float) -> CapStatus:
        spent, held = self.use(totals, calendar, now)
        if self.period == "run":
            return CapStatus(self.name, "run", self.limit, spent, held, None, None, self.setting)
        starts = calendar.day_starts(now) if self.period == "day" else calendar.month_starts(now)
        ends = calendar.day_ends(now) if self.period == "day" else calendar.month_ends(now)
        elapsed = max(3600.0, now - starts.timestamp())  # an hour at least: a first call is no rate yet
        length = ends.timestamp() - starts.timestamp()
        forecast = (spent + held) * max(1.0, length / elapsed)
        return CapStatus(self.name, self.period, self.limit, spent, held, ends, forecast, self.setting)


_matched: dict[tuple[str, int], tuple[dict[str, Pair], int, list[str]]] = {}


def _matching(pattern: str, sessions: dict[str, Pair]) -> list[str]:
    """The sessions of one day's totals that `pattern` names. A day's sessions are only ever added to, so the matches
    are found again only when their number changed."""
    key = (pattern, id(sessions))
    cached = _matched.get(key)
    if cached is not None and cached[0] is sessions and cached[1] == len(sessions):
        return cached[2]
    if len(_matched) > 1000:
        _matched.clear()
    found = [session for session in sessions if matches(pattern, session)]
    _matched[key] = (sessions, len(sessions), found)
    return found


def caps(config: Config, scope: Scope | None = None, every: bool = False) -> list[Cap]:
    """The caps that apply to a call in `scope` (None: the agent-wide ones), or with `every` all configured but runs'."""
    b = config.budget
    found = []
    if b.daily is not None:
        found.append(Cap("daily", "day", b.daily, "budget.daily", "all"))
    if b.monthly is not None:
        found.append(Cap("monthly", "month", b.monthly, "budget.monthly", "all"))
    session = scope.session if scope is not None else None
    for pattern, limit in b.sessions.items():
        if every or (session is not None and matches(pattern, session)):
            found.append(Cap(f"sessions {pattern}", "day", limit, f'budget.sessions."{pattern}"', "session", pattern))
    for kind, per_day in (("heartbeat", b.heartbeat), ("dream", b.dream)):
        if per_day is not None and (every or (scope is not None and scope.capped_as == kind)):
            found.append(Cap(kind, "day", per_day, f"budget.{kind}", "kind", kind))
    if not every and scope is not None and scope.run_cap is not None:
        job = scope.job or "?"
        found.append(Cap(f"cron {job} (per run)", "run", scope.run_cap, f"the --budget of cron job {job}", "run",
                         scope.run))
    return found


_ledgers: dict[tuple[str, str], Ledger] = {}


def ledger_for(paths: Paths, timezone: str | None) -> Ledger:
    """This process's one Ledger for the home (its totals are caught up, not read again, at each check)."""
    key = (str(paths.spend_dir), timezone or "")
    ledger = _ledgers.get(key)
    if ledger is None:
        ledger = _ledgers[key] = Ledger(paths.spend_dir, timezone)
    return ledger


def report(config: Config, paths: Paths, now: datetime | None = None) -> list[CapStatus]:
    """Every configured cap (agent-wide, each `budget.sessions` pattern, heartbeat, Dream) with what it has spent in
    its period at `now`, from the ledger's running totals (no session file is read)."""
    ledger = ledger_for(paths, config.defaults.timezone)
    totals = ledger.refresh()
    t = time.time() if now is None else now.timestamp()
    return [cap.status(totals, ledger.calendar, t) for cap in caps(config, every=True)]


def blocked(config: Config, paths: Paths, scope: Scope | None, now: datetime | None = None) -> CapStatus | None:
    """A cap that `scope` has already reached at `now` (so its work need not start), or None."""
    ledger = ledger_for(paths, config.defaults.timezone)
    totals = ledger.refresh()
    t = time.time() if now is None else now.timestamp()
    for cap in caps(config, scope):
        status = cap.status(totals, ledger.calendar, t)
        if status.used >= status.limit:
            return status
    return None


def cap_title(cap: CapStatus) -> str:
    """The cap as a sentence names it: "the daily budget", "the per-run budget of cron job x"."""
    known = {"daily": "the daily budget", "monthly": "the monthly budget", "heartbeat": "the heartbeat's daily budget",
             "dream": "Dream's daily budget"}.get(cap.name)
    if known is not None:
        return known
    if cap.name.startswith("sessions "):
        return f"the daily budget of sessions {cap.name.removeprefix('sessions ')}"
    return f"the per-run budget of cron job {cap.name.split()[1]}"


def _resets(cap: CapStatus, timezone: str | None) -> str | None:
    if cap.resets_at is None:
        return None
    zone = f" ({timezone})" if timezone else ""
    return f"it resets at {cap.resets_at:%H:%M} on {cap.resets_at:%Y-%m-%d}{zone}"


def reached_line(cap: CapStatus, worst: float = 0.0, timezone: str | None = None) -> str:
    """The one line a turn ends with at a cap: what was spent, the cap, when it resets, how to raise it."""
    title = cap_title(cap)
    what = title[0].upper() + title[1:]
    held = f" (and {format_cost(cap.reserved)} held by unfinished calls)" if cap.reserved >= 0.00005 else ""
    if cap.used < cap.limit and worst > 0:
        state = (f"{what} ({format_cost(cap.limit)}) would be crossed: {format_cost(cap.spent)} is spent{held} and "
                 f"the next model call could cost up to {format_cost(worst)}, so it was not made")
    else:
        state = f"{what} is reached: {format_cost(cap.spent)} spent{held} of {format_cost(cap.limit)}"
    resets = _resets(cap, timezone) or "it applies to each run of the job"
    raise_it = (f"raise {cap.setting} in config.json" if cap.setting.startswith("budget.")
                else f"raise {cap.setting}")
    return f"{state}; {resets}. To spend more, {raise_it}."


def warning_line(cap: CapStatus, share: float, timezone: str | None = None) -> str:
    """What the user is told once per period when a cap is `share` (budget.warnAt) used."""
    resets = _resets(cap, timezone)
    return (f"Spend: {format_cost(cap.used)} of {cap_title(cap)} ({format_cost(cap.limit)}) is used, over "
            f"{share:.0%}{'; ' + resets if resets else ''}. At the cap calls stop; {cap.setting} raises it.")
