"""exec's cgroups with real processes: memoryMb bounds the command as a whole, and a kill -9 of nanoagent leaves
neither a process (a `setsid` child included) nor a `nanoagent-...` cgroup folder behind, with or without the
sandbox. Skipped, with the reason, where this user cannot make cgroups."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nanoagent.procguard import CGROUP_ROOTS, Cgroup
from nanoagent.tools import ToolContext, ToolError
from nanoagent.tools.sandbox import SandboxPolicy, check_bwrap
from nanoagent.tools.shell import ExecSettings, exec_tool
from tests.conftest import PATIENCE, ROOT
from tests.test_exec import gone, running, unique_sleep

BWRAP = check_bwrap()
MODES = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP.ok, reason=f"no sandbox here: "
                                                                  f"{BWRAP.explain()}"))]


def can_make(memory: bool = False) -> bool:
    group = Cgroup.create(10, 64 << 20 if memory else None)
    if group is None:
        return False
    made = group.memory is not None or not memory
    group.close()
    return made


needs_pids_cgroup = pytest.mark.skipif(not can_make(), reason="this user cannot make a pids cgroup here "
                                                              "(not root, no delegated cgroup)")
needs_memory_cgroup = pytest.mark.skipif(not can_make(memory=True), reason="no memory cgroup can be made here "
                                                                          "(not root, or no memory controller)")

# Each process holds 40 MB and waits (up to a minute) for the other to hold its 40 MB too: together they need
# more than 64 MB, so under a limit for the whole command they never both get there.
HOLD = ("import os, sys, time\n"
        "me, other = sys.argv[1], sys.argv[2]\n"
        "held = b'x' * (40 << 20)\n"
        "open(me, 'w').close()\n"
        "deadline = time.time() + 60\n"
        "while not os.path.exists(other) and time.time() < deadline: time.sleep(0.01)\n"
        "print('both held' if os.path.exists(other) else 'waited in vain', flush=True)\n")


def cgroups_of(pid: int) -> list[Path]:
    return [p for roots in CGROUP_ROOTS.values() for root in roots if root.is_dir()
            for p in root.glob(f"nanoagent-{pid}-*")]


def wait_until(condition, within: float = PATIENCE) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@needs_memory_cgroup
@pytest.mark.parametrize("mode", MODES)
def test_processes_that_together_go_over_memory_mb_stop_the_command(tmp_path, mode):
    (tmp_path / "hold.py").write_text(HOLD)
    settings = ExecSettings(timeout=60, policy=SandboxPolicy(mode=mode, memory_mb=64), approve="never")
    started = time.monotonic()
    try:
        out = asyncio.run(exec_tool(settings).call(ToolContext(tmp_path), {
            "command": "python3 hold.py a b & python3 hold.py b a & wait"}))
    except ToolError as e:
        out = str(e)
    assert time.monotonic() - started < 30, out  # stopped, not left to wait
    assert "both held" not in out
    assert "went over the memory limit (64 MB for all its processes together" in out, out


@needs_memory_cgroup
def test_processes_that_fit_together_under_memory_mb_run_as_before(tmp_path):
    (tmp_path / "hold.py").write_text(HOLD)
    settings = ExecSettings(timeout=60, policy=SandboxPolicy(mode="none", memory_mb=256), approve="never")
    out = asyncio.run(exec_tool(settings).call(ToolContext(tmp_path), {
        "command": "python3 hold.py a b & python3 hold.py b a & wait"}))
    assert out.count("both held") == 2 and "memory limit" not in out


def start_exec_process(command: str, mode: str) -> subprocess.Popen:
    """A nanoagent process running one exec command, as a turn would."""
    script = ("import asyncio; from nanoagent.agent.build import exec_settings; from nanoagent.config.schema import "
              "Config; from nanoagent.paths import Paths; from nanoagent.tools import ToolContext; "
              "from nanoagent.tools.shell import exec_tool; p = Paths.from_env(); p.workspace.mkdir(parents=True, "
              f"exist_ok=True); c = Config(); c.tools.exec.sandbox = {mode!r}; c.tools.exec.approve = 'never'; "
              f"print(asyncio.run(exec_tool(exec_settings(c, p)).call(ToolContext(p.workspace), "
              f"{{'command': {command!r}}})))")
    return subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)


@needs_pids_cgroup
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.process
def test_a_kill_9_of_nanoagent_leaves_no_setsid_child_and_no_cgroup_folder(mode):
    marker = unique_sleep()
    proc = start_exec_process(f"setsid sleep {marker} & sleep {marker}", mode)
    assert wait_until(lambda: len(running(marker)) == 2 or proc.poll() is not None)
    assert proc.poll() is None and cgroups_of(proc.pid)
    proc.kill()
    proc.wait()
    assert gone(marker, within=20)
    assert wait_until(lambda: not cgroups_of(proc.pid)), cgroups_of(proc.pid)


@needs_pids_cgroup
@pytest.mark.process
def test_cgroups_a_dead_nanoagent_left_are_swept_at_the_next_start_with_what_is_left_in_them():
    """As if the watcher died with nanoagent: a cgroup named for a pid that is gone, a process still in it."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = [root / f"nanoagent-{dead.pid}-0123456789ab" for root in (Path("/sys/fs/cgroup/pids"),)
            if root.is_dir()]
    if not left:
        pytest.skip("no cgroup v1 pids hierarchy to plant a leftover in")
    left[0].mkdir()
    marker = unique_sleep()
    orphan = subprocess.Popen(["sleep", marker])
    (left[0] / "cgroup.procs").write_text(str(orphan.pid))
    empty = left[0].with_name(f"nanoagent-{dead.pid}-ba9876543210")
    empty.mkdir()
    try:
        proc = start_exec_process("echo next start", "none")
        out, _ = proc.communicate(timeout=PATIENCE)
        assert "next start" in out
        assert wait_until(lambda: orphan.poll() is not None)
        assert not left[0].exists() and not empty.exists()
    finally:
        orphan.kill()
        orphan.wait()
        for folder in (left[0], empty):
            if folder.exists():
                Cgroup([folder]).close()


@needs_pids_cgroup
@pytest.mark.process
def test_the_sweep_leaves_the_cgroups_of_a_running_nanoagent_alone():
    marker = unique_sleep()
    first = start_exec_process(f"sleep {marker}", "none")
    try:
        assert wait_until(lambda: bool(running(marker)) or first.poll() is not None)
        mine = cgroups_of(first.pid)
        assert mine
        second = start_exec_process("echo next start", "none")
        out, _ = second.communicate(timeout=PATIENCE)
        assert "next start" in out
        assert all(p.exists() for p in mine) and running(marker)
    finally:
        first.kill()
        first.wait()
    assert gone(marker, within=20)
    assert wait_until(lambda: not cgroups_of(first.pid))


def test_doctor_says_what_bounds_a_command_here():
    from tests.conftest import invoke

    ran = invoke("doctor")
    line = next(line for line in ran.stdout.splitlines() if "exec limits:" in line)
    if can_make(memory=True):
        assert "bound each command as a whole (cgroups)" in line
    else:
        assert "bounds each process, not the command" in line
