"""The jobs store: a file that does not parse is never overwritten, the last good copy stays beside it, unknown keys
survive, and a thousand jobs are no trouble."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nanoagent.cron.schedule import Schedule
from nanoagent.cron.store import Job, JobStore, RunRecord, StoreCorrupt, new_job_id
from nanoagent.paths import Paths

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def store() -> JobStore:
    return JobStore(Paths.from_env().cron_jobs_file)


def add(jobs_store: JobStore, message: str = "tea", every: str = "1h") -> Job:
    def change(jobs):
        job = Job(id=new_job_id(jobs.jobs), message=message, schedule=Schedule.every(every, NOW), created=NOW,
                  next_run=NOW + timedelta(hours=1))
        jobs.jobs.append(job)
        return job

    return jobs_store.update(change)


def test_jobs_live_under_the_home_not_the_workspace_with_a_version_and_private_modes(isolated_home):
    s = store()
    job = add(s)
    assert s.path == isolated_home / "cron" / "jobs.json"
    data = json.loads(s.path.read_text())
    assert data["version"] == 2 and data["jobs"][0]["id"] == job.id
    assert oct(s.path.stat().st_mode & 0o777) == "0o600"
    assert oct(s.path.parent.stat().st_mode & 0o777) == "0o700"
    assert s.read().jobs[0].message == "tea"


@pytest.mark.parametrize(("content", "expected"), [
    ('{"version": 1, "jobs": [', "is not valid JSON (line 1, column 25"),
    ('[1, 2]', "the top level must be an object"),
    ('{"version": 1, "jobs": {"a": 1}}', "jobs: must be a list"),
    ('{"version": 1, "jobs": [{"id": "ab12", "message": 5, "schedule": {"kind": "every", "seconds": 60, '
     '"anchor": "2026-05-01T12:00:00Z"}}]}', "jobs[0]: expected a string, got 5"),
    ('{"version": 1, "jobs": [{"id": "ab12", "message": "x", "schedule": {"kind": "weekly"}}]}',
     "jobs[0]: kind must be cron, every or at"),
    ('{"version": 2, "jobs": [{"id": "ab12", "message": "x", "schedule": {"kind": "every", "seconds": 60, '
     '"anchor": "2026-05-01T12:00:00Z"}, "budget": -1}]}', "jobs[0]: budget must be a number of USD above 0"),
    ('{"version": 7, "jobs": []}', "written by a newer nanoagent (format 7; this one reads 2)"),
])
def test_a_jobs_file_that_does_not_parse_is_never_overwritten_and_the_error_names_file_and_place(content, expected):
    s = store()
    add(s)  # a good copy exists from this write
    good = s.good_path.read_text()
    s.path.write_text(content)
    with pytest.raises(StoreCorrupt) as caught:
        s.read()
    assert str(s.path) in str(caught.value) and expected in str(caught.value)
    with pytest.raises(StoreCorrupt):
        add(s, "another")
    assert s.path.read_text() == content  # not reset, not rewritten
    assert s.good_path.read_text() == good  # the last good copy is kept beside it
    if "newer" not in expected:
        assert "jobs.json.good" in str(caught.value)


def test_the_good_copy_follows_every_good_write_and_restoring_it_brings_the_jobs_back():
    s = store()
    add(s, "first")
    add(s, "second")
    assert [j["message"] for j in json.loads(s.good_path.read_text())["jobs"]] == ["first", "second"]
    s.path.write_text("{oops")
    os.replace(s.good_path, s.path)
    assert [j.message for j in s.read().jobs] == ["first", "second"]


def test_keys_this_version_does_not_know_are_kept_through_a_change():
    s = store()
    add(s)
    data = json.loads(s.path.read_text())
    data["owner"] = "me"
    data["jobs"][0]["colour"] = "green"
    s.path.write_text(json.dumps(data))
    add(s, "second")
    data = json.loads(s.path.read_text())
    assert data["owner"] == "me" and data["jobs"][0]["colour"] == "green"


def test_nothing_is_written_when_nothing_changed():
    s = store()
    add(s)
    before = s.path.stat().st_mtime_ns, s.path.stat().st_ino
    s.update(lambda jobs: None)
    assert (s.path.stat().st_mtime_ns, s.path.stat().st_ino) == before


def test_a_thousand_jobs_load_and_each_knows_its_next_run(tmp_path: Path):
    s = store()

    def fill(jobs):
        for i in range(1000):
            schedule = Schedule.cron(f"{i % 60} {i % 24} * * *", "Europe/Berlin") if i % 2 else \
                Schedule.every(f"{i + 10}m", NOW)
            jobs.jobs.append(Job(id=f"j{i:04d}", message=f"job {i}", schedule=schedule, created=NOW,
                                 next_run=schedule.next_after(NOW)))

    s.update(fill)
    jobs = s.read().jobs
    assert len(jobs) == 1000 and len({j.id for j in jobs}) == 1000
    assert all(j.schedule.next_after(NOW) == j.next_run for j in jobs)
    assert jobs[1].next_run == datetime(2026, 5, 1, 23, 1, tzinfo=UTC)  # 01:01 in Berlin, tomorrow


def test_job_ids_can_be_given_by_their_start_when_it_is_unique():
    s = store()
    a, b = add(s, "a"), add(s, "b")
    jobs = s.read()
    assert jobs.find(a.id[:6]).message == "a"
    assert jobs.find(b.id).message == "b"
    with pytest.raises(Exception, match="No job 'zz'"):
        jobs.find("zz")


def test_a_version_1_file_is_read_as_jobs_without_a_budget_and_written_back_as_version_2():
    s = store()
    s.path.parent.mkdir(parents=True, exist_ok=True)
    s.path.write_text(json.dumps({"version": 1, "jobs": [
        {"id": "ab12", "message": "tea", "schedule": {"kind": "every", "seconds": 3600,
                                                      "anchor": "2026-05-01T12:00:00Z"},
         "runs": [{"started": "2026-05-01T13:00:00Z", "status": "ok", "tokens": 5}]}]}))
    old = s.read().jobs[0]
    assert old.budget is None and [r.status for r in old.runs] == ["ok"]
    add(s, "second")
    data = json.loads(s.path.read_text())
    assert data["version"] == 2 and data["jobs"][0]["budget"] is None and data["jobs"][0]["runs"][0]["status"] == "ok"


def test_a_jobs_budget_and_a_skipped_run_survive_a_round_trip():
    s = store()
    job = add(s)

    def cap(jobs):
        saved = jobs.get(job.id)
        saved.budget = 0.2
        saved.record(RunRecord(started=NOW, status="skipped", note="budget: daily cap $1.00 reached, resets 00:00"))

    s.update(cap)
    saved = s.read().get(job.id)
    assert saved is not None and saved.budget == 0.2
    assert (saved.runs[-1].status, saved.runs[-1].note) == ("skipped", "budget: daily cap $1.00 reached, resets 00:00")
