"""Temporary chats (`/incognito`, `agent --incognito`, the HTTP flag): never archived, Dreamed or indexed, deleted
when they end, and their cost still counted."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from nanoagent.agent import events as ev
from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.memory.search import MemorySearch
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from nanoagent.usage import Usage
from tests.conftest import PATIENCE, ROOT, anthropic_env, invoke, wait_until
from tests.llm_server import Reply
from tests.test_consolidator import is_summary, small_window_config, summarizer
from tests.test_gateway_http import Live, scenario

SECRET = "PLUMBUS"


def costly(request) -> ScriptedReply:
    return ScriptedReply("summary of the talk" if is_summary(request) else "reply " * 50,
                         usage=Usage(input_tokens=1000, output_tokens=100))


def run(loop, text: str, key: str = "cli:direct", sink=ev.discard):
    return asyncio.run(loop.handle(text, key, sink=sink))


def left_in(paths: Paths) -> list[Path]:
    """Temporary session files still on disk (the spend ledger is not one)."""
    folder = paths.sessions_dir / "incognito"
    return sorted(p for p in folder.glob("*.jsonl") if p.name != "usage.jsonl") if folder.is_dir() else []


def everything_written(paths: Paths) -> str:
    """Every file under the home, but the spend ledger, as text: where a trace of the chat would be."""
    texts = []
    for path in paths.home.rglob("*"):
        if path.is_file() and path.name != "usage.jsonl" and ".git" not in path.parts and "git" not in path.parts:
            texts.append(path.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(texts)


def test_an_incognito_chat_leaves_no_trace_in_history_the_index_dream_or_sessions_list_after_it_ends(isolated_home):
    provider = ScriptedProvider(respond=summarizer(), default="reply " * 50)
    paths = Paths.from_env()
    loop = build_agent(small_window_config(), paths, provider=provider)
    run(loop, "my boat is called Gull")  # the saved conversation, from before
    notices: list[str] = []
    answer = run(loop, "/incognito").reply
    assert "Temporary chat" in answer
    for i in range(24):  # long enough to outgrow the window: it is trimmed, never summarised
        run(loop, f"secret {i}: my password is {SECRET} " + "words " * 400,
            sink=lambda e: notices.append(e.text) if isinstance(e, ev.Notice) else None)
    assert any("Temporary chat" in n for n in notices[:1])  # the first reply says what it is
    live = loop.session("cli:direct")
    assert live.meta.incognito and live.last_consolidated > 0  # it overflowed and dropped its oldest turns
    assert not any(is_summary(r) and SECRET in json.dumps(r.messages) for r in provider.requests)
    assert SECRET not in invoke("sessions", "list").stdout
    assert run(loop, "/new").reply.startswith("Ended the temporary chat")
    assert left_in(paths) == []
    assert "Gull" in json.dumps(loop.session("cli:direct").messages)  # back to the saved conversation
    assert SECRET not in everything_written(paths)  # history.jsonl, the saved session, the search index
    assert MemorySearch(paths).search(SECRET) == []
    asked = len(provider.requests)
    run(loop, "/dream")
    assert not any(SECRET in json.dumps([r.system, r.messages]) for r in provider.requests[asked:])
    sessions = invoke("sessions", "list").stdout
    assert "cli:direct" in sessions and SECRET not in sessions


def test_a_temporary_chat_that_outgrows_its_window_writes_nothing_to_history_nor_flushes_notes(isolated_home):
    provider = ScriptedProvider(respond=summarizer(), default="reply " * 50)
    paths = Paths.from_env()
    loop = build_agent(small_window_config(), paths, provider=provider)
    run(loop, "/incognito")
    for i in range(24):
        run(loop, f"message {i}: " + "words " * 400)
    assert loop.session("cli:direct").last_consolidated > 0
    assert not (paths.memory_dir / "history.jsonl").exists()
    assert not any(is_summary(r) for r in provider.requests)
    assert not any("This is a memory flush" in r.system for r in provider.requests)  # no note written before the cut


def test_what_a_temporary_chat_cost_still_counts_in_nanoagent_usage_after_it_is_deleted(isolated_home):
    paths = Paths.from_env()
    loop = build_agent(Config(), paths, provider=ScriptedProvider(respond=costly))
    run(loop, "/incognito")
    run(loop, f"my password is {SECRET}")
    run(loop, "and again")
    assert "2 calls" in run(loop, "/usage").reply
    run(loop, "/new")
    assert left_in(paths) == []
    shown = invoke("usage")
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if "(incognito)" in line)
    assert "2,000" in row and "200" in row  # two calls: their tokens, not their words
    assert SECRET not in (paths.sessions_dir / "incognito" / "usage.jsonl").read_text()


def test_a_temporary_chat_idle_for_an_hour_is_deleted_and_the_key_goes_back_to_its_saved_session(isolated_home):
    paths = Paths.from_env()
    loop = build_agent(Config(), paths, provider=ScriptedProvider(default="ok"))
    run(loop, "saved words")
    run(loop, "/incognito")
    run(loop, f"temporary words {SECRET}")
    assert loop.end_idle(time.time() + 60) == []  # a minute is not an hour
    assert len(left_in(paths)) == 1
    assert loop.end_idle(time.time() + 3601) == ["cli:direct"]
    assert left_in(paths) == []
    assert not loop.session("cli:direct").meta.incognito
    assert SECRET not in everything_written(paths)
    assert "temporary chat" not in run(loop, "/status").reply  # a command does not use up the warning
    late = run(loop, f"more temporary words {SECRET}")  # its person does not know it ended: told, not stored
    assert late.refused and "ended" in late.reply and "send it again" in late.reply
    assert SECRET not in everything_written(paths)
    assert run(loop, "saved words again").refused is False  # said once
    assert "saved words again" in json.dumps(loop.session("cli:direct").messages)


KILLED = """
import asyncio
from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.usage import Usage

reply = ScriptedReply("ok", usage=Usage(input_tokens=1000, output_tokens=100))
loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider(respond=lambda request: reply))

async def main():
    await loop.handle("/incognito")
    await loop.handle("my password is PLUMBUS")
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.process
def test_a_temporary_chat_left_by_a_killed_process_is_deleted_at_the_next_start_and_its_cost_kept(isolated_home):
    paths = Paths.from_env()
    proc = subprocess.Popen([sys.executable, "-c", KILLED], cwd=ROOT, env=dict(os.environ), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n", proc.stderr.read()
        build_agent(Config(), paths, provider=ScriptedProvider(default="ok"))  # its owner lives: left alone
        assert len(left_in(paths)) == 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(PATIENCE)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert SECRET in left_in(paths)[0].read_text()  # what kill -9 leaves behind
    loop = build_agent(Config(), paths, provider=ScriptedProvider(default="ok"))  # the next start
    assert left_in(paths) == []
    assert SECRET not in everything_written(paths)
    assert len(SessionStore(paths.sessions_dir).incognito_usage()) == 1
    assert "was not sent" in run(loop, "the next message").reply  # the chat was cut off: said before going on


def test_the_http_incognito_flag_chats_beside_the_saved_session_and_the_gateway_stopping_deletes_it(isolated_home):
    async def body(live: Live) -> dict:
        async with live.http() as client:
            saved = await client.post("/v1/chat/completions", headers=live.auth(), json={
                "model": "nanoagent", "user": "alice", "messages": [{"role": "user", "content": "saved words"}]})
            temporary = await client.post("/v1/chat/completions", headers=live.auth(), json={
                "model": "nanoagent", "user": "alice", "incognito": True,
                "messages": [{"role": "user", "content": f"my password is {SECRET}"}]})
            by_header = await client.post("/v1/chat/completions", headers={**live.auth(), "X-Nanoagent-Incognito": "1"},
                                          json={"model": "nanoagent", "user": "alice",
                                                "messages": [{"role": "user", "content": "what was it?"}]})
            bad = await client.post("/v1/chat/completions", headers=live.auth(), json={
                "model": "nanoagent", "incognito": "yes", "messages": [{"role": "user", "content": "x"}]})
        assert saved.status_code == temporary.status_code == by_header.status_code == 200
        assert "X-Nanoagent-Incognito" not in saved.headers and "temporary" in temporary.headers["X-Nanoagent-Incognito"]
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_incognito"
        assert len(left_in(live.paths)) == 1  # one temporary session for both flagged requests, while it runs
        assert SECRET in json.dumps(live.hub.loop.session("http:alice:incognito").messages)
        assert SECRET not in live.session_text("http:alice")
        return {"last": provider.requests[-1]}

    provider = ScriptedProvider(respond=costly)
    seen = scenario(provider, body)
    assert SECRET in json.dumps(seen["last"].messages)  # the second flagged request continued the first
    paths = Paths.from_env()
    assert left_in(paths) == []  # the gateway stopped: the temporary chat ended
    assert SECRET not in everything_written(paths)
    assert len(SessionStore(paths.sessions_dir).incognito_usage()) == 2
    assert "http:alice:incognito" not in invoke("sessions", "list").stdout


def test_agent_incognito_answers_in_a_temporary_session_that_is_gone_when_it_exits(llm, isolated_home):
    env = anthropic_env(llm)
    llm.script(Reply(text="Saved."), Reply(text="Kept secret."))
    assert invoke("agent", "-m", "saved words", env=env).returncode == 0
    proc = invoke("agent", "-m", f"my password is {SECRET}", "--incognito", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Kept secret." in proc.stdout
    assert "Temporary chat" in proc.stdout + proc.stderr  # the first reply's notice
    paths = Paths.from_env()
    assert left_in(paths) == []
    assert SECRET not in everything_written(paths)
    assert len(SessionStore(paths.sessions_dir).incognito_usage()) == 1
    assert "saved words" in json.dumps(SessionStore(paths.sessions_dir).load("cli:direct").messages)


def test_a_second_incognito_is_refused_politely_and_new_in_a_saved_session_still_archives(isolated_home):
    paths = Paths.from_env()
    loop = build_agent(Config(), paths, provider=ScriptedProvider(respond=summarizer(), default="ok"))
    run(loop, "/incognito")
    assert "already a temporary chat" in run(loop, "/incognito").reply
    run(loop, "/new")
    run(loop, "saved words")
    assert "archived to memory" in run(loop, "/new").reply
    wait_until(lambda: (paths.memory_dir / "history.jsonl").exists(), "the saved conversation archived")


@pytest.mark.process
def test_agent_incognito_at_a_terminal_says_so_in_the_banner_and_exit_deletes_it(llm, isolated_home):
    from tests.test_interactive import PROMPT, spawn_agent, visible

    llm.script(Reply(text="Kept secret."))
    child = spawn_agent(llm, "--incognito")
    try:
        child.expect_exact(PROMPT)
        assert "Temporary chat" in visible(child.before)
        child.send(f"my password is {SECRET}\r")
        child.expect_exact("Kept secret.")
        child.expect_exact(PROMPT)
        assert len(left_in(Paths.from_env())) == 1
        child.send("/exit\r")
        child.expect(pexpect.EOF)
    finally:
        child.terminate(force=True)
    paths = Paths.from_env()
    assert left_in(paths) == []
    assert SECRET not in everything_written(paths)


@pytest.mark.process
def test_incognito_typed_at_a_terminal_through_the_gateway_ends_when_the_terminal_leaves(llm, isolated_home):
    from tests.conftest import start_gateway_process
    from tests.test_interactive import PROMPT, spawn_agent

    gateway = start_gateway_process({**os.environ, **anthropic_env(llm)})
    try:
        llm.script(Reply(text="Kept secret."))
        child = spawn_agent(llm)
        try:
            child.expect_exact(PROMPT)
            child.send("/incognito\r")
            child.expect_exact("Temporary chat")
            child.send(f"my password is {SECRET}\r")
            child.expect_exact("Kept secret.")
            child.expect_exact(PROMPT)
            paths = Paths.from_env()
            assert len(left_in(paths)) == 1
            child.send("/exit\r")
            child.expect(pexpect.EOF)
        finally:
            child.terminate(force=True)
        wait_until(lambda: left_in(paths) == [], "the gateway to end the temporary chat")
        assert SECRET not in everything_written(paths)
    finally:
        gateway.terminate()
        gateway.communicate(timeout=PATIENCE)


def test_a_sub_agent_of_a_temporary_chat_is_temporary_too_and_goes_with_it(isolated_home):
    from tests.test_subagents import child_reply, spawn

    paths = Paths.from_env()
    provider = ScriptedProvider([ScriptedReply(tool_calls=[spawn(f"say {SECRET}")]), "It said it."],
                                respond=child_reply)
    loop = build_agent(Config(), paths, provider=provider)
    run(loop, "/incognito")
    assert run(loop, "ask a helper").reply == "It said it."
    assert len(left_in(paths)) == 2  # the chat and its sub-agent's session, both temporary
    assert not list(paths.sessions_dir.glob("subagent*.jsonl"))
    run(loop, "/new")
    assert left_in(paths) == []
    assert SECRET not in everything_written(paths)
    assert sum(r.usage.input_tokens for r in SessionStore(paths.sessions_dir).incognito_usage()) >= 1000


def test_incognito_in_a_chat_channel_keeps_nothing_of_the_chat_after_new(isolated_home):
    from tests.channel_harness import running, settled
    from tests.conftest import until
    from tests.telegram_server import StandIn

    stand_in = StandIn()
    provider = ScriptedProvider(["Saved reply.", "Kept secret."])

    async def scenario():
        async with running(stand_in, provider) as runner:
            owner = stand_in.owner
            stand_in.write(owner, "saved words")
            await until(lambda: "Saved reply." in stand_in.shown(owner), "the saved chat's reply")
            stand_in.write(owner, "/incognito")
            await until(lambda: any("Temporary chat" in s for s in stand_in.shown(owner)), "/incognito")
            stand_in.write(owner, f"my password is {SECRET}")
            await until(lambda: "Kept secret." in stand_in.shown(owner), "the temporary chat's reply")
            assert len(left_in(Paths.from_env())) == 1
            stand_in.write(owner, "/new")
            await until(lambda: any("Ended the temporary chat" in s for s in stand_in.shown(owner)), "/new")
            await until(lambda: settled(runner), "the inbox to empty")

    try:
        asyncio.run(scenario())
    finally:
        stand_in.close()
    paths = Paths.from_env()
    assert left_in(paths) == []
    assert SECRET not in everything_written(paths)  # sessions, history, the index, the channel's inbox state
