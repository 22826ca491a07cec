"""Exactly once with real processes: two `cron tick`s started together run a due job once, a tick killed with
SIGKILL mid-run leaves the run recorded as interrupted by the next one (not repeated), and the gateway runs a
due job through its hub and stands a crontab tick aside."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from nanoagent.cron.schedule import Schedule
from nanoagent.cron.store import Job, JobStore
from nanoagent.paths import Paths
from tests.conftest import PATIENCE, ROOT, anthropic_env, start_gateway_process, wait_until
from tests.llm_server import Reply


def due_job(job_id: str = "tea", target: str = "cli:direct") -> JobStore:
    now = datetime.now(UTC)
    store = JobStore(Paths.from_env().cron_jobs_file)
    schedule = Schedule.every("1h", now - timedelta(hours=1, seconds=1))

    def change(jobs):
        jobs.jobs.append(Job(id=job_id, message="Say hello.", schedule=schedule, target=target, created=now,
                             next_run=now - timedelta(seconds=1)))

    store.update(change)
    return store


def start(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nanoagent", *args], cwd=ROOT, env={**os.environ, **env},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.process
def test_two_ticks_started_together_run_a_due_job_once(llm):
    store = due_job()
    release = threading.Event()
    llm.script(Reply(text="Hello!", release=release), Reply(text="a second run must not happen"))
    env = anthropic_env(llm)
    first, second = start("cron", "tick", env=env), start("cron", "tick", env=env)
    try:
        wait_until(lambda: llm.requests, "the run's model call")
        time.sleep(0.3)  # both processes had time to look at the job
        release.set()
        outs = [p.communicate(timeout=PATIENCE) for p in (first, second)]
    finally:
        release.set()
        for p in (first, second):
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    assert outs[0][0] + outs[1][0] == "" and outs[0][1] + outs[1][1] == ""  # cron mails nothing
    assert len(llm.requests) == 1
    job = store.read().get("tea")
    assert job is not None and [r.status for r in job.runs] == ["ok"] and job.running is None


@pytest.mark.process
def test_a_tick_killed_mid_run_is_recorded_interrupted_by_the_next_and_not_repeated(llm):
    store = due_job()
    release = threading.Event()
    llm.script(Reply(text="never finished", release=release))
    env = anthropic_env(llm)
    killed = start("cron", "tick", env=env)
    try:
        wait_until(lambda: llm.requests, "the run's model call")
        running = store.read().get("tea")
        assert running is not None and running.running is not None and running.running.pid == killed.pid
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
    finally:
        release.set()
    after = start("cron", "tick", env=env)
    out, err = after.communicate(timeout=PATIENCE)
    assert after.returncode == 0, err
    job = store.read().get("tea")
    assert job is not None and job.running is None
    assert [r.status for r in job.runs] == ["interrupted"]
    assert f"pid {killed.pid}" in (job.runs[0].error or "")
    assert job.next_run is not None and job.next_run > datetime.now(UTC)  # moved on: not run again
    assert len(llm.requests) == 1
    assert not list((store.path.parent / "running").glob("*.lock"))


@pytest.mark.process
def test_the_gateway_runs_a_due_job_and_a_crontab_tick_stands_aside(llm, isolated_home):
    store = due_job()
    llm.script(Reply(text="Hello from the gateway."))
    env = anthropic_env(llm)
    log_path = isolated_home.parent / "gateway.stderr"  # where start_gateway_process logs
    gateway = start_gateway_process({**os.environ, **env})
    try:
        wait_until(lambda: (j := store.read().get("tea")) is not None and j.runs, "the gateway to run the job")
        tick = start("cron", "tick", "-v", env=env)
        out, _ = tick.communicate(timeout=PATIENCE)
        assert tick.returncode == 0 and "A scheduler is already running" in out
    finally:
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=PATIENCE) == 0, log_path.read_text()
    job = store.read().get("tea")
    assert job is not None and [r.status for r in job.runs] == ["ok"]
    lines = [json.loads(line) for line in Paths.from_env().session_file("cli:direct").read_text().splitlines()]
    notes = [r["message"]["content"] for r in lines if r["type"] == "message"]
    assert len(notes) == 1 and notes[0].endswith("Hello from the gateway.")
    assert len(llm.requests) == 1
