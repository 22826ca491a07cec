"""The Consolidator: old turns become history.jsonl entries before they leave the prompt, and nothing is lost."""

import asyncio
import json
import multiprocessing
from pathlib import Path

import pytest

from nanoagent.agent import events as ev
from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.memory.history import HistoryLog
from nanoagent.paths import Paths
from nanoagent.providers.base import ProviderError
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply

SUMMARY_MARK = "condense a stretch of conversation"


FLUSH_MARK = "This is a memory flush"


def is_summary(request) -> bool:
    return SUMMARY_MARK in request.system


def small_window_config(window: int = 8000, max_tokens: int = 200) -> Config:
    config = Config()
    config.agents.defaults.context_window_tokens = window
    config.agents.defaults.max_tokens = max_tokens
    return config


def agent(tmp_path: Path, provider, config: Config | None = None):
    paths = Paths.from_env()
    loop = build_agent(config or small_window_config(), paths, provider=provider)
    return loop, paths


def summarizer(summary: str = "- the user talked about topic {n}"):
    counter = {"n": 0}

    def respond(request):
        if is_summary(request):
            counter["n"] += 1
            return summary.format(n=counter["n"])
        return None

    return respond


def talk(loop, turns: int, size: int = 400, key: str = "cli:direct", sink=ev.discard) -> None:
    for i in range(turns):
        asyncio.run(loop.handle(f"message {i}: " + "words " * size, key, sink=sink))


def history(paths: Paths) -> list[dict]:
    path = paths.memory_dir / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_long_conversation_is_archived_with_consecutive_cursors(tmp_path):
    provider = ScriptedProvider(default="reply " * 50, respond=summarizer())
    loop, paths = agent(tmp_path, provider)
    talk(loop, 24)
    entries = history(paths)
    assert len(entries) >= 2
    assert [e["cursor"] for e in entries] == list(range(1, len(entries) + 1))
    assert all(e["session"] == "cli:direct" and e["content"].startswith("- the user talked") for e in entries)
    assert (paths.memory_dir / ".cursor").read_text().strip() == str(entries[-1]["cursor"])
    session = loop.session("cli:direct")
    assert 0 < session.last_consolidated < len(session.messages)
    assert session.messages[session.last_consolidated]["role"] == "user"  # cut only where a user turn starts


def test_the_prompt_stays_under_the_budget_after_consolidating(tmp_path):
    provider = ScriptedProvider(default="reply " * 50, respond=summarizer())
    config = small_window_config()
    config.agents.defaults.subagents.max_depth = 0  # the tool list this window was sized for (where 12 turns end)
    loop, _ = agent(tmp_path, provider, config)
    talk(loop, 12)
    turns = [r for r in provider.requests if not is_summary(r)]
    budget = loop.consolidator.budget
    session = loop.session("cli:direct")
    # after each turn, a prompt over 80% of the budget is archived down to half: it never stays above 80%
    assert session.last_consolidated > 0
    assert loop.context.prompt_tokens(session.messages, session.last_consolidated) <= budget * 0.8
    assert len(turns[-1].messages) < 2 * 12  # old turns left the prompt


def test_a_tool_call_and_its_result_are_never_split(tmp_path):
    (tmp_path / "home" / "workspace").mkdir(parents=True)
    (tmp_path / "home" / "workspace" / "a.txt").write_text("alpha " * 300)

    def respond(request):
        if is_summary(request):
            return "- summary"
        last = request.messages[-1]
        if last["role"] == "user":
            return ScriptedReply(tool_calls=[("read_file", {"path": "a.txt"})])
        return "read it"

    loop, _ = agent(tmp_path, ScriptedProvider(respond=respond))
    talk(loop, 10, size=100)
    session = loop.session("cli:direct")
    assert session.last_consolidated > 0
    assert session.messages[session.last_consolidated]["role"] == "user"


def test_a_failed_summary_archives_a_capped_raw_excerpt_instead(tmp_path):
    def respond(request):
        return ScriptedReply(error=ProviderError("503 overloaded")) if is_summary(request) else None

    loop, paths = agent(tmp_path, ScriptedProvider(default="ok " * 50, respond=respond))
    talk(loop, 12, size=2000)
    entries = history(paths)
    assert entries and all(e["raw"] for e in entries)
    assert all("no summary because 503 overloaded" in e["content"] for e in entries)
    assert all(len(e["content"]) < 4500 for e in entries)  # never an unbounded paste of the transcript
    assert "message 0" in entries[0]["content"]


def test_an_empty_summary_is_never_stored_as_a_summary(tmp_path):
    loop, paths = agent(tmp_path, ScriptedProvider(default="ok", respond=summarizer("   ")))
    talk(loop, 12)
    entries = history(paths)
    assert entries and all(e["raw"] and "empty summary" in e["content"] for e in entries)
    assert not any(e["content"].strip() in ("", "[no summary]") for e in entries)


def test_consolidation_still_runs_when_the_tokenizer_is_unavailable(tmp_path, monkeypatch):
    import nanoagent.tokens as tokens

    monkeypatch.setattr(tokens, "_encoding", lambda: None)
    assert tokens.count_tokens("hello world, this is text") > 0
    loop, paths = agent(tmp_path, ScriptedProvider(default="ok", respond=summarizer()))
    talk(loop, 12)
    assert history(paths), "with no tokenizer the estimate must still trigger consolidation"


def test_new_archives_the_whole_conversation_before_clearing_it(tmp_path):
    loop, paths = agent(tmp_path, ScriptedProvider(default="ok", respond=summarizer("- we planned the trip to Lisbon")),
                        Config())
    asyncio.run(loop.handle("Let's plan my trip to Lisbon in May", "cli:direct"))
    reply = asyncio.run(loop.handle("/new", "cli:direct")).reply
    assert "archived to memory" in reply
    assert [e["content"] for e in history(paths)] == ["- we planned the trip to Lisbon"]
    session = loop.session("cli:direct")
    assert session.last_consolidated == len(session.messages) == 2


def test_new_keeps_the_conversation_when_history_cannot_be_written(tmp_path):
    loop, paths = agent(tmp_path, ScriptedProvider(default="ok", respond=summarizer()), Config())
    asyncio.run(loop.handle("remember the code word: heron", "cli:direct"))
    (paths.memory_dir / "history.jsonl").mkdir()  # appending will fail
    try:
        asyncio.run(loop.handle("/new", "cli:direct"))
    except OSError:
        pass
    reloaded = Paths.from_env()
    loop2, _ = agent(tmp_path, ScriptedProvider(default="ok"), Config())
    assert loop2.session("cli:direct").last_consolidated == 0, "the conversation was hidden before it was archived"
    assert reloaded.memory_dir.exists()


def test_history_not_yet_dreamed_is_shown_as_recent_history_within_a_cap(tmp_path):
    config = Config()
    config.memory.recent_history_tokens = 60
    loop, paths = agent(tmp_path, ScriptedProvider(default="ok"), config)
    log = HistoryLog(paths.memory_dir)
    for n in range(1, 9):
        log.append("cli:direct", f"- fact number {n} about the user's garden")
    log.set_dream_cursor(2)
    prompt = loop.context.system_prompt()
    assert "## Recent history" in prompt
    assert "fact number 8" in prompt and "fact number 2" not in prompt and "fact number 1 " not in prompt
    assert "left out" in prompt  # the cap dropped the oldest undreamed entries and says so
    assert prompt == loop.context.system_prompt()  # stable between turns: the prompt cache keeps hitting


def test_recent_history_reaches_the_model_in_the_system_prompt(tmp_path):
    provider = ScriptedProvider(default="ok")
    loop, paths = agent(tmp_path, provider, Config())
    HistoryLog(paths.memory_dir).append("cli:work", "- the user's cat is called Miso")
    asyncio.run(loop.handle("what is my cat called?", "cli:direct"))
    assert "the user's cat is called Miso" in provider.requests[-1].system


def _append_many(memory_dir: str, worker: int, count: int) -> None:
    log = HistoryLog(Path(memory_dir))
    for i in range(count):
        log.append(f"cli:{worker}", f"entry {worker}-{i}")


@pytest.mark.process
def test_two_processes_never_allocate_the_same_cursor(tmp_path):
    memory_dir = tmp_path / "memory"
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_append_many, args=(str(memory_dir), w, 40)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    cursors = [json.loads(line)["cursor"] for line in (memory_dir / "history.jsonl").read_text().splitlines()]
    assert sorted(cursors) == list(range(1, 161))
    assert HistoryLog(memory_dir).cursor == 160


def test_a_torn_last_history_line_is_skipped_and_the_next_append_continues(tmp_path):
    log = HistoryLog(tmp_path)
    log.append("cli:direct", "first")
    with open(tmp_path / "history.jsonl", "ab") as f:
        f.write(b'{"cursor": 2, "timestamp": "2026-11-22 10:00", "sess')
    warnings = []
    fresh = HistoryLog(tmp_path, warn=warnings.append)
    assert [e.content for e in fresh.entries()] == ["first"]
    assert warnings and "incomplete last line" in warnings[0]
    entry = fresh.append("cli:direct", "second")
    assert entry.cursor == 2
    assert [e.content for e in HistoryLog(tmp_path).entries()] == ["first", "second"]


def test_consolidation_usage_is_recorded_in_the_session(tmp_path):
    loop, _ = agent(tmp_path, ScriptedProvider(default="ok " * 20, respond=summarizer()))
    talk(loop, 12)
    purposes = {r.purpose for r in loop.session("cli:direct").usage}
    assert purposes == {"turn", "consolidate", "flush"}  # the memory flush before each archive counts too


def test_events_do_not_leak_summary_text_to_the_terminal(tmp_path):
    seen = []
    provider = ScriptedProvider(default="answer", respond=summarizer("- secret summary"))
    paths = Paths.from_env()
    loop = build_agent(small_window_config(), paths, provider=provider)
    talk(loop, 12, sink=seen.append)
    assert any(is_summary(r) for r in provider.requests), "consolidation never ran"
    assert any("secret summary" in e["content"] for e in history(paths))  # the summary was written, not shown
    streamed = "".join(e.text for e in seen if isinstance(e, ev.TextDelta))
    assert "answer" in streamed and "secret summary" not in streamed


def test_a_backlog_too_big_for_one_turn_is_left_out_of_the_request_but_kept(tmp_path):
    from nanoagent.session.store import SessionStore

    paths = Paths.from_env()
    store = SessionStore(paths.sessions_dir)
    session = store.load("cli:direct")
    with store.lock(session):
        for i in range(2000):  # as if imported, or left by a model with a larger window
            store.add_messages(session, [{"role": "user", "content": f"old question {i} " + "pad " * 60},
                                         {"role": "assistant", "content": f"old answer {i}"}])
    provider = ScriptedProvider(default="ok", respond=summarizer())
    loop, _ = agent(tmp_path, provider, small_window_config(window=20_000, max_tokens=500))
    asyncio.run(loop.handle("newest question", "cli:direct"))
    [turn] = [r for r in provider.requests if not is_summary(r) and FLUSH_MARK not in r.system]
    sent = sum(len(m["content"]) for m in turn.messages) // 4
    assert sent < loop.consolidator.budget, "the request must fit the window even before the backlog is archived"
    assert turn.messages[-1]["content"].endswith("newest question")
    session = loop.session("cli:direct")
    from nanoagent.memory.consolidator import MAX_MESSAGES_PER_ARCHIVE, MAX_ROUNDS

    summaries = [r for r in provider.requests if is_summary(r)]
    assert 0 < len(summaries) <= 2 * MAX_ROUNDS  # bounded rounds before and after the turn ...
    assert all(r.messages[0]["content"].count("\n[") + 1 <= MAX_MESSAGES_PER_ARCHIVE for r in summaries)
    assert session.last_consolidated <= 2 * MAX_ROUNDS * MAX_MESSAGES_PER_ARCHIVE < 4000  # ... so not all at once
    assert len(session.messages) == 4002  # and nothing was dropped from the session


def test_the_users_message_is_on_disk_before_any_summary_call(tmp_path):
    seen_on_disk = []

    def respond(request):
        if is_summary(request):
            session_file = Paths.from_env().session_file("cli:direct")
            seen_on_disk.append("the newest message" in session_file.read_text())
            return "- summary"
        return None

    loop, _ = agent(tmp_path, ScriptedProvider(default="ok " * 50, respond=respond))
    talk(loop, 4)
    seen_on_disk.clear()  # archiving during the earlier turns (the prompt's size decides whether any) is not the point
    asyncio.run(loop.handle("the newest message " + "words " * 4000, "cli:direct"))
    assert seen_on_disk and all(seen_on_disk)  # a process killed while summarising keeps the message


def test_newest_first_reads_back_across_chunks_and_skips_torn_and_corrupt_lines(tmp_path):
    log = HistoryLog(tmp_path)
    for n in range(1, 401):
        log.append("cli:direct", f"entry {n} " + "x" * 400)  # ~170 KB: several 64 KB chunks
    with open(tmp_path / "history.jsonl", "ab") as f:
        f.write(b'not json\n{"cursor": 401, "timestamp": "2026-11-22 10:00", "sess')
    newest = list(HistoryLog(tmp_path).newest_first(after=250))
    assert [e.cursor for e in newest] == list(range(400, 250, -1))
    assert newest[0].content.startswith("entry 400 ")
    assert [e.cursor for e in HistoryLog(tmp_path).newest_first()][-1] == 1


def test_recent_history_at_start_reads_only_the_end_of_a_long_history(tmp_path, monkeypatch):
    loop, paths = agent(tmp_path, ScriptedProvider(default="ok"), Config())
    log = HistoryLog(paths.memory_dir)
    for n in range(1, 2001):
        log.append("cli:direct", f"- fact {n}")
    fresh, _ = agent(tmp_path, ScriptedProvider(default="ok"), Config())
    parsed = []
    import nanoagent.memory.history as history_module

    original = history_module._parse
    monkeypatch.setattr(history_module, "_parse", lambda line, key=None: parsed.append(1) or original(line, key))
    prompt = fresh.context.system_prompt()
    assert "- fact 2000" in prompt and "older entries are left out" in prompt
    assert len(parsed) < 1000  # not the whole file: a start stays fast however long the history grows


def test_a_stale_cursor_file_and_a_long_last_line_never_reuse_a_cursor(tmp_path):
    log = HistoryLog(tmp_path)
    for n in range(3):
        log.append("cli:direct", f"entry {n}")
    log.append("cli:direct", "a raw excerpt " + "x" * 100_000)  # longer than one 64 KB read
    (tmp_path / ".cursor").write_text("1\n")  # killed between the line's fsync and the .cursor update
    assert HistoryLog(tmp_path).append("cli:direct", "next").cursor == 5


def test_a_history_line_without_text_content_is_skipped_not_read_as_none(tmp_path):
    log = HistoryLog(tmp_path)
    log.append("cli:direct", "real")
    with open(tmp_path / "history.jsonl", "ab") as f:
        f.write(b'{"cursor": 2, "timestamp": "", "session": "x", "content": null}\n')
    warnings = []
    assert [e.content for e in HistoryLog(tmp_path, warn=warnings.append).entries()] == ["real"]
    assert warnings and "corrupt line" in warnings[0]
    assert [e.content for e in HistoryLog(tmp_path).newest_first()] == ["real"]


def test_a_complete_last_line_without_its_newline_is_kept_by_the_next_append(tmp_path):
    log = HistoryLog(tmp_path)
    log.append("cli:direct", "first")
    path = tmp_path / "history.jsonl"
    path.write_bytes(path.read_bytes() + b'{"cursor": 2, "timestamp": "", "session": "x", "content": "hand-added"}')
    assert log.append("cli:direct", "third").cursor == 3
    assert [e.content for e in HistoryLog(tmp_path).entries()] == ["first", "hand-added", "third"]
