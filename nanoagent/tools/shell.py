"""The exec tool: a shell command in its own process group, with bounded output and a timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from nanoagent.tools.base import Tool, ToolContext, ToolError, tool
from nanoagent.tools.fs import resolve_path

MAX_TIMEOUT = 600
CHUNK = 65536


class BoundedOutput:
    """Keeps the first and last `limit // 2` bytes of a stream and counts what falls between."""

    def __init__(self, limit: int):
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.omitted = 0

    def add(self, data: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        if len(self.tail) > self.half:
            drop = len(self.tail) - self.half
            self.omitted += drop
            del self.tail[:drop]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if self.omitted:
            return f"{head}\n[... {self.omitted:,} bytes omitted ...]\n{tail}"
        return head + tail


def exec_tool(default_timeout: int = 60, max_output_chars: int = 16_000) -> Tool:
    """The exec tool with its limits from config (tools.exec.timeout, tools.maxResultChars)."""

    @tool(name="exec")
    async def exec_(ctx: ToolContext, command: str, timeout: int | None = None, workdir: str | None = None) -> str:
        """Run a shell command in the workspace and return its output and exit code.

        Args:
            command: The command line, run with /bin/sh -c.
            timeout: Seconds before the command is killed (default from config, at most 600).
            workdir: Folder to run in, relative to the workspace.
        """
        cwd = resolve_path(ctx, workdir) if workdir else ctx.workspace
        if not cwd.is_dir():
            raise ToolError(f"workdir '{workdir}' is not a folder.")
        return await run_command(command, cwd, min(MAX_TIMEOUT, timeout or default_timeout), max_output_chars)

    return exec_


async def run_command(command: str, cwd: Path, limit: float, max_output_chars: int) -> str:
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        env=_command_env(),
    )
    output = BoundedOutput(max_output_chars)
    try:
        # the deadline covers reading AND waiting for exit: a command may close its output and keep running
        code = await asyncio.wait_for(_drain_and_wait(proc, output), timeout=limit)
    except TimeoutError:
        await _kill_group(proc)
        return f"{output.text()}\n[timed out after {limit:g} s; process group killed]"
    except asyncio.CancelledError:
        await _kill_group(proc)
        raise
    return f"{output.text()}\n[exit code: {code}]"


def _command_env() -> dict[str, str]:
    """The environment with this Python's bin folder first on PATH, so commands the skills name
    (`nanoagent skills validate`) work even when the venv was never activated."""
    env = dict(os.environ)
    own_bin = os.path.dirname(sys.executable)
    entries = env.get("PATH", "").split(os.pathsep) if env.get("PATH") else []
    if own_bin not in entries:
        env["PATH"] = os.pathsep.join([own_bin, *entries])
    return env


async def _drain_and_wait(proc: asyncio.subprocess.Process, output: BoundedOutput) -> int:
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(CHUNK):
        output.add(chunk)
    return await proc.wait()


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace)
            if sig == signal.SIGKILL:
                return
        except TimeoutError:
            continue
    # SIGTERM may end the leader while children linger in the group: make sure they go too
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
