import asyncio
import os
import sys
import time
import uuid

import pytest

from nanoagent.tools import ToolContext, ToolError
from nanoagent.tools.sandbox import SandboxPolicy, check_bwrap
from nanoagent.tools.shell import ExecSettings, exec_tool
from tests.conftest import PATIENCE

BWRAP = check_bwrap()
MODES = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP.ok, reason=f"no sandbox here: "
                                                                  f"{BWRAP.explain()}"))]


def settings(mode: str, **policy) -> ExecSettings:
    return ExecSettings(timeout=60, max_output_chars=2000, policy=SandboxPolicy(mode=mode, **policy), approve="never")


def call(ctx, mode="none", **arguments):
    return asyncio.run(exec_tool(settings(mode)).call(ctx, arguments))


def running(marker: str, wrappers: bool = False) -> list[int]:
    """Host pids of processes whose command line holds `marker` (sandboxed or not); with `wrappers`, the
    shell and bwrap that carry it in their arguments too."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        wrapper = "/bin/sh -c" in cmdline or "bwrap" in cmdline
        if marker in cmdline and not zombie and (wrappers or not wrapper) and "-c import asyncio" not in cmdline:
            found.append(int(entry))
    return found


def gone(marker: str, within: float = PATIENCE) -> bool:
    deadline = time.monotonic() + within
    while running(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def unique_sleep() -> str:
    """A sleep whose command line no other process has: `sleep 1000.<random>`."""
    return f"1000.{uuid.uuid4().int % 10**8:08d}"


@pytest.fixture
def ctx(tmp_path):
    return ToolContext(workspace=tmp_path)


@pytest.mark.parametrize("mode", MODES)
def test_returns_output_and_exit_code(ctx, mode):
    assert call(ctx, mode, command="echo hi; echo err >&2; exit 3") == "hi\nerr\n\n[exit code: 3]"


@pytest.mark.parametrize("mode", MODES)
def test_runs_in_the_workspace_or_a_workdir_inside_it(ctx, tmp_path, mode):
    (tmp_path / "sub").mkdir()
    assert call(ctx, mode, command="pwd").startswith(str(tmp_path))
    assert call(ctx, mode, command="pwd", workdir="sub").startswith(str(tmp_path / "sub"))


def test_fifty_megabytes_of_output_stay_capped_with_head_and_tail(ctx):
    out = call(ctx, command="echo START; head -c 50000000 /dev/zero | tr '\\0' x; echo; echo END")
    assert out.startswith("START") and "END" in out[-100:]
    assert "bytes omitted" in out and len(out) < 2200


@pytest.mark.parametrize("mode", MODES)
def test_a_command_that_never_ends_is_killed_with_everything_it_started_and_reported_as_an_error(ctx, mode):
    marker = unique_sleep()
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        call(ctx, mode, command=f"sleep {marker} & sleep {marker}", timeout=1)
    assert time.monotonic() - started < 5
    assert "timed out after 1 s" in str(info.value)
    assert gone(marker)


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_the_turn_kills_the_running_command(ctx, tmp_path, mode):
    marker = unique_sleep()

    async def go():
        task = asyncio.create_task(exec_tool(settings(mode)).call(ctx, {"command": f"sleep {marker}"}))
        deadline = time.monotonic() + PATIENCE
        while not running(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert running(marker)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert gone(marker)


@pytest.mark.parametrize("mode", MODES)
def test_a_command_that_closes_its_output_and_keeps_running_is_still_killed_at_the_timeout(ctx, mode):
    marker = unique_sleep()
    started = time.monotonic()
    with pytest.raises(ToolError, match="timed out after 1 s"):
        call(ctx, mode, command=f"exec >/dev/null 2>&1; sleep {marker}", timeout=1)
    assert time.monotonic() - started < 4
    assert gone(marker)


@pytest.mark.parametrize("mode", MODES)
def test_a_background_child_holding_the_output_open_does_not_hold_the_turn_and_ends_with_the_command(ctx, mode):
    marker = unique_sleep()
    started = time.monotonic()
    out = call(ctx, mode, command=f"sleep {marker} & echo started", timeout=30)
    assert time.monotonic() - started < 3
    assert out == "started\n\n[exit code: 0]"
    assert gone(marker)


@pytest.mark.parametrize("mode", MODES)
def test_nohup_and_setsid_children_end_with_the_command(ctx, mode):
    if mode == "none" and not _pids_cgroup():
        pytest.skip("without a sandbox, escaped children are ended through a pids cgroup, which this user "
                    "cannot create here")
    first, second = unique_sleep(), unique_sleep()
    out = call(ctx, mode, command=f"nohup sleep {first} >/dev/null 2>&1 & setsid sleep {second} & echo ok")
    assert out.startswith("ok")
    assert gone(first) and gone(second)


def _pids_cgroup() -> bool:
    from nanoagent.procguard import Cgroup

    group = Cgroup.create(10)
    if group is None:
        return False
    group.close()
    return True


def test_nanoagent_itself_runs_through_exec_when_its_venv_is_not_on_path(ctx, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    out = call(ctx, command="nanoagent --version")
    assert out.endswith("[exit code: 0]"), out
    assert "nanoagent" in out.lower()


def test_the_venv_is_not_added_to_path_twice(ctx, monkeypatch):
    venv_bin = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", f"/usr/bin:{venv_bin}:/bin")
    assert call(ctx, command="echo $PATH") == f"/usr/bin:{venv_bin}:/bin\n\n[exit code: 0]"


def test_workdir_must_be_inside_the_workspace_even_when_file_tools_may_leave_it(tmp_path):
    ctx = ToolContext(workspace=tmp_path / "ws", restrict_to_workspace=False)
    (tmp_path / "ws").mkdir()
    with pytest.raises(ToolError, match="outside the workspace"):
        asyncio.run(exec_tool(settings("none")).call(ctx, {"command": "pwd", "workdir": str(tmp_path)}))
    with pytest.raises(ToolError, match="outside the workspace"):
        asyncio.run(exec_tool(settings("none")).call(ctx, {"command": "pwd", "workdir": "../"}))
