"""What a person sees of the spend caps (issue 21): scheduled runs at a cap are recorded `skipped` (not failed, no
request made), `nanoagent budget` and its `--json` give the ledger's figures, `/budget` answers in a one-shot, and
`nanoagent usage` carries the same figures. Real calls to the local LLM server, priced by `providers.anthropic.prices`
so every figure is known: output $100 per million tokens and input free, so a reply of 100 tokens costs $0.01 and,
with `maxTokens` 100, so does any call's worst case."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from nanoagent.cron.store import JobStore
from nanoagent.paths import Paths
from tests.conftest import anthropic_env, invoke, write_config
from tests.llm_server import Reply

PRICED = {"providers": {"anthropic": {"prices": {"claude-test": {"input": 0.0, "output": 100.0}}}},
          "agents": {"defaults": {"maxTokens": 100, "timezone": "Europe/Berlin"}}}


def configure(home, **budget) -> None:
    write_config(home, {**PRICED, "budget": budget} if budget else PRICED)


def store() -> JobStore:
    return JobStore(Paths.from_env().cron_jobs_file)


def ledger_spent() -> float:
    """What the ledger's settled lines add up to (every call of these tests is today's)."""
    path = Paths.from_env().spend_dir / "ledger.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return sum(line["usd"] for line in lines if line["op"] == "settle")


def spend(llm, *replies: Reply) -> None:
    for reply in replies:
        llm.script(reply)
        ran = invoke("agent", "-m", "hello", env=anthropic_env(llm))
        assert ran.returncode == 0, ran.stderr


def make_due(job_id: str) -> None:
    def change(jobs):
        jobs.get(job_id).next_run = datetime.now(UTC) - timedelta(seconds=30)

    store().update(change)


def test_a_cron_job_past_the_daily_cap_is_skipped_recorded_and_the_server_gets_no_request(isolated_home, llm):
    configure(isolated_home, daily=0.01)
    spend(llm, Reply(text="hi", output_tokens=100))  # $0.01: the day's cap is reached
    job_id = invoke("cron", "add", "--every", "1h", "-m", "Check the prices.").stdout.strip()
    make_due(job_id)
    before = len(llm.requests)
    ran = invoke("cron", "tick", env=anthropic_env(llm))
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")  # no failure: crontab mails nothing
    assert len(llm.requests) == before
    job = store().read().get(job_id)
    assert job is not None and job.enabled and job.next_run > datetime.now(UTC)
    run = job.runs[-1]
    assert run.status == "skipped" and run.error is None
    assert run.note is not None and run.note.startswith("budget: daily cap $0.01 reached, resets 00:00")
    assert "skipped" in invoke("cron", "list", env={"COLUMNS": "250"}).stdout
    by_hand = invoke("cron", "run", job_id, env=anthropic_env(llm))
    assert by_hand.returncode == 0 and f"{job_id} (Check the prices.): skipped" in by_hand.stdout
    assert len(llm.requests) == before


def test_the_heartbeat_past_its_daily_cap_is_skipped_without_a_request(isolated_home, llm):
    configure(isolated_home, heartbeat=0.01)
    assert invoke("cron", "tick").returncode == 0  # the first pass schedules the heartbeat
    (isolated_home / "workspace").mkdir(exist_ok=True)
    (isolated_home / "workspace" / "HEARTBEAT.md").write_text("- check the build\n")
    llm.script(Reply(text="The build is green.", output_tokens=100))

    def due(jobs):
        jobs.system["heartbeat"].next_run = datetime.now(UTC) - timedelta(seconds=30)

    store().update(due)
    assert invoke("cron", "tick", env=anthropic_env(llm)).returncode == 0
    assert len(llm.requests) == 1  # it ran once, for $0.01: the heartbeat's day is spent
    store().update(due)
    ran = invoke("cron", "tick", env=anthropic_env(llm))
    assert (ran.returncode, ran.stderr) == (0, "")
    assert len(llm.requests) == 1
    run = store().read().system["heartbeat"].runs[-1]
    assert run.status == "skipped" and (run.note or "").startswith("budget: heartbeat cap $0.01 reached")


def test_a_run_that_reaches_its_own_cap_mid_way_is_skipped_not_failed_and_asks_no_more(isolated_home, llm):
    configure(isolated_home)
    job_id = invoke("cron", "add", "--every", "1h", "-m", "Read the notes.", "--budget", "0.015").stdout.strip()
    # the first call ($0.01) fits under $0.015; the second's worst case ($0.01 more) would cross it
    llm.script(Reply(tool_calls=[("list_dir", {"path": "."})], output_tokens=100), Reply(text="never sent"))
    ran = invoke("cron", "run", job_id, env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert len(llm.requests) == 1
    run = store().read().get(job_id).runs[-1]
    assert run.status == "skipped" and run.error is None
    assert run.note == "budget: this run's cap $0.015 (its --budget) would be crossed by the next call ($0.0100 spent)"
    assert abs(ledger_spent() - 0.01) < 1e-9


def test_budget_and_its_json_give_the_ledgers_figures_after_real_calls(isolated_home, llm):
    configure(isolated_home, daily=5.0, monthly=50.0, sessions={"cli:*": 1.0})
    spend(llm, Reply(text="one", output_tokens=100), Reply(text="two", output_tokens=250))
    spent = ledger_spent()
    assert abs(spent - 0.035) < 1e-9
    data = json.loads(invoke("budget", "--json").stdout)
    caps = {cap["name"]: cap for cap in data["caps"]}
    assert set(caps) == {"daily", "monthly", "sessions cli:*"}
    for name, limit in (("daily", 5.0), ("monthly", 50.0), ("sessions cli:*", 1.0)):
        assert caps[name]["limit"] == limit and caps[name]["spent"] == round(spent, 6) and caps[name]["reserved"] == 0
        assert caps[name]["forecast"] >= caps[name]["spent"]
    assert caps["daily"]["resets_at"].endswith(("+01:00", "+02:00")) and "T00:00:00" in caps["daily"]["resets_at"]
    assert data["today"]["spent"] == round(spent, 6) and data["month"]["spent"] == round(spent, 6)
    lines = invoke("budget").stdout.splitlines()
    assert lines[0].startswith("daily: $0.0350 spent of $5.00 (1%); resets 00:00 (Europe/Berlin); at this rate $")
    assert lines[0].endswith(". Raise it: `budget.daily`.")
    assert lines[2].startswith("sessions `cli:*`: $0.0350 spent of $1.00 (4%)")
    assert lines[2].endswith("Raise it: `budget.sessions.\"cli:*\"`.")
    assert lines[1].startswith("monthly: $0.0350 spent of $50.00 (0%); resets 00:00")
    assert lines[3].startswith("Spent today (") and "$0.0350" in lines[3]


def test_budget_with_no_cap_says_so_with_todays_spend_and_how_to_set_one(isolated_home, llm):
    configure(isolated_home)
    spend(llm, Reply(text="one", output_tokens=100))
    lines = invoke("budget").stdout.splitlines()
    assert lines[0] == "No spending caps are set: nanoagent spends without a limit."
    assert lines[1].startswith("Spent today (") and "$0.0100" in lines[1]
    assert "budget" in lines[2] and "\"daily\": 1.0" in lines[2]
    data = json.loads(invoke("budget", "--json").stdout)
    assert data["caps"] == [] and data["today"]["spent"] == 0.01


def test_slash_budget_answers_in_a_one_shot_without_a_model_call(isolated_home, llm):
    configure(isolated_home, daily=1.0)
    ran = invoke("agent", "-m", "/budget", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("daily: $0.0000 spent of $1.00 (0%); resets 00:00 (Europe/Berlin)")
    assert llm.requests == []
    assert "/budget" in invoke("agent", "-m", "/help", env=anthropic_env(llm)).stdout


def test_usage_shows_the_budget_under_its_table_and_in_its_json(isolated_home, llm):
    configure(isolated_home, daily=1.0)
    spend(llm, Reply(text="one", output_tokens=100))
    text = invoke("usage", env={"COLUMNS": "200"}).stdout
    assert text.splitlines()[-1].startswith("Budget: daily $0.0100 of $1.00 (resets 00:00)")
    data = json.loads(invoke("usage", "--json").stdout)
    assert data["budget"]["caps"][0]["name"] == "daily" and data["budget"]["caps"][0]["spent"] == 0.01
    assert data["budget"]["today"]["spent"] == 0.01
    assert isinstance(data["total"]["cost"], float) and data["total"]["calls"] == 1
    assert [row["session"] for row in data["rows"]] == ["cli:direct"]


def test_scheduled_dream_stopped_at_its_cap_mid_way_is_skipped_and_tells_nobody(isolated_home, llm):
    from nanoagent.memory.history import HistoryLog

    # Dream's calls may write 4,096 tokens: a worst case of $0.4096 each. The analysis fits under $0.415; the editing
    # call, after the analysis's $0.01, would not.
    configure(isolated_home, dream=0.415)
    assert invoke("cron", "tick").returncode == 0  # the first pass schedules Dream
    history = HistoryLog(Paths.from_env().memory_dir)
    history.append("cli:direct", "- the user's sister is called Ines")
    llm.script(Reply(text="## memory/MEMORY.md\n- ADD: the user's sister is called Ines", output_tokens=100),
               Reply(text="never sent"))

    def due(jobs):
        jobs.system["dream"].next_run = datetime.now(UTC) - timedelta(seconds=30)

    store().update(due)
    ran = invoke("cron", "tick", env=anthropic_env(llm))
    assert (ran.returncode, ran.stderr) == (0, "")
    assert len(llm.requests) == 1 and history.dream_cursor == 0  # the entries wait for the next run
    run = store().read().system["dream"].runs[-1]
    assert (run.status, run.error, run.delivery) == ("skipped", None, None)
    assert (run.note or "").startswith("budget: dream cap $0.415 would be crossed by the next call ($0.0100 spent), "
                                       "resets 00:00")
    assert "Stopped at a spend cap" in (Paths.from_env().logs_dir / "dream.log").read_text()
