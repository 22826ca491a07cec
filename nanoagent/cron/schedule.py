"""When a job runs: a cron expression in a time zone, an interval, or one time.

Times are aware datetimes in UTC everywhere but on the way in and out (parsing, showing), where the user's time
zone applies: `agents.defaults.timezone`, else the machine's own.

Daylight-saving time, deliberately: a cron expression follows Debian's cron (the cronsim library): a fixed time
that falls in the hour the clocks skip runs at the first minute after the jump, a fixed time in the hour that
happens twice runs once (the first time), and `*`-hour expressions follow the wall clock through both. An `at`
time in the gap moves to the first minute after the jump and one in the fold means the first of the two; the
resolved time is said back, with a note. `every` is an interval of real time (`every 1d` drifts an hour against
the wall clock across a change; use a cron expression for "every day at 9").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nanoagent.errors import NanoagentError

Kind = Literal["cron", "every", "at"]
MIN_EVERY = 10  # seconds: anything more often is a loop, not a schedule
MAX_DURATION = 10 * 366 * 86400  # seconds: an interval or a wait longer than ten years is a typo, not a plan
UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60,
         "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
         "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
          "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")


class ScheduleError(NanoagentError):
    """A schedule or time that cannot be used; the message says why and what to write instead."""


def zone(name: str | None) -> tzinfo:
    """The time zone `name` (IANA, e.g. Europe/Berlin); the machine's own when None or empty."""
    if not name:
        local = local_zone_name()
        return ZoneInfo(local) if local else UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"Unknown time zone {name!r}: use an IANA name such as Europe/Berlin, America/New_York "
                            "or UTC.") from None


def zone_name(tz: tzinfo) -> str:
    return getattr(tz, "key", None) or "UTC"


def local_zone_name() -> str | None:
    """The machine's time zone by IANA name (TZ, /etc/localtime, /etc/timezone); None when it has none."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        real = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in real:
            candidates.append(real.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    try:
        candidates.append(Path("/etc/timezone").read_text().strip())
    except OSError:
        pass
    for name in candidates:
        if name:
            try:
                ZoneInfo(name)
                return name
            except (ZoneInfoNotFoundError, ValueError):
                continue
    return None


@dataclass(frozen=True)
class Schedule:
    kind: Kind
    expr: str = ""  # cron: the five fields as given (or a macro such as @daily)
    tz: str = ""  # cron and at: the IANA zone the times are in
    seconds: int = 0  # every: the interval
    anchor: datetime | None = None  # every: runs fall at anchor + k * seconds
    when: datetime | None = None  # at: the one time

    # --- making one -----------------------------------------------------------------------------------

    @classmethod
    def cron(cls, expr: str, tz: str) -> Schedule:
        schedule = cls("cron", expr=" ".join(expr.split()), tz=zone_name(zone(tz)))
        schedule.next_after(datetime.now(UTC))  # refuses an expression cronsim cannot read
        return schedule

    @classmethod
    def every(cls, text: str | int, now: datetime) -> Schedule:
        seconds = text if isinstance(text, int) else parse_duration(text, what="--every")
        if seconds < MIN_EVERY:
            raise ScheduleError(f"every {seconds} s is too often; the shortest interval is {MIN_EVERY} s.")
        if seconds > MAX_DURATION:
            raise ScheduleError(f"every {format_duration(seconds)} is too long; the longest interval is 10 years.")
        return cls("every", seconds=seconds, anchor=now.astimezone(UTC))

    @classmethod
    def at(cls, when: datetime, tz: str) -> Schedule:
        return cls("at", when=when.astimezone(UTC), tz=tz)

    # --- using one --------------------------------------------------------------------------------------

    def next_after(self, after: datetime) -> datetime | None:
        """The first run strictly after `after` (UTC); None when there is none (a one-off whose time passed)."""
        if self.kind == "at":
            return self.when if self.when is not None and self.when > after else None
        if self.kind == "every":
            assert self.anchor is not None
            if after < self.anchor:
                return self.anchor
            steps = int((after - self.anchor).total_seconds() // self.seconds) + 1
            return self.anchor + timedelta(seconds=steps * self.seconds)
        return _cron_next(self.expr, zone(self.tz), after)

    def describe(self) -> str:
        if self.kind == "every":
            return f"every {format_duration(self.seconds)}"
        if self.kind == "at":
            assert self.when is not None
            return f"once at {format_time(self.when, zone(self.tz))}"
        return f"cron {self.expr} ({self.tz})"

    def explain(self) -> str:
        """The schedule in words where the library can say it ("At 09:00 on Monday through Friday")."""
        if self.kind != "cron":
            return self.describe()
        from cronsim import CronSim

        try:
            words = CronSim(MACROS.get(self.expr, self.expr), datetime.now(zone(self.tz))).explain()
        except Exception:  # noqa: BLE001 - words are a courtesy; the expression itself is shown anyway
            return self.describe()
        return f"{words} ({self.tz})"

    # --- on disk ----------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        if self.kind == "cron":
            return {"kind": "cron", "expr": self.expr, "tz": self.tz}
        if self.kind == "every":
            assert self.anchor is not None
            return {"kind": "every", "seconds": self.seconds, "anchor": iso(self.anchor)}
        assert self.when is not None
        return {"kind": "at", "time": iso(self.when), "tz": self.tz}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schedule:
        """Raises KeyError, TypeError or ValueError for a shape it cannot read (the store names the place)."""
        kind = data["kind"]
        if kind == "cron":
            return cls("cron", expr=_text(data["expr"]), tz=_text(data.get("tz") or "UTC"))
        if kind == "every":
            seconds = data["seconds"]
            if not isinstance(seconds, int) or isinstance(seconds, bool) or not 1 <= seconds <= MAX_DURATION:
                raise TypeError(f"seconds must be a whole number from 1 to {MAX_DURATION}")
            return cls("every", seconds=seconds, anchor=parse_iso(data["anchor"]))
        if kind == "at":
            return cls("at", when=parse_iso(data["time"]), tz=_text(data.get("tz") or "UTC"))
        raise ValueError(f"kind must be cron, every or at, not {kind!r}")


def _cron_next(expr: str, tz: tzinfo, after: datetime) -> datetime | None:
    from cronsim import CronSim, CronSimError

    text = MACROS.get(expr.strip().lower(), expr)
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(f"Invalid cron expression {expr!r}: it needs five fields (minute hour day-of-month month "
                            "day-of-week), e.g. \"0 9 * * 1-5\" for 9:00 on weekdays, or a macro such as @daily.")
    local = after.astimezone(tz)
    # cronsim starts wrongly from the second pass of a repeated hour (it may answer a time already past): start
    # a few hours earlier, outside any fold, and take the first time after `after`.
    start = (after - timedelta(hours=4)).astimezone(tz) if local.fold else local
    try:
        times = CronSim(text, start)
        for _ in range(100_000):
            found = next(times)
            if found > after:
                return found.astimezone(UTC)
    except CronSimError as e:
        raise ScheduleError(f"Invalid cron expression {expr!r}: {str(e).lower() or 'cannot be read'}. Five fields: "
                            "minute hour day-of-month month day-of-week, e.g. \"30 8 * * *\".") from None
    except StopIteration:
        pass
    return None


# --- reading times and durations -------------------------------------------------------------------------------


def parse_duration(text: str, what: str = "the interval") -> int:
    """Seconds in "30s", "15m", "2h", "1d", "1h30m" or "90 minutes"."""
    cleaned = text.strip().lower().replace(" and ", " ").replace(",", " ")
    parts = _DURATION.findall(cleaned)
    if not parts or _DURATION.sub("", cleaned).strip():
        raise ScheduleError(f"{what} {text!r} is not a duration: write e.g. 30s, 15m, 2h, 1d or 1h30m.")
    total = 0.0
    for number, unit in parts:
        if unit not in UNITS:
            raise ScheduleError(f"{what} {text!r}: unknown unit {unit!r}; use s, m, h, d or w.")
        total += float(number) * UNITS[unit]
    if total > MAX_DURATION:  # also keeps datetime arithmetic from overflowing
        raise ScheduleError(f"{what} {text!r} is longer than 10 years: write a shorter one.")
    return int(total)


def parse_when(text: str, tz: tzinfo, now: datetime) -> tuple[datetime, str | None]:
    """(the time in UTC, a note when daylight saving moved or chose it) for an ISO time (`2026-05-04 09:00`, with
    or without an offset), `09:00` (its next occurrence), `today 18:30`, `tomorrow 9:00`, or `in 20 minutes`.
    A time that has passed is refused."""
    raw = text.strip()
    lowered = raw.lower()
    local_now = now.astimezone(tz)
    if lowered.startswith("in "):
        seconds = parse_duration(lowered[3:], what="--at in")
        if seconds < 1:
            raise ScheduleError(f"--at {text!r} is now, not later: give a time to come, e.g. \"in 1 minute\".")
        return (now + timedelta(seconds=seconds)).astimezone(UTC), None
    day_word = re.fullmatch(r"(today|tomorrow)\s+(.+)", lowered)
    clock = _clock(day_word.group(2) if day_word else lowered)
    if clock is not None:
        day = local_now.date() + timedelta(days=1 if day_word and day_word.group(1) == "tomorrow" else 0)
        naive = datetime.combine(day, clock)
        if day_word is None and naive <= local_now.replace(tzinfo=None):
            naive += timedelta(days=1)  # a bare time means its next occurrence
        when, note = resolve_local(naive, tz)
    else:
        try:
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00") if raw.endswith("Z") else raw)
        except ValueError:
            raise ScheduleError(f"Cannot read the time {text!r}: write 2026-05-04 09:00 (in your time zone, or with "
                                "an offset such as +02:00), 09:00, tomorrow 9:00 or \"in 20 minutes\".") from None
        if len(raw) <= 10:
            raise ScheduleError(f"{text!r} is a day without a time: add one, e.g. {raw} 09:00.")
        if parsed.tzinfo is None:
            when, note = resolve_local(parsed, tz)
        else:
            when, note = parsed, None
    if when <= now:
        raise ScheduleError(f"{format_time(when, tz)} is in the past (it is now {format_time(now, tz)}); give a later "
                            "time.")
    return when.astimezone(UTC), note


def _clock(text: str) -> Any:
    match = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?", text.strip())
    if match is None or (match.group(2) is None and match.group(3) is None):
        return None
    hour, minute = int(match.group(1)), int(match.group(2) or 0)
    if match.group(3):
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if match.group(3) == "pm" else 0)
    if hour > 23 or minute > 59:
        raise ScheduleError(f"{text!r} is not a time of day: hours 0-23, minutes 0-59.")
    from datetime import time

    return time(hour, minute)


def resolve_local(naive: datetime, tz: tzinfo) -> tuple[datetime, str | None]:
    """A wall-clock time in `tz`, made exact: in a daylight-saving gap, the first minute after the jump; in a
    fold, the first of the two. The note says which when it had to choose."""
    first = naive.replace(tzinfo=tz, fold=0)
    second = naive.replace(tzinfo=tz, fold=1)
    name = zone_name(tz)
    if _exists(first):
        if first.utcoffset() != second.utcoffset():
            return first, (f"{naive:%H:%M} happens twice on {naive:%Y-%m-%d} in {name} (the clocks go back); this "
                           f"is the first, {format_time(first, tz)}.")
        return first, None
    moved = naive.replace(second=0, microsecond=0)
    for _ in range(24 * 60):
        moved += timedelta(minutes=1)
        if _exists(moved.replace(tzinfo=tz)):
            break
    when = moved.replace(tzinfo=tz)
    return when, (f"{naive:%H:%M} does not exist on {naive:%Y-%m-%d} in {name} (the clocks jump forward): set "
                  f"for {format_time(when, tz)}, the first minute after the jump.")


def _exists(local: datetime) -> bool:
    back = local.astimezone(UTC).astimezone(local.tzinfo)
    return back.replace(tzinfo=None) == local.replace(tzinfo=None)


# --- showing ---------------------------------------------------------------------------------------------------


def iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_iso(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"a time must be an ISO string, not {type(value).__name__}")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    if parsed.tzinfo is None:
        raise ValueError(f"the time {value!r} has no UTC offset")
    return parsed.astimezone(UTC)


def format_time(when: datetime, tz: tzinfo) -> str:
    local = when.astimezone(tz)
    return f"{local:%a %Y-%m-%d %H:%M} {local.tzname() or zone_name(tz)}"


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    parts = []
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
    return " ".join(parts[:2])


def relative(when: datetime, now: datetime) -> str:
    delta = (when - now).total_seconds()
    return f"in {format_duration(delta)}" if delta >= 0 else f"{format_duration(-delta)} ago"


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {type(value).__name__}")
    return value


def make_schedule(cron: str | None, every: str | None, at: str | None, tz: str | None, default_tz: str | None,
                  now: datetime) -> tuple[Schedule, str | None]:
    """The schedule given by exactly one of `cron`, `every` and `at` (as the CLI and the tool take them), in the
    zone `tz`, else `default_tz`, else the machine's; (schedule, a note on daylight saving or None)."""
    given = [name for name, value in (("cron", cron), ("every", every), ("at", at)) if value]
    if len(given) != 1:
        raise ScheduleError("Give exactly one schedule: a cron expression (e.g. \"0 9 * * 1-5\"), every (30s, 15m, "
                            "2h, 1d) or at (a time such as 2026-05-04 09:00 or \"in 20 minutes\")"
                            + (f"; got {' and '.join(given)}." if given else "."))
    name = zone_name(zone(tz or default_tz))
    note = None
    if cron:
        schedule = Schedule.cron(cron, name)
    elif every:
        schedule = Schedule.every(every, now)
    else:
        assert at is not None
        when, note = parse_when(at, zone(name), now)
        schedule = Schedule.at(when, name)
    if schedule.next_after(now) is None:  # a job that would never run is refused, not stored
        raise ScheduleError(f"{schedule.describe()} never comes after now; give one that does.")
    return schedule, note
