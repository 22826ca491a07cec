"""`nanoagent agent -m` against the local LLM server: in this process through the real SDKs, and as real
processes for what needs one (kill -9, two writers, import time, the traceback a process prints)."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import nanoagent.channels.registry as registry
from nanoagent.session.store import SessionStore
from tests.conftest import (
    PATIENCE,
    ROOT,
    anthropic_env,
    fast_retries,
    invoke,
    openai_env,
    run_cli,
    write_config,
)
from tests.llm_server import Reply


def session_messages(home, key="cli:direct"):
    return SessionStore(home / "sessions").load(key).messages


@pytest.mark.parametrize("env_for", [anthropic_env, openai_env], ids=["anthropic", "openai"])
def test_one_shot_reply_goes_to_stdout_and_the_session(llm, isolated_home, env_for):
    llm.script(Reply(text="Hello, human."))
    proc = invoke("agent", "-m", "hello", env=env_for(llm))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Hello, human.\n"
    messages = session_messages(isolated_home)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"].endswith("hello") and "<runtime_context>" in messages[0]["content"]


def test_the_next_run_continues_the_same_conversation(llm, isolated_home):
    env = anthropic_env(llm)
    llm.script(Reply(text="Noted: your name is Ada."), Reply(text="Your name is Ada."))
    assert invoke("agent", "-m", "my name is Ada", env=env).returncode == 0
    assert invoke("agent", "-m", "what is my name?", env=env).returncode == 0
    sent = llm.requests[-1].body["messages"]
    assert len(sent) == 3 and "my name is Ada" in json.dumps(sent[0])
    assert len(session_messages(isolated_home)) == 4


def test_sessions_are_separate_by_key(llm, isolated_home):
    env = anthropic_env(llm)
    assert invoke("agent", "-m", "one", "-s", "work", env=env).returncode == 0
    assert invoke("agent", "-m", "two", "-s", "telegram:42", env=env).returncode == 0
    assert len(session_messages(isolated_home, "cli:work")) == 2
    assert len(session_messages(isolated_home, "telegram:42")) == 2
    hint = registry.get("telegram").hint  # how replies render there, beside the channel's name
    opening = session_messages(isolated_home, "telegram:42")[0]["content"]
    assert f"channel: telegram\nformat: {hint}\nchat_id: 42" in opening


def test_system_prompt_stays_byte_identical_between_turns(llm, isolated_home):
    env = anthropic_env(llm)
    assert invoke("agent", "-m", "one", env=env).returncode == 0
    assert invoke("agent", "-m", "two", env=env).returncode == 0
    first, second = llm.requests[-2].body, llm.requests[-1].body
    assert first["system"] == second["system"] and first["tools"] == second["tools"]
    assert "chat_id: direct" not in json.dumps(first["system"])


def test_json_output_has_reply_session_usage_and_tool_calls(llm, isolated_home):
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "todo.md").write_text("- buy milk\n")
    llm.script(Reply(tool_calls=[("read_file", {"path": "todo.md"})]), Reply(text="Buy milk."))
    proc = invoke("agent", "-m", "what is on my list?", "--json", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["reply"] == "Buy milk." and data["session"] == "cli:direct"
    assert data["usage"]["input_tokens"] > 0 and data["usage"]["output_tokens"] > 0
    assert data["tool_calls"][0]["name"] == "read_file" and data["tool_calls"][0]["ok"] is True
    assert "read_file" in proc.stderr  # activity goes to stderr


def test_workspace_flag_picks_another_workspace(llm, isolated_home, tmp_path):
    other = tmp_path / "elsewhere"
    llm.script(Reply(tool_calls=[("write_file", {"path": "out.txt", "content": "hi"})]), Reply(text="done"))
    proc = invoke("agent", "-m", "write it", "-w", str(other), env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    assert (other / "out.txt").read_text() == "hi"
    assert (other / "SOUL.md").exists()


def test_provider_failure_is_one_line_and_keeps_the_users_message(llm, isolated_home):
    write_config(isolated_home, fast_retries(maxRetries=0))
    long_message = "the upstream model is overloaded\n\n" * 8 + "END-OF-MESSAGE"  # long, and with newlines
    llm.script(Reply(status=500, error_message=long_message))
    proc = invoke("agent", "-m", "please remember this", env=anthropic_env(llm))
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "500" in lines[0] and "END-OF-MESSAGE" in lines[0] and "Traceback" not in proc.stderr
    messages = session_messages(isolated_home)
    assert messages[-1]["role"] == "user" and "please remember this" in messages[-1]["content"]


def test_connection_refused_is_a_clear_error(isolated_home):
    write_config(isolated_home, fast_retries(maxRetries=0))
    env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "NANOAGENT_MODEL": "claude-x"}
    proc = invoke("agent", "-m", "hi", env=env)
    assert proc.returncode == 1
    assert "cannot connect to http://127.0.0.1:9 (connection refused)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.process
def test_debug_shows_tracebacks_only_when_asked(isolated_home):
    # a real process: the traceback is what Python prints when an exception ends it
    (isolated_home).mkdir(parents=True, exist_ok=True)
    (isolated_home / "config.json").write_text("[]")
    assert "Traceback" not in run_cli("status").stderr
    assert "Traceback" in run_cli("--debug", "status").stderr


@pytest.mark.process
def test_killed_between_tool_call_and_result_the_next_run_repairs_and_continues(llm, isolated_home):
    env = anthropic_env(llm)
    llm.script(Reply(tool_calls=[("exec", {"command": "sleep 30"})]), Reply(text="Recovered."))
    proc = subprocess.Popen([sys.executable, "-m", "nanoagent", "agent", "-m", "run it"], cwd=ROOT,
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + PATIENCE
    while not ((messages := session_messages(isolated_home)) and messages[-1].get("tool_calls")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the tool call never reached the session"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert session_messages(isolated_home)[-1].get("tool_calls")
    done = invoke("agent", "-m", "are you there?", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Recovered.\n"
    messages = session_messages(isolated_home)
    tool = [m for m in messages if m["role"] == "tool"]
    assert len(tool) == 1 and "interrupted" in tool[0]["content"]
    sent = json.dumps(llm.requests[-1].body["messages"])
    assert "interrupted" in sent


def open_files(pid: int) -> set[str]:
    """The paths process `pid` has open (empty once it has ended)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return set()
    found = set()
    for fd in fds:
        try:
            found.add(os.readlink(fd))
        except OSError:
            continue  # closed while we looked
    return found


@pytest.mark.process
def test_two_processes_on_one_session_take_turns(llm, isolated_home):
    # The first reply is held until both processes have the session's lock file open: one holds the lock
    # through its turn, the other waits for it. Without the lock the second would call the model meanwhile.
    env = anthropic_env(llm)
    release = threading.Event()
    llm.script(Reply(text="first", release=release), Reply(text="second"))
    procs = [subprocess.Popen([sys.executable, "-m", "nanoagent", "agent", "-m", f"message {i}"], cwd=ROOT,
                              env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    try:
        lock = str(isolated_home / "sessions" / "cli__direct.jsonl.lock")
        deadline = time.monotonic() + PATIENCE
        while not (llm.requests and all(lock in open_files(p.pid) for p in procs)):
            assert len(llm.requests) < 2, "the second process called the model while the first held the session"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline, "the processes never met at the session lock"
            time.sleep(0.02)
        assert len(llm.requests) == 1
    finally:
        release.set()
    outputs = [p.communicate(timeout=PATIENCE) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sorted(out for out, _ in outputs) == ["first\n", "second\n"]
    roles = [m["role"] for m in session_messages(isolated_home)]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert len(llm.requests[-1].body["messages"]) == 3  # the second turn saw the first


@pytest.mark.process
def test_help_and_version_do_not_import_provider_sdks():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "nanoagent", "--help"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0 and "agent" in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert not imported & {"anthropic", "litellm", "httpx", "openai", "git", "prompt_toolkit", "tiktoken"}
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("nanoagent ")


def test_empty_model_reply_is_explained_not_silent(llm, isolated_home):
    llm.script(Reply(text=""))
    proc = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert proc.returncode == 0
    assert "empty reply" in proc.stdout


def test_failures_are_logged_without_the_api_key(llm, isolated_home):
    write_config(isolated_home, fast_retries(maxRetries=0))
    llm.script(Reply(status=500, error_message="boom"))
    env = {**anthropic_env(llm), "ANTHROPIC_API_KEY": "sk-ant-do-not-log-me"}
    assert invoke("agent", "-m", "hi", env=env).returncode == 1
    log = (isolated_home / "logs" / "nanoagent.log").read_text()
    assert "boom" in log and "sk-ant-do-not-log-me" not in log


def test_model_flag_beats_the_nanoagent_model_variable(llm, isolated_home):
    llm.script(Reply(text="from the flag's model"))
    proc = invoke("agent", "-m", "hi", "--model", "anthropic/claude-flag", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    assert anthropic_env(llm)["NANOAGENT_MODEL"] == "anthropic/claude-test"
    assert llm.requests[-1].body["model"] == "claude-flag"


def slash(llm, command: str, session: str = "cli:direct", refused: bool = False):
    """A command under -m: its answer on stdout, or, when it could not do what was asked, one line on stderr
    and exit 1 (so a script can tell)."""
    proc = invoke("agent", "-m", command, "-s", session, env=anthropic_env(llm))
    assert proc.returncode == (1 if refused else 0), proc.stderr
    if refused:
        assert proc.stdout == "" and proc.stderr.count("\n") == 1
    return proc


def test_slash_help_lists_every_command_without_calling_the_model(llm):
    out = slash(llm, "/help").stdout
    for command in ("/help", "/new", "/status", "/model", "/usage", "/skills", "/sessions", "/stop"):
        assert any(line.startswith(command + " ") for line in out.splitlines()), command
    assert llm.requests == []


def test_slash_stop_or_cancel_with_nothing_running_says_so(llm):
    for command in ("/stop", "/cancel"):
        stopped = slash(llm, command)
        assert stopped.returncode == 0 and stopped.stdout.strip() == "Nothing is running.", command
    assert llm.requests == []


def test_slash_model_shows_and_switches_the_model_for_this_session_only(llm, isolated_home):
    assert slash(llm, "/model").stdout.startswith("Model: anthropic/claude-test")
    assert "now uses anthropic/claude-other" in slash(llm, "/model anthropic/claude-other").stdout
    records = [json.loads(line) for line in (isolated_home / "sessions" / "cli__direct.jsonl").read_text().splitlines()]
    assert [r["model"] for r in records if r["type"] == "meta" and "model" in r] == ["anthropic/claude-other"]  # kept in the session file
    assert slash(llm, "/model").stdout.startswith("Model: anthropic/claude-other")
    llm.script(Reply(text="switched"), Reply(text="unchanged"))
    slash(llm, "hello")
    assert llm.requests[-1].body["model"] == "claude-other"
    slash(llm, "hello", session="cli:elsewhere")
    assert llm.requests[-1].body["model"] == "claude-test"


def test_slash_model_refuses_an_unknown_model_and_keeps_the_current_one(llm, isolated_home):
    out = slash(llm, "/model mystery-model", refused=True).stderr
    assert out.startswith("Cannot switch: Unknown model 'mystery-model'") and "provider/model" in out
    assert slash(llm, "/model").stdout.startswith("Model: anthropic/claude-test")
    assert llm.requests == []


def test_slash_usage_totals_this_sessions_tokens_by_model(llm):
    assert slash(llm, "/usage").stdout.strip() == "No model calls in this session yet."
    llm.script(Reply(text="hi", input_tokens=1234, output_tokens=56))
    slash(llm, "hello")
    out = slash(llm, "/usage").stdout
    assert re.match(r"anthropic/claude-test: 1 calls, [\d,]+ in, 56 out, [\d,]+ cache read, [\d,]+ cache write", out)


def test_slash_skills_lists_the_built_in_skills_with_their_source(llm):
    lines = slash(llm, "/skills").stdout.splitlines()
    names = [line.split(" ")[0] for line in lines]
    assert names == sorted(names) and {"memory", "skill-creator", "github", "summarize", "tmux"} <= set(names)
    assert any(line.startswith("memory (builtin, always loaded): ") for line in lines)
    assert llm.requests == []


def test_slash_sessions_lists_saved_sessions_and_marks_the_current_one(llm):
    assert slash(llm, "/sessions").stdout.strip() == "No saved sessions yet."
    llm.script(Reply(text="a"), Reply(text="b"))
    slash(llm, "hello", session="cli:first")
    slash(llm, "hello", session="cli:second")
    lines = slash(llm, "/sessions", session="cli:second").stdout.splitlines()
    assert "  cli:first" in lines and "* cli:second" in lines


def test_an_unknown_slash_command_gets_a_hint_exits_1_and_makes_no_model_call(llm):
    out = slash(llm, "/foo bar", refused=True).stderr
    assert out.strip() == "Unknown command /foo. Type /help to see the commands."
    assert llm.requests == []


def test_slash_new_starts_fresh_but_keeps_the_old_conversation(llm, isolated_home):
    slash(llm, "remember: the code word is heron")
    said = slash(llm, "/new").stdout.strip()
    assert said.startswith("Started a fresh conversation. The previous 2 messages stay in ")
    assert said.endswith(" and were archived to memory. Archiving took 2 model calls (no listed price for "
                         "anthropic/claude-test).")  # the flush and the summary
    priced = {**anthropic_env(llm), "NANOAGENT_MODEL": "anthropic/claude-sonnet-4-5"}
    assert invoke("agent", "-m", "and the colour is teal", env=priced).returncode == 0
    said = invoke("agent", "-m", "/new", env=priced).stdout.strip()
    assert re.search(r" Archiving took 2 model calls \(\$0\.\d+\)\.$", said), said
    slash(llm, "what is the code word?")
    [sent] = llm.requests[-1].body["messages"]  # the old conversation is not sent...
    text = json.dumps(sent).partition("</runtime_context>")
    assert "heron" not in text[2] and "heron" in text[0].partition("recalled memory")[2]  # ...only recalled from memory
    assert "heron" in json.dumps(session_messages(isolated_home))


def test_slash_status_shows_token_counts(llm):
    llm.script(Reply(text="hi", input_tokens=1234, output_tokens=56))
    slash(llm, "hello")
    out = slash(llm, "/status").stdout
    assert re.search(r"^context:\s+[\d,]+ of 200,000 tokens \(\d+%\)$", out, re.MULTILINE), out
    assert re.search(r"^tokens:\s+[\d,]+ in, 56 out", out, re.MULTILINE), out


def test_a_command_that_cannot_do_what_was_asked_exits_1_in_json_too(llm):
    assert "Nothing to retry" in slash(llm, "/retry", refused=True).stderr
    ran = invoke("agent", "-m", "/dream-restore", "--json", env=anthropic_env(llm))
    assert ran.returncode == 1 and json.loads(ran.stdout)["refused"] is True
    assert slash(llm, "/status").stdout  # one that works still exits 0


def test_slash_model_switches_to_a_name_the_model_table_does_not_know_but_says_what_was_likely_meant(llm):
    out = slash(llm, "/model anthropic/claude-sonet-4-5").stdout
    assert "This session now uses anthropic/claude-sonet-4-5." in out
    assert "not in the bundled model table" in out and "did you mean anthropic/claude-sonnet-4-5" in out
    assert "bundled model table" not in slash(llm, "/model anthropic/claude-sonnet-4-5").stdout
    local = slash(llm, "/model ollama/my-own-tag").stdout  # local tags are the user's own: nothing to compare
    assert "now uses ollama/my-own-tag" in local and "bundled model table" not in local


@pytest.mark.process
def test_a_process_waiting_for_a_busy_session_says_who_holds_it_then_goes_on(llm, isolated_home):
    store = SessionStore(isolated_home / "sessions")
    session = store.load("cli:direct")
    heard: list[str] = []
    with store.lock(session, waiting=heard.append):  # this test process holds the session, as a running turn would
        proc = subprocess.Popen([sys.executable, "-m", "nanoagent", "agent", "-m", "hi"], cwd=ROOT,
                                env={**os.environ, **anthropic_env(llm)}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        first = proc.stderr.readline()  # blocks until the waiting process says something
        assert first.startswith(f"Waiting for session cli:direct: another nanoagent process (pid {os.getpid()}) "
                                "is using it"), first
        assert llm.requests == [] and proc.poll() is None
    out, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 0 and out == "ok\n", err
    assert heard == []  # the holder never waited


def test_a_project_folder_given_with_w_is_not_seeded_without_consent_off_a_terminal(llm, isolated_home, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('mine')\n")
    proc = invoke("agent", "-m", "hi", "-w", str(project), env=anthropic_env(llm))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"Error: {project} holds other files and is not a nanoagent workspace yet: to "
                                   f"work on its files, use `nanoagent agent -C {project}`; `nanoagent onboard -w "
                                   f"{project}` makes it a workspace (adds AGENTS.md, HEARTBEAT.md, SOUL.md, "
                                   "TOOLS.md, USER.md, memory/ and skills/).")
    assert sorted(p.name for p in project.iterdir()) == ["main.py"] and llm.requests == []
    assert invoke("onboard", "-w", str(project)).returncode == 0  # the way to say yes from a script
    assert (project / "SOUL.md").exists()
    proc = invoke("agent", "-m", "hi", "-w", str(project), env=anthropic_env(llm))
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


@pytest.mark.process
def test_a_project_folder_given_with_w_is_seeded_only_when_the_person_at_the_terminal_agrees(llm, tmp_path):
    import pexpect

    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('mine')\n")
    env = {**os.environ, **anthropic_env(llm), "TERM": "dumb"}
    for answer, code in (("n", 1), ("y", 0)):
        child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "agent", "-m", "hi", "-w", str(project)],
                              cwd=str(ROOT), env=env, encoding="utf-8", timeout=PATIENCE)
        child.expect_exact("is not a nanoagent workspace yet. Add AGENTS.md")
        child.expect_exact("[y/N] ")
        child.send(answer + "\r")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == code, child.before
        assert (project / "SOUL.md").exists() == (answer == "y")
        assert len(llm.requests) == (answer == "y")


def test_slash_commands_that_call_no_model_need_no_api_key(isolated_home):
    shown = invoke("agent", "-m", "/help")
    assert shown.returncode == 0 and "/sessions" in shown.stdout, shown.stderr
    assert invoke("agent", "-m", "/sessions").returncode == 0
    message = invoke("agent", "-m", "hello")  # a message does: the key is asked for before anything is stored
    assert message.returncode == 1 and "No API key" in message.stderr
    assert not list((isolated_home / "sessions").glob("*.jsonl"))


def test_a_session_whose_model_is_unknown_says_the_name_came_from_the_session_and_new_still_works(llm, isolated_home):
    slash(llm, "remember: the code word is heron")
    store = SessionStore(isolated_home / "sessions")
    store.set_model(store.load("cli:direct"), "nosuch/provider-x")  # as a /model of an older version left it
    turn = invoke("agent", "-m", "hello?", env=anthropic_env(llm))
    assert turn.returncode == 1 and len(turn.stderr.strip().splitlines()) == 1, turn.stderr
    assert "This session's model nosuch/provider-x was set with /model" in turn.stderr
    assert "Type /model anthropic/claude-test to switch this session back" in turn.stderr
    assert len(session_messages(isolated_home)) == 2  # the message that could not be sent was not stored either
    fresh = slash(llm, "/new").stdout
    assert fresh.startswith("Started a fresh conversation. The previous 2 messages stay in ")
    assert "This session's model nosuch/provider-x was set with /model" in fresh
    summary = llm.requests[-1].body  # archived all the same, by the default model
    assert summary["model"] == "claude-test" and "heron" in json.dumps(summary["messages"])
    slash(llm, "/model anthropic/claude-test")
    llm.script(Reply(text="back again"))
    assert invoke("agent", "-m", "hello?", env=anthropic_env(llm)).stdout.strip() == "back again"


def test_a_failed_one_shot_does_not_offer_retry(llm, isolated_home):
    write_config(isolated_home, fast_retries(maxRetries=0))
    llm.script(Reply(status=500, error_message="upstream exploded"))
    proc = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert proc.returncode == 1 and "upstream exploded" in proc.stderr
    assert "/retry" not in proc.stderr + proc.stdout
