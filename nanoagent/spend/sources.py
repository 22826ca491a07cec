"""What the spend ledger says was spent, summed by source (the kind of work and its model), channel or session:
`nanoagent usage --by ...`, the line under `nanoagent usage`'s table and the web app's usage page.

Read from the ledger's lines themselves (the running totals keep neither models nor tokens), so every call a provider
may bill counts: deleted sessions, temporary chats, transcriptions, Dream, embeddings, failed attempts. A settled
call counts what it cost; a reservation never settled (a call under way, or one whose process died) counts as
`held`, as the caps count it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanoagent.spend.ledger import Calendar
from nanoagent.usage import TOKEN_FIELDS, Usage

GROUPS = ("source", "channel", "session")  # what `usage --by` takes
NO_SESSION = "(none)"  # a call outside any session: `memory search` embedding its query, say


@dataclass(frozen=True)
class Call:
    """One call as the ledger has it: settled (its cost) or only reserved (`held`, its worst case)."""

    day: str  # in the user's time zone, as the caps count it
    session: str | None
    kind: str
    model: str
    usd: float
    held: float
    usage: Usage
    unpriced: bool  # recorded at $0 for want of a price (a transcription by a server without one)


@dataclass
class Spent:
    """Calls summed: settled calls, their tokens and cost, and what unsettled reservations hold."""

    calls: int = 0
    usd: float = 0.0
    held: float = 0.0
    usage: Usage = field(default_factory=Usage)
    unpriced: bool = False

    def add(self, call: Call) -> None:
        if call.held:
            self.held += call.held
            return
        self.calls += 1
        self.usd += call.usd
        self.usage = self.usage + call.usage
        self.unpriced = self.unpriced or call.unpriced

    def to_json(self) -> dict[str, Any]:
        """As `nanoagent usage --json` gives a total: calls, tokens by kind, cost in USD (null when no call had a
        price), `unpriced`, and `reserved` (held by calls not settled)."""
        cost = None if self.unpriced and self.usd == 0 else round(self.usd, 6)
        return {"calls": self.calls, **self.usage.to_dict(), "cost": cost, "unpriced": self.unpriced,
                "reserved": round(self.held, 6)}


def read_calls(ledger_file: Path, calendar: Calendar, days: int | None = None, session: str | None = None,
               now: float | None = None) -> list[Call]:
    """The ledger's calls, oldest first: those of the last `days` days (None: all), of `session` (a key, or a
    terminal session's name without `cli:`; None: every session)."""
    since = calendar.day((time.time() if now is None else now) - days * 86_400) if days else ""
    wanted = None if session is None else {session} if ":" in session else {session, f"cli:{session}"}
    reserved: dict[str, dict[str, Any]] = {}
    found = []
    for line in _lines(ledger_file):
        t = line.get("t")
        if not isinstance(t, int | float) or isinstance(t, bool):
            continue
        if wanted is not None and line.get("session") not in wanted:
            continue
        op = line.get("op")
        if op == "reserve":
            reserved[str(line.get("id"))] = line
        elif op == "settle":
            reserved.pop(str(line.get("id")), None)
            found.append(_call(line, calendar.day(float(t)), held=False))
    found += [_call(line, calendar.day(float(line["t"])), held=True) for line in reserved.values()]
    return sorted((call for call in found if call.day > since), key=lambda call: call.day)


def grouped(calls: list[Call], by: str) -> list[tuple[tuple[str, ...], Spent]]:
    """The calls summed by `by` (`GROUPS`): ((kind, model), spent) for "source", ((channel,), spent), ((session,),
    spent); the dearest first."""
    sums: dict[tuple[str, ...], Spent] = {}
    for call in calls:
        sums.setdefault(group_of(call, by), Spent()).add(call)
    return sorted(sums.items(), key=lambda item: (-item[1].usd, item[0]))


def by_json(calls: list[Call], by: str) -> dict[str, Any]:
    """`nanoagent usage --by BY --json` and the web app's by-source view: `{"by", "rows": [{<the group's names>,
    calls, tokens by kind, cost, unpriced, reserved}], "total"}`."""
    names = ("source", "model") if by == "source" else (by,)
    rows = [{**dict(zip(names, key, strict=True)), **spent.to_json()} for key, spent in grouped(calls, by)]
    return {"by": by, "rows": rows, "total": total(calls).to_json()}


def group_of(call: Call, by: str) -> tuple[str, ...]:
    if by == "source":
        return call.kind, call.model
    session = call.session or NO_SESSION
    if by == "channel":
        return (session.split(":", 1)[0],)
    return (session,)


def total(calls: list[Call]) -> Spent:
    spent = Spent()
    for call in calls:
        spent.add(call)
    return spent


def _call(line: dict[str, Any], day: str, held: bool) -> Call:
    session, kind, model = line.get("session"), line.get("kind"), line.get("model")
    given = line.get("tokens")
    tokens = given if isinstance(given, dict) else line  # a transcription's detail has its tokens at the top
    usd = _number(line.get("usd"))
    return Call(day, session if isinstance(session, str) else None, kind if isinstance(kind, str) else "other",
                model if isinstance(model, str) else "", 0.0 if held else usd, usd if held else 0.0,
                Usage(*(int(_number(tokens.get(name))) for name in TOKEN_FIELDS)), line.get("unpriced") is True)


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a line still being written
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # a torn line a killed writer left
            if isinstance(line, dict):
                yield line


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value == value else 0.0
