"""Memory end to end through the CLI and the real SDK against the local LLM server: in this process, and
`dream`, `dream-log` and `dream-restore` once each as a real process."""

import json

import pytest

from nanoagent.memory.history import HistoryLog
from nanoagent.paths import Paths
from nanoagent.templates import seed_workspace
from tests.conftest import anthropic_env, fast_retries, invoke, run_cli, write_config
from tests.llm_server import Reply

ANALYSIS = "## memory/MEMORY.md\n- ADD: the user's boat is called Gull"


def remember(home, *facts: str) -> HistoryLog:
    log = HistoryLog(home / "workspace" / "memory")
    for fact in facts:
        log.append("cli:direct", fact)
    return log


def append_call(text: str, summary: str, path: str = "memory/MEMORY.md") -> Reply:
    return Reply(tool_calls=[("append_to_file", {"path": path, "text": text, "summary": summary})])


def dream_once(llm, analysis: str, call: Reply) -> None:
    """One `nanoagent dream` whose model finds `analysis` and makes the one edit `call`."""
    llm.script(Reply(text=analysis), call, Reply(text="ok"))
    assert invoke("dream", env=anthropic_env(llm)).returncode == 0


def memory_md(home) -> str:
    return (home / "workspace" / "memory" / "MEMORY.md").read_text()


def test_a_long_conversation_consolidates_into_history_with_correct_cursors(llm, isolated_home):
    write_config(isolated_home, {"agents": {"defaults": {"contextWindowTokens": 8000, "maxTokens": 200}}})
    llm.default_reply = Reply(text="noted " * 40)
    for i in range(6):
        result = invoke("agent", "-m", f"turn {i}: " + "the harbour is busy today " * 280, env=anthropic_env(llm))
        assert result.returncode == 0, result.stderr
    lines = (isolated_home / "workspace" / "memory" / "history.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert len(entries) >= 2, "the conversation outgrew the window but was not archived"
    assert [e["cursor"] for e in entries] == list(range(1, len(entries) + 1))
    assert (isolated_home / "workspace" / "memory" / ".cursor").read_text().strip() == str(len(entries))
    session = (isolated_home / "sessions" / "cli__direct.jsonl").read_text()
    assert '"last_consolidated"' in session
    summaries = [r for r in llm.requests if "condense a stretch of conversation" in json.dumps(r.body.get("system"))]
    assert summaries and "turn 0" in json.dumps(summaries[0].body["messages"])


@pytest.mark.process
def test_dream_edits_memory_commits_and_advances_the_cursor(llm, isolated_home):
    # real processes: the one end-to-end run of `dream` and `dream-log`
    log = remember(isolated_home, "- the user bought a boat and named it Gull")
    llm.script(Reply(text=ANALYSIS), append_call("- Boat: Gull", "add: boat is called Gull"), Reply(text="Added."))
    result = run_cli("dream", env=anthropic_env(llm))
    assert result.returncode == 0, result.stderr
    assert "- Boat: Gull" in memory_md(isolated_home)
    assert log.dream_cursor == 1
    assert "memory/MEMORY.md: add: boat is called Gull" in result.stdout
    shown = run_cli("dream-log", env=anthropic_env(llm))
    assert "add: boat is called Gull" in shown.stdout


def test_dream_with_nothing_new_makes_no_model_call(llm, isolated_home):
    result = invoke("dream", env=anthropic_env(llm))
    assert result.returncode == 0 and "Nothing new" in result.stdout
    assert llm.requests == []


def test_a_failing_dream_exits_non_zero_and_leaves_cursor_and_files(llm, isolated_home):
    write_config(isolated_home, fast_retries())
    log = remember(isolated_home, "- the user bought a boat and named it Gull")
    seed_workspace(isolated_home / "workspace")
    llm.script(Reply(text=ANALYSIS), append_call("- Boat: Gull", "add"),
               Reply(status=400, error_message="prompt is too long"))
    before = memory_md(isolated_home)
    result = invoke("dream", env=anthropic_env(llm))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Nothing changed" in errors[0] and "Traceback" not in result.stderr
    assert memory_md(isolated_home) == before
    assert log.dream_cursor == 0


@pytest.mark.process
def test_two_dreams_then_restoring_the_first_keeps_the_second(llm, isolated_home):
    log = remember(isolated_home, "- boat named Gull")
    dream_once(llm, ANALYSIS, append_call("- Boat: Gull", "add: boat Gull"))
    log.append("cli:direct", "- the user moved to Porto")
    dream_once(llm, "## USER.md\n- ADD: lives in Porto",
               append_call("- Lives in Porto", "add: lives in Porto", path="USER.md"))
    workspace = isolated_home / "workspace"
    first = next(c for c in _log(workspace) if "boat Gull" in c.summary)
    restored = run_cli("dream-restore", first.short, env=anthropic_env(llm))  # the one real-process restore
    assert restored.returncode == 0, restored.stderr
    assert "Boat: Gull" not in memory_md(isolated_home)
    assert "- Lives in Porto" in (workspace / "USER.md").read_text()


def test_dream_batch_falls_back_to_direct_calls_for_a_non_anthropic_model(llm, isolated_home):
    remember(isolated_home, "- boat named Gull")
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": llm.url + "/v1", "NANOAGENT_MODEL": "openai/gpt-test"}
    llm.script(Reply(text="NOTHING"))
    result = invoke("dream", "--batch", env=env)
    assert result.returncode == 0, result.stderr
    assert "needs an Anthropic model" in result.stderr
    assert [r.path for r in llm.requests] == ["/v1/chat/completions"]


def _log(workspace):
    from nanoagent.memory.gitlog import MemoryGit

    paths = Paths(home=workspace.parent, workspace=workspace)
    return MemoryGit(workspace, paths.memory_git_dir).log()


def test_dream_batch_sends_both_phases_through_message_batches_at_half_price(llm, isolated_home):
    log = remember(isolated_home, "- the user bought a boat and named it Gull")
    llm.script(Reply(text=ANALYSIS), append_call("- Boat: Gull", "add: boat Gull"), Reply(text="ok"))
    result = invoke("dream", "--batch", env=anthropic_env(llm))
    assert result.returncode == 0, result.stderr
    assert "- Boat: Gull" in memory_md(isolated_home) and log.dream_cursor == 1
    created = [r for r in llm.requests if r.path == "/v1/messages/batches"]
    assert len(created) == 3 and not any(r.path == "/v1/messages" for r in llm.requests)
    ledger = next((isolated_home / "sessions").glob("dream__*.jsonl"))
    usage = [json.loads(line) for line in ledger.read_text().splitlines() if '"usage"' in line]
    assert len(usage) == 3 and all(u["price_factor"] == 0.5 for u in usage)


def test_the_system_prompt_tells_the_model_to_search_memory_before_answering_about_the_past(llm, isolated_home):
    assert invoke("agent", "-m", "hi", env=anthropic_env(llm)).returncode == 0
    system = json.dumps(llm.requests[-1].body["system"])
    assert "call `memory_search` first" in system and "memory_search" in json.dumps(llm.requests[-1].body["tools"])


def test_a_fact_told_ten_sessions_earlier_is_found_through_the_agent(llm, isolated_home):
    from nanoagent.session.store import SessionStore

    llm.script(Reply(text="Noted."))
    told = invoke("agent", "-m", "My locker code at the pool is 4471, remember it.", "-s", "s0", env=anthropic_env(llm))
    assert told.returncode == 0, told.stderr
    store = SessionStore(isolated_home / "sessions")
    for n in range(1, 10):  # nine conversations about other things in between
        session = store.load(f"cli:s{n}")
        store.add_messages(session, [{"role": "user", "content": f"Plan day {n} of the garden project"},
                                     {"role": "assistant", "content": f"Day {n}: water the tomatoes."}])
    llm.script(Reply(tool_calls=[("memory_search", {"query": "locker code pool"})]), Reply(text="It is 4471."))
    asked = invoke("agent", "-m", "What was my locker code?", "-s", "s10", env=anthropic_env(llm))
    assert asked.returncode == 0, asked.stderr
    result = json.dumps(llm.requests[-1].body["messages"][-1])
    assert "4471" in result and "session cli:s0 #0" in result


def test_two_dreams_appending_to_memory_then_restoring_the_first_keeps_the_second_line(llm, isolated_home):
    # Regression: the two appends sit on neighbouring lines, which git merge-file called a conflict.
    log = remember(isolated_home, "- boat named Gull")
    dream_once(llm, ANALYSIS, append_call("- Boat: Gull", "add: boat Gull"))
    log.append("cli:direct", "- the user moved to Porto")
    dream_once(llm, "## memory/MEMORY.md\n- ADD: lives in Porto",
               append_call("- Lives in Porto", "add: lives in Porto"))
    before = memory_md(isolated_home)
    assert before.endswith("- Boat: Gull\n- Lives in Porto\n")
    first = next(c for c in _log(isolated_home / "workspace") if "boat Gull" in c.summary)

    restored = invoke("dream-restore", first.short, env=anthropic_env(llm))

    assert restored.returncode == 0, restored.stderr
    assert memory_md(isolated_home) == before.replace("- Boat: Gull\n", "")
