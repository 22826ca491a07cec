"""The scheduler against an injected clock: each occurrence runs once, missed runs are caught up once or skipped, a
clock jumping forward fires nothing twice, failures are recorded and retried at the next occurrence, runs are
capped and timed out, and system tasks ride the same machinery. No test waits for a schedule."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from nanoagent.agent.build import build_agent, build_outbox
from nanoagent.agent.cron_runs import NO_REPLY, TurnRunner
from nanoagent.config.schema import Config
from nanoagent.cron.schedule import Schedule
from nanoagent.cron.scheduler import MAX_SLEEP, Claim, RunOutcome, Scheduler, Settings, SystemTask
from nanoagent.cron.store import Job, JobStore, Running, StoreCorrupt
from nanoagent.paths import Paths
from nanoagent.providers.base import ProviderError
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from tests.conftest import PATIENCE

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime = T0):
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class Recorder:
    """A job runner that notes which jobs ran, and gives what it is told."""

    def __init__(self, outcome: RunOutcome | None = None):
        self.ran: list[tuple[str, Claim]] = []
        self.outcome = outcome or RunOutcome(tokens=12)

    async def __call__(self, job: Job, claim: Claim) -> RunOutcome:
        self.ran.append((job.id, claim))
        return self.outcome


def jobs_store() -> JobStore:
    return JobStore(Paths.from_env().cron_jobs_file)


def add_job(schedule: Schedule, job_id: str = "tea", missed: str = "once", made: datetime = T0, **fields) -> None:
    def change(jobs):
        jobs.jobs.append(Job(id=job_id, message=f"do {job_id}", schedule=schedule, created=made, missed=missed,
                             next_run=schedule.next_after(made), **fields))

    jobs_store().update(change)


def job(job_id: str = "tea") -> Job:
    found = jobs_store().read().get(job_id)
    assert found is not None
    return found


def tick(runner, clock: Clock, **settings) -> list:
    return asyncio.run(Scheduler(jobs_store(), runner, Settings(**settings), clock=clock).tick())


def test_a_job_runs_once_at_each_occurrence_and_not_before():
    add_job(Schedule.every("15m", T0))
    clock, runner = Clock(), Recorder()
    clock.advance(minutes=14)
    tick(runner, clock)
    assert runner.ran == []
    clock.advance(minutes=1)
    tick(runner, clock)
    tick(runner, clock)  # the same moment again: nothing twice
    assert [r[0] for r in runner.ran] == ["tea"]
    assert runner.ran[0][1].scheduled == T0 + timedelta(minutes=15)
    saved = job()
    assert saved.next_run == T0 + timedelta(minutes=30) and saved.running is None
    assert [(r.status, r.tokens) for r in saved.runs] == [("ok", 12)]


def test_a_clock_jumping_forward_an_hour_runs_a_job_once_not_once_per_missed_occurrence():
    add_job(Schedule.every("15m", T0))
    clock, runner = Clock(), Recorder()
    clock.advance(minutes=15)
    tick(runner, clock)
    clock.advance(hours=1)  # 12:15 -> 13:15: the 12:30, 12:45, 13:00 and 13:15 runs are all due at once
    tick(runner, clock)
    tick(runner, clock)
    assert len(runner.ran) == 2
    late = runner.ran[1][1]
    assert late.late == 45 * 60 and late.missed == 3
    saved = job()
    assert saved.next_run == clock.now + timedelta(minutes=15)
    assert saved.runs[-1].note == "ran 45 min late, 3 missed runs skipped"


def test_a_run_missed_while_nothing_ran_is_caught_up_once_within_the_catch_up_window():
    add_job(Schedule.cron("0 9 * * *", "UTC"))  # first due 2026-05-02 09:00
    clock, runner = Clock(datetime(2026, 5, 2, 14, 0, tzinfo=UTC)), Recorder()
    tick(runner, clock, catch_up=12 * 3600)
    assert len(runner.ran) == 1 and runner.ran[0][1].late == 5 * 3600
    assert job().next_run == datetime(2026, 5, 3, 9, 0, tzinfo=UTC)


def test_a_run_missed_by_more_than_the_window_or_with_missed_skip_is_recorded_and_skipped():
    add_job(Schedule.cron("0 9 * * *", "UTC"), "old")
    add_job(Schedule.cron("0 9 * * *", "UTC"), "skipper", missed="skip")
    clock, runner = Clock(datetime(2026, 5, 2, 22, 0, tzinfo=UTC)), Recorder()
    tick(runner, clock, catch_up=12 * 3600)
    assert runner.ran == []
    for job_id in ("old", "skipper"):
        saved = job(job_id)
        assert saved.runs[-1].status == "missed" and "skipped" in (saved.runs[-1].note or "")
        assert saved.next_run == datetime(2026, 5, 3, 9, 0, tzinfo=UTC)


def test_a_one_off_is_removed_after_it_ran_and_kept_switched_off_when_it_failed():
    add_job(Schedule.at(T0 + timedelta(minutes=5), "UTC"), "once")
    add_job(Schedule.at(T0 + timedelta(minutes=5), "UTC"), "broken")
    clock = Clock()
    clock.advance(minutes=5)

    async def runner(j: Job, claim: Claim) -> RunOutcome:
        return RunOutcome("error", error="boom") if j.id == "broken" else RunOutcome()

    tick(runner, clock)
    jobs = jobs_store().read()
    assert jobs.get("once") is None
    broken = jobs.get("broken")
    assert broken is not None and not broken.enabled and broken.runs[-1].error == "boom"


def test_a_failing_turn_is_recorded_and_the_job_runs_again_at_its_next_occurrence():
    provider = ScriptedProvider([ScriptedReply(error=ProviderError("overloaded, try later", status=400)),
                                 "All done."])
    paths = Paths.from_env()
    config = Config()
    outbox = build_outbox(config, paths)
    loop = build_agent(config, paths, provider=provider, outbox=outbox)
    runner = TurnRunner(lambda key, text: loop.handle(text, key), outbox, UTC)
    add_job(Schedule.every("1h", T0), target="cli:direct")
    clock = Clock()
    clock.advance(hours=1)
    tick(runner, clock)
    clock.advance(hours=1)
    tick(runner, clock)
    saved = job()
    assert [r.status for r in saved.runs] == ["error", "ok"]
    assert "overloaded" in (saved.runs[0].error or "")
    assert saved.runs[1].tokens > 0
    assert saved.next_run == T0 + timedelta(hours=3)
    # the reply reached the terminal session as the agent's note, never as the user's words
    session = loop.store.load("cli:direct")
    assert [m["role"] for m in session.messages] == ["assistant"]
    assert session.messages[0]["content"].endswith("All done.") and "Scheduled job tea" in \
        session.messages[0]["content"]


def test_a_reply_of_no_reply_delivers_nothing():
    paths = Paths.from_env()
    outbox = build_outbox(Config(), paths)
    loop = build_agent(Config(), paths, provider=ScriptedProvider([NO_REPLY]), outbox=outbox)
    add_job(Schedule.every("1h", T0), target="cli:direct")
    clock = Clock()
    clock.advance(hours=1)
    tick(TurnRunner(lambda key, text: loop.handle(text, key), outbox, UTC), clock)
    assert job().runs[-1].status == "ok" and job().runs[-1].note == "nothing to deliver"
    assert not paths.session_file("cli:direct").exists()


def test_a_run_over_its_timeout_is_stopped_and_recorded_and_the_job_stays_scheduled():
    add_job(Schedule.every("1h", T0))
    clock = Clock()
    clock.advance(hours=1)

    async def forever(j: Job, claim: Claim) -> RunOutcome:
        await asyncio.sleep(3600)
        return RunOutcome()

    tick(forever, clock, timeout=0.1)
    saved = job()
    assert saved.runs[-1].status == "timeout" and "stopped after" in (saved.runs[-1].error or "")
    assert saved.next_run == T0 + timedelta(hours=2) and saved.running is None


def test_no_more_than_the_cap_run_at_once_and_every_due_job_still_runs():
    for i in range(5):
        add_job(Schedule.every("1h", T0), f"job{i}")
    clock = Clock()
    clock.advance(hours=1)
    now_running, most = 0, 0

    async def runner(j: Job, claim: Claim) -> RunOutcome:
        nonlocal now_running, most
        now_running += 1
        most = max(most, now_running)
        await asyncio.sleep(0.01)
        now_running -= 1
        return RunOutcome()

    finished = tick(runner, clock, max_concurrent=2)
    assert most == 2 and len(finished) == 5


def test_a_raising_runner_is_an_error_record_not_a_crash():
    add_job(Schedule.every("1h", T0))
    clock = Clock()
    clock.advance(hours=1)

    async def broken(j: Job, claim: Claim) -> RunOutcome:
        raise RuntimeError("no such thing")

    tick(broken, clock)
    assert job().runs[-1].error == "RuntimeError: no such thing"


def test_a_run_left_running_by_a_dead_process_is_recorded_interrupted_and_not_repeated():
    add_job(Schedule.every("1h", T0))
    add_job(Schedule.at(T0 + timedelta(minutes=30), "UTC"), "reminder")
    clock = Clock()
    clock.advance(hours=1)

    def claimed_then_killed(jobs):  # what a process killed mid-run leaves: a claim whose lock nobody holds
        for j in jobs.jobs:
            j.running = Running(clock.now, 999999, j.next_run)
            j.next_run = j.schedule.next_after(clock.now)

    jobs_store().update(claimed_then_killed)
    runner = Recorder()
    tick(runner, clock)
    assert runner.ran == []
    regular, reminder = job("tea"), job("reminder")
    assert regular.runs[-1].status == "interrupted" and "pid 999999" in (regular.runs[-1].error or "")
    assert regular.running is None and regular.next_run == T0 + timedelta(hours=2)
    assert reminder.runs[-1].status == "interrupted" and not reminder.enabled  # kept, so the user sees it


def test_system_tasks_run_on_their_schedule_with_state_in_the_store():
    calls = []

    async def demo() -> RunOutcome:
        calls.append(1)
        return RunOutcome(note="did the thing")

    task = SystemTask("demo", Schedule.every(600, T0), demo)
    clock = Clock()

    def run() -> None:
        asyncio.run(Scheduler(jobs_store(), Recorder(), Settings(), [task], clock=clock).tick())

    run()
    assert calls == []
    clock.advance(minutes=10)
    run()
    run()
    assert calls == [1]
    state = json.loads(jobs_store().path.read_text())["system"]["demo"]
    assert state["runs"][-1]["status"] == "ok" and state["runs"][-1]["note"] == "did the thing"
    assert state["nextRun"] == "2026-05-01T12:20:00Z"


def test_an_idle_scheduler_sleeps_until_the_next_run_but_never_longer_than_a_minute():
    add_job(Schedule.every("1h", T0))
    clock = Clock()
    scheduler = Scheduler(jobs_store(), Recorder(), clock=clock)
    assert asyncio.run(scheduler.pass_()) == MAX_SLEEP == 60
    clock.advance(minutes=59, seconds=30)
    assert asyncio.run(scheduler.pass_()) == 30


def test_a_corrupt_store_stops_scheduling_with_one_logged_line_and_resumes_when_fixed(caplog):
    add_job(Schedule.every("1h", T0))
    store = jobs_store()
    good = store.path.read_text()
    store.path.write_text("{not json")
    clock = Clock()
    clock.advance(hours=1)
    runner = Recorder()
    scheduler = Scheduler(store, runner, clock=clock)
    with caplog.at_level(logging.ERROR, logger="nanoagent.cron"):
        assert asyncio.run(scheduler.pass_()) == MAX_SLEEP
        asyncio.run(scheduler.pass_())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "jobs.json is not valid JSON (line 1, column 2" in errors[0]
    assert store.path.read_text() == "{not json"
    with pytest.raises(StoreCorrupt):
        tick(runner, clock)
    store.path.write_text(good)
    tick(runner, clock)
    assert len(runner.ran) == 1


def test_a_system_task_switched_off_while_its_run_died_is_recorded_interrupted_and_not_run_again():
    async def demo() -> RunOutcome:
        return RunOutcome()

    clock = Clock()
    task = SystemTask("dream", Schedule.every(600, T0), demo)
    asyncio.run(Scheduler(jobs_store(), Recorder(), Settings(), [task], clock=clock).tick())

    def died(jobs):
        jobs.system["dream"].running = Running(clock.now, 999999, clock.now)
        jobs.system["dream"].next_run = clock.now - timedelta(minutes=1)

    jobs_store().update(died)
    clock.advance(hours=1)
    asyncio.run(Scheduler(jobs_store(), Recorder(), Settings(), [], clock=clock).tick())  # dream now switched off
    state = jobs_store().read().system["dream"]
    assert state.running is None and [r.status for r in state.runs] == ["interrupted"]


def test_cancelling_the_scheduler_as_a_wake_arrives_stops_it():
    # asyncio.wait_for on 3.11 returns the inner result instead of raising when both land in one step: a gateway
    # stopping just as a job's result woke its scheduler would wait on it for ever.
    scheduler = Scheduler(jobs_store(), Recorder(), Settings(), clock=Clock())

    async def scenario() -> None:
        serving = asyncio.create_task(scheduler.serve())
        while scheduler.wakeups == 0:  # its first pass is done; it waits for the next wake
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)
        scheduler._wake.set()
        await asyncio.sleep(0)  # the wake is seen by the waiting side...
        serving.cancel()  # ...in the same step as the cancellation
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(serving, PATIENCE)

    asyncio.run(scenario())


def test_a_run_the_gate_stops_is_recorded_skipped_without_running_and_the_job_runs_again_next_time():
    add_job(Schedule.every("1h", T0))
    add_job(Schedule.at(T0 + timedelta(hours=1), "UTC"), "once")
    clock, runner = Clock(), Recorder()
    reasons = iter(["budget: daily cap $1.00 reached, resets 00:00", "budget: daily cap $1.00 reached, resets 00:00",
                    None])

    async def gate(claim: Claim) -> str | None:
        return next(reasons)

    clock.advance(hours=1)
    asyncio.run(Scheduler(jobs_store(), runner, clock=clock, gate=gate).tick())
    assert runner.ran == []
    saved, once = job(), job("once")
    assert [(r.status, r.note, r.error) for r in saved.runs] == [
        ("skipped", "budget: daily cap $1.00 reached, resets 00:00", None)]
    assert saved.next_run == T0 + timedelta(hours=2) and saved.enabled
    assert not once.enabled and once.runs[-1].status == "skipped"  # kept: `cron run` runs it once the cap resets
    clock.advance(hours=1)
    asyncio.run(Scheduler(jobs_store(), runner, clock=clock, gate=gate).tick())
    assert [r.status for r in job().runs] == ["skipped", "ok"] and [j for j, _ in runner.ran] == ["tea"]
