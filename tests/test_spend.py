"""Spend caps: checked before every model call attempt against the ledger, with the local LLM server and the real
providers (the CLI in-process, or real processes where two must spend at once or one must die mid-call)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from nanoagent.config.loader import load_config
from nanoagent.paths import Paths
from nanoagent.spend import Scope, blocked, report
from nanoagent.spend.ledger import Ledger
from nanoagent.spend.meter import most_expensive
from tests.conftest import ROOT, anthropic_env, invoke, wait_until, write_config
from tests.llm_server import Reply

MODEL = "claude-test"
# A price where the reply's worst case is the whole cost: 1,000 tokens out at most cost $0.10; the prompt is free.
PRICES = {"anthropic": {"prices": {MODEL: {"input": 0.0, "output": 100.0}}}}
OUT = 1000  # agents.defaults.maxTokens in these tests
CALL = 0.1  # what a call with OUT tokens out costs at PRICES


def configure(home: Path, budget: dict, **defaults) -> None:
    write_config(home, {"agents": {"defaults": {"maxTokens": OUT, **defaults}}, "budget": budget,
                        "providers": PRICES})


def ledger_lines(home: Path) -> list[dict]:
    path = home / "spend" / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def spent(home: Path) -> float:
    return sum(line["usd"] for line in ledger_lines(home) if line["op"] == "settle")


def costly(**extra) -> Reply:
    """A reply that costs CALL: OUT tokens out, a few in."""
    return Reply(input_tokens=10, output_tokens=OUT, **extra)


def reported(home: Path, key: str = "cli__direct") -> list[dict]:
    """The usage records the session file has: the tokens the server said each call used."""
    lines = [json.loads(line) for line in (home / "sessions" / f"{key}.jsonl").read_text().splitlines()]
    return [line for line in lines if line.get("type") == "usage"]


def cost(record: dict, input: float, output: float) -> float:
    """A usage record at a price per token (cache reads and writes at the input price)."""
    return (record["input_tokens"] + record["cache_read_tokens"] + record["cache_write_tokens"]) * input \
        + record["output_tokens"] * output


def status(home: Path, name: str, now: datetime | None = None):
    config, _ = load_config(home / "config.json", env={})
    return next(s for s in report(config, Paths(home, home / "workspace"), now) if s.name == name)


def test_a_daily_cap_reached_mid_turn_ends_the_turn_before_the_call_that_would_cross_it(llm, isolated_home):
    configure(isolated_home, {"daily": 0.25})
    llm.script(costly(tool_calls=[("list_dir", {"path": "."})]), costly(tool_calls=[("list_dir", {"path": "."})]),
               costly(text="never sent"))
    ran = invoke("agent", "-m", "look around", env=anthropic_env(llm))
    assert ran.returncode == 1
    assert len(llm.requests) == 2  # the third call could cross $0.25 ($0.20 spent, up to $0.10 more): not made
    line = ran.error_lines[-1] if ran.error_lines else ran.stdout.splitlines()[-1]
    assert "The daily budget ($0.2500) would be crossed: $0.2000 is spent" in ran.stdout + ran.stderr
    assert "it resets at 00:00 on" in line and "raise budget.daily in config.json" in line
    session = (isolated_home / "sessions" / "cli__direct.jsonl").read_text()
    assert "look around" in session  # the user's message is kept
    assert spent(isolated_home) == pytest.approx(0.2)
    ran = invoke("agent", "-m", "and now?", env=anthropic_env(llm))
    assert ran.returncode == 1 and len(llm.requests) == 2  # still at the cap: no request at all


def test_the_retry_layer_checks_every_attempt_so_a_429_storm_stops_at_the_cap(llm, isolated_home):
    """Each retry is checked on its own: spend made elsewhere while the storm waits (another session, another
    process) stops it at the cap, and the server gets no further request."""
    import asyncio

    from nanoagent.agent.build import spend_meter
    from nanoagent.providers.base import ChatRequest, ProviderError, complete_text
    from nanoagent.providers.registry import make_provider, with_retries
    from nanoagent.spend import current_scope

    configure(isolated_home, {"daily": 0.35}, maxRetries=20, retryBaseDelay=0.01)
    config, _ = load_config(isolated_home / "config.json", env=anthropic_env(llm))
    paths = Paths.from_env()
    other = Ledger(paths.spend_dir)  # another process's view of the same ledger

    async def elsewhere_spends(seconds: float) -> None:
        with other.locked():
            line = other.reserve(CALL, {"session": "telegram:1", "kind": "turn"}, MODEL)
            other.append([line, other.settlement(line, CALL)])

    llm.default_reply = Reply(status=429, error_message="rate limited", headers={"retry-after": "0"})
    provider = with_retries(config, [(f"anthropic/{MODEL}", make_provider(f"anthropic/{MODEL}", config))],
                            meter=spend_meter(config, paths))
    provider.sleep = elsewhere_spends
    token = current_scope.set(Scope("cli:direct"))
    request = ChatRequest(model=f"anthropic/{MODEL}", system="s", messages=[{"role": "user", "content": "hi"}],
                          max_tokens=OUT)
    try:
        with pytest.raises(ProviderError) as failure:
            asyncio.run(complete_text(provider, request))
    finally:
        current_scope.reset(token)
    # $0.35: attempts 1-3 fit (0, 0.1, 0.2 spent elsewhere, +0.1 worst case); the fourth would cross it
    assert len(llm.requests) == 3
    assert "The daily budget ($0.3500) would be crossed" in str(failure.value)
    assert spent(isolated_home) == pytest.approx(0.3)  # refused attempts cost nothing


def test_a_call_that_would_cross_a_cap_ends_there_and_no_fallback_model_is_tried(llm, isolated_home):
    """The cap is checked around each attempt (`providers/metered.py`), and `Capped` is final for the retry layer:
    a cheaper fallback does not get the call the cap refused."""
    import asyncio

    from nanoagent.agent.build import spend_meter
    from nanoagent.providers.base import ChatRequest, ProviderError, complete_text
    from nanoagent.providers.registry import make_provider, with_retries
    from nanoagent.spend import current_scope

    write_config(isolated_home, {"agents": {"defaults": {"maxTokens": OUT}}, "budget": {"daily": 0.05},
                                 "providers": {"anthropic": {"prices": {MODEL: {"input": 0.0, "output": 100.0},
                                                                         "claude-cheap": {"input": 0.0,
                                                                                          "output": 1.0}}}}})
    config, _ = load_config(isolated_home / "config.json", env=anthropic_env(llm))  # the fallback's call would fit
    chain = [(f"anthropic/{name}", make_provider(f"anthropic/{name}", config)) for name in (MODEL, "claude-cheap")]
    provider = with_retries(config, chain, meter=spend_meter(config, Paths.from_env()))
    token = current_scope.set(Scope("cli:direct"))
    request = ChatRequest(model=f"anthropic/{MODEL}", system="s", messages=[{"role": "user", "content": "hi"}],
                          max_tokens=OUT)
    try:
        with pytest.raises(ProviderError) as failure:
            asyncio.run(complete_text(provider, request))
    finally:
        current_scope.reset(token)
    assert llm.requests == [] and "The daily budget ($0.0500) would be crossed" in str(failure.value)
    assert spent(isolated_home) == 0


def test_the_warning_at_warn_at_is_given_once_per_day(llm, isolated_home):
    configure(isolated_home, {"daily": 1.0, "warnAt": 0.5})
    llm.default_reply = costly(text="ok")
    outputs = [invoke("agent", "-m", f"turn {n}", env=anthropic_env(llm)) for n in range(7)]
    said = [n for n, ran in enumerate(outputs)
            if "of the daily budget ($1.00) is used, over 50%" in ran.stdout + ran.stderr]
    assert said == [4]  # the fifth call brought it to $0.50
    assert all(ran.returncode == 0 for ran in outputs)


def test_a_new_day_in_the_users_time_zone_resets_the_daily_cap(llm, isolated_home):
    zone = "Pacific/Auckland"
    configure(isolated_home, {"daily": 0.15}, timezone=zone)
    paths = Paths.from_env()
    local_now = datetime.now(ZoneInfo(zone))
    yesterday = (local_now - timedelta(days=1)).replace(hour=23, minute=30)
    ledger = Ledger(paths.spend_dir, zone)
    with ledger.locked():
        line = ledger.reserve(CALL, {"session": "cli:direct", "kind": "turn"}, MODEL, now=yesterday.timestamp())
        ledger.append([line, ledger.settlement(line, CALL)])
    config, _ = load_config(paths.config_file, env={})
    late = yesterday + timedelta(minutes=20)
    assert blocked(config, paths, Scope("cli:direct"), now=late) is None  # $0.10 of $0.15: not reached...
    assert status(isolated_home, "daily", late).spent == pytest.approx(CALL)
    assert status(isolated_home, "daily", late).resets_at == (late + timedelta(days=1)).replace(hour=0, minute=0,
                                                                                                 second=0,
                                                                                                 microsecond=0)
    assert status(isolated_home, "daily", yesterday + timedelta(hours=1)).spent == 0  # 00:30 the next day
    llm.default_reply = costly(text="fresh day")
    ran = invoke("agent", "-m", "hello", env=anthropic_env(llm))  # ...and a call of $0.10 more would cross it
    assert ran.returncode == 0 and "fresh day" in ran.stdout
    assert status(isolated_home, "daily").spent == pytest.approx(CALL)


def test_a_model_without_a_price_counts_at_its_providers_most_expensive_and_says_so_once(llm, isolated_home):
    write_config(isolated_home, {"agents": {"defaults": {"maxTokens": OUT}}, "budget": {"daily": 100.0}})
    env = {**anthropic_env(llm), "NANOAGENT_MODEL": "anthropic/claude-unpriced-1"}
    llm.default_reply = Reply(text="hi", input_tokens=1000, output_tokens=100)
    first = invoke("agent", "-m", "one", env=env)
    second = invoke("agent", "-m", "two", env=env)
    note = "anthropic/claude-unpriced-1 has no price in the bundled table, so spend caps count it at anthropic's"
    assert (first.stdout + first.stderr).count(note) == 1
    assert note not in second.stdout + second.stderr  # once per process and model
    top, _ = most_expensive("anthropic")
    assert top.input == top.cache_write or top.cache_write > top.input  # the dearest of each kind
    record = reported(isolated_home)[0]
    expected = (record["input_tokens"] * top.input + record["output_tokens"] * top.output
                + record["cache_read_tokens"] * top.cache_read + record["cache_write_tokens"] * top.cache_write)
    settle = next(line for line in ledger_lines(isolated_home) if line["op"] == "settle")
    assert settle["usd"] == pytest.approx(expected)
    reserve = next(line for line in ledger_lines(isolated_home) if line["op"] == "reserve")
    assert reserve["usd"] > OUT * top.output  # the whole reply at the output price, and the prompt


def test_a_price_in_providers_prices_is_the_one_counted(llm, isolated_home):
    write_config(isolated_home, {"budget": {"monthly": 50.0},
                                 "providers": {"anthropic": {"prices": {MODEL: {"input": 3.0, "output": 15.0}}}}})
    llm.default_reply = Reply(text="hi", input_tokens=1000, output_tokens=500)
    ran = invoke("agent", "-m", "price me", env=anthropic_env(llm))
    assert ran.returncode == 0 and "no price" not in ran.stdout + ran.stderr
    expected = cost(reported(isolated_home)[0], 3e-6, 15e-6)
    assert spent(isolated_home) == pytest.approx(expected)
    assert status(isolated_home, "monthly").spent == pytest.approx(expected)


def test_deleting_a_session_does_not_lower_what_was_spent(llm, isolated_home):
    configure(isolated_home, {"daily": 5.0})
    llm.default_reply = costly(text="ok")
    assert invoke("agent", "-m", "spend", "-s", "cli:gone", env=anthropic_env(llm)).returncode == 0
    for file in (isolated_home / "sessions").glob("*.jsonl"):
        file.unlink()
    assert status(isolated_home, "daily").spent == pytest.approx(CALL)


def nanoagent_process(home: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nanoagent", *args], cwd=ROOT, text=True,
                            env={**os.environ, **env, "NANOAGENT_HOME": str(home)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.process
def test_two_processes_spending_at_once_never_cross_the_cap_together(llm, isolated_home):
    configure(isolated_home, {"daily": 0.15})  # room for one call's worst case, not two
    release = threading.Event()
    llm.default_reply = costly(text="the one answer", release=release)
    env = anthropic_env(llm)
    procs = [nanoagent_process(isolated_home, env, "agent", "-m", f"who first {n}", "-s", f"cli:p{n}")
             for n in range(2)]
    try:
        wait_until(lambda: len(llm.requests) >= 1, "the first process's request")
        # one process holds $0.10 of the $0.15 while its call is under way: the other's must wait for none of it
        refused = next(proc for proc in wait_until(lambda: [p for p in procs if p.poll() is not None], "a refusal"))
        assert refused.returncode == 1
        assert "would be crossed" in refused.stderr.read() + refused.stdout.read()
    finally:
        release.set()
        outputs = [p.communicate(timeout=120) for p in procs]
    assert len(llm.requests) == 1
    assert sum("the one answer" in out for out, _ in outputs) == 1
    assert spent(isolated_home) == pytest.approx(CALL) and spent(isolated_home) <= 0.15


@pytest.mark.process
def test_a_process_killed_between_reserve_and_settle_keeps_its_reservation(llm, isolated_home):
    configure(isolated_home, {"daily": 0.15})
    release = threading.Event()
    llm.default_reply = costly(text="never finished", release=release)
    proc = nanoagent_process(isolated_home, anthropic_env(llm), "agent", "-m", "die mid-call")
    try:
        wait_until(lambda: len(llm.requests) == 1, "the call under way")
        assert [line["op"] for line in ledger_lines(isolated_home)] == ["reserve"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        release.set()
        proc.communicate()
    daily = status(isolated_home, "daily")
    assert daily.spent == 0 and daily.reserved == pytest.approx(ledger_lines(isolated_home)[0]["usd"])
    llm.default_reply = costly(text="too much")
    ran = invoke("agent", "-m", "again", env=anthropic_env(llm))
    assert ran.returncode == 1 and len(llm.requests) == 1
    assert "held by unfinished calls" in ran.stdout + ran.stderr


def test_budget_settings_are_checked_with_one_line_naming_the_key(isolated_home):
    write_config(isolated_home, {"budget": {"sessions": {"telegram:*": -1}}})
    ran = invoke("status")
    assert ran.returncode == 1 and len(ran.error_lines) == 1
    assert "`budget.sessions` has 'telegram:*': -1.0" in ran.stderr
    write_config(isolated_home, {"providers": {"anthropic": {"prices": {MODEL: {"input": 3.0}}}}})
    ran = invoke("status")
    assert ran.returncode == 1 and "needs both `input` and `output`" in ran.stderr
    write_config(isolated_home, {"budget": {"warnAt": 2}})
    ran = invoke("status")
    assert ran.returncode == 1 and "`budget.warnAt` must be from 0 to 1" in ran.stderr


def test_session_patterns_heartbeat_and_dream_caps_count_only_their_own_calls(isolated_home):
    configure(isolated_home, {"sessions": {"telegram:*": 0.5, "telegram:42": 0.2}, "heartbeat": 0.1, "dream": 1.0})
    paths = Paths.from_env()
    ledger = Ledger(paths.spend_dir)
    with ledger.locked():
        for session, kind, usd in (("telegram:42", "turn", 0.2), ("telegram:7", "turn", 0.1),
                                   ("heartbeat", "heartbeat", 0.1), ("cli:direct", "turn", 0.3)):
            line = ledger.reserve(usd, {"session": session, "kind": kind}, MODEL)
            ledger.append([line, ledger.settlement(line, usd)])
    config, _ = load_config(paths.config_file, env={})
    by_name = {s.name: s for s in report(config, paths)}
    assert {name: round(s.spent, 6) for name, s in by_name.items()} == {
        "sessions telegram:*": 0.3, "sessions telegram:42": 0.2, "heartbeat": 0.1, "dream": 0.0}
    assert blocked(config, paths, Scope("telegram:42")).name == "sessions telegram:42"
    assert blocked(config, paths, Scope("telegram:7")) is None
    assert blocked(config, paths, Scope("heartbeat", "heartbeat")).name == "heartbeat"
    assert blocked(config, paths, Scope("cli:direct")) is None
    run = Scope("cron:job1", "cron", "job1", run_cap=0.0)
    assert blocked(config, paths, run).name == "cron job1 (per run)"
    assert by_name["heartbeat"].to_json()["resets_at"].endswith(("+00:00", "Z")) or by_name["heartbeat"].resets_at


def test_the_warning_and_the_cap_reach_the_chat_the_turn_came_from(llm, isolated_home):
    """Through the shared channel engine and the Telegram stand-in, the agent on the local LLM server: the warning at
    warnAt is shown in the chat, once; at the cap the reply is the cap's line and the server gets no request."""
    import asyncio
    import contextlib

    from nanoagent.agent.build import build_agent
    from nanoagent.channels import registry
    from nanoagent.gateway.channels.engine import ChannelRunner
    from nanoagent.gateway.hub import Hub
    from tests.channel_harness import TIMING
    from tests.conftest import until
    from tests.telegram_server import StandIn

    stand_in = StandIn()
    try:
        write_config(isolated_home, {
            "agents": {"defaults": {"maxTokens": OUT, "model": f"anthropic/{MODEL}"}},
            "budget": {"sessions": {"telegram:*": 0.3}, "warnAt": 0.5},
            "providers": {"anthropic": {**PRICES["anthropic"], "apiKey": "sk-ant-test", "apiBase": llm.url}},
            "channels": {"telegram": stand_in.settings()}})
        config, _ = load_config(isolated_home / "config.json", env={})
        paths = Paths.from_env()
        llm.default_reply = costly(text="answered")

        async def scenario() -> None:
            hub = Hub(build_agent(config, paths))
            runner = ChannelRunner(registry.get("telegram"), registry.get("telegram").settings(config), paths, hub,
                                   TIMING)
            task = asyncio.create_task(runner.run())
            try:
                for n in range(4):
                    stand_in.write(stand_in.owner, f"question {n}")
                    await until(lambda n=n: len(stand_in.shown(stand_in.owner)) > n, f"the reply to question {n}")
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        asyncio.run(scenario())
    finally:
        stand_in.close()
    shown = stand_in.shown(stand_in.owner)
    warned = [n for n, text in enumerate(shown) if "over 50%" in text]
    assert warned == [1]  # the second call brought telegram:* to $0.20 of $0.30
    assert "answered" in shown[2]
    assert "The daily budget of sessions telegram:* is reached: $0.3000 spent of $0.3000" in shown[3]
    assert 'raise budget.sessions."telegram:*" in config.json' in shown[3]
    assert len(llm.requests) == 3


def spend_earlier(home: Path, usd: float, session: str, kind: str) -> None:
    ledger = Ledger(home / "spend")
    with ledger.locked():
        line = ledger.reserve(usd, {"session": session, "kind": kind}, MODEL)
        ledger.append([line, ledger.settlement(line, usd)])


def test_the_heartbeat_at_its_cap_starts_no_turn_and_says_why(llm, isolated_home):
    configure(isolated_home, {"heartbeat": 0.05})
    (isolated_home / "workspace").mkdir(parents=True)
    (isolated_home / "workspace" / "HEARTBEAT.md").write_text("- check the inbox\n")
    spend_earlier(isolated_home, 0.05, "heartbeat", "heartbeat")
    ran = invoke("heartbeat", "--force", env=anthropic_env(llm))
    assert ran.returncode == 1 and len(ran.error_lines) == 1
    assert "The heartbeat did not run: The heartbeat's daily budget is reached: $0.0500 spent" in ran.stderr
    assert "raise budget.heartbeat in config.json" in ran.stderr
    assert llm.requests == []
    state = json.loads((isolated_home / "heartbeat.json").read_text())
    assert state["last"] == "over_budget"


def test_scheduled_dream_at_its_cap_starts_nothing_and_notes_it_in_its_log(llm, isolated_home):
    import asyncio

    from nanoagent.agent.scheduled_dream import scheduled_dream

    configure(isolated_home, {"dream": 0.02})
    spend_earlier(isolated_home, 0.02, "dream", "dream")
    config, _ = load_config(isolated_home / "config.json", env=anthropic_env(llm))
    assert asyncio.run(scheduled_dream(config, Paths.from_env())) is None  # nothing to tell the user each run
    log = (isolated_home / "logs" / "dream.log").read_text()
    assert "skipped: Dream's daily budget is reached: $0.0200 spent of $0.0200" in log
    assert llm.requests == []


def test_message_batches_calls_are_counted_at_half_the_price(llm, isolated_home):
    import asyncio

    from nanoagent.config.schema import ModelPrice, ProviderConfig
    from nanoagent.providers.anthropic_batch import build_batch_provider
    from nanoagent.providers.base import ChatRequest, complete_text
    from nanoagent.spend import Meter

    config, _ = load_config(isolated_home / "config.json", env={})
    config.agents.defaults.model = f"anthropic/{MODEL}"
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=llm.url,
                                                   prices={MODEL: ModelPrice(input=3.0, output=15.0)})
    llm.default_reply = Reply(text="summed up", input_tokens=1000, output_tokens=200)
    provider = build_batch_provider(config, poll_interval=0.01, max_poll_interval=0.02,
                                    meter=Meter(config, Paths.from_env()))
    request = ChatRequest(model=f"anthropic/{MODEL}", system="s", messages=[{"role": "user", "content": "hi"}],
                          max_tokens=100)
    text, usage, _ = asyncio.run(complete_text(provider, request))
    assert text == "summed up"
    full = (usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens) * 3e-6 + usage.output_tokens * 15e-6
    assert spent(isolated_home) == pytest.approx(full / 2)


@pytest.mark.process
def test_a_gateway_and_a_cron_tick_spending_at_once_never_cross_the_cap_together(llm, isolated_home):
    """The gateway answers a chat while `cron tick` (the gateway's own scheduler off) runs a due job: two processes,
    one ledger. Whichever reserves first holds its worst case until its call ends; the other is refused."""
    from datetime import UTC

    from nanoagent.cron.schedule import Schedule
    from nanoagent.cron.store import Job, JobStore
    from tests.conftest import PATIENCE, start_gateway_process

    write_config(isolated_home, {"agents": {"defaults": {"maxTokens": OUT}}, "budget": {"daily": 0.15},
                                 "providers": PRICES, "cron": {"enabled": False}})
    now = datetime.now(UTC)
    store = JobStore(Paths.from_env().cron_jobs_file)
    store.update(lambda jobs: jobs.jobs.append(Job(
        id="tea", message="Say hello.", schedule=Schedule.every("1h", now - timedelta(hours=1, seconds=1)),
        target="none", created=now, next_run=now - timedelta(seconds=1))))
    release = threading.Event()
    llm.default_reply = costly(text="the one answer", release=release)
    env = {**os.environ, **anthropic_env(llm)}
    gateway = start_gateway_process(env)
    try:
        chat = nanoagent_process(isolated_home, env, "agent", "-m", "hello there")
        tick = nanoagent_process(isolated_home, env, "cron", "tick")
        try:
            wait_until(lambda: len(llm.requests) >= 1, "the first call")
            wait_until(lambda: chat.poll() is not None or tick.poll() is not None, "the other to be refused")
        finally:
            release.set()
            outputs = [p.communicate(timeout=PATIENCE) for p in (chat, tick)]
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=PATIENCE)
    assert len(llm.requests) == 1, outputs
    assert spent(isolated_home) == pytest.approx(CALL)
    job = store.read().get("tea")
    answered = "the one answer" in outputs[0][0]
    run = job.runs[0]  # a run refused at the cap is recorded skipped, not failed (spendcli)
    refused = ("The daily budget ($0.1500) would be crossed" in outputs[0][1] if not answered
               else run.status == "skipped" and "daily cap $0.15 would be crossed" in (run.note or ""))
    assert refused, (outputs, job.runs)


def test_embedding_requests_go_through_the_spend_check_of_the_session_that_searched(llm, isolated_home):
    from nanoagent.memory.embeddings import EmbeddingError, EmbeddingSettings, embed_texts
    from nanoagent.spend import Meter, current_scope

    write_config(isolated_home, {"budget": {"sessions": {"telegram:*": 0.01}}})
    config, _ = load_config(isolated_home / "config.json", env={})
    settings = EmbeddingSettings("openai/text-embedding-3-small", "openai", llm.url + "/v1", "sk-test", None,
                                 meter=Meter(config, Paths.from_env()))
    token = current_scope.set(Scope("telegram:9"))
    try:
        assert len(embed_texts(settings, ["colour of the sky", "a cup of tea"])) == 2
        line = ledger_lines(isolated_home)[0]
        assert (line["session"], line["model"]) == ("telegram:9", "openai/text-embedding-3-small")
        spend_earlier(isolated_home, 0.01, "telegram:9", "turn")
        with pytest.raises(EmbeddingError, match=r"The daily budget of sessions telegram:\* is reached"):
            embed_texts(settings, ["one more"])
    finally:
        current_scope.reset(token)
    assert len([r for r in llm.requests if r.path.endswith("/embeddings")]) == 1


# --- the prompt's bound: the tokens the provider reported for the request before, plus what was appended -----------

INPUT_ONLY = {"anthropic": {"prices": {MODEL: {"input": 4.0, "output": 0.0}}}}  # only the prompt costs: $4/M tokens


def test_a_long_sessions_next_step_is_bounded_by_the_reported_tokens_so_the_cap_is_not_a_quarter_of_itself(
        llm, isolated_home, tmp_path):
    """A 100 KB message: its bytes bound the first call (nothing is known of it yet); the provider reports about a
    quarter of that as tokens, and each next step of the turn is bounded by that count plus the bytes appended since.
    Counted by bytes again, the second step's worst case alone would cross the cap ($0.25 spent of 1.125x the first
    call's bound, plus that bound again)."""
    message = "the agent read the file and answered " * 2800  # ~100 KB
    probe = tmp_path / "probe"  # another home, same prompt: what the first call's byte bound costs at this price
    write_config(probe, {"providers": INPUT_ONLY})
    llm.default_reply = Reply(text="probe", input_tokens=1)
    assert invoke("agent", "-m", message, env={**anthropic_env(llm), "NANOAGENT_HOME": str(probe)}).returncode == 0
    first_bound = next(line["usd"] for line in ledger_lines(probe) if line["op"] == "reserve")
    assert first_bound > 0.4  # 100 KB at $4/M
    tokens = int(first_bound / 4e-6) // 4  # what the server reports: a token of English is about 4 bytes
    cap = round(first_bound * 1.125, 4)
    write_config(isolated_home, {"budget": {"daily": cap}, "providers": INPUT_ONLY})
    llm.requests.clear()
    llm.script(Reply(tool_calls=[("list_dir", {"path": "."})], input_tokens=tokens),
               Reply(tool_calls=[("list_dir", {"path": "."})], input_tokens=tokens),
               Reply(text="all done", input_tokens=tokens))
    ran = invoke("agent", "-m", message, env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "all done" in ran.stdout and len(llm.requests) == 3
    reserves = [line["usd"] for line in ledger_lines(isolated_home) if line["op"] == "reserve"]
    assert reserves[0] == pytest.approx(first_bound, rel=0.02)  # the first call: its bytes
    assert reserves[1] < first_bound / 2 and reserves[2] < first_bound / 2  # the next: tokens reported + appended
    records = reported(isolated_home)
    assert reserves[1] >= cost(records[0], 4e-6, 0.0)  # never below what the same prompt really cost
    assert spent(isolated_home) == pytest.approx(sum(cost(r, 4e-6, 0.0) for r in records)) and spent(isolated_home) < cap


def test_a_pruned_or_changed_prompt_is_bounded_by_its_bytes_again(llm, isolated_home):
    """Only a request that is the one before plus appended messages builds on the reported count; a conversation
    cut at its start, a changed system prompt, an earlier message changed in place or another model count bytes."""
    import asyncio

    from nanoagent.agent.build import spend_meter
    from nanoagent.providers.base import ChatRequest, complete_text
    from nanoagent.providers.metered import prompt_bound
    from nanoagent.providers.registry import make_provider, with_retries
    from nanoagent.tokens import message_bound

    write_config(isolated_home, {"providers": {"anthropic": {"prices": {MODEL: {"input": 1.0, "output": 0.0},
                                                                         "claude-other": {"input": 1.0,
                                                                                          "output": 0.0}}}}})
    config, _ = load_config(isolated_home / "config.json", env=anthropic_env(llm))
    meter = spend_meter(config, Paths.from_env())
    providers = {name: with_retries(config, [(f"anthropic/{name}", make_provider(f"anthropic/{name}", config))],
                                    meter=meter) for name in (MODEL, "claude-other")}
    llm.default_reply = Reply(text="ok", input_tokens=500)
    text = "words of the first message " * 400
    messages: list = [{"role": "user", "content": text}]

    def send(system: str = "the system prompt", model: str = MODEL, sent: list | None = None) -> tuple[float, int]:
        """The call's reservation in tokens ($1/M), and the prompt's byte bound."""
        request = ChatRequest(model=f"anthropic/{model}", system=system, messages=messages if sent is None else sent,
                              max_tokens=OUT)
        asyncio.run(complete_text(providers[model], request))
        reserve = [line for line in ledger_lines(isolated_home) if line["op"] == "reserve"][-1]
        return round(reserve["usd"] * 1e6), prompt_bound(request)

    first, bound = send()
    assert first == bound  # nothing known yet: bytes
    appended = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and then?"}]
    messages.extend(appended)
    second, bound = send()
    settled = [line for line in ledger_lines(isolated_home) if line["op"] == "settle"]
    reported_tokens = round(settled[0]["usd"] * 1e6)
    assert second == reported_tokens + sum(message_bound(m) for m in appended) and second < bound / 2
    messages[-1]["content"] = "and then, at much greater length? " * 100  # the last message sent, changed in place
    messages.append({"role": "assistant", "content": "fine"})
    grown, bound = send()
    assert grown == bound
    messages.append({"role": "user", "content": "more"})
    assert send()[0] < bound / 2  # the same conversation again: back on the reported count
    pruned, bound = send(sent=messages[2:])  # its start archived
    assert pruned == bound
    changed, bound = send(system="another system prompt")
    assert changed == bound
    other, bound = send(model="claude-other")
    assert other == bound
