"""What ends a child process and everything it started, even when nanoagent itself is killed (-9).

The watcher is a small `sh` holding the read end of a pipe only nanoagent writes. It is told the child's pid; when
nanoagent dies (even by kill -9) the pipe closes, its second `read` ends, and it kills the child's process group
and the child itself (a parent-death signal reaches neither grandchildren nor a bwrap that dropped privileges).
Start it before the child, so no moment of the child goes unwatched; release it when the child is done.

A `setsid` child leaves the process group. Where nanoagent may make cgroups (root, or a cgroup it can write), the
child runs in cgroups of its own (`Cgroup`): every process it starts stays in them, so the watcher and `close` end
all of them and remove the folders. Their names carry nanoagent's pid (`nanoagent-<pid>-<random>`), so a later
start sweeps the folders of a nanoagent that died without its watcher (`sweep_stale`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import time
import uuid
from pathlib import Path

Guard = asyncio.subprocess.Process

# each controller's root: cgroup v1 mounts one hierarchy per controller, v2 one for all (with the controller
# enabled in its subtree_control)
CGROUP_ROOTS = {"pids": (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")),
                "memory": (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup"))}
OWNED = re.compile(r"nanoagent-(\d+)-[0-9a-f]+")
LEGACY = re.compile(r"nanoagent-[0-9a-f]{12}")  # before names carried the owner's pid
LEGACY_AGE = 60.0  # a legacy folder older than this, and empty, is left over (one in use holds its command)

# The watcher's shell: kill the group and the child, then (args "$@") every process left in each cgroup, then
# remove the cgroup folders.
_KILL_CGROUPS = ('for cg in "$@"; do for i in 1 2 3 4 5 6 7 8 9 10; do '
                 'while read p; do kill -9 "$p"; done < "$cg/cgroup.procs"; rmdir "$cg" && break; sleep 0.05; '
                 'done; done 2>/dev/null; ')


async def start_guard(extra: str = "", name: str = "nanoagent-guard", cgroups: list[Path] | tuple[Path, ...] = ()
                      ) -> Guard | None:
    """The watcher, or None where it cannot start. `extra` is more shell run when it fires, with `name` as its
    $0; `cgroups` are emptied (every process in them killed) and removed when it fires."""
    script = 'read pid; read _; [ -n "$pid" ] && { kill -9 "-$pid"; kill -9 "$pid"; } 2>/dev/null; '
    script += (_KILL_CGROUPS if cgroups else "") + extra
    try:
        return await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", script, name, *map(str, cgroups), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def watch(guard: Guard | None, pid: int) -> None:
    """Tell the watcher which process (and group) to end (written at once: the pipe is empty and ready)."""
    if guard is not None and guard.stdin is not None:
        guard.stdin.write(f"{pid}\n".encode())


async def release(guard: Guard | None) -> None:
    """Stop the watcher without it firing: killed before its pipe closes."""
    if guard is None or guard.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        guard.kill()
    await guard.wait()


class Cgroup:
    """The cgroups of one child (a pids one, and a memory one where asked): whatever the child starts stays in
    them, even a process that left its group, so all of it can be ended. cgroup v1 has a folder per controller,
    v2 one folder with both."""

    def __init__(self, paths: list[Path], memory: Path | None = None, pids: Path | None = None):
        self.paths = paths
        self.memory = memory  # the folder with the memory controller's files, when there is one
        self.pids = pids
        self.over_memory = False  # set by whoever ended the child for going over the memory limit

    @classmethod
    def create(cls, max_processes: int | None = None, memory_bytes: int | None = None) -> Cgroup | None:
        """New cgroups under each controller's root that nanoagent may write; None where there is no pids one.
        A memory cgroup is made only when `memory_bytes` is given and one can be made here; its limit counts
        every process of the child together, and going over it ends them all (`oom_event`)."""
        sweep_stale()
        name = f"nanoagent-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        pids = _make(name, "pids", {"pids.max": str(max_processes) if max_processes else "max"})
        if pids is None:
            return None
        group = cls([pids], pids=pids)
        if memory_bytes:
            if pids.parent.name != "pids":  # v2: the same folder, where the root lets children use the controller
                settings = {"memory.max": str(memory_bytes), "memory.swap.max": "0", "memory.oom.group": "1"}
                if "memory" in _controllers(pids.parent) and _write_all(pids, settings, ("memory.swap.max",)):
                    group.memory = pids
            else:
                group.memory = _make(name, "memory", {"memory.limit_in_bytes": str(memory_bytes),
                                                      "memory.memsw.limit_in_bytes": str(memory_bytes)},
                                     optional=("memory.memsw.limit_in_bytes",))
                if group.memory is not None:
                    group.paths.append(group.memory)
        return group

    def join(self) -> None:
        """In the child before exec: move this process into the cgroups."""
        for path in self.paths:
            with open(path / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    def hit_process_limit(self) -> bool:
        return self.pids is not None and _counter(self.pids / "pids.events", "max") > 0

    def oom_kills(self) -> int:
        """How many processes the kernel killed for going over the memory limit."""
        if self.memory is None:
            return 0
        v2 = self.memory == self.pids and self.memory.parent.name != "pids"
        return _counter(self.memory / ("memory.events" if v2 else "memory.oom_control"), "oom_kill")

    def oom_event(self) -> int | None:
        """An eventfd that becomes readable when the kernel kills a process for the memory limit (cgroup v1; under
        v2 `memory.oom.group` ends the whole cgroup itself); None where there is none. The caller closes it."""
        if self.memory is None or self.memory == self.pids or not hasattr(os, "eventfd"):
            return None
        event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            control = os.open(self.memory / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
            try:
                (self.memory / "cgroup.event_control").write_text(f"{event} {control}")
            finally:
                os.close(control)
        except OSError:
            os.close(event)
            return None
        return event

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroups, until they are empty (or half a second passed)."""
        for _ in range(50):
            members = {int(p) for path in self.paths for p in _read(path / "cgroup.procs").split()}
            if not members:
                return
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def close(self) -> None:
        """End what is left in them and remove the folders."""
        self.kill_all()
        for path in self.paths:
            _rmdir(path)


@functools.cache
def sweep_stale() -> None:
    """Remove the cgroups of nanoagent processes that died without removing them (a kill -9 that its watcher did
    not survive), ending what is left in them. Done once per process."""
    now = time.time()
    for roots in CGROUP_ROOTS.values():
        for root in roots:
            try:
                folders = [p for p in root.iterdir() if p.name.startswith("nanoagent-")]
            except OSError:
                continue
            for folder in folders:
                owner = OWNED.fullmatch(folder.name)
                if owner and not alive(int(owner.group(1))):
                    Cgroup([folder]).close()
                elif LEGACY.fullmatch(folder.name) and not _read(folder / "cgroup.procs"):
                    with contextlib.suppress(OSError):
                        if now - folder.stat().st_mtime > LEGACY_AGE:
                            _rmdir(folder)


def alive(pid: int) -> bool:
    """Whether process `pid` exists (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        pass
    return True


def _make(name: str, controller: str, settings: dict[str, str], optional: tuple[str, ...] = ()) -> Path | None:
    for root in CGROUP_ROOTS[controller]:
        if not (root / "cgroup.procs").exists() or not os.access(root, os.W_OK):
            continue
        if root.name != controller and controller not in _controllers(root):
            continue
        path = root / name
        try:
            path.mkdir()
        except OSError:
            continue
        if _write_all(path, settings, optional):
            return path
        _rmdir(path)
    return None


def _write_all(path: Path, settings: dict[str, str], optional: tuple[str, ...] = ()) -> bool:
    for file, value in settings.items():  # in order: v1's memsw limit may not be below the memory limit
        try:
            (path / file).write_text(value)
        except OSError:
            if file not in optional:
                return False
    return True


def _controllers(root: Path) -> list[str]:
    return _read(root / "cgroup.subtree_control").split()


def _counter(path: Path, key: str) -> int:
    for line in _read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _rmdir(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()
