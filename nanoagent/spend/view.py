"""What the spend surfaces show (`nanoagent budget`, `/budget`, `nanoagent usage`, and the web app after them): every
cap with what it has spent, what calls under way hold, its limit, when it resets and the period's forecast; and,
caps or not, today's and this month's spend. One snapshot from the ledger's running totals (no session file read),
said as lines of plain text (they read the same in a terminal and in a chat) or as JSON (numbers in USD)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nanoagent.config.schema import Config
from nanoagent.paths import Paths
from nanoagent.pricing import format_cost, format_limit
from nanoagent.spend.caps import CapStatus, ledger_for, report

SHOWN = 0.00005  # USD: less shows as $0.0000, so it is not shown
HOW_TO_CAP = ("Set a cap in config.json: `\"budget\": {\"daily\": 1.0}` (USD a day; `monthly` is USD a month, "
              "`heartbeat` and `dream` a day each, `\"sessions\": {\"telegram:*\": 0.5}` a day per session pattern); "
              "`nanoagent cron add --budget` caps one run of a job.")


@dataclass(frozen=True)
class Period:
    """What was spent in one day or month, caps or not."""

    name: str  # "2026-11-26" or "2026-11"
    spent: float
    reserved: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "spent": round(self.spent, 6), "reserved": round(self.reserved, 6)}


@dataclass(frozen=True)
class SpendView:
    caps: list[CapStatus]
    today: Period
    month: Period
    timezone: str  # the user's (agents.defaults.timezone), or "local"
    warn_at: float

    def to_json(self) -> dict[str, Any]:
        return {"caps": [cap.to_json() for cap in self.caps], "today": self.today.to_json(),
                "month": self.month.to_json(), "timezone": self.timezone, "warn_at": self.warn_at}

    def lines(self) -> list[str]:
        """Each cap on a line, then today's and this month's spend; with no cap, that none is set and how to set one."""
        spent = (f"Spent today ({self.today.name}): {format_cost(self.today.spent)}{_held(self.today.reserved)}; "
                 f"this month ({self.month.name}): {format_cost(self.month.spent)}{_held(self.month.reserved)}.")
        if not self.caps:
            return ["No spending caps are set: nanoagent spends without a limit.", spent, HOW_TO_CAP]
        return [*(cap_line(cap, self.timezone) for cap in self.caps), spent]

    def short(self) -> str:
        """One line for under `nanoagent usage`'s table: each cap's use of its limit."""
        parts = [f"{label(cap)} {format_cost(cap.used)} of {format_limit(cap.limit)}"
                 + (f" (resets {_when(cap.resets_at)})" if cap.resets_at else "") for cap in self.caps]
        return "Budget: " + "; ".join(parts) + ". `nanoagent budget` shows more."


def label(cap: CapStatus) -> str:
    """The cap's name with a session pattern in backticks ("sessions `telegram:*`"): a chat's Markdown would read the
    stars of two patterns as emphasis."""
    pattern = cap.name.removeprefix("sessions ")
    return f"sessions `{pattern}`" if pattern != cap.name else cap.name


def cap_line(cap: CapStatus, timezone: str) -> str:
    """"daily: $0.4210 of $1.00 (42%), $0.0100 reserved by calls under way; resets 00:00 on 2026-11-27 (Europe/Berlin);
    at this rate $1.20 by then. Raise it: `budget.daily`.\""""
    share = cap.used / cap.limit if cap.limit > 0 else 1.0
    text = f"{label(cap)}: {format_cost(cap.spent)} spent of {format_limit(cap.limit)} ({share:.0%})"
    if cap.reserved >= SHOWN:
        text += f", {format_cost(cap.reserved)} reserved by calls under way"
    if cap.resets_at is not None:
        text += f"; resets {_when(cap.resets_at)} ({timezone})"
    if cap.forecast is not None and cap.used >= SHOWN:  # nothing spent yet is no rate
        over = " (over the cap: calls stop at it)" if cap.forecast > cap.limit else ""
        text += f"; at this rate {format_cost(cap.forecast)} by then{over}"
    if cap.used >= cap.limit:
        text += "; reached: model calls wait for the reset"
    return text + (f". Raise it: `{cap.setting}`." if cap.setting else ".")


def spend_view(config: Config, paths: Paths, now: datetime | None = None) -> SpendView:
    """The caps (`report`) and the day's and month's spend at `now`, from the ledger's running totals."""
    caps = report(config, paths, now)
    ledger = ledger_for(paths, config.defaults.timezone)
    totals = ledger.refresh()
    t = time.time() if now is None else now.timestamp()
    day = ledger.calendar.day(t)
    today = totals.days.get(day, {}).get("all", [0.0, 0.0])
    month = totals.months.get(day[:7], [0.0, 0.0])
    return SpendView(caps, Period(day, today[0], today[1]), Period(day[:7], month[0], month[1]),
                     ledger.calendar.name, config.budget.warn_at)


def skip_note(cap: CapStatus) -> str:
    """Why a scheduled run was skipped, for its record: "budget: daily cap $1.00 reached, resets 00:00", or, when the
    run stopped before a call whose worst case would cross it, "... would be crossed by the next call ($0.0100
    spent)"."""
    name = f"this run's cap {format_limit(cap.limit)} (its --budget)" if cap.period == "run" else \
        f"{label(cap)} cap {format_limit(cap.limit)}"
    state = "reached" if cap.used >= cap.limit else f"would be crossed by the next call ({format_cost(cap.used)} spent)"
    when = f", resets {_when(cap.resets_at)}" if cap.resets_at is not None else ""
    return f"budget: {name} {state}{when}"


def _held(reserved: float) -> str:
    return f" (+ {format_cost(reserved)} reserved by calls under way)" if reserved >= SHOWN else ""


def _when(at: datetime) -> str:
    """"00:00" when it is within a day, else "00:00 on 2026-12-01"."""
    return f"{at:%H:%M}" if at - datetime.now(at.tzinfo) <= timedelta(days=1) else f"{at:%H:%M} on {at:%Y-%m-%d}"
