"""`nanoagent cron`: add prints the id, list shows next run and last result (and --json), enable/disable/remove, a
run by hand, a silent tick, and bad input as one line with a non-zero exit."""

from __future__ import annotations

import json

from nanoagent.cron.store import JobStore
from nanoagent.paths import Paths
from tests.conftest import anthropic_env, invoke, write_config
from tests.llm_server import Reply


def store() -> JobStore:
    return JobStore(Paths.from_env().cron_jobs_file)


def test_add_prints_the_new_jobs_id_and_list_shows_it_with_its_next_run(isolated_home):
    write_config(isolated_home, {"agents": {"defaults": {"timezone": "Europe/Berlin"}}})
    ran = invoke("cron", "add", "--cron", "0 9 * * 1-5", "--message", "Plan the day.", "--name", "plan")
    assert ran.returncode == 0, ran.stderr
    job_id = ran.stdout.strip()
    assert len(job_id) == 8 and store().read().get(job_id) is not None
    assert "At 09:00 on Monday through Friday (Europe/Berlin)" in ran.stderr and "cli:direct" in ran.stderr
    assert "no scheduler has run lately" in ran.stderr
    listing = invoke("cron", "list")
    assert listing.returncode == 0
    assert job_id in listing.stdout and "plan" in listing.stdout and "09:00 CE" in listing.stdout
    data = json.loads(invoke("cron", "list", "--json").stdout)
    assert data["jobs"][0]["id"] == job_id and data["jobs"][0]["schedule"] == \
        {"kind": "cron", "expr": "0 9 * * 1-5", "tz": "Europe/Berlin"}


def test_every_and_at_and_a_target_are_taken(isolated_home):
    write_config(isolated_home, {"channels": {"telegram": {"allowFrom": [42]}}})
    every = invoke("cron", "add", "--every", "15m", "-m", "Check the build.", "--to", "telegram:42")
    at = invoke("cron", "add", "--at", "in 20 minutes", "-m", "Tea.", "--to", "none")
    assert every.returncode == 0 and at.returncode == 0, every.stderr + at.stderr
    jobs = {j.id: j for j in store().read().jobs}
    assert jobs[every.stdout.strip()].target == "telegram:42" and jobs[every.stdout.strip()].schedule.seconds == 900
    assert jobs[at.stdout.strip()].schedule.kind == "at" and jobs[at.stdout.strip()].target == "none"


def test_disable_enable_and_remove(isolated_home):
    job_id = invoke("cron", "add", "--every", "1h", "-m", "x").stdout.strip()
    assert invoke("cron", "disable", job_id[:5]).stdout.startswith(f"Paused job {job_id}")
    assert not store().read().jobs[0].enabled
    assert "paused" in invoke("cron", "list").stdout
    assert invoke("cron", "enable", job_id).stdout.startswith(f"Enabled job {job_id}; next run")
    assert invoke("cron", "remove", job_id).stdout == f"Removed job {job_id} (x).\n"
    assert store().read().jobs == []


def test_bad_input_is_one_line_and_a_non_zero_exit(isolated_home):
    cases = {
        ("--cron", "0 25 * * *"): "Invalid cron expression '0 25 * * *'",
        ("--every", "often"): "is not a duration",
        ("--at", "2001-01-01 09:00"): "is in the past",
        ("--cron", "0 9 * * *", "--tz", "Atlantis/Capital"): "Unknown time zone 'Atlantis/Capital'",
        ("--every", "1h", "--to", "fax:me"): "Cannot deliver to 'fax:me'",
        ("--every", "1h", "--to", "telegram:999"): "telegram:999 is not one of the user's own chats",
        ("--every", "1h", "--at", "10:00"): "Give exactly one schedule",
    }
    for args, expected in cases.items():
        ran = invoke("cron", "add", *args, "-m", "x")
        assert ran.returncode == 1, args
        assert ran.stderr.startswith("Error: ") and expected in ran.stderr and ran.stderr.count("\n") == 1, ran.stderr
    assert invoke("cron", "remove", "nope").stderr == "Error: No job 'nope'; `nanoagent cron list` shows the ids.\n"
    assert not store().path.exists() or store().read().jobs == []


def test_a_schedule_that_never_comes_or_overflows_is_one_line_and_no_job_is_stored(isolated_home):
    cases = {
        ("--at", "in 0 minutes"): "Error: --at 'in 0 minutes' is now, not later: give a time to come, e.g. \"in 1 minute\".",
        ("--every", "99999999999d"): "Error: --every '99999999999d' is longer than 10 years: write a shorter one.",
        ("--at", "in 99999999999d"): "Error: --at in '99999999999d' is longer than 10 years: write a shorter one.",
        ("--every", "9" * 400 + "d"): "Error: --every '" + "9" * 400 + "d' is longer than 10 years: write a shorter one.",
    }
    for args, expected in cases.items():
        ran = invoke("cron", "add", *args, "-m", "x")
        assert (ran.returncode, ran.stdout, ran.stderr) == (1, "", expected + "\n"), args
    assert not store().path.exists() or store().read().jobs == []


def test_a_corrupt_jobs_file_stops_every_command_with_the_file_and_the_place_and_is_left_alone(isolated_home):
    invoke("cron", "add", "--every", "1h", "-m", "x")
    path = store().path
    data = json.loads(path.read_text())
    data["jobs"][0]["id"] = 3
    broken = json.dumps(data)
    path.write_text(broken)
    for args in (("list",), ("add", "--every", "1h", "-m", "y"), ("tick",)):
        ran = invoke("cron", *args)
        assert ran.returncode == 1 and f"{path}: jobs[0]: expected a string, got 3" in ran.stderr, ran.stderr
    assert path.read_text() == broken
    assert json.loads(path.with_name("jobs.json.good").read_text())["jobs"][0]["message"] == "x"


def test_tick_with_nothing_due_is_silent_and_needs_no_api_key(isolated_home):
    invoke("cron", "add", "--every", "1h", "-m", "x")
    ran = invoke("cron", "tick")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    assert invoke("cron", "tick", "-v").stdout == "Nothing was due.\n"


def test_run_runs_a_job_now_prints_its_reply_and_records_it_without_moving_its_schedule(isolated_home, llm):
    job_id = invoke("cron", "add", "--every", "1d", "-m", "Say hi.").stdout.strip()
    before = store().read().jobs[0].next_run
    llm.script(Reply(text="Hi there!"))
    ran = invoke("cron", "run", job_id[:3], env=anthropic_env(llm))  # the start of the id is enough
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"{job_id} (Say hi.): ok in ")
    assert ran.stdout.splitlines()[1:] == ["Hi there!"]  # the reply it got
    job = store().read().jobs[0]
    assert job.next_run == before and [r.status for r in job.runs] == ["ok"] and job.runs[0].scheduled is None
    assert "Say hi." in json.dumps(llm.requests[0].body)
    notes = Paths.from_env().session_file("cli:direct").read_text()
    assert "Hi there!" in notes


def test_a_failing_run_by_hand_exits_1_with_the_error(isolated_home, llm):
    job_id = invoke("cron", "add", "--every", "1d", "-m", "Say hi.").stdout.strip()
    llm.script(Reply(status=400, error_message="bad request: nope"))
    ran = invoke("cron", "run", job_id, env=anthropic_env(llm))
    assert ran.returncode == 1 and ": error" in ran.stdout and "nope" in ran.stdout


def test_list_says_the_heartbeats_interval_as_a_jobs_is_said(isolated_home):
    assert invoke("cron", "tick").returncode == 0  # the scheduler's first pass records the system tasks
    listing = invoke("cron", "list").stdout
    heartbeat = next(line for line in listing.splitlines() if "(heartbeat)" in line)
    assert "every 30 min" in heartbeat and "1800" not in heartbeat


def test_budget_is_kept_per_job_shown_in_list_and_in_json_and_survives_a_pause(isolated_home):
    ran = invoke("cron", "add", "--every", "1h", "-m", "Check the build.", "--budget", "$0.20")
    assert ran.returncode == 0, ran.stderr
    job_id = ran.stdout.strip()
    assert "at most $0.20 a run" in ran.stderr
    assert store().read().get(job_id).budget == 0.2
    assert invoke("cron", "disable", job_id).returncode == 0
    assert store().read().get(job_id).budget == 0.2
    assert "at most $0.20 a run" in invoke("cron", "list", env={"COLUMNS": "200"}).stdout
    assert json.loads(invoke("cron", "list", "--json").stdout)["jobs"][0]["budget"] == 0.2
    plain = invoke("cron", "add", "--every", "1h", "-m", "No cap.").stdout.strip()
    assert store().read().get(plain).budget is None


def test_a_budget_that_is_not_an_amount_above_zero_is_one_line_and_no_job_is_stored(isolated_home):
    cases = {
        "abc": "Error: --budget 'abc' is not an amount in USD: give one like 0.20 (dollars a run may spend).",
        "0": "Error: --budget '0' must be more than 0 USD: leave it out for no cap of the job's own.",
        "-1": "Error: --budget '-1' must be more than 0 USD: leave it out for no cap of the job's own.",
        "nan": "Error: --budget 'nan' must be more than 0 USD: leave it out for no cap of the job's own.",
        "inf": "Error: --budget 'inf' must be more than 0 USD: leave it out for no cap of the job's own.",
    }
    for value, expected in cases.items():
        ran = invoke("cron", "add", "--every", "1h", "-m", "x", "--budget", value)
        assert (ran.returncode, ran.stdout, ran.stderr) == (1, "", expected + "\n"), value
    assert not store().path.exists() or store().read().jobs == []


def test_a_skipped_run_shows_in_list_with_its_reason_and_is_not_a_failure(isolated_home):
    from datetime import UTC, datetime

    from nanoagent.cron.store import RunRecord

    job_id = invoke("cron", "add", "--every", "1h", "-m", "x", "--budget", "0.5").stdout.strip()
    store().update(lambda jobs: jobs.get(job_id).record(RunRecord(
        started=datetime.now(UTC), status="skipped", note="budget: daily cap $1.00 reached, resets 00:00")))
    listing = invoke("cron", "list", "--wide").stdout
    assert "skipped" in listing and "daily cap $1.00 reached, resets 00:00" in listing
    runs = json.loads(invoke("cron", "list", "--json").stdout)["jobs"][0]["runs"]
    assert [(r["status"], r["error"]) for r in runs] == [("skipped", None)]


def test_list_fits_100_columns_and_wide_shows_the_last_runs_error_whole(isolated_home):
    from datetime import UTC, datetime

    from nanoagent.cron.store import RunRecord

    write_config(isolated_home, {"agents": {"defaults": {"timezone": "Europe/Berlin"}},
                                 "channels": {"telegram": {"allowFrom": [42]}}})
    job_id = invoke("cron", "add", "--cron", "0 9 * * 1-5", "-m", "Plan the day.", "--name",
                    "the morning plan for the whole team", "--to", "telegram:42", "--budget", "0.5").stdout.strip()
    error = "cannot connect to https://api.example.com/v1 (connection refused)"
    store().update(lambda jobs: jobs.get(job_id).record(RunRecord(started=datetime.now(UTC), status="error",
                                                                  error=error)))
    assert invoke("cron", "tick").returncode == 0  # the heartbeat's and Dream's rows too
    listing = invoke("cron", "list", env={"COLUMNS": "250"}).stdout
    assert max(len(line) for line in listing.splitlines()) <= 100, listing
    assert job_id in listing and "error" in listing and "cannot connect" not in listing
    wide = invoke("cron", "list", "--wide").stdout
    assert error in wide and max(len(line) for line in wide.splitlines()) > 100
