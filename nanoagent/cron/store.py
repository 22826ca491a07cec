"""The jobs store: `$NANOAGENT_HOME/cron/jobs.json`, format version 1, mode 0600.

    {"version": 1,
     "jobs": [{"id": "3f9a1c2e", "name": "", "message": "...", "schedule": {"kind": "cron", "expr": "0 9 * * *",
               "tz": "Europe/Berlin"}, "target": "telegram:42", "enabled": true, "missed": "once",
               "timeout": null, "created": "2026-05-01T07:00:00Z", "createdBy": "telegram:42",
               "nextRun": "2026-05-02T07:00:00Z", "running": null, "runs": [...]}],
     "system": {"dream": {"schedule": "cron 0 */2 * * * (UTC)", "nextRun": ..., "running": null, "runs": [...]}}}

Every change is read-modify-write under `jobs.lock`, which every process takes (the gateway, `nanoagent cron`,
the agent's tool), and every write is atomic (temp file, fsync, rename, fsync of the folder). A file that does not
parse (not JSON, a wrong type, a format version from a newer nanoagent) is never overwritten or reset: reading it
raises `StoreCorrupt`, one line naming the file and the place, and `jobs.json.good` keeps the last copy that did
parse (written after each good read or write that changed it). Keys this version does not know are kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from nanoagent.cron.schedule import Schedule, iso, parse_iso
from nanoagent.errors import ConfigError, NanoagentError
from nanoagent.fsutil import async_file_lock, atomic_write, file_lock
from nanoagent.paths import check_owned

FORMAT_VERSION = 1
KEEP_RUNS = 20
LOCK_TIMEOUT = 30.0
MISSED = ("once", "skip")
T = TypeVar("T")


class StoreCorrupt(NanoagentError):
    """jobs.json cannot be read; nothing is written until it is fixed."""


class JobNotFound(NanoagentError):
    pass


@dataclass
class RunRecord:
    started: datetime
    status: str  # ok | error | timeout | interrupted | missed
    duration: float | None = None
    tokens: int = 0
    error: str | None = None
    delivery: str | None = None  # why the reply did not reach the target; None when it did (or had nowhere to go)
    scheduled: datetime | None = None  # the occurrence it ran for; None for `cron run`
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"started": iso(self.started), "status": self.status, "duration": self.duration,
                                "tokens": self.tokens, "error": self.error, "delivery": self.delivery,
                                "scheduled": iso(self.scheduled) if self.scheduled else None}
        if self.note:
            data["note"] = self.note
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        return cls(started=parse_iso(data["started"]), status=_str(data["status"]),
                   duration=_num(data.get("duration")), tokens=int(data.get("tokens") or 0),
                   error=_opt_str(data.get("error")), delivery=_opt_str(data.get("delivery")),
                   scheduled=parse_iso(data["scheduled"]) if data.get("scheduled") else None,
                   note=_opt_str(data.get("note")))


@dataclass
class Running:
    """A run claimed and not finished. Its process holds `running/<key>.lock` for as long as it runs: a record
    whose lock is free belongs to a process that died (kill -9, a crash)."""

    started: datetime
    pid: int
    scheduled: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"started": iso(self.started), "pid": self.pid,
                "scheduled": iso(self.scheduled) if self.scheduled else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Running:
        return cls(parse_iso(data["started"]), int(data["pid"]),
                   parse_iso(data["scheduled"]) if data.get("scheduled") else None)


@dataclass
class Entry:
    """What the scheduler keeps for anything it runs: a job or a system task."""

    next_run: datetime | None = None
    running: Running | None = None
    runs: list[RunRecord] = field(default_factory=list)

    def record(self, run: RunRecord) -> None:
        self.runs = [*self.runs, run][-KEEP_RUNS:]

    @property
    def last(self) -> RunRecord | None:
        return self.runs[-1] if self.runs else None


@dataclass
class Job(Entry):
    id: str = ""
    message: str = ""
    schedule: Schedule = field(default_factory=lambda: Schedule("every", seconds=3600))
    target: str = "none"
    name: str = ""
    enabled: bool = True
    missed: str = "once"
    timeout: float | None = None
    created: datetime | None = None
    created_by: str = ""
    workdir: str = ""  # the folder its runs work in: the one the turn that made it worked in (`agent -C DIR`)
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as they were

    @property
    def lock_key(self) -> str:
        return f"job-{self.id}"

    @property
    def title(self) -> str:
        return self.name or " ".join(self.message.split())[:60]

    def to_json(self) -> dict[str, Any]:
        return {**self.extra, "id": self.id, "name": self.name, "message": self.message,
                "schedule": self.schedule.to_json(), "target": self.target, "enabled": self.enabled,
                "missed": self.missed, "timeout": self.timeout,
                "created": iso(self.created) if self.created else None, "createdBy": self.created_by,
                **({"workdir": self.workdir} if self.workdir else {}),
                "nextRun": iso(self.next_run) if self.next_run else None,
                "running": self.running.to_json() if self.running else None,
                "runs": [r.to_json() for r in self.runs]}


@dataclass
class TaskState(Entry):
    """A system task's bookkeeping (heartbeat, dream): `schedule` is the schedule it was computed for, so a
    changed setting starts over from now."""

    schedule: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "nextRun": iso(self.next_run) if self.next_run else None,
                "running": self.running.to_json() if self.running else None,
                "runs": [r.to_json() for r in self.runs]}


@dataclass
class JobsFile:
    jobs: list[Job] = field(default_factory=list)
    system: dict[str, TaskState] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def find(self, ref: str) -> Job:
        """The job whose id is `ref` or starts with it (unique)."""
        exact = [j for j in self.jobs if j.id == ref]
        found = exact or [j for j in self.jobs if ref and j.id.startswith(ref)]
        if len(found) == 1:
            return found[0]
        if not found:
            raise JobNotFound(f"No job {ref!r}; `nanoagent cron list` shows the ids.")
        raise JobNotFound(f"{ref!r} matches {len(found)} jobs ({', '.join(j.id for j in found)}); give more of the id.")

    def get(self, job_id: str) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def to_json(self) -> dict[str, Any]:
        return {**self.extra, "version": FORMAT_VERSION, "jobs": [j.to_json() for j in self.jobs],
                "system": {name: s.to_json() for name, s in self.system.items()}}


# --- reading ---------------------------------------------------------------------------------------------------


def parse(text: str, path: Path) -> JobsFile:
    """The store in `text`; StoreCorrupt naming `path` and the place when it cannot be read."""
    good = path.with_name(path.name + ".good")
    fix = (f"fix it by hand, or put back the last good copy ({good.name})" if good.exists()
           else "fix it by hand, or move it away to start with no jobs")
    if not text.strip():
        return JobsFile()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise StoreCorrupt(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); scheduling is "
                           f"stopped until you {fix}.") from None
    if not isinstance(data, dict):
        raise StoreCorrupt(f"{path}: the top level must be an object with \"version\" and \"jobs\"; scheduling is "
                           f"stopped until you {fix}.")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StoreCorrupt(f"{path}: \"version\" must be a whole number (this nanoagent writes {FORMAT_VERSION}), "
                           f"got {version!r}; scheduling is stopped until you {fix}.")
    if version > FORMAT_VERSION:
        raise StoreCorrupt(f"{path} was written by a newer nanoagent (format {version}; this one reads "
                           f"{FORMAT_VERSION}): upgrade nanoagent. The file is left as it is.")
    where = "jobs"
    try:
        jobs = data.get("jobs", [])
        if not isinstance(jobs, list):
            raise TypeError("must be a list")
        parsed = []
        for i, item in enumerate(jobs):
            where = f"jobs[{i}]"
            parsed.append(_job(item))
        where = "system"
        system = data.get("system") or {}
        if not isinstance(system, dict):
            raise TypeError("must be an object")
        states = {}
        for name, item in system.items():
            where = f"system.{name}"
            states[str(name)] = _task_state(item)
    except (KeyError, TypeError, ValueError) as e:
        detail = f"missing key {e}" if isinstance(e, KeyError) else str(e)
        raise StoreCorrupt(f"{path}: {where}: {detail}; scheduling is stopped until you {fix}.") from None
    ids = [j.id for j in parsed]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise StoreCorrupt(f"{path}: two jobs have the id {dup!r}; scheduling is stopped until you {fix}.")
    extra = {k: v for k, v in data.items() if k not in ("version", "jobs", "system")}
    return JobsFile(parsed, states, extra)


KNOWN = {"id", "name", "message", "schedule", "target", "enabled", "missed", "timeout", "created", "createdBy",
         "nextRun", "running", "runs", "workdir"}


def _job(item: Any) -> Job:
    if not isinstance(item, dict):
        raise TypeError(f"a job must be an object, not {type(item).__name__}")
    schedule = item["schedule"]
    if not isinstance(schedule, dict):
        raise TypeError("schedule must be an object")
    missed = item.get("missed", "once")
    if missed not in MISSED:
        raise ValueError(f"missed must be \"once\" or \"skip\", not {missed!r}")
    enabled = item.get("enabled", True)
    if not isinstance(enabled, bool):
        raise TypeError("enabled must be true or false")
    runs = item.get("runs") or []
    if not isinstance(runs, list):
        raise TypeError("runs must be a list")
    job_id = _str(item["id"])
    if not job_id or not all(c.isalnum() or c in "-_" for c in job_id):
        raise ValueError(f"id {job_id!r} must be letters, digits, - or _")
    return Job(
        id=job_id, message=_str(item["message"]), schedule=Schedule.from_json(schedule),
        target=_str(item.get("target", "none")), name=_str(item.get("name") or ""), enabled=enabled, missed=missed,
        timeout=_num(item.get("timeout")), created=parse_iso(item["created"]) if item.get("created") else None,
        created_by=_str(item.get("createdBy") or ""), workdir=_str(item.get("workdir") or ""),
        next_run=parse_iso(item["nextRun"]) if item.get("nextRun") else None,
        running=Running.from_json(item["running"]) if item.get("running") else None,
        runs=[RunRecord.from_json(r) for r in runs], extra={k: v for k, v in item.items() if k not in KNOWN})


def _task_state(item: Any) -> TaskState:
    if not isinstance(item, dict):
        raise TypeError("must be an object")
    runs = item.get("runs") or []
    if not isinstance(runs, list):
        raise TypeError("runs must be a list")
    return TaskState(schedule=_str(item.get("schedule") or ""),
                     next_run=parse_iso(item["nextRun"]) if item.get("nextRun") else None,
                     running=Running.from_json(item["running"]) if item.get("running") else None,
                     runs=[RunRecord.from_json(r) for r in runs])


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {json.dumps(value)[:40]}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {json.dumps(value)[:40]}")
    return float(value)


# --- the store -------------------------------------------------------------------------------------------------


class JobStore:
    """Reads and changes jobs.json; every change under the shared lock. Listeners in this process hear of each
    change (the scheduler wakes when the agent's tool adds a job)."""

    def __init__(self, path: Path):
        self.path = path
        self.lock_path = path.with_name("jobs.lock")
        self.good_path = path.with_name(path.name + ".good")
        self.running_dir = path.parent / "running"
        self.scheduler_lock = path.parent / "scheduler.lock"  # held by the one scheduler of this home

    def read(self) -> JobsFile:
        text = self._read_text()
        jobs = parse(text, self.path)
        self._keep_good(text)
        return jobs

    def update(self, change: Callable[[JobsFile], T]) -> T:
        with file_lock(self.lock_path, LOCK_TIMEOUT, self._busy()):
            return self._apply(change)

    async def update_async(self, change: Callable[[JobsFile], T]) -> T:
        async with async_file_lock(self.lock_path, LOCK_TIMEOUT, self._busy()):
            return self._apply(change)

    def _apply(self, change: Callable[[JobsFile], T]) -> T:
        """Call while holding the lock: read, change, write when anything changed."""
        text = self._read_text()
        jobs = parse(text, self.path)
        result = change(jobs)
        new = json.dumps(jobs.to_json(), ensure_ascii=False, indent=1) + "\n"
        if new != text:
            atomic_write(self.path, new)
            self._keep_good(new)
            self.changed()
        else:
            self._keep_good(text)
        return result

    def _read_text(self) -> str:
        try:
            check_owned(self.path)  # it names prompts run as you: before it is read or written again
        except ConfigError as e:  # the scheduler stops scheduling and says so, as for a damaged file
            raise StoreCorrupt(str(e)) from None
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return ""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise StoreCorrupt(f"{self.path} is not UTF-8 text (byte {e.start}); scheduling is stopped until you fix "
                               f"it or put back {self.good_path.name}.") from None

    def _keep_good(self, text: str) -> None:
        if not text.strip():
            return
        digest = hashlib.sha1(text.encode()).hexdigest()
        if _good.get(self.good_path) == digest:
            return
        try:
            same = self.good_path.read_text(encoding="utf-8") == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            atomic_write(self.good_path, text)
        _good[self.good_path] = digest

    def _busy(self) -> NanoagentError:
        return NanoagentError(f"{self.lock_path} stayed locked for {LOCK_TIMEOUT:g} s; another nanoagent process "
                              "is stuck changing the jobs. Try again, or stop that process.")

    def changed(self) -> None:
        """Tell this process's listeners that the jobs changed: written here, or by another process that said so
        (`nanoagent cron add` tells a running gateway over its socket)."""
        for listener in list(_listeners.get(self.path, ())):
            listener()

    def listen(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` after each change this process writes; returns the function that stops it."""
        _listeners.setdefault(self.path, []).append(listener)
        return lambda: _listeners.get(self.path, []).remove(listener) if listener in _listeners.get(
            self.path, []) else None


_listeners: dict[Path, list[Callable[[], None]]] = {}
_good: dict[Path, str] = {}  # the digest of what each .good file holds, as this process last saw it


def new_job_id(existing: list[Job]) -> str:
    import secrets

    taken = {j.id for j in existing}
    while True:
        candidate = secrets.token_hex(4)
        if candidate not in taken and not any(t.startswith(candidate) or candidate.startswith(t) for t in taken):
            return candidate
