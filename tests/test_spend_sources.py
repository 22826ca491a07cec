"""Cost by source (issue 31): every call in the spend ledger names the kind of work it was (a turn, the memory flush,
a summary, the heartbeat, a transcription...), counted against the session that caused it; `nanoagent usage --by`
sums the ledger, so what no session file holds counts too, and `agents.defaults.backgroundModel` is the model the
housekeeping uses where its own setting is unset. Real calls to the local LLM server through the CLI, priced by
`providers.openai.prices`; the model choices through the ScriptedProvider."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from nanoagent.agent.build import build_agent, build_dream, spend_meter
from nanoagent.agent.heartbeat import NOTHING_TO_REPORT, run_heartbeat
from nanoagent.config.schema import Config
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.spend import Scope, current_scope, report, working_as
from nanoagent.templates import render
from nanoagent.usage import Usage
from tests.conftest import invoke, openai_env, write_config
from tests.llm_server import Reply, Transcript

VOICE = b"OggS\x00\x02" + bytes(26) + b"OpusHead" + bytes(200)
# USD per million tokens: the turn's model, and a cheaper one for housekeeping
PRICES = {"gpt-test": {"input": 1.0, "output": 100.0}, "gpt-cheap": {"input": 0.1, "output": 10.0}}
CONFIG = {"agents": {"defaults": {"backgroundModel": "openai/gpt-cheap", "retryBaseDelay": 0.01}},
          "providers": {"openai": {"prices": PRICES}}, "tools": {"transcribe": {"model": "openai/whisper-1"}}}


def call(text: str = "ok") -> Reply:
    return Reply(text=text, input_tokens=1000, output_tokens=100)


def settled_usd(home) -> float:
    lines = [json.loads(line) for line in (home / "spend" / "ledger.jsonl").read_text().splitlines()]
    return sum(line["usd"] for line in lines if line["op"] == "settle")


def by(what: str, *more: str) -> dict:
    ran = invoke("usage", "--by", what, "--json", *more)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_a_turn_a_new_a_heartbeat_and_a_transcription_each_show_under_their_own_kind_and_model(
        llm, isolated_home, tmp_path):
    write_config(isolated_home, CONFIG)
    memo = tmp_path / "memo.ogg"
    memo.write_bytes(VOICE)
    env = openai_env(llm)
    llm.transcriptions.script(Transcript("Buy milk.", duration=120.0))  # two minutes at whisper-1's $0.006/min
    llm.script(call("Milk, then."))
    assert invoke("agent", "-m", "what did I say?", "-a", str(memo), env=env).returncode == 0
    llm.script(call("DONE"), call("- the user asked what they said: buy milk"))  # the flush, then the summary
    ran = invoke("agent", "-m", "/new", env=env)
    assert ran.returncode == 0 and "Started a fresh conversation" in ran.stdout
    (isolated_home / "workspace" / "HEARTBEAT.md").write_text("- check the build\n")
    llm.script(call(NOTHING_TO_REPORT))
    assert invoke("heartbeat", env=env).returncode == 0
    assert [r.body["model"] for r in llm.requests] == ["gpt-test", "gpt-cheap", "gpt-cheap", "gpt-cheap"]

    data = by("source")
    rows = {(row["source"], row["model"]): row for row in data["rows"]}
    assert set(rows) == {("turn", "openai/gpt-test"), ("transcription", "openai/whisper-1"),
                         ("flush", "openai/gpt-cheap"), ("summary", "openai/gpt-cheap"),
                         ("heartbeat", "openai/gpt-cheap")}
    assert all(row["calls"] == 1 for row in rows.values())
    assert rows[("flush", "openai/gpt-cheap")]["cost"] == pytest.approx(0.0011)  # 1,000 in at $0.1/M, 100 out at $10/M
    assert rows[("turn", "openai/gpt-test")]["cost"] == pytest.approx(0.011)
    assert rows[("turn", "openai/gpt-test")]["output_tokens"] == 100
    assert rows[("transcription", "openai/whisper-1")]["cost"] == pytest.approx(0.012)
    sessions = {row["session"]: row["calls"] for row in by("session")["rows"]}
    assert sessions == {"cli:direct": 4, "heartbeat": 1}  # the flush and summary count against the chat's session
    assert {row["channel"] for row in by("channel")["rows"]} == {"cli", "heartbeat"}
    assert data["total"]["cost"] == pytest.approx(settled_usd(isolated_home))

    shown = invoke("usage", "--by", "source", env={"COLUMNS": "200"}).stdout
    flush_row = next(line for line in shown.splitlines() if "│ flush" in line)
    assert "openai/gpt-cheap" in flush_row and "$0.0011" in flush_row


def test_the_totals_of_usage_and_usage_by_source_agree_and_a_deleted_session_still_counts(llm, isolated_home):
    write_config(isolated_home, CONFIG)
    env = openai_env(llm)
    llm.script(call("one"), call("two"))
    assert invoke("agent", "-m", "hello", env=env).returncode == 0
    assert invoke("agent", "-m", "scratch this", "-s", "cli:scratch", env=env).returncode == 0
    assert invoke("sessions", "rm", "cli:scratch", "--yes").returncode == 0

    sessions = {row["session"]: row for row in by("session")["rows"]}
    assert set(sessions) == {"cli:direct", "cli:scratch"}  # the deleted session's call is still in the ledger
    plain = json.loads(invoke("usage", "--json").stdout)
    assert [row["session"] for row in plain["rows"]] == ["cli:direct"]  # the session files no longer have it
    ledger_total = by("source")["total"]
    assert plain["ledger"]["cost"] == ledger_total["cost"] == pytest.approx(0.022)
    assert plain["ledger"]["calls"] == ledger_total["calls"] == 2
    for other in ("channel", "session"):
        assert by(other)["total"] == ledger_total

    text = invoke("usage", env={"COLUMNS": "200"}).stdout
    line = next(line for line in text.splitlines() if line.startswith("Spend ledger:"))
    assert line.startswith("Spend ledger: $0.0220 in 2 calls") and "deleted sessions" in line
    total_row = next(row for row in invoke("usage", "--by", "source", env={"COLUMNS": "200"}).stdout.splitlines()
                     if "total" in row)
    assert re.search(r"\$0\.0220\s*│?$", total_row.rstrip(" │") + "│")


def test_usage_by_source_on_a_narrow_terminal_cuts_no_figure(llm, isolated_home):
    write_config(isolated_home, CONFIG)
    llm.script(Reply(text="one", input_tokens=1_234_567, output_tokens=123_456))
    assert invoke("agent", "-m", "hello", env=openai_env(llm)).returncode == 0
    shown = invoke("usage", "--by", "source", env={"COLUMNS": "50", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}).stdout
    shown = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    for figure in ("1,234,567", "123,456", "$13.58"):
        assert figure in shown, shown
    assert "Not shown at 50 columns: cache write, cache read" in shown


def test_housekeeping_a_capped_kind_causes_still_counts_against_that_kinds_cap(isolated_home):
    config = Config()
    config.budget.heartbeat = 1.0
    paths = Paths.from_env()
    meter = spend_meter(config, paths)
    token = current_scope.set(Scope("heartbeat", "heartbeat"))
    try:
        with working_as("summary") as scope:
            hold = meter.reserve("anthropic/claude-sonnet-4-5", 1000, 100)
        meter.settle(hold, Usage(input_tokens=1000, output_tokens=100), known=True)
    finally:
        current_scope.reset(token)
    assert (scope.kind, scope.session, scope.cause) == ("summary", "heartbeat", "heartbeat")
    [cap] = [cap for cap in report(config, paths) if cap.name == "heartbeat"]
    assert cap.spent == pytest.approx(1000 * 3e-6 + 100 * 15e-6)


# --- agents.defaults.backgroundModel -----------------------------------------------------------------------------

OWN = {"heartbeat": "scripted/heartbeat", "flush": "scripted/flush", "dream": "scripted/dream",
       "subagent summary": "scripted/subagent-summary"}


def configured(own_settings: bool) -> Config:
    config = Config()
    config.agents.defaults.model = "scripted/turn"
    config.agents.defaults.background_model = "scripted/background"
    if own_settings:
        config.heartbeat.model = OWN["heartbeat"]
        config.memory.flush.model = OWN["flush"]
        config.memory.dream_model = OWN["dream"]
        config.agents.defaults.subagents.summary_model = OWN["subagent summary"]
    return config


def models_used(config: Config) -> dict[str, set[str]]:
    """Each kind of housekeeping's models: a turn that spawns a sub-agent with a summary of the conversation, /new
    (the flush and the archive's summary), a heartbeat, and Dream over what /new archived."""
    paths = Paths.from_env()
    (paths.workspace / "HEARTBEAT.md").parent.mkdir(parents=True, exist_ok=True)
    (paths.workspace / "HEARTBEAT.md").write_text("- check the build\n")
    chat = ScriptedProvider(["Hello.", ScriptedReply(tool_calls=[("spawn", {"task": "say ok", "context": "summary"})])],
                            default="DONE")
    beat = ScriptedProvider(default=NOTHING_TO_REPORT)
    dream = ScriptedProvider(default="DONE")

    async def scenario() -> None:
        loop = build_agent(config, paths, provider=chat)
        try:
            await loop.handle("I am Ada", "cli:direct")
            await loop.handle("delegate", "cli:direct")
            await loop.handle("/new", "cli:direct")
        finally:
            await loop.aclose()
        await run_heartbeat(config, paths, provider=beat, ignore_hours=True)
        await build_dream(config, paths, sink=lambda event: None, provider=dream).run()

    asyncio.run(scenario())
    used: dict[str, set[str]] = {}
    for request in chat.requests:
        names = {tool.name for tool in request.tools}
        kind = ("flush" if "append_note" in names else "summary" if request.system == render("prompts/consolidate.md")
                else "subagent summary" if "You brief a helper agent" in request.system else "turn")
        used.setdefault(kind, set()).add(request.model)
    used["heartbeat"] = {request.model for request in beat.requests}
    used["dream"] = {request.model for request in dream.requests}
    assert all(used.get(kind) for kind in ("turn", "flush", "summary", "subagent summary", "heartbeat", "dream")), used
    return used


def test_the_background_model_does_the_housekeeping_whose_own_model_is_unset(isolated_home):
    used = models_used(configured(own_settings=False))
    assert used.pop("turn") == {"scripted/turn"}
    assert used == {kind: {"scripted/background"} for kind in ("flush", "summary", "subagent summary", "heartbeat",
                                                               "dream")}


def test_a_housekeeping_model_of_its_own_wins_over_the_background_model(isolated_home):
    used = models_used(configured(own_settings=True))
    assert used.pop("turn") == {"scripted/turn"}
    assert used.pop("summary") == {"scripted/background"}  # archiving's summary has no setting of its own
    assert used == {kind: {model} for kind, model in OWN.items()}
