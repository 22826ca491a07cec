"""The spend ledger: `spend/ledger.jsonl` under the home, append-only, fsynced, locked across processes.

Every model call is reserved before it is made (its worst case) and settled after (its real cost):

    {"op": "reserve", "id": "...", "t": 1764120000.5, "usd": 0.131, "session": "telegram:42", "kind": "turn",
     "job": null, "run": "...", "model": "anthropic/claude-sonnet-4-5"}
    {"op": "settle", "id": "...", "t": <the reservation's t>, "usd": 0.0123, "held": 0.131, ...the same scope...,
     "tokens": {"input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 0, "cache_write_tokens": 0}}

A settle line repeats its reservation's time and scope, so each line applies alone: the reservation's day and
buckets lose `held` and gain `usd`. Housekeeping (a flush, a summary, an embedding) has a `kind` of its own and names
the work that caused it in `cause`; the per-kind totals, which only the caps read, count it under `cause`. `tokens`
(what the provider reported, when it did) is for `nanoagent usage`, which reads the lines themselves
(`spend/sources.py`). A reservation never settled (the process died between the two) stays held.
Deleting sessions does not touch the ledger, so what was spent never goes down.

Running totals (per day and month in the user's time zone, per session, per kind, per cron run) are kept in memory
and caught up from the ledger's end at each check; `totals.json` keeps them with the ledger offset they cover, so a
new process reads only what was appended since (rebuilt from the whole ledger when missing, stale or for another time
zone).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as clock_time
from pathlib import Path
from typing import Any

from nanoagent.fsutil import append_lines, atomic_write, file_lock

VERSION = 1
SNAPSHOT_EVERY = 2000  # ledger lines read since the last totals.json before it is written again
KEEP_DAYS = 70  # days whose totals totals.json keeps; months are kept whole
DETAIL_DAYS = 3  # days whose sessions and kinds it keeps (today's, and yesterday's and tomorrow's in another zone)
KEEP_RUNS = 2000  # cron runs whose spend is kept (a run is short: its cap is checked while it runs)

Pair = list[float]  # [spent, held]: settled USD, and USD reserved by calls not settled yet


class Calendar:
    """Days and months in the user's time zone (agents.defaults.timezone, else this machine's)."""

    def __init__(self, timezone: str | None):
        self.name = timezone or "local"
        self.zone: Any = None
        if timezone:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                self.zone = ZoneInfo(timezone)
            except (ZoneInfoNotFoundError, ValueError):
                self.name = "local"
        self._days: dict[int, str] = {}  # quarter-hour since the epoch -> its day (no zone moves midnight off one)

    def local(self, t: float) -> datetime:
        return datetime.fromtimestamp(t, self.zone) if self.zone is not None else datetime.fromtimestamp(t).astimezone()

    def midnight(self, day: date) -> datetime:
        start = datetime.combine(day, clock_time())
        return start.replace(tzinfo=self.zone) if self.zone is not None else start.astimezone()

    def day(self, t: float) -> str:
        quarter = int(t // 900)
        name = self._days.get(quarter)
        if name is None:
            if len(self._days) > 100_000:
                self._days.clear()
            name = self._days[quarter] = self.local(quarter * 900).date().isoformat()
        return name

    def day_ends(self, t: float) -> datetime:
        return self.midnight(self.local(t).date() + timedelta(days=1))

    def month_ends(self, t: float) -> datetime:
        today = self.local(t).date()
        return self.midnight(date(today.year + today.month // 12, today.month % 12 + 1, 1))

    def day_starts(self, t: float) -> datetime:
        return self.midnight(self.local(t).date())

    def month_starts(self, t: float) -> datetime:
        return self.midnight(self.local(t).date().replace(day=1))


@dataclass
class Totals:
    """What the ledger holds up to `offset`, summed."""

    timezone: str
    offset: int = 0
    inode: int = 0
    days: dict[str, dict[str, Any]] = field(default_factory=dict)  # day -> {"all": Pair, "sessions": {}, "kinds": {}}
    months: dict[str, Pair] = field(default_factory=dict)
    runs: dict[str, Pair] = field(default_factory=dict)

    def apply(self, line: dict[str, Any], calendar: Calendar) -> None:
        op, t = line.get("op"), line.get("t")
        if op not in ("reserve", "settle") or not isinstance(t, int | float):
            return
        usd = _number(line.get("usd"))
        spent, held = (0.0, usd) if op == "reserve" else (usd, -_number(line.get("held")))
        name = calendar.day(float(t))
        day = self.days.get(name)
        if day is None:
            day = self.days[name] = {"all": [0.0, 0.0], "sessions": {}, "kinds": {}}
        _add(day["all"], spent, held)
        _add(self.months.setdefault(name[:7], [0.0, 0.0]), spent, held)
        session, kind, run = line.get("session"), line.get("cause") or line.get("kind"), line.get("run")
        if isinstance(session, str):
            _add(day["sessions"].setdefault(session, [0.0, 0.0]), spent, held)
        if isinstance(kind, str):
            _add(day["kinds"].setdefault(kind, [0.0, 0.0]), spent, held)
        if isinstance(run, str):  # only runs with a cap of their own carry one
            _add(self.runs.setdefault(run, [0.0, 0.0]), spent, held)
            if len(self.runs) > KEEP_RUNS:
                self.runs.pop(next(iter(self.runs)))

    def to_json(self) -> dict[str, Any]:
        """The snapshot: each day's total for KEEP_DAYS, its sessions and kinds for the last DETAIL_DAYS (the caps
        that read them are daily), every month."""
        newest = sorted(self.days)[-KEEP_DAYS:]
        detail = set(newest[-DETAIL_DAYS:])
        days = {d: self.days[d] if d in detail else {"all": self.days[d]["all"], "sessions": {}, "kinds": {}}
                for d in newest}
        return {"version": VERSION, "timezone": self.timezone, "offset": self.offset, "inode": self.inode,
                "days": days, "months": self.months, "runs": self.runs}

    @classmethod
    def from_json(cls, data: Any, timezone: str) -> Totals | None:
        """The snapshot in `data`, or None when it cannot be trusted (another version or time zone, a bad shape)."""
        if not isinstance(data, dict) or data.get("version") != VERSION or data.get("timezone") != timezone:
            return None
        try:
            totals = cls(timezone, int(data["offset"]), int(data["inode"]), dict(data["days"]), dict(data["months"]),
                         dict(data["runs"]))
        except (KeyError, TypeError, ValueError):
            return None
        return totals if totals.offset >= 0 else None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value == value else 0.0


def _add(pair: Pair, spent: float, held: float) -> None:
    pair[0] += spent
    pair[1] = max(0.0, pair[1] + held) if abs(pair[1] + held) > 1e-12 else 0.0


class Ledger:
    """The ledger files in `folder` (`Paths.spend_dir`), and their running totals in this process."""

    def __init__(self, folder: Path, timezone: str | None = None):
        self.folder = folder
        self.file = folder / "ledger.jsonl"
        self.snapshot_file = folder / "totals.json"  # the running totals and the offset they cover
        self.lock_file = folder / "ledger.lock"
        self.warned_file = folder / "warned.json"  # the warnings given: {cap name: period}
        self.calendar = Calendar(timezone)
        self.totals: Totals | None = None
        self._unsaved = 0  # lines read since totals.json was last written
        self._mutex = threading.Lock()  # one catch-up at a time in this process

    @contextmanager
    def locked(self) -> Iterator[Totals]:
        """Hold the ledger's lock (across processes) with the totals caught up: check, then append, atomically. The
        first loading (a rebuild of the totals, when totals.json is missing) is done before the lock is taken, so the
        lock is held only for the lines appended meanwhile."""
        if self.totals is None:
            self.refresh()
        with file_lock(self.lock_file), self._mutex:
            yield self._catch_up()

    def refresh(self) -> Totals:
        """The totals up to the ledger's end, without the lock (a line being written is left for the next read)."""
        with self._mutex:
            return self._catch_up()

    def append(self, lines: list[dict[str, Any]], sync: bool = True) -> None:
        """Append `lines` (fsynced unless `sync` is False) and count them; call inside `locked`."""
        data = b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines)
        at = append_lines(self.file, data, sync=sync)
        totals = self.totals
        if totals is not None and at == totals.offset:
            for line in lines:
                totals.apply(line, self.calendar)
            totals.offset = at + len(data)
            self._unsaved += len(lines)
        # else: the file was cut or replaced under us; the next catch-up reads it again

    def reserve(self, usd: float, scope: dict[str, Any], model: str, now: float | None = None) -> dict[str, Any]:
        """The reservation line for a call of worst case `usd` (not yet appended)."""
        return {"op": "reserve", "id": uuid.uuid4().hex, "t": time.time() if now is None else now, "usd": usd,
                **scope, "model": model}

    @staticmethod
    def settlement(reservation: dict[str, Any], usd: float, tokens: dict[str, int] | None = None) -> dict[str, Any]:
        line = {**reservation, "op": "settle", "usd": usd, "held": reservation["usd"], "at": time.time()}
        if tokens and any(tokens.values()):
            line["tokens"] = tokens
        return line

    def _catch_up(self) -> Totals:
        totals = self.totals
        if totals is None:
            totals = self.totals = self._load()
        try:
            stat = os.stat(self.file)
        except FileNotFoundError:
            stat = None
        size, inode = (stat.st_size, stat.st_ino) if stat is not None else (0, 0)
        if size < totals.offset or (totals.offset and inode != totals.inode):  # cut or replaced: count it again
            totals = self.totals = Totals(self.calendar.name)
        totals.inode = inode
        if size > totals.offset:
            self._read(totals, size)
        if self._unsaved >= SNAPSHOT_EVERY and totals.offset:
            self._save(totals)
        return totals

    def _read(self, totals: Totals, size: int) -> None:
        with open(self.file, "rb") as f:
            f.seek(totals.offset)
            data = f.read(size - totals.offset)
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        for raw in data[:end].splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # a torn line a killed writer left (the next append cuts it)
            if isinstance(line, dict):
                totals.apply(line, self.calendar)
        totals.offset += end
        self._unsaved += data.count(b"\n", 0, end)

    def _load(self) -> Totals:
        try:
            data = json.loads(self.snapshot_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        totals = Totals.from_json(data, self.calendar.name)
        if totals is None:
            self._unsaved = SNAPSHOT_EVERY  # rebuilt from the whole ledger: keep what the work found
            return Totals(self.calendar.name)
        return totals

    def _save(self, totals: Totals) -> None:
        self._unsaved = 0
        try:
            atomic_write(self.snapshot_file, json.dumps(totals.to_json(), separators=(",", ":")), mode=0o600)
        except OSError:
            pass  # only a cache: the next process rebuilds it from the ledger

    # --- the warnings already given, per cap and period, shared by every process ---------------------------

    def first_warning(self, cap: str, period: str) -> bool:
        """True the first time (across processes) `cap` is warned about in `period`; records it. Call inside
        `locked`."""
        try:
            warned = json.loads(self.warned_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            warned = {}
        if not isinstance(warned, dict):
            warned = {}
        if warned.get(cap) == period:
            return False
        warned[cap] = period
        atomic_write(self.warned_file, json.dumps(warned, indent=1), mode=0o600)
        return True
