"""The scheduler: runs each due job (and each built-in system task) exactly once.

- One scheduler per home at a time: it holds `cron/scheduler.lock` (the gateway's for its whole life, a `cron
  tick` for one pass). A second finds it held and stands aside.
- A run is claimed before it starts, in one write under the store's lock: the next run moves on and the run is
  recorded as running, with its process holding `cron/running/<job>.lock`. The result is recorded after. So no
  two processes run the same occurrence, and a process killed mid-run leaves a running record whose lock is free:
  the next pass records that run as interrupted (not repeated, not forgotten).
- A run missed while nothing was running (or the clock jumping forward) runs once, late, when the job's `missed`
  is "once" (the default) and it is at most `catch_up` late; otherwise it is recorded as missed and skipped.
  However many occurrences were missed, it runs at most once.
- At most `max_concurrent` runs at once; each stopped after its timeout; a failure is recorded and the job runs
  again at its next occurrence. The last 20 runs of each job are kept.
- A run a spending cap stops (the `gate` says why before it starts, or the run ends at a cap) is recorded as
  `skipped` with the reason in its note: not a failure, and the job runs again at its next occurrence.
- Idle, the scheduler sleeps until the next due time, at most a minute, and wakes at once when this process
  changes a job.

Time comes from `clock`, so tests decide what "now" is.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from nanoagent.cron.schedule import Schedule, format_duration, iso
from nanoagent.cron.store import Entry, Job, JobsFile, JobStore, Running, RunRecord, StoreCorrupt, TaskState
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import try_lock

log = logging.getLogger("nanoagent.cron")
MAX_SLEEP = 60.0  # seconds: the longest an idle scheduler sleeps (it also notices jobs other processes added)
ON_TIME = 120.0  # seconds late that still count as on time (a crontab `tick` runs once a minute)
SEEN_RECENTLY = 150.0  # seconds: a scheduler touches its lock at least this often while it runs


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class RunOutcome:
    """What one run gave. A job runner or system task returns it; raising instead records an error."""

    status: str = "ok"  # ok | error | skipped (stopped by a spending cap; `note` says which)
    tokens: int = 0
    error: str | None = None
    delivery: str | None = None  # why the reply did not reach its target
    note: str | None = None


@dataclass(frozen=True)
class SystemTask:
    """A built-in periodic task (the heartbeat, Dream). It runs with the same exactly-once machinery as jobs; its
    state lives in jobs.json under "system".<name>."""

    name: str
    schedule: Schedule
    run: Callable[[], Awaitable[RunOutcome | None]]
    missed: str = "once"
    timeout: float | None = None  # None: cron.runTimeout

    @property
    def fingerprint(self) -> str:
        """The schedule as jobs.json keeps it, to tell when it changed: "every 1800", or a job's description."""
        s = self.schedule
        return f"every {s.seconds}" if s.kind == "every" else s.describe()


def described(fingerprint: str) -> str:
    """A system task's kept schedule (`SystemTask.fingerprint`) said as a job's is: "every 30 min"."""
    kind, _, seconds = fingerprint.partition(" ")
    return f"every {format_duration(int(seconds))}" if kind == "every" and seconds.isdigit() else fingerprint


@dataclass(frozen=True)
class Settings:
    catch_up: float = 12 * 3600.0  # seconds
    max_concurrent: int = 2
    timeout: float = 600.0  # seconds a run may take, unless the job says otherwise


@dataclass(frozen=True)
class Claim:
    """A run this scheduler claimed: what the runner needs to know about it."""

    key: str
    job: Job | None
    task: SystemTask | None
    started: datetime
    scheduled: datetime | None  # None: run by hand
    late: float = 0.0  # seconds after its time
    missed: int = 0  # occurrences before it that never ran


JobRunner = Callable[[Job, Claim], Awaitable[RunOutcome]]
Gate = Callable[[Claim], Awaitable[str | None]]  # before a run: why it must not start (a spending cap), or None


class SchedulerBusy(NanoagentError):
    pass


@dataclass
class Scheduler:
    store: JobStore
    run_job: JobRunner
    settings: Settings = field(default_factory=Settings)
    tasks: Sequence[SystemTask] = ()
    clock: Callable[[], datetime] = utc_now
    finished: list[tuple[str, RunRecord]] = field(default_factory=list)  # (title, record) of runs this one ran
    wakeups: int = 0
    accepting: Callable[[], bool] = lambda: True  # False: start nothing new (the gateway is stopping)
    gate: Gate | None = None  # asked before each run; a reason records the run `skipped` without starting it
    _active: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _locks: dict[str, int] = field(default_factory=dict)  # running/<key>.lock held for each active run
    _pending: list[tuple[str, RunRecord]] = field(default_factory=list)  # results the store could not take yet
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _lock_fd: int | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _reported: str = ""

    @property
    def lock_path(self) -> Path:
        return self.store.scheduler_lock

    def wake(self) -> None:
        """Look at the jobs again now; safe from any thread (the agent's cron tool runs in one)."""
        if self._loop is None or self._loop.is_closed():
            self._wake.set()
        else:
            self._loop.call_soon_threadsafe(self._wake.set)

    # --- the long run (the gateway) and one pass (`cron tick`) ---------------------------------------------------

    async def serve(self) -> None:
        """Run jobs as they come due until cancelled. Waits while another scheduler (a long `cron tick`) runs."""
        waited = False
        while not self._acquire():
            if not waited:
                log.info("cron: another scheduler (pid %s) is running; waiting for it to finish", self.holder())
                waited = True
            await asyncio.sleep(5)
        self._loop = asyncio.get_running_loop()
        stop = self.store.listen(self.wake)
        try:
            while True:
                delay = await self.pass_()
                self.finished.clear()  # what ran is in jobs.json: only tick and run_now hand it back
                await self._sleep(delay)
                self._wake.clear()
        finally:
            stop()
            await self._stop_runs()
            self._release()

    async def _sleep(self, seconds: float) -> None:
        """Until a wake or `seconds` pass. Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that
        lands in the same step as the wake, and the scheduler would then outlive the gateway stopping it."""
        waking = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({waking}, timeout=seconds)
        finally:
            waking.cancel()

    async def tick(self) -> list[tuple[str, RunRecord]]:
        """Run everything due now, wait for it, and return what ran. SchedulerBusy when another scheduler holds
        the home (the gateway runs the jobs then)."""
        if not self._acquire():
            raise SchedulerBusy(f"A scheduler is already running for this home (pid {self.holder()}); it runs the "
                                "jobs.")
        try:
            await self.pass_(raise_corrupt=True)
            while self._active:  # more due than may run at once: start the rest as runs finish
                await asyncio.wait(list(self._active.values()), return_when=asyncio.FIRST_COMPLETED)
                await self.pass_(raise_corrupt=True)
            await self._flush_pending()
            return self.finished
        finally:
            await self._stop_runs()
            self._release()

    async def pass_(self, raise_corrupt: bool = False) -> float:
        """Record what died, claim and start what is due; the seconds to sleep until the next due time."""
        self.wakeups += 1
        now = self.clock()
        self._touch()
        try:
            claims, next_due = await self.store.update_async(lambda jobs: self._plan(jobs, now))
        except StoreCorrupt as e:
            if raise_corrupt:
                raise
            if str(e) != self._reported:
                log.error("cron: %s", e)
                self._reported = str(e)
            return MAX_SLEEP
        if self._reported:
            log.info("cron: %s reads again; scheduling goes on", self.store.path)
            self._reported = ""
        for claim in claims:
            self._active[claim.key] = asyncio.create_task(self._execute(claim), name=f"cron {claim.key}")
        if next_due is None:
            return MAX_SLEEP
        return max(0.0, min(MAX_SLEEP, (next_due - now).total_seconds()))

    # --- deciding, under the store's lock ----------------------------------------------------------------------

    def _plan(self, jobs: JobsFile, now: datetime) -> tuple[list[Claim], datetime | None]:
        self._apply_pending(jobs)
        entries = self._entries(jobs, now)
        for key, entry, _ in entries:
            if entry.running is not None and key not in self._active and self._stale(key):
                self._interrupted(jobs, key, entry)
        claims: list[Claim] = []
        room = self.settings.max_concurrent - len(self._active) if self.accepting() else 0
        offered = {f"system-{t.name}" for t in self.tasks}
        due = sorted(((k, e, s) for k, e, s in entries if self._is_due(e, now) and (isinstance(e, Job) or k in offered)),
                     key=lambda x: x[1].next_run or now)
        for key, entry, schedule in due:
            assert entry.next_run is not None
            late = (now - entry.next_run).total_seconds()
            missed = self._missed_before(schedule, entry.next_run, now)
            policy = entry.missed if isinstance(entry, Job) else self._task(key).missed
            if late > ON_TIME and (policy == "skip" or late > self.settings.catch_up):
                why = "missed: skip" if policy == "skip" else "more than cron.catchUpHours late"
                entry.record(RunRecord(started=now, status="missed", scheduled=entry.next_run,
                                       note=f"not running at {iso(entry.next_run)}"
                                            + (f" (and {missed} more)" if missed else "") + f"; skipped ({why})"))
                self._advance(jobs, entry, schedule, now)
                continue
            if room <= 0 or not self._lock(key):
                continue
            room -= 1
            scheduled = entry.next_run
            entry.running = Running(now, os.getpid(), scheduled)
            self._advance(jobs, entry, schedule, now, keep=True)
            job = entry if isinstance(entry, Job) else None
            claims.append(Claim(key, _copy(job), None if job else self._task(key), now, scheduled,
                                late if late > ON_TIME else 0.0, missed))
        waiting = [e.next_run for k, e, _ in entries if e.next_run is not None and e.next_run > now
                   and e.running is None and (e.enabled if isinstance(e, Job) else k in offered)]
        return claims, min(waiting, default=None)

    def _entries(self, jobs: JobsFile, now: datetime) -> list[tuple[str, Entry, Schedule]]:
        found: list[tuple[str, Entry, Schedule]] = [(j.lock_key, j, j.schedule) for j in jobs.jobs]
        for task in self.tasks:
            state = jobs.system.setdefault(task.name, TaskState())
            if state.schedule != task.fingerprint:  # new, or its setting changed: start from now
                state.schedule = task.fingerprint
                state.next_run = task.schedule.next_after(now)
            found.append((f"system-{task.name}", state, task.schedule))
        for name, state in jobs.system.items():  # a task not offered here (switched off) may still have died
            if state.running is not None and not any(t.name == name for t in self.tasks):
                found.append((f"system-{name}", state, Schedule("every", seconds=3600, anchor=now)))
        return found

    def _is_due(self, entry: Entry, now: datetime) -> bool:
        if entry.running is not None or entry.next_run is None or entry.next_run > now:
            return False
        if isinstance(entry, Job):
            return entry.enabled
        return True

    def _task(self, key: str) -> SystemTask:
        name = key.removeprefix("system-")
        return next(t for t in self.tasks if t.name == name)

    @staticmethod
    def _missed_before(schedule: Schedule, first: datetime, now: datetime) -> int:
        """Occurrences after `first` up to now (counted up to 1,000)."""
        count, at = 0, first
        while count < 1000:
            following = schedule.next_after(at)
            if following is None or following > now:
                break
            count, at = count + 1, following
        return count

    @staticmethod
    def _advance(jobs: JobsFile, entry: Entry, schedule: Schedule, now: datetime, keep: bool = False) -> None:
        """Move the entry's next run past now. A one-off has none: it is removed after its run (or, `keep`, once the
        run is recorded); one that never ran stays, switched off, so the user sees it was missed."""
        entry.next_run = schedule.next_after(now)
        if isinstance(entry, Job) and schedule.kind == "at" and not keep:
            entry.enabled = False

    def _interrupted(self, jobs: JobsFile, key: str, entry: Entry) -> None:
        running = entry.running
        assert running is not None
        entry.running = None
        entry.record(RunRecord(started=running.started, status="interrupted", scheduled=running.scheduled,
                               error=f"the process running it (pid {running.pid}) stopped before it finished; "
                                     "not repeated"))
        if isinstance(entry, Job) and entry.schedule.kind == "at":
            entry.enabled = False
        log.warning("cron: the run of %s started %s was interrupted (pid %s stopped); recorded, not repeated",
                    key, iso(running.started), running.pid)

    # --- running -----------------------------------------------------------------------------------------------

    async def _execute(self, claim: Claim) -> None:
        started = time.monotonic()
        timeout = (claim.job.timeout if claim.job and claim.job.timeout else None) or (
            claim.task.timeout if claim.task and claim.task.timeout else None) or self.settings.timeout
        try:
            reason = await self.gate(claim) if self.gate is not None else None
            if reason is not None:
                log.info("cron: %s skipped: %s", claim.key, reason)
                outcome = RunOutcome("skipped", note=reason)
            else:
                outcome = await asyncio.wait_for(self._call(claim), timeout)
        except TimeoutError:
            outcome = RunOutcome("timeout", error=f"stopped after {format_duration(timeout)} (the run's timeout)")
        except asyncio.CancelledError:
            record = self._record(claim, RunOutcome("interrupted", error="nanoagent stopped before it finished; "
                                                                         "not repeated"), started)
            await asyncio.shield(self._finish(claim, record))
            raise
        except Exception as e:  # noqa: BLE001 - a failed run is recorded; the job runs again next time
            log.warning("cron: %s failed: %s", claim.key, type(e).__name__)
            outcome = RunOutcome("error", error=f"{type(e).__name__}: {e}"[:500])
        await self._finish(claim, self._record(claim, outcome, started))

    async def _call(self, claim: Claim) -> RunOutcome:
        if claim.job is not None:
            return await self.run_job(claim.job, claim)
        assert claim.task is not None
        return await claim.task.run() or RunOutcome()

    def _record(self, claim: Claim, outcome: RunOutcome, started: float) -> RunRecord:
        note = outcome.note
        if claim.late:
            late = f"ran {format_duration(claim.late)} late" + (f", {claim.missed} missed runs skipped"
                                                                if claim.missed else "")
            note = f"{late}; {note}" if note else late
        return RunRecord(started=claim.started, status=outcome.status, duration=round(time.monotonic() - started, 3),
                         tokens=outcome.tokens, error=outcome.error, delivery=outcome.delivery,
                         scheduled=claim.scheduled, note=note)

    async def _finish(self, claim: Claim, record: RunRecord) -> None:
        title = claim.job.title if claim.job else claim.key.removeprefix("system-")
        self.finished.append((title, record))
        self._pending.append((claim.key, record))
        try:
            await self._flush_pending()
        except (StoreCorrupt, NanoagentError) as e:
            log.error("cron: the result of %s is kept until the store can take it: %s", claim.key, e)
        finally:
            self._active.pop(claim.key, None)
            self.wake()

    async def _flush_pending(self) -> None:
        if self._pending:
            await self.store.update_async(self._apply_pending)

    def _apply_pending(self, jobs: JobsFile) -> None:
        for key, record in self._pending:
            entry: Entry | None = jobs.get(key.removeprefix("job-")) if key.startswith("job-") else \
                jobs.system.get(key.removeprefix("system-"))
            if entry is not None:
                entry.running = None
                entry.record(record)
                if isinstance(entry, Job) and entry.schedule.kind == "at":  # a one-off: removed once it ran
                    if record.status == "ok":
                        jobs.jobs.remove(entry)
                    else:
                        entry.enabled = False  # kept, with what went wrong: `cron run ID` runs it again
            self._unlock(key)
        self._pending.clear()

    async def _stop_runs(self) -> None:
        for task in self._active.values():
            task.cancel()
        await asyncio.gather(*list(self._active.values()), return_exceptions=True)

    async def run_now(self, job_ref: str) -> RunRecord:
        """Run one job now, outside its schedule (`cron run ID`); its next run stays where it is."""
        now = self.clock()

        def claim(jobs: JobsFile) -> Claim:
            job = jobs.find(job_ref)
            if job.running is not None and not self._stale(job.lock_key):
                raise NanoagentError(f"Job {job.id} is running already (since {iso(job.running.started)}, pid "
                                     f"{job.running.pid}).")
            if job.running is not None:
                self._interrupted(jobs, job.lock_key, job)
            if not self._lock(job.lock_key):
                raise NanoagentError(f"Job {job.id} is being started by another process; try again.")
            job.running = Running(now, os.getpid(), None)
            return Claim(job.lock_key, _copy(job), None, now, None)

        taken = await self.store.update_async(claim)
        self._active[taken.key] = task = asyncio.create_task(self._execute(taken))
        await task
        return self.finished[-1][1]

    # --- locks -------------------------------------------------------------------------------------------------

    def _lock(self, key: str) -> bool:
        """Take running/<key>.lock for a run about to start (under the store's lock)."""
        fd = try_lock(self.store.running_dir / f"{key}.lock")
        if fd is None:
            return False
        self._locks[key] = fd
        return True

    def _unlock(self, key: str) -> None:
        fd = self._locks.pop(key, None)
        if fd is not None:
            (self.store.running_dir / f"{key}.lock").unlink(missing_ok=True)
            os.close(fd)

    def _stale(self, key: str) -> bool:
        """True when no process holds the run's lock: whoever claimed the run died."""
        if key in self._locks:
            return False
        path = self.store.running_dir / f"{key}.lock"
        if not path.exists():
            return True
        fd = try_lock(path)
        if fd is None:
            return False
        os.close(fd)
        path.unlink(missing_ok=True)
        return True

    def _acquire(self) -> bool:
        self._lock_fd = try_lock(self.lock_path, record_pid=True)
        return self._lock_fd is not None

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _touch(self) -> None:
        """The lock's time says when a scheduler last looked (`scheduler_seen`)."""
        if self._lock_fd is not None:
            os.utime(self.lock_path)

    def holder(self) -> str:
        try:
            return self.lock_path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"


def scheduler_seen(store: JobStore, now: float | None = None) -> bool:
    """True when a scheduler (the gateway's, or a crontab `tick`) looked at the jobs in the last few minutes."""
    try:
        mtime = store.scheduler_lock.stat().st_mtime
    except OSError:
        return False
    return (now or time.time()) - mtime < SEEN_RECENTLY


def _copy(job: Job | None) -> Job | None:
    """A snapshot for the runner: the store's objects are read anew at each change."""
    import copy

    return copy.copy(job) if job is not None else None


__all__ = ["Claim", "RunOutcome", "Scheduler", "SchedulerBusy", "Settings", "SystemTask", "scheduler_seen"]
