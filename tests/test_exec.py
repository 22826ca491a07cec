import asyncio
import os
import sys
import time

import pytest

from nanoagent.tools import ToolContext
from nanoagent.tools.shell import exec_tool


def alive(pid: int) -> bool:
    """True while the process runs; an unreaped zombie (its parent was killed too) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def call(ctx, **arguments):
    return asyncio.run(exec_tool(60, 2000).call(ctx, arguments))


@pytest.fixture
def ctx(tmp_path):
    return ToolContext(workspace=tmp_path)


def test_returns_output_and_exit_code(ctx):
    assert call(ctx, command="echo hi; echo err >&2; exit 3") == "hi\nerr\n\n[exit code: 3]"


def test_runs_in_the_workspace_or_a_workdir_inside_it(ctx, tmp_path):
    (tmp_path / "sub").mkdir()
    assert call(ctx, command="pwd").startswith(str(tmp_path))
    assert call(ctx, command="pwd", workdir="sub").startswith(str(tmp_path / "sub"))


def test_fifty_megabytes_of_output_stay_capped_with_head_and_tail(ctx):
    out = call(ctx, command="echo START; head -c 50000000 /dev/zero | tr '\\0' x; echo; echo END")
    assert out.startswith("START") and "END" in out[-100:]
    assert "bytes omitted" in out and len(out) < 2200


def test_a_command_that_never_ends_is_killed_with_its_process_group(ctx, tmp_path):
    pidfile = tmp_path / "pids"
    started = time.monotonic()
    out = call(ctx, command=f"sleep 1000 & echo $! > {pidfile}; sleep 1000", timeout=1)
    assert time.monotonic() - started < 5
    assert "timed out after 1 s" in out
    child = int(pidfile.read_text())
    time.sleep(0.1)
    assert not alive(child)


def test_cancelling_the_turn_kills_the_running_command(ctx, tmp_path):
    pidfile = tmp_path / "pids"

    async def go():
        task = asyncio.create_task(exec_tool(60, 2000).call(
            ctx, {"command": f"echo $$ > {pidfile}; sleep 1000"}))
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    time.sleep(0.1)
    assert not alive(int(pidfile.read_text()))


def test_a_command_that_closes_its_output_and_keeps_running_is_still_killed_at_the_timeout(ctx, tmp_path):
    pidfile = tmp_path / "pid"
    started = time.monotonic()
    # sleep 6, not forever: before the fix this returned only when the command ended by itself
    out = call(ctx, command=f"echo $$ > {pidfile}; exec >/dev/null 2>&1; sleep 6", timeout=1)
    assert time.monotonic() - started < 4
    assert "timed out after 1 s" in out
    time.sleep(0.1)
    assert not alive(int(pidfile.read_text()))


def test_nanoagent_itself_runs_through_exec_when_its_venv_is_not_on_path(ctx, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    out = call(ctx, command="nanoagent --version")
    assert out.endswith("[exit code: 0]"), out
    assert "nanoagent" in out.lower()


def test_the_venv_is_not_added_to_path_twice(ctx, monkeypatch):
    venv_bin = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", f"/usr/bin:{venv_bin}:/bin")
    assert call(ctx, command="echo $PATH") == f"/usr/bin:{venv_bin}:/bin\n\n[exit code: 0]"
