"""Where an editor's session runs its turns: through a running gateway (the session shows in the web app and its
spend in the ledger), else in this process, as `nanoagent agent` chooses; and the editor's buffers as the files
the file tools read and write.

Either way a turn is `agent -C DIR`'s: the editor's folder is the turn's working folder (file tools and exec work
there; identity, memory and sessions stay in the home), narrowed to the session's tool profile (its mode).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nanoagent.agent import events as ev

if TYPE_CHECKING:
    from nanoagent.agent.loop import AgentLoop
    from nanoagent.gateway.client import GatewayClient
    from nanoagent.messages import ImageBlock
    from nanoagent.tools import Ask
    from nanoagent.tools.fs import Buffers

FILE_WAIT = 30.0  # seconds a file tool waits for the editor to give or take a file before using the disk


@dataclass
class Seat:
    """One editor session as a turn needs it: nanoagent's session key, the folder, its tool profile, where its events
    go (`sink`, set by the agent), who answers its approvals, and the editor's files (None: the disk)."""

    key: str
    folder: str
    profile: str = ""
    sink: ev.EventSink = ev.discard
    ask: Ask | None = None
    buffers: Buffers | None = None  # for turns in this process
    files: Files | None = None  # the same for turns in the gateway, which asks over its socket
    running_exec: str = ""  # the call id of the command last started: what an approval question is about


# ("read", path, None) -> the editor's text, or ("write", path, text) -> True; None or False: the disk
Files = Callable[[str, str, str | None], Awaitable[str | bool | None]]


class Turns(Protocol):
    async def run(self, seat: Seat, text: str, images: list[ImageBlock]) -> ev.TurnResult: ...

    async def aclose(self) -> None: ...


class Here:
    """Turns in this process: one AgentLoop, built on first need (after `initialize` has been answered)."""

    def __init__(self, build: Callable[[], AgentLoop]):
        self.build = build
        self._loop: AgentLoop | None = None

    @property
    def loop(self) -> AgentLoop:
        if self._loop is None:
            self._loop = self.build()
        return self._loop

    async def run(self, seat: Seat, text: str, images: list[ImageBlock]) -> ev.TurnResult:
        from nanoagent.tools.fs import editor

        token = editor.set(seat.buffers)
        try:
            return await self.loop.handle(text, seat.key, seat.sink, ask=seat.ask, images=images,
                                          workdir=seat.folder, profile=seat.profile)
        finally:
            editor.reset(token)

    async def aclose(self) -> None:
        if self._loop is not None:
            await self._loop.aclose()


class ThroughGateway:
    """Turns in the running gateway: one connection per session, watching it; approvals come back as its asks, and
    its file tools' questions about the folder's files as `file` messages the editor answers."""

    def __init__(self, socket: Path):
        self.socket = socket
        self._clients: dict[str, GatewayClient] = {}

    async def _client(self, seat: Seat) -> GatewayClient:
        from nanoagent.gateway.client import GatewayClient

        client = self._clients.get(seat.key)
        if client is None or client.gone:
            client = await GatewayClient.connect(self.socket, seat.key, lambda event: seat.sink(event))
            self._clients[seat.key] = client
        return client

    async def run(self, seat: Seat, text: str, images: list[ImageBlock]) -> ev.TurnResult:
        client = await self._client(seat)
        client.ask = seat.ask
        client.files = seat.files
        turn = await client.send(text, seat.key, images, workdir=seat.folder, profile=seat.profile)
        return turn or ev.TurnResult("", seat.key)

    async def aclose(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.close()


class EditorFiles:
    """The editor's buffers for the file tools (`tools.fs.Buffers`): read through `fs/read_text_file` where the
    editor offered it, written through `fs/write_text_file` where it offered that. The tools call from a worker
    thread; the request runs on the event loop. An editor that fails or takes too long leaves the file to the disk."""

    def __init__(self, conn: Any, session_id: str, loop: asyncio.AbstractEventLoop, reads: bool, writes: bool):
        self.conn = conn
        self.session_id = session_id
        self.loop = loop
        self.reads = reads
        self.writes = writes

    async def files(self, op: str, path: str, text: str | None) -> str | bool | None:
        """The same over the event loop, for the gateway's questions (`GatewayClient.files`)."""
        if op == "read" and self.reads:
            return str((await self.conn.read_text_file(path=path, session_id=self.session_id)).content)
        if op == "write" and self.writes and text is not None:
            return await self._write(Path(path), text)
        return None

    def _ask(self, request: Callable[[], Any]) -> Any:
        try:
            return asyncio.run_coroutine_threadsafe(request(), self.loop).result(FILE_WAIT)
        except Exception:  # noqa: BLE001 - whatever the editor said, the disk is the answer
            return None

    def read(self, path: Path) -> str | None:
        if not self.reads:
            return None
        answer = self._ask(lambda: self.conn.read_text_file(path=str(path), session_id=self.session_id))
        return None if answer is None else str(answer.content)

    def write(self, path: Path, text: str) -> bool:
        if not self.writes:
            return False
        done = self._ask(lambda: self._write(path, text))
        return done is True

    async def _write(self, path: Path, text: str) -> bool:
        await self.conn.write_text_file(path=str(path), content=text, session_id=self.session_id)
        return True
