"""The memory flush: before older turns are archived (the budget, overflow recovery, /new), a silent turn writes what
must outlast the cut to a dated note, which memory search finds later."""

from __future__ import annotations

import asyncio
import json
import stat
import time
from datetime import datetime

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config, ProviderConfig
from nanoagent.memory.gitlog import MemoryGit
from nanoagent.memory.search import MemorySearch, embedding_settings
from nanoagent.paths import Paths
from nanoagent.providers.base import ChatRequest, ProviderError
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from tests.conftest import PATIENCE, invoke
from tests.llm_server import Reply

FLUSH_MARK = "This is a memory flush"
SUMMARY_MARK = "condense a stretch of conversation"
NOTE = "- The user's bike is a blue Gazelle, bought in Utrecht"
TOO_LONG = ScriptedReply(error=ProviderError("m: 400 prompt is too long", status=400, overflow=True))


def with_history(key: str = "cli:direct", turns: int = 10) -> None:
    store = SessionStore(Paths.from_env().sessions_dir)
    session = store.load(key)
    for i in range(turns):
        store.add_messages(session, [{"role": "user", "content": f"question {i} about the garden " + "words " * 60},
                                     {"role": "assistant", "content": f"answer {i} " + "words " * 40}])


def today_note() -> str:
    return f"memory/{datetime.now().astimezone().date().isoformat()}.md"


def history_entries() -> list[str]:
    path = Paths.from_env().memory_dir / "history.jsonl"
    return [json.loads(line)["content"] for line in path.read_text().splitlines()] if path.exists() else []


class Script:
    """A ScriptedProvider's `respond`: the flush writes NOTE (then says DONE), summaries are fixed, turns answer."""

    def __init__(self, flush: ScriptedReply | None = None, turn: list | None = None):
        self.flush = flush
        self.flushes: list[ChatRequest] = []
        self.turn = list(turn or [])

    def __call__(self, request: ChatRequest) -> ScriptedReply | str:
        if FLUSH_MARK in request.system:
            if request.messages[-1]["role"] == "tool":
                return "DONE"
            self.flushes.append(request)
            return self.flush or ScriptedReply(tool_calls=[("append_note", {"text": NOTE})])
        if SUMMARY_MARK in request.system:
            return "- the user asked about the garden"
        return self.turn.pop(0) if self.turn else "ok"


def agent(script: Script, config: Config | None = None, warn=None):
    return build_agent(config or Config(), Paths.from_env(), provider=ScriptedProvider(respond=script),
                       warn=warn or (lambda message: None))


def search(query: str) -> list[str]:
    return [hit.source for hit in MemorySearch(Paths.from_env(), embedding_settings(Config())).search(query, 5)]


def test_a_flush_before_new_writes_a_dated_note_that_memory_search_finds():
    script = Script()
    loop = agent(script)
    asyncio.run(loop.handle("I bought a blue Gazelle bike in Utrecht", "cli:direct"))
    reply = asyncio.run(loop.handle("/new", "cli:direct"))
    assert reply.reply.startswith("Started a fresh conversation")
    note = Paths.from_env().workspace / today_note()
    assert NOTE in note.read_text()
    assert stat.S_IMODE(note.stat().st_mode) == 0o600
    assert any(source.startswith(today_note()) for source in search("Gazelle Utrecht"))
    assert len(script.flushes) == 1 and "blue Gazelle" in script.flushes[0].messages[0]["content"]
    session = SessionStore(Paths.from_env().sessions_dir).load("cli:direct")
    assert [m["content"] for m in session.messages if m["role"] == "assistant"] == ["ok"]  # the flush said nothing
    assert [r.purpose for r in session.usage].count("flush") == 2  # its cost still counts
    commit = MemoryGit(Paths.from_env().workspace, Paths.from_env().memory_git_dir).log(1)[0]
    assert commit.author == "agent" and commit.files == (today_note(),)  # dream-restore can undo it


def test_a_flush_before_overflow_recovery_keeps_its_note_and_the_turn_goes_on():
    with_history()
    script = Script(turn=[TOO_LONG, "fits now"])
    loop = agent(script)
    turn = asyncio.run(loop.handle("and the roses?", "cli:direct"))
    assert turn.reply == "fits now"
    assert loop.session("cli:direct").last_consolidated == 20
    assert NOTE in (Paths.from_env().workspace / today_note()).read_text()
    assert "question 0 about the garden" in script.flushes[0].messages[0]["content"]
    assert "and the roses?" not in script.flushes[0].messages[0]["content"]  # the current turn stays in the prompt
    assert any(source.startswith(today_note()) for source in search("Gazelle"))


def test_a_note_written_on_another_day_is_appended_to_not_replaced():
    script = Script()
    loop = agent(script)
    note = Paths.from_env().workspace / today_note()
    note.write_text("# Earlier today\n- the user likes tea")
    asyncio.run(loop.handle("I bought a blue Gazelle bike", "cli:direct"))
    asyncio.run(loop.handle("/new", "cli:direct"))
    text = note.read_text()
    assert text.startswith("# Earlier today\n- the user likes tea\n\n## ") and text.endswith(NOTE + "\n")


def test_a_flush_never_runs_twice_for_the_same_stretch():
    config = Config()
    config.agents.defaults.context_window_tokens = 4000
    config.agents.defaults.max_tokens = 200
    script = Script()
    loop = agent(script, config)
    for i in range(12):
        asyncio.run(loop.handle(f"question {i} about the garden " + "words " * 150, "cli:direct"))
    asyncio.run(loop.handle("/new", "cli:direct"))
    assert len(script.flushes) >= 2
    seen: list[str] = []
    for request in script.flushes:
        asked = [f"question {i} " for i in range(12) if f"question {i} " in request.messages[0]["content"]]
        assert not set(asked) & set(seen), "a stretch was flushed twice"
        seen += asked
    assert sorted(seen) == sorted(f"question {i} " for i in range(12))  # and every stretch once


def test_a_stretch_with_nothing_new_since_the_last_flush_costs_no_call():
    script = Script()
    loop = agent(script)
    asyncio.run(loop.handle("I bought a blue Gazelle bike", "cli:direct"))
    asyncio.run(loop.handle("/new", "cli:direct"))
    session = loop.session("cli:direct")
    loop.store.add_messages(session, [{"role": "assistant", "content": "(heartbeat) nothing to report"}])
    asyncio.run(loop.handle("/new", "cli:direct"))  # archives an assistant line only
    assert len(script.flushes) == 1


def test_a_failing_flush_leaves_the_archive_as_it_would_have_been():
    warnings: list[str] = []
    script = Script(flush=ScriptedReply(error=ProviderError("m: 401 invalid key", status=401)))
    loop = agent(script, warn=warnings.append)
    asyncio.run(loop.handle("I bought a blue Gazelle bike", "cli:direct"))
    reply = asyncio.run(loop.handle("/new", "cli:direct"))
    assert reply.reply.startswith("Started a fresh conversation")
    assert history_entries() == ["- the user asked about the garden"]
    assert loop.session("cli:direct").last_consolidated == 2
    assert not (Paths.from_env().workspace / today_note()).exists()
    assert len(warnings) == 1 and "memory flush" in warnings[0] and "\n" not in warnings[0]


def test_a_hanging_flush_is_cut_at_its_timeout_and_the_turn_finishes():
    with_history()
    config = Config()
    config.memory.flush.timeout = 0.5
    warnings: list[str] = []
    script = Script(flush=ScriptedReply("never", delay=600), turn=[TOO_LONG, "fits now"])
    loop = agent(script, config, warn=warnings.append)
    started = time.monotonic()
    turn = asyncio.run(loop.handle("and the roses?", "cli:direct"))
    assert time.monotonic() - started < 60  # not the flush's 600 s
    assert turn.reply == "fits now"
    assert history_entries() == ["- the user asked about the garden"]
    assert loop.session("cli:direct").last_consolidated == 20
    assert len(warnings) == 1 and "memory.flush.timeout" in warnings[0]


def test_the_flush_is_off_when_the_setting_says_so():
    config = Config()
    config.memory.flush.enabled = False
    script = Script()
    loop = agent(script, config)
    asyncio.run(loop.handle("I bought a blue Gazelle bike", "cli:direct"))
    asyncio.run(loop.handle("/new", "cli:direct"))
    assert script.flushes == [] and history_entries() == ["- the user asked about the garden"]
    assert not (Paths.from_env().workspace / today_note()).exists()


def test_the_flush_reaches_only_memory():
    script = Script(flush=ScriptedReply(tool_calls=[("edit_file", {"path": "USER.md", "old_text": "#",
                                                                    "new_text": "# hacked"})]))
    loop = agent(script)
    before = (Paths.from_env().workspace / "USER.md").read_text()
    asyncio.run(loop.handle("I bought a blue Gazelle bike", "cli:direct"))
    asyncio.run(loop.handle("/new", "cli:direct"))
    assert (Paths.from_env().workspace / "USER.md").read_text() == before
    assert sorted(t.name for t in script.flushes[0].tools) == ["append_note", "edit_file", "read_file"]


def test_new_through_the_cli_flushes_with_the_flush_model_and_search_finds_the_note(llm):
    """The real anthropic wire: the flush's tool call and model, then the CLI's memory search."""
    config = {"agents": {"defaults": {"model": "anthropic/claude-test", "retryBaseDelay": 0.01}},
              "providers": {"anthropic": {"apiKey": "sk-ant-test", "apiBase": llm.url}},
              "memory": {"flush": {"model": "anthropic/claude-flush"}}}
    Paths.from_env().config_file.parent.mkdir(parents=True, exist_ok=True)
    Paths.from_env().config_file.write_text(json.dumps(config))
    llm.script(Reply(text="Noted."), Reply(tool_calls=[("append_note", {"text": NOTE})]), Reply(text="DONE"),
               Reply(text="- the user bought a bike"))
    assert invoke("agent", "-m", "I bought a blue Gazelle bike in Utrecht").returncode == 0
    ran = invoke("agent", "-m", "/new")
    assert ran.returncode == 0 and "Started a fresh conversation" in ran.stdout
    assert [r.body["model"] for r in llm.requests] == ["claude-test", "claude-flush", "claude-flush", "claude-test"]
    found = invoke("memory", "search", "Gazelle")
    assert found.returncode == 0 and today_note() in found.stdout


def test_a_flush_cancelled_with_new_gives_its_stretch_back():
    script = Script(flush=ScriptedReply("never", delay=600))
    loop = agent(script)
    asyncio.run(loop.handle("I bought a blue Gazelle bike", "cli:direct"))

    async def cancel_new() -> None:
        task = asyncio.create_task(loop.handle("/new", "cli:direct"))
        deadline = time.monotonic() + PATIENCE
        while not script.flushes and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # until the flush's call is under way
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_new())
    assert loop.session("cli:direct").last_consolidated == 0  # nothing was archived
    script.flush = None
    asyncio.run(loop.handle("/new", "cli:direct"))
    assert len(script.flushes) == 2 and NOTE in (Paths.from_env().workspace / today_note()).read_text()


def test_dated_notes_written_by_hand_are_searched_and_leave_the_index_when_deleted():
    paths = Paths.from_env()
    agent(Script())  # seeds the workspace
    note = paths.workspace / "memory" / "2026-05-04.md"
    note.write_text("# May the fourth\n\n- the user's sister Ingrid visits from Bergen\n")
    assert "memory/2026-05-04.md:1-3" in search("Ingrid Bergen")
    note.unlink()
    assert search("Ingrid Bergen") == []


def test_dream_reads_a_dated_note_but_does_not_write_it():
    from nanoagent.agent.build import build_dream
    from nanoagent.memory.dream import DreamFailed
    from nanoagent.memory.history import HistoryLog

    paths = Paths.from_env()
    HistoryLog(paths.memory_dir).append("cli:direct", "- the user's sister is called Ines")
    note = paths.workspace / "memory" / "2026-05-04.md"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text("- Ines visits in June\n")
    events: list = []
    provider = ScriptedProvider([
        "## memory/MEMORY.md\n- ADD: the user's sister is called Ines",
        ScriptedReply(tool_calls=[("read_file", {"path": "memory/2026-05-04.md"}),
                                  ("append_to_file", {"path": "memory/2026-05-04.md", "text": "x", "summary": "x"})]),
        "done",
    ])
    dream = build_dream(Config(), paths, sink=events.append, provider=provider)
    with pytest.raises(DreamFailed):
        asyncio.run(dream.run())
    read, write = [e for e in events if type(e).__name__ == "ToolFinished"]
    assert read.ok and "Ines visits in June" in read.result
    assert not write.ok and "dated note" in write.result
    assert note.read_text() == "- Ines visits in June\n"


def test_a_flush_before_overflow_recovery_over_the_anthropic_wire_keeps_its_note(llm):
    with_history()
    config = Config()
    d = config.agents.defaults
    d.model, d.context_window_tokens, d.max_tokens, d.retry_base_delay = "anthropic/claude-test", 16_000, 200, 0.01
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=llm.url)
    overflow = Reply(status=400, error_type="invalid_request_error",
                     error_message="prompt is too long: 210000 tokens > 200000 maximum")
    llm.script(overflow, Reply(tool_calls=[("append_note", {"text": NOTE})]), Reply(text="DONE"),
               Reply(text="- the user asked about the garden"), Reply(text="fits now"))
    loop = build_agent(config, Paths.from_env())
    turn = asyncio.run(loop.handle("and the roses?", "cli:direct"))
    assert turn.reply == "fits now" and loop.session("cli:direct").last_consolidated == 20
    assert NOTE in (Paths.from_env().workspace / today_note()).read_text()
    assert any(source.startswith(today_note()) for source in search("Gazelle"))


def test_a_persons_chat_is_not_flushed_into_notes_everyone_is_shown():
    script = Script()
    loop = agent(script)
    asyncio.run(loop.handle("I bought a blue Gazelle bike in Utrecht", "telegram:7"))
    reply = asyncio.run(loop.handle("/new", "telegram:7"))
    assert reply.reply.startswith("Started a fresh conversation")
    assert script.flushes == [] and not (Paths.from_env().workspace / today_note()).exists()
    assert history_entries() == ["- the user asked about the garden"]  # archived as ever: Dream files it as theirs
