"""A kill -9 guard for a child process group: a watcher that outlives nanoagent only long enough to end it.

The watcher is a small `sh` holding the read end of a pipe only nanoagent writes. It is told the child's pid; when
nanoagent dies (even by kill -9) the pipe closes, its second `read` ends, and it kills the child's process group
and the child itself (a parent-death signal reaches neither grandchildren nor a bwrap that dropped privileges).
Start it before the child, so no moment of the child goes unwatched; release it when the child is done.
"""

from __future__ import annotations

import asyncio
import contextlib

Guard = asyncio.subprocess.Process


async def start_guard(extra: str = "", *args: str) -> Guard | None:
    """The watcher, or None where it cannot start. `extra` is more shell run when it fires; `args` are its $0...."""
    script = 'read pid; read _; [ -n "$pid" ] && { kill -9 "-$pid"; kill -9 "$pid"; } 2>/dev/null; ' + extra
    try:
        return await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", script, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
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
