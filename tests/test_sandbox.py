"""exec in the real bubblewrap sandbox: what a command cannot reach, its limits, and the rules for when the
sandbox cannot start. Skipped, with the reason, where the kernel forbids user namespaces."""

from __future__ import annotations

import asyncio
import http.server
import os
import threading
import time
from pathlib import Path

import pytest

from nanoagent.agent.build import build_agent, exec_settings
from nanoagent.config.schema import Config
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.tools import ToolContext, ToolError, TurnScope, current_turn
from nanoagent.tools.sandbox import SandboxCheck, SandboxPolicy, check_bwrap, command_env
from nanoagent.tools.shell import ExecSettings, Gate, exec_tool
from tests.conftest import PATIENCE
from tests.test_exec import gone, unique_sleep

BWRAP = check_bwrap()
needs_bwrap = pytest.mark.skipif(not BWRAP.ok, reason=f"no sandbox here: {BWRAP.explain()}")


@pytest.fixture
def home(isolated_home: Path) -> Paths:
    """A home with a key in config.json, a private key in ~/.ssh and a secret in the environment."""
    paths = Paths.from_env()
    paths.workspace.mkdir(parents=True)
    isolated_home.joinpath("config.json").write_text('{"providers": {"openai": {"apiKey": "sk-in-config"}}}')
    ssh = Path(os.path.expanduser("~/.ssh"))
    ssh.mkdir(parents=True)
    (ssh / "id_rsa").write_text("-----BEGIN PRIVATE KEY-----")
    return paths


def run(paths: Paths, command: str, config: Config | None = None, timeout: int = 20) -> str:
    tool = exec_tool(exec_settings(config or Config(), paths))
    try:
        return asyncio.run(tool.call(ToolContext(paths.workspace), {"command": command, "timeout": timeout}))
    except ToolError as e:
        return f"ToolError: {e}"


@needs_bwrap
def test_a_command_cannot_read_the_config_the_ssh_key_or_any_environment_secret(home, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-in-env")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-in-env")
    out = run(home, f"cat {home.config_file}; cat ~/.ssh/id_rsa; cat /proc/1/environ; "
                    f"cat /proc/{os.getpid()}/environ; env")
    assert "sk-in-config" not in out and "PRIVATE KEY" not in out
    assert "sk-in-env" not in out and "ghp-in-env" not in out
    assert "No such file or directory" in out and out.endswith("[exit code: 0]")


def test_secrets_stay_out_without_the_sandbox_too_unless_listed_by_name(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-in-env")
    monkeypatch.setenv("MY_DB_PASSWORD", "hunter2")
    monkeypatch.setenv("EDITOR", "vim")
    env = command_env(SandboxPolicy(mode="none"), sandboxed=False)
    assert "OPENAI_API_KEY" not in env and "MY_DB_PASSWORD" not in env and "EDITOR" not in env
    assert set(env) <= {"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ"}
    listed = command_env(SandboxPolicy(mode="none", env=("MY_DB_PASSWORD", "EDITOR")), sandboxed=False)
    assert listed["MY_DB_PASSWORD"] == "hunter2" and listed["EDITOR"] == "vim"


@needs_bwrap
def test_writes_stay_in_the_workspace_and_history_and_cursors_are_read_only(home, tmp_path):
    (home.memory_dir).mkdir(parents=True, exist_ok=True)
    (home.memory_dir / "history.jsonl").write_text('{"cursor": 1}\n')
    (home.memory_dir / ".dream_cursor").write_text("1")
    outside = tmp_path / "outside.txt"
    out = run(home, f"echo made > made.txt; echo x > {outside}; echo x > ~/notes; echo gone > memory/history.jsonl; "
                    "echo 0 > memory/.dream_cursor; touch /usr/x")
    assert (home.workspace / "made.txt").read_text() == "made\n"
    assert not outside.exists() and not Path(os.path.expanduser("~/notes")).exists()
    assert (home.memory_dir / "history.jsonl").read_text() == '{"cursor": 1}\n'
    assert (home.memory_dir / ".dream_cursor").read_text() == "1"
    assert "Read-only file system" in out


@needs_bwrap
def test_no_network_by_default_a_loopback_server_is_unreachable_and_a_lookup_failure_gets_a_hint(home):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        probe = (f"python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/', "
                 "timeout=3)\" 2>&1 | tail -1")
        out = run(home, probe)
        assert "Connection refused" in out or "Network is unreachable" in out, out
        lookup = run(home, "python3 -c \"import socket; socket.getaddrinfo('example.com', 80)\"")
        assert "tools.exec.network is false" in lookup
        config = Config()
        config.tools.exec.network = True
        allowed = run(home, probe.replace(" | tail -1", "; echo fetched"), config)
        assert "fetched" in allowed and "refused" not in allowed
    finally:
        server.shutdown()


@needs_bwrap
def test_a_command_cannot_see_or_kill_host_processes(home):
    marker = unique_sleep()
    import subprocess

    host = subprocess.Popen(["sleep", marker])
    try:
        out = run(home, f"kill -9 {host.pid}; echo rc=$?; ps -e -o pid,cmd | grep -c {marker}")
        assert host.poll() is None  # still running
        assert "rc=1" in out or "No such process" in out
    finally:
        host.kill()
        host.wait()


@needs_bwrap
def test_a_fork_bomb_hits_the_process_limit_and_ends_as_a_result(home):
    config = Config()
    config.tools.exec.max_processes = 40
    started = time.monotonic()
    out = run(home, "bomb() { bomb | bomb & }; bomb; sleep 1; echo still-here", config, timeout=4)
    assert time.monotonic() - started < 15
    assert "process limit" in out or "Cannot fork" in out or "Resource temporarily unavailable" in out, out


@needs_bwrap
def test_a_runaway_allocation_is_stopped_by_the_memory_limit(home):
    config = Config()
    config.tools.exec.memory_mb = 200
    out = run(home, "python3 -c \"b = bytearray(600 * 1024 * 1024); print('allocated')\"", config)
    assert "MemoryError" in out and "allocated" not in out


@needs_bwrap
def test_the_private_tmp_has_a_size_cap(home):
    config = Config()
    config.tools.exec.tmp_mb = 8
    out = run(home, "yes > /tmp/big; ls -l /tmp/big | awk '{print $5}'", config)
    assert "No space left on device" in out
    size = int(out.split("\n")[1])
    assert size <= 8 << 20


@needs_bwrap
def test_nohup_sleep_left_running_past_the_end_is_gone(home):
    marker = unique_sleep()
    out = run(home, f"nohup sleep {marker} > /dev/null 2>&1 & echo left")
    assert out.startswith("left")
    assert gone(marker)


@needs_bwrap
def test_skill_validation_runs_inside_the_sandbox(home):
    skill = home.workspace / "skills" / "demo"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: demo\ndescription: Greets the user warmly when they ask for a demonstration of skills.\n---\nDo it.\n")
    out = run(home, "nanoagent skills validate skills/demo")
    assert out.endswith("[exit code: 0]"), out


# --- when the sandbox cannot start -------------------------------------------------------------


def broken(monkeypatch) -> None:
    check = SandboxCheck(False, "bubblewrap (bwrap) is not installed", "install it: `sudo apt install bubblewrap`")
    monkeypatch.setattr("nanoagent.tools.shell.check_bwrap", lambda: check)


def admit(gate: Gate, turn: TurnScope, command: str = "ls") -> bool | str:
    try:
        return asyncio.run(gate.admit(command, turn))
    except ToolError as e:
        return str(e)




def asking(reply: str, asked: list[str] | None = None):
    async def ask(question: str) -> str:
        (asked if asked is not None else []).append(question)
        return reply

    return ask


def test_without_a_working_sandbox_nobody_watching_means_refused_with_the_fix(monkeypatch):
    broken(monkeypatch)
    result = admit(Gate(ExecSettings()), TurnScope("cron:job", ask=None))
    assert isinstance(result, str) and "bwrap" in result and "apt install bubblewrap" in result
    assert "tools.exec.sandbox" in result


def test_without_a_working_sandbox_a_person_is_warned_once_per_session_and_asked(monkeypatch):
    broken(monkeypatch)
    notices: list[str] = []
    asked: list[str] = []
    gate = Gate(ExecSettings())
    turn = TurnScope("cli:direct", notify=notices.append, ask=asking("y", asked))
    assert admit(gate, turn) is False and admit(gate, turn, "pwd") is False
    assert len(notices) == 1 and "WITHOUT a sandbox" in notices[0]
    assert len(asked) == 2 and "WITHOUT a sandbox: pwd" in asked[1]
    no = admit(gate, TurnScope("cli:other", notify=notices.append, ask=asking("n")))
    assert isinstance(no, str) and "declined" in no


def test_always_this_session_stops_asking_in_that_session_only(monkeypatch):
    broken(monkeypatch)
    asked: list[str] = []
    gate = Gate(ExecSettings())
    turn = TurnScope("cli:direct", ask=asking("always", asked))
    assert admit(gate, turn) is False and admit(gate, turn) is False
    assert len(asked) == 1
    admit(gate, TurnScope("cli:else", ask=asking("y", asked)))
    assert len(asked) == 2


def test_sandbox_bwrap_chosen_but_broken_is_refused_even_with_a_person_there(monkeypatch):
    broken(monkeypatch)
    gate = Gate(ExecSettings(policy=SandboxPolicy(mode="bwrap")))
    result = admit(gate, TurnScope("cli:direct", ask=asking("y")))
    assert isinstance(result, str) and "cannot start" in result


def test_sandbox_none_runs_unsandboxed_everywhere_and_approve_always_asks(monkeypatch):
    gate = Gate(ExecSettings(policy=SandboxPolicy(mode="none"), approve="never"))
    assert admit(gate, TurnScope("cron:job")) is False
    strict = Gate(ExecSettings(policy=SandboxPolicy(mode="none"), approve="always"))
    refused = admit(strict, TurnScope("cron:job"))
    assert isinstance(refused, str) and "nobody can answer" in refused


def test_an_approval_question_reaches_the_person_through_the_loop(monkeypatch, isolated_home):
    broken(monkeypatch)
    asked: list[str] = []
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("exec", {"command": "echo approved-run"})]), "done"])
    loop = build_agent(Config(), Paths.from_env(), provider=provider)
    turn = asyncio.run(loop.handle("run it", "cli:direct", ask=asking("y", asked)))
    assert turn.reply == "done" and len(asked) == 1
    assert "approved-run" in provider.requests[1].messages[-1]["content"]
    refused = ScriptedProvider([ScriptedReply(tool_calls=[("exec", {"command": "echo x"})]), "ok"])
    unattended = build_agent(Config(), Paths.from_env(), provider=refused)
    asyncio.run(unattended.handle("run it", "cron:job"))
    assert "Not run" in refused.requests[1].messages[-1]["content"]


def test_the_turn_scope_is_reset_after_a_turn(isolated_home):
    loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider(["hi"]))
    asyncio.run(loop.handle("hello", "cli:direct", ask=asking("y")))
    assert current_turn.get().ask is None


# --- doctor and signals ------------------------------------------------------------------------------


@pytest.mark.process
def test_doctor_runs_the_same_smoke_test_and_names_the_fix_when_bwrap_is_missing(tmp_path, isolated_home):
    import subprocess
    import sys

    from tests.conftest import ROOT

    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}
    proc = subprocess.run([sys.executable, "-m", "nanoagent", "doctor"], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=PATIENCE)
    line = next(line for line in proc.stdout.splitlines() if "sandbox:" in line)
    assert line.startswith("FIX") and "bubblewrap (bwrap) is not installed" in line
    assert "apt install bubblewrap" in proc.stdout
    if BWRAP.ok:
        ok = subprocess.run([sys.executable, "-m", "nanoagent", "doctor"], capture_output=True, text=True,
                            cwd=ROOT, timeout=PATIENCE)
        assert "ok    sandbox: bubblewrap works" in ok.stdout


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGHUP"])
@pytest.mark.process
def test_sigterm_or_sighup_during_a_command_kills_it_and_records_the_interrupted_turn(llm, isolated_home,
                                                                                      signal_name):
    import json
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT, anthropic_env
    from tests.llm_server import Reply

    marker = unique_sleep()
    llm.script(Reply(tool_calls=[("exec", {"command": f"sleep {marker}"})]))
    proc = subprocess.Popen([sys.executable, "-m", "nanoagent", "agent", "-m", "run it"], cwd=ROOT,
                            env={**os.environ, **anthropic_env(llm)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    from tests.test_exec import running

    deadline = time.monotonic() + PATIENCE
    while not running(marker):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(getattr(signal, signal_name))
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == (f"Error: Stopped by {signal_name}; the running turn was recorded as "
                                            "interrupted.")
    assert gone(marker)
    session = Paths.from_env().sessions_dir / "cli__direct.jsonl"
    records = [json.loads(line) for line in session.read_text().splitlines()]
    messages = [r["message"] for r in records if r["type"] == "message"]
    assert messages[-2]["role"] == "tool" and "interrupted" in messages[-2]["content"]
    assert "cancelled" in messages[-1]["content"]


@needs_bwrap
def test_folders_the_user_adds_are_readable_or_writable_as_chosen(home, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("reference")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    config = Config()
    config.tools.exec.read_only_paths = [str(shared)]
    config.tools.exec.writable_paths = [str(out_dir)]
    out = run(home, f"cat {shared}/data.txt; echo x > {shared}/new.txt; echo done > {out_dir}/result.txt", config)
    assert out.startswith("reference") and "Read-only file system" in out
    assert not (shared / "new.txt").exists() and (out_dir / "result.txt").read_text() == "done\n"


@needs_bwrap
@pytest.mark.process
def test_a_kill_9_of_nanoagent_leaves_no_sandboxed_command_running(home):
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.test_exec import running

    marker = unique_sleep()
    script = ("import asyncio; from nanoagent.agent.build import exec_settings; from nanoagent.config.schema import "
              "Config; from nanoagent.paths import Paths; from nanoagent.tools import ToolContext; "
              "from nanoagent.tools.shell import exec_tool; p = Paths.from_env(); "
              f"asyncio.run(exec_tool(exec_settings(Config(), p)).call(ToolContext(p.workspace), "
              f"{{'command': 'sleep {marker} & sleep {marker}'}}))")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    deadline = time.monotonic() + PATIENCE
    while len(running(marker)) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    assert gone(marker)
    deadline = time.monotonic() + PATIENCE
    while running(marker, wrappers=True):  # bwrap itself too (its arguments hold the marker)
        assert time.monotonic() < deadline, running(marker, wrappers=True)
        time.sleep(0.02)


# --- what the system prompt says about it ---------------------------------------------------------------------


@pytest.fixture
def without_bwrap(monkeypatch, tmp_path):
    """A PATH with no bwrap on it, and the once-per-process smoke test run again under it (and after)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    check_bwrap.cache_clear()
    yield
    check_bwrap.cache_clear()


def prompt_for(**exec_config) -> str:
    config = Config()
    for name, value in exec_config.items():
        setattr(config.tools.exec, name, value)
    prompt = build_agent(config, Paths.from_env(), provider=ScriptedProvider([])).context.system_prompt()
    assert "confined to the workspace" not in prompt
    return prompt


@needs_bwrap
def test_the_prompt_says_commands_run_in_the_sandbox_and_whether_they_have_network(isolated_home):
    prompt = prompt_for()
    assert ("Commands (`exec`) run in a bubblewrap sandbox: the workspace is writable, the system read-only, the "
            "user's home and nanoagent's own files are hidden, /tmp is private, and there is no network.") in prompt
    assert "approves each command" not in prompt
    assert "and the network is reachable." in prompt_for(network=True)
    assert "The user approves each command first" in prompt_for(approve="always")


def test_the_prompt_says_commands_are_not_confined_when_the_sandbox_is_off(isolated_home):
    prompt = prompt_for(sandbox="none")
    assert ("Commands (`exec`) run WITHOUT a sandbox (tools.exec.sandbox is \"none\"): as the user, with all of "
            "the user's files and the network within reach.") in prompt
    assert "approves each command" not in prompt


def test_the_prompt_says_what_happens_when_the_sandbox_cannot_start(isolated_home, without_bwrap):
    prompt = prompt_for()
    assert ("Commands (`exec`) run WITHOUT a sandbox (the sandbox cannot start: bubblewrap (bwrap) is not "
            "installed)") in prompt
    assert "The user approves each command first; where nobody can answer, commands are refused." in prompt
    assert ("Commands (`exec`) cannot run here: they may run only in the sandbox, which cannot start (bubblewrap "
            "(bwrap) is not installed).") in prompt_for(sandbox="bwrap")


def test_the_prompt_says_file_tools_stay_in_the_workspace_only_when_they_do(isolated_home):
    assert "File tools reach only the workspace" in prompt_for(sandbox="none")
    config = Config()
    config.tools.restrict_to_workspace = False
    prompt = build_agent(config, Paths.from_env(), provider=ScriptedProvider([])).context.system_prompt()
    assert "File tools may reach paths outside the workspace" in prompt


@needs_bwrap
def test_a_working_folder_is_writable_and_the_home_stays_hidden_even_when_the_folder_holds_it(home, tmp_path):
    # `agent -C` refuses such a folder (tools.fs.working_folder); the sandbox hides the home regardless
    scope = current_turn.set(TurnScope("cli:x", workdir=os.path.realpath(tmp_path)))
    try:
        out = run(home, f"pwd; echo made > made-here.txt; cat {home.config_file}; ls {home.home}; "
                        f"echo ws > {home.workspace}/from-folder.txt")
    finally:
        current_turn.reset(scope)
    assert out.startswith(os.path.realpath(tmp_path)) and (tmp_path / "made-here.txt").read_text() == "made\n"
    assert "sk-in-config" not in out and "No such file or directory" in out
    assert (home.workspace / "from-folder.txt").read_text() == "ws\n"  # the workspace stays bound, writable
