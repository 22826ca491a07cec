"""Turns that stay sound: bad provider replies, bad stored records, failed turns, cut replies, events
routed to whoever asked, and nothing that blocks other sessions."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from nanoagent.agent import events as ev
from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config, ProviderConfig
from nanoagent.fsutil import file_lock
from nanoagent.memory.gitlog import MemoryGit
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from tests.conftest import PATIENCE
from tests.llm_server import Reply

ANTHROPIC = "anthropic/claude-test"
OPENAI = "openai/gpt-test"


def server_config(server, model: str) -> Config:
    config = Config()
    config.agents.defaults.model = model
    config.agents.defaults.retry_base_delay = 0.01
    config.agents.defaults.max_retries = 1
    config.agents.defaults.stream_idle_timeout = 5
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=server.url)
    config.providers["openai"] = ProviderConfig(api_key="sk-test", api_base=server.url + "/v1")
    return config


def real_agent(server, model: str = ANTHROPIC, warnings: list[str] | None = None):
    return build_agent(server_config(server, model), Paths.from_env(), warn=(warnings or []).append)


@pytest.fixture(autouse=True)
def one_event_loop():
    """Every turn of a test on one event loop, as in a real process (SDK clients keep their connections)."""
    global RUNNER
    with asyncio.Runner() as runner:
        RUNNER = runner
        yield


RUNNER: asyncio.Runner | None = None


def turn(loop, text: str, key: str = "cli:direct", sink=ev.discard):
    assert RUNNER is not None
    return RUNNER.run(loop.handle(text, key, sink=sink))


def stored(key: str = "cli:direct") -> list[dict]:
    path = SessionStore(Paths.from_env().sessions_dir).path_for(key)
    return [json.loads(line) for line in path.read_text().splitlines()]


def request_bodies(server) -> list[dict]:
    return [r.body for r in server.requests if r.api in ("anthropic", "openai")]


# --- provider replies are checked before they are stored ----------------------------------------


def test_an_anthropic_tool_call_with_a_null_name_becomes_an_error_the_model_sees_and_later_turns_work(llm):
    llm.script(Reply(tool_calls=[(None, {"path": "x"})]), Reply(text="sorry"), Reply(text="second turn fine"))
    loop = real_agent(llm)
    assert turn(loop, "read it").reply == "sorry"
    calls = [m["message"] for m in stored() if m["type"] == "message" and m["message"].get("tool_calls")]
    assert calls[0]["tool_calls"][0]["name"] == "unnamed_tool"
    result = request_bodies(llm)[1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] and "no usable name" in result["content"]
    again = real_agent(llm)  # a new process reading the stored session
    assert turn(again, "and now?").reply == "second turn fine"


def test_a_null_id_and_two_calls_sharing_an_id_get_fresh_ids_on_the_openai_path(llm, isolated_home):
    (Paths.from_env().workspace).mkdir(parents=True, exist_ok=True)
    llm.script(Reply(tool_calls=[("list_dir", {}, None), ("glob", {"pattern": "*"}, "dup"),
                                 ("glob", {"pattern": "*.md"}, "dup")]), Reply(text="done"))
    loop = real_agent(llm, OPENAI)
    assert turn(loop, "look around").reply == "done"
    second = request_bodies(llm)[1]["messages"]
    ids = [c["id"] for c in second[-4]["tool_calls"]]
    assert len(set(ids)) == 3 and all(ids)
    assert [m["tool_call_id"] for m in second[-3:]] == ids


# --- the session reader checks types, not only JSON ---------------------------------------------


@pytest.mark.parametrize("bad", ['"abc"', "null", "-1", "1e9", "2.5", "1000000000", "true"])
def test_a_bad_last_consolidated_is_a_warning_and_every_command_still_works(bad, isolated_home):
    store = SessionStore(Paths.from_env().sessions_dir)
    session = store.load("cli:direct")
    store.add_messages(session, [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    with open(session.path, "a") as f:
        f.write(f'{{"type": "meta", "last_consolidated": {bad}}}\n')
    warnings: list[str] = []
    loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider(default="fine"), warn=warnings.append)
    assert turn(loop, "next").reply == "fine"
    assert "cli:direct (" in turn(loop, "/status").reply
    assert turn(loop, "/new").reply.startswith("Started a fresh conversation")
    assert any("line 4" in w and "last_consolidated" in w for w in warnings)
    assert 0 <= loop.session("cli:direct").last_consolidated <= len(loop.session("cli:direct").messages)


def test_a_message_whose_content_is_a_number_and_a_model_of_42_are_skipped_with_warnings(isolated_home):
    store = SessionStore(Paths.from_env().sessions_dir)
    session = store.load("cli:direct")
    store.add_messages(session, [{"role": "user", "content": "hello"}])
    with open(session.path, "a") as f:
        f.write('{"type": "message", "message": {"role": "assistant", "content": 42}}\n')
        f.write('{"type": "message", "message": "not an object"}\n')
        f.write('{"type": "meta", "model": 42}\n')
        f.write('{"type": "usage", "model": "m", "input_tokens": "many", "output_tokens": -3}\n')
    warnings: list[str] = []
    provider = ScriptedProvider(default="fine")
    loop = build_agent(Config(), Paths.from_env(), provider=provider, warn=warnings.append)
    assert turn(loop, "next").reply == "fine"
    assert turn(loop, "/model").reply.startswith("Model: anthropic/claude-sonnet-4-5")
    assert "m: 1 calls, 0 in, 0 out" in turn(loop, "/usage").reply  # token counts of the wrong type count as 0
    sent = provider.requests[0].messages
    assert all(isinstance(m["content"], str) for m in sent)
    assert [w.split(": ", 1)[0].rsplit(" ", 1)[-1] for w in warnings] == ["3", "4", "5"]
    assert "content must be text" in warnings[0] and "model 42" in warnings[2]


# --- a failed turn is kept, marked, and not sent again ------------------------------------------


def test_a_turn_failing_with_a_400_is_not_resent_and_retry_sends_it_once_more(llm):
    llm.script(Reply(status=400, error_message="prompt is too long: bad input"), Reply(text="fresh answer"),
               Reply(text="retried answer"))
    loop = real_agent(llm)
    failed = turn(loop, "a message the API refuses")
    assert failed.result is not None and failed.result.error is not None
    assert failed.result.sent  # it reached the model: the terminal offers /retry (the reply itself does not)
    assert turn(loop, "something else").reply == "fresh answer"
    second = json.dumps(request_bodies(llm)[1]["messages"])
    assert "a message the API refuses" not in second  # every later turn does not fail the same way
    assert "a message the API refuses" in json.dumps(stored())  # but nothing is lost
    assert turn(loop, "/retry").reply == "Nothing to retry: the last turn did not fail."


def test_retry_resends_the_failed_message_once(llm):
    llm.script(Reply(status=400, error_message="bad"), Reply(text="it worked this time"))
    loop = real_agent(llm)
    turn(loop, "please do the thing")
    assert turn(loop, "/retry").reply == "it worked this time"
    sent = json.dumps(request_bodies(llm)[1]["messages"])
    assert sent.count("please do the thing") == 1


# --- the stop reason is read --------------------------------------------------------------------


def test_a_reply_cut_by_max_tokens_says_so(llm):
    llm.script(Reply(text="The first half of a long", stop_reason="max_tokens"))
    seen: list[ev.Event] = []
    result = turn(real_agent(llm), "write a lot", sink=seen.append).result
    assert result is not None and result.stop is ev.StopReason.MAX_TOKENS
    notices = [e.text for e in seen if isinstance(e, ev.Notice)]
    assert any("cut off" in n and "maxTokens" in n for n in notices)


def test_a_tool_call_cut_by_max_tokens_is_not_run(llm, isolated_home):
    llm.script(Reply(tool_calls=[("write_file", '{"path": "big.txt", "content": "part')], stop_reason="max_tokens"),
               Reply(text="I will write it in parts."))
    loop = real_agent(llm)
    assert turn(loop, "write a big file").reply == "I will write it in parts."
    assert not (Paths.from_env().workspace / "big.txt").exists()
    result = request_bodies(llm)[1]["messages"][-1]["content"][0]
    assert result["is_error"] and "was not run" in result["content"] and "cut off" in result["content"]


# --- events go to the sink of whoever asked -----------------------------------------------------


def test_two_sessions_at_once_each_get_only_their_own_events_starting_with_the_turn_and_message(isolated_home):
    provider = ScriptedProvider(respond=lambda request: "answer for " + request.messages[-1]["content"][-6:])
    loop = build_agent(Config(), Paths.from_env(), provider=provider)
    first: list[ev.Event] = []
    second: list[ev.Event] = []

    async def both():
        return await asyncio.gather(loop.handle("from A", "chat:a", sink=first.append),
                                    loop.handle("from B", "chat:b", sink=second.append))

    a, b = asyncio.run(both())
    assert (a.reply, b.reply) == ("answer for from A", "answer for from B")
    assert {e.session for e in first} == {"chat:a"} and {e.session for e in second} == {"chat:b"}
    assert isinstance(first[0], ev.TurnStarted) and isinstance(first[1], ev.MessageAdded)
    assert first[1].message["content"].endswith("from A")
    assert isinstance(first[-1], ev.TurnEnded)


def test_slash_dream_sends_its_events_to_the_callers_sink(isolated_home):
    from nanoagent.memory.history import HistoryLog

    paths = Paths.from_env()
    loop = build_agent(Config(), paths, provider=ScriptedProvider(["- likes tea", ScriptedReply(
        tool_calls=[("append_to_file", {"path": "USER.md", "text": "- Likes tea", "summary": "tea"})]), "done"]))
    HistoryLog(paths.memory_dir).append("cli:direct", "The user said they like tea.")
    seen: list[ev.Event] = []
    reply = turn(loop, "/dream", sink=seen.append).reply
    assert "USER.md" in reply
    assert any(isinstance(e, ev.ToolFinished) and e.name == "append_to_file" for e in seen)
    assert any(isinstance(e, ev.UsageRecorded) for e in seen)


# --- nothing blocks the event loop --------------------------------------------------------------


def test_a_session_locked_by_another_process_does_not_hold_up_other_sessions(isolated_home):
    loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider(default="done"))
    locked = loop.session("chat:busy")
    finished: list[str] = []

    async def scenario():
        with file_lock(Path(f"{locked.path}.lock")):  # as another process holding that session would
            waiting = asyncio.create_task(loop.handle("queued", "chat:busy"))
            other = await asyncio.wait_for(loop.handle("hello", "chat:free"), timeout=PATIENCE)
            finished.append(other.reply)
            assert not waiting.done()
        finished.append((await asyncio.wait_for(waiting, timeout=PATIENCE)).reply)

    asyncio.run(scenario())
    assert finished == ["done", "done"]


def test_a_command_that_changes_the_session_waits_for_the_running_turn_but_status_does_not(isolated_home):
    started = threading.Event()

    class Slow(ScriptedProvider):
        async def stream(self, request):
            started.set()
            await asyncio.sleep(0.3)
            async for event in super().stream(request):
                yield event

    loop = build_agent(Config(), Paths.from_env(), provider=Slow(default="slow answer"))

    async def scenario():
        running = asyncio.create_task(loop.handle("think", "cli:direct"))
        while not started.is_set():
            await asyncio.sleep(0.01)
        new = await loop.handle("/new", "cli:direct")
        status = await loop.handle("/status", "cli:direct")
        return new.reply, status.reply, (await running).reply

    new, status, answer = asyncio.run(scenario())
    assert new.startswith("Wait for the current turn") and status.startswith("model:") and answer == "slow answer"


def test_memory_git_commits_from_two_threads_each_take_the_lock(tmp_path):
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    git = MemoryGit(workspace, tmp_path / "git" / "ws.git")
    git.ensure()
    errors: list[Exception] = []

    def write(name: str) -> None:
        try:
            for n in range(4):
                (workspace / name).write_text(f"{name} {n}\n")
                git.commit([name], f"{name} {n}")
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=write, args=(name,)) for name in ("SOUL.md", "USER.md")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(c.summary for c in git.log(20) if c.author != "init") == sorted(
        f"{name} {n}" for name in ("SOUL.md", "USER.md") for n in range(4))
