"""`nanoagent acp`'s process: stdio, the SDK's agent-side connection, and the agent.

The protocol's stdout is a copy of the descriptor the process started with; descriptor 1 and `sys.stdout` become
stderr, so nothing but protocol reaches the editor whatever prints. stdin is read at once (`wire.Stdio.pump`,
answering `initialize`) while the SDK loads in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from nanoagent.acp import wire

if TYPE_CHECKING:
    from nanoagent.acp.turns import Turns
    from nanoagent.agent.loop import AgentLoop
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.acp")


def serve(paths: Paths, config: Callable[[], Config], build: Callable[[], AgentLoop], local: bool) -> None:
    """Serve one editor on stdin and stdout until stdin ends. `build` makes the agent for turns in this process;
    `local`: never through a running gateway."""
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    asyncio.run(_serve(paths, config, build, local, out))


async def _serve(paths: Paths, config: Callable[[], Config], build: Callable[[], AgentLoop], local: bool,
                 out: int) -> None:
    stdio = wire.Stdio(await _stdin(), _Out(out))
    pump = asyncio.create_task(stdio.pump())
    await asyncio.to_thread(_load_sdk)  # `initialize` is answered meanwhile

    from acp.core import AgentSideConnection

    from nanoagent.acp.agent import NanoagentAgent

    turns = _Chooser(paths, build, local)
    agent = NanoagentAgent(paths, stdio, turns.choose, lambda key: _models(paths, config(), key))
    conn = AgentSideConnection(agent, stdio, listening=False)  # type: ignore[arg-type] # the SDK routes by method name; a few it names we leave to "Method not found"
    try:
        await conn.listen()
    finally:
        await agent.aclose()
        await turns.aclose()
        pump.cancel()
        await stdio.close()


async def _stdin() -> asyncio.StreamReader:
    """stdin as a stream: a pipe (what an editor gives) read by the event loop; a file or a terminal by a thread."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=wire.MAX_LINE)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:  # not a pipe, socket or character device
        def feed() -> None:
            try:
                while data := sys.stdin.buffer.readline():
                    loop.call_soon_threadsafe(reader.feed_data, data)
            finally:
                loop.call_soon_threadsafe(reader.feed_eof)

        threading.Thread(target=feed, daemon=True, name="acp stdin").start()
    return reader


class _Out:
    """The protocol's stdout: each message written whole, at once, in order (a blocking write: the editor reads
    as it goes, and a pipe, a file or a terminal all take it)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.closed = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError:  # the editor went away: stdin ends next
            self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


def _load_sdk() -> None:
    import acp.core  # noqa: F401 - its schema's models take most of a second to build

    import nanoagent.acp.agent  # noqa: F401


class _Chooser:
    """Where a new session's turns run: the gateway when one answers with this process's settings (as `agent`
    chooses), else this process (one agent, built on first need)."""

    def __init__(self, paths: Paths, build: Callable[[], AgentLoop], local: bool):
        from nanoagent.acp.turns import Here

        self.paths = paths
        self.local = local
        self.here = Here(build)
        self.gateway: Turns | None = None

    def choose(self) -> tuple[Turns, bool]:
        from nanoagent.gateway.oneshot import gateway_answers, settings_differ

        if self.local or not gateway_answers(self.paths.gateway_socket) or settings_differ(self.paths.run_dir):
            return self.here, False
        if self.gateway is None:
            from nanoagent.acp.turns import ThroughGateway

            self.gateway = ThroughGateway(self.paths.gateway_socket)
        return self.gateway, True

    async def aclose(self) -> None:
        await self.here.aclose()
        if self.gateway is not None:
            await self.gateway.aclose()


def _models(paths: Paths, config: Config, key: str) -> tuple[str, list[str]]:
    """Session `key`'s model now (its /model choice, else the default) and the models offered beside it: the
    default and its fallbacks."""
    from nanoagent.session.store import SessionStore

    default = config.defaults.model
    try:
        chosen = SessionStore(paths.sessions_dir).load(key).meta.model
    except Exception:  # noqa: BLE001 - a session that cannot be read yet says its turns' model is the default
        chosen = ""
    return chosen or default, [default, *config.defaults.fallback_models]
