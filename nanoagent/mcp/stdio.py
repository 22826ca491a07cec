"""The stdio transport: the server as a child process speaking JSON-RPC lines on stdin and stdout.

Ours rather than the SDK's, for three things a user notices:
- the server's stderr goes to `logs/mcp-<name>.log`, and its last lines explain a failed start;
- stdout lines that are not JSON-RPC (a chatty server's banner) are skipped and counted, not fatal;
- no orphans: the server runs in its own process group and, where nanoagent may make one, its own pids cgroup
  (which keeps even a `setsid` child of it); it dies with nanoagent (PR_SET_PDEATHSIG), and a small watcher
  ends the whole group and everything in the cgroup if nanoagent is killed (-9) before it could stop it.

MCP servers are the user's own programs: they run as the user, outside the exec sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nanoagent.fsutil import private_dir
from nanoagent.procguard import Cgroup, release, start_guard, watch

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

LOG_LIMIT = 1 << 20  # a server's log is started afresh past this size
MAX_LINE = 64 << 20  # a JSON-RPC message may carry an image
PR_SET_PDEATHSIG = 1
STOP_GRACE = 2.0  # after stdin closes, how long a server gets to exit before SIGTERM (half that), then SIGKILL


@dataclass
class StdioProcess:
    """What the connection may want to know about the running server."""

    log: Path
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    returncode: int | None = None
    skipped: list[str] = field(default_factory=list)  # stdout lines that were not JSON-RPC (the first few)
    skipped_count: int = 0

    def describe_exit(self) -> str:
        """Why the server is gone, in a few words: its exit code, its last stderr line, what it printed on stdout."""
        parts = []
        if self.returncode is not None:
            parts.append(f"exited with code {self.returncode}" if self.returncode >= 0
                         else f"was killed by signal {-self.returncode}")
        last = last_line(self.log)
        if last:
            parts.append(f"its last error line: {last!r}")
        if self.skipped_count:
            parts.append(f"it printed {self.skipped_count} line(s) on stdout that are not MCP, e.g. "
                         f"{self.skipped[0][:80]!r}")
        return "; ".join(parts)


def last_line(log: Path) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - 4096))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


@contextlib.asynccontextmanager
async def stdio_transport(command: str, args: list[str], env: dict[str, str], cwd: str | None, log: Path,
                          process: StdioProcess, stop_grace: float = STOP_GRACE) -> AsyncIterator[tuple[Any, Any]]:
    """The two streams ClientSession wants, for a server started from `command`; it is stopped on exit, given
    `stop_grace` seconds to go once its stdin closes."""
    import anyio
    from mcp.shared.message import SessionMessage

    stderr = _open_log(log)
    group = await asyncio.to_thread(Cgroup.create)
    guard = await start_guard(cgroups=group.paths if group else ())
    try:
        proc = await asyncio.create_subprocess_exec(
            command, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr,
            env={**os.environ, **env}, cwd=cwd, start_new_session=True, limit=MAX_LINE,
            preexec_fn=_in_group_and_die_with_parent(group))
    except BaseException:
        await release(guard)
        if group is not None:
            await asyncio.to_thread(group.close)
        raise
    finally:
        os.close(stderr)
    watch(guard, proc.pid)
    read_send: MemoryObjectSendStream[Any]
    read_recv: MemoryObjectReceiveStream[Any]
    read_send, read_recv = anyio.create_memory_object_stream(0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        from mcp_types import jsonrpc_message_adapter

        assert proc.stdout is not None
        async with read_send:
            while line := await proc.stdout.readline():
                text = line.decode("utf-8", "replace").strip()
                if not text:
                    continue
                try:
                    message = jsonrpc_message_adapter.validate_json(text, by_name=False)
                except ValueError:
                    process.skipped_count += 1
                    if len(process.skipped) < 3:
                        process.skipped.append(text)
                    continue
                await read_send.send(SessionMessage(message))

    async def write_stdin() -> None:
        assert proc.stdin is not None
        async with write_recv:
            async for item in write_recv:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                try:
                    proc.stdin.write(data.encode())
                    await proc.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    return

    async def watch_exit() -> None:
        process.returncode = await _exited(proc)
        process.exited.set()

    tasks = [asyncio.create_task(t()) for t in (read_stdout, write_stdin, watch_exit)]
    try:
        yield read_recv, write_send
    finally:
        await asyncio.shield(_stop(proc, tasks, guard, group, stop_grace))


async def _stop(proc: asyncio.subprocess.Process, tasks: list[asyncio.Task[None]],
                guard: asyncio.subprocess.Process | None, group: Cgroup | None, grace: float) -> None:
    """Close stdin (the polite way the spec asks for), then SIGTERM and SIGKILL the whole process group."""
    if proc.stdin is not None:
        proc.stdin.close()
    for sig, wait in ((None, grace), (signal.SIGTERM, grace / 2), (signal.SIGKILL, 2.0)):
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(asyncio.shield(tasks[2]), wait)
            break
        except TimeoutError:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what it started and left behind goes with it
    if group is not None:  # and what left the group
        await asyncio.to_thread(group.close)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await release(guard)


def _open_log(log: Path) -> int:
    private_dir(log.parent)
    with contextlib.suppress(OSError):
        if log.stat().st_size > LOG_LIMIT:
            log.unlink()
    return os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


def _in_group_and_die_with_parent(group: Cgroup | None) -> Any:
    """Between fork and exec: the server joins its cgroup, and gets SIGKILL when nanoagent dies (Linux; elsewhere
    the guard does it)."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded here, not after the fork
    except (OSError, AttributeError):
        prctl = None
    if prctl is None and group is None:
        return None

    def apply() -> None:
        if group is not None:
            group.join()
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return apply


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """The server's own exit, not its output's end: a grandchild holding stdout must not hide it."""
    if hasattr(os, "pidfd_open"):
        with contextlib.suppress(ProcessLookupError):
            fd = os.pidfd_open(proc.pid)
            loop = asyncio.get_running_loop()
            done: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, _settle, done)
            try:
                await done
            finally:
                loop.remove_reader(fd)
                os.close(fd)
    while proc.returncode is None:  # asyncio's child watcher sets it a moment later (or: no pidfd here)
        await asyncio.sleep(0.02)
    return proc.returncode


