"""`nanoagent mcp add/list/remove`, what a start imports, and no orphans after a kill -9: real processes where
they are needed."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import PATIENCE, ROOT, anthropic_env, invoke, write_config
from tests.llm_server import Reply
from tests.test_mcp import PLAIN, SERVERS, stdio


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def can_make_cgroup() -> bool:
    from nanoagent.procguard import Cgroup

    group = Cgroup.create()
    if group is not None:
        group.close()
    return group is not None


def wait_for(condition, timeout: float = PATIENCE) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.process
def test_mcp_add_list_and_remove_edit_config_json_and_keep_its_other_keys(isolated_home):
    write_config(isolated_home, {"agents": {"defaults": {"model": "anthropic/claude-keep"}}})
    added = invoke("mcp", "add", "demo", "--", sys.executable, SERVERS, "basic")
    assert added.returncode == 0, added.stderr
    assert "Added MCP server 'demo'" in added.stdout and re.search(r"answered with 9 tool\(s\): echo, add", added.stdout)
    remote = invoke("mcp", "add", "remote", "--url", "http://127.0.0.1:9/mcp", "--header", "Authorization: Bearer t")
    assert remote.returncode == 0 and "cannot reach http://127.0.0.1:9/mcp" in remote.stderr
    config = isolated_home / "config.json"
    data = json.loads(config.read_text())
    assert data["agents"]["defaults"]["model"] == "anthropic/claude-keep"
    assert data["mcpServers"]["demo"] == {"command": sys.executable, "args": [SERVERS, "basic"]}
    assert data["mcpServers"]["remote"] == {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer t"}}
    assert config.stat().st_mode & 0o777 == 0o600
    assert (isolated_home / "cache" / "mcp" / "demo.json").exists()

    listed = invoke("mcp", "list", "--timeout", str(PATIENCE))
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("demo (stdio: ") and lines[1].startswith("  connected, 9 tool(s): echo, add")
    assert lines[2] == "remote (http: http://127.0.0.1:9/mcp)" and "cannot reach" in lines[3]

    again = invoke("mcp", "add", "demo", "--", "true")
    assert again.returncode == 1 and "exists already" in again.stderr
    assert invoke("mcp", "remove", "demo").returncode == 0
    assert "demo" not in json.loads(config.read_text())["mcpServers"]
    assert not (isolated_home / "cache" / "mcp" / "demo.json").exists()
    missing = invoke("mcp", "remove", "demo")
    assert missing.returncode == 1 and "No MCP server named 'demo'" in missing.stderr and "remote" in missing.stderr


def test_mcp_add_needs_a_command_or_a_url(isolated_home):
    ran = invoke("mcp", "add", "nothing")
    assert ran.returncode == 1 and "either a command (after `--`) or --url" in ran.stderr


def test_a_server_entry_without_command_or_url_is_reported_and_the_agent_still_answers(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"half": {"args": ["x"]}}})
    llm.script(Reply(text="still here"))
    ran = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert ran.returncode == 0 and ran.stdout == "still here\n"
    assert "`mcpServers.half` has neither `command` nor `url`" in ran.stderr


@pytest.mark.process
def test_help_and_a_one_shot_without_mcp_servers_do_not_import_the_mcp_sdk(llm, isolated_home):
    def imported(*args: str) -> set[str]:
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "nanoagent", *args], capture_output=True,
                              text=True, cwd=ROOT, env={**os.environ, **anthropic_env(llm)}, timeout=PATIENCE)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}

    assert not {"mcp", "mcp_types", "httpx2"} & imported("--help")
    llm.script(Reply(text="hi"))
    assert not {"mcp", "mcp_types", "httpx2"} & imported("agent", "-m", "hi")
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    assert invoke("mcp", "list").returncode == 0  # caches the tool list
    llm.script(Reply(text="hi"))
    assert not {"mcp", "mcp_types", "httpx2"} & imported("agent", "-m", "hi")  # cached tools, none called


@pytest.mark.process
def test_no_mcp_server_or_its_children_outlive_a_kill_9_of_nanoagent(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"kids": stdio("children", timeout=120)}})
    llm.script(Reply(tool_calls=[("mcp__kids__slow", {"seconds": 300})]), Reply(text="never"))
    proc = subprocess.Popen([sys.executable, "-m", "nanoagent", "agent", "-m", "go"], cwd=ROOT,
                            env={**os.environ, **anthropic_env(llm)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    log = isolated_home / "logs" / "mcp-kids.log"
    try:
        assert wait_for(lambda: log.exists() and "slow started" in log.read_text())
        server, grandchild = map(int, re.search(r"server (\d+) grandchild (\d+)", log.read_text()).groups())
        assert alive(server) and alive(grandchild)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert wait_for(lambda: not alive(server) and not alive(grandchild), timeout=PATIENCE)


@pytest.mark.process
@pytest.mark.skipif(not can_make_cgroup(), reason="a setsid child is caught through a pids cgroup, which this user "
                                                  "cannot make here (not root, no delegated cgroup)")
def test_an_mcp_servers_setsid_child_does_not_outlive_a_kill_9_of_nanoagent(llm, isolated_home):
    import threading

    write_config(isolated_home, {"mcpServers": {"kids": stdio("children", timeout=120)}})
    held = threading.Event()  # the model never answers: nanoagent is alive, waiting, when it is killed
    llm.script(Reply(text="never", release=held))
    proc = subprocess.Popen([sys.executable, "-m", "nanoagent", "agent", "-m", "go"], cwd=ROOT,
                            env={**os.environ, **anthropic_env(llm)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    log = isolated_home / "logs" / "mcp-kids.log"
    try:
        assert wait_for(lambda: log.exists() and "grandchild" in log.read_text() or proc.poll() is not None,
                        timeout=PATIENCE)
        assert proc.poll() is None
        away = int(re.search(r"setsid child (\d+)", log.read_text()).group(1))
        assert alive(away) and os.getsid(away) == away  # in a session of its own, out of the server's group
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        held.set()
    assert wait_for(lambda: not alive(away), timeout=PATIENCE)


@pytest.mark.process
def test_the_gateway_keeps_one_connection_for_every_session_and_stops_its_servers(llm, isolated_home):
    from tests.conftest import start_gateway_process

    write_config(isolated_home, {"mcpServers": {"kids": stdio("children")}})
    env = {**os.environ, **anthropic_env(llm)}
    gateway = start_gateway_process(env)
    log = isolated_home / "logs" / "mcp-kids.log"
    try:
        assert wait_for(lambda: log.exists() and "grandchild" in log.read_text())  # started in the background
        for session in ("one", "two"):
            llm.script(Reply(tool_calls=[("mcp__kids__slow", {"seconds": 0})]), Reply(text=f"done {session}"))
            ran = subprocess.run([sys.executable, "-m", "nanoagent", "agent", "-m", "go", "-s", session], cwd=ROOT,
                                 env=env, capture_output=True, text=True, timeout=PATIENCE)
            assert ran.returncode == 0 and ran.stdout.strip().endswith(f"done {session}"), ran.stderr
        assert log.read_text().count("grandchild") == 1  # one server process for both sessions
        server, grandchild = map(int, re.search(r"server (\d+) grandchild (\d+)", log.read_text()).groups())
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.communicate(timeout=PATIENCE)
    assert gateway.returncode == 0
    assert wait_for(lambda: not alive(server) and not alive(grandchild), timeout=PATIENCE)


@pytest.mark.process
def test_mcp_add_and_list_print_a_tool_name_holding_escape_sequences_as_plain_text(isolated_home):
    from tests.mcp_servers import ESCAPE_NAME

    added = invoke("mcp", "add", "evil", "--", sys.executable, PLAIN, "escapes")
    listed = invoke("mcp", "list")
    assert added.returncode == 0 and listed.returncode == 0, added.stderr + listed.stderr
    for output in (added.stdout, added.stderr, listed.stdout, listed.stderr):
        assert "\x1b" not in output and "\x07" not in output
    assert "answered with 1 tool(s): eviltool" in added.stdout  # the escapes dropped, the rest of the name shown
    assert listed.stdout.splitlines()[1] == "  connected, 1 tool(s): eviltool"
    cached = json.loads((isolated_home / "cache" / "mcp" / "evil.json").read_text())
    assert cached["tools"][0]["name"] == ESCAPE_NAME  # the server's own name is kept, only shown safely


@pytest.mark.process
def test_a_server_slow_to_start_is_reported_by_mcp_list_and_add_in_one_line_without_a_traceback(isolated_home):
    write_config(isolated_home, {"mcpServers": {"sleepy": stdio("sleepy", stopGrace=0.2)}})  # it never reads stdin
    listed = subprocess.run([sys.executable, "-m", "nanoagent", "mcp", "list", "--timeout", "0.5"], cwd=ROOT,
                            capture_output=True, text=True, env=os.environ, timeout=PATIENCE)
    assert listed.returncode == 0 and listed.stderr == ""
    assert listed.stdout.splitlines()[1] == (f"  MCP server 'sleepy' did not answer within 0.5 s of starting; check it "
                                             f"starts on its own; its log is {isolated_home}/logs/mcp-sleepy.log")

    added = subprocess.run([sys.executable, "-m", "nanoagent", "mcp", "add", "slow", "--wait", "0.5", "--", sys.executable,
                            PLAIN, "sleepy"],
                           cwd=ROOT, capture_output=True, text=True, env=os.environ, timeout=PATIENCE)
    assert added.returncode == 0 and added.stdout.startswith("Added MCP server 'slow'")
    assert added.stderr.splitlines() == [f"warning: MCP server 'slow' did not answer within 0.5 s of starting; check "
                                         f"it starts on its own; its log is {isolated_home}/logs/mcp-slow.log"]


@pytest.mark.process
def test_a_server_that_exits_at_once_is_reported_as_exited_with_its_code_and_last_error_line(isolated_home):
    added = invoke("mcp", "add", "dies", "--", sys.executable, PLAIN, "dies")
    listed = invoke("mcp", "list")
    exited = (f"MCP server 'dies' stopped: exited with code 2; its last error line: 'config file /nope/server.toml "
              f"not found'; see {isolated_home}/logs/mcp-dies.log")
    assert added.stderr.splitlines() == [f"warning: {exited}"]
    assert listed.stdout.splitlines()[1] == f"  {exited}" and listed.stderr == ""
