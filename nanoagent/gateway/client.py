"""A local client of the gateway: what the interactive `nanoagent agent` uses when a gateway is running.

Light on purpose (no provider SDK, pydantic or tokenizer): it speaks the socket protocol and turns the
gateway's lines back into the typed events the terminal renderers already draw.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nanoagent.agent import events as ev
from nanoagent.errors import NanoagentError
from nanoagent.gateway import protocol
from nanoagent.gateway.protocol import GONE_MID_TURN, GatewayGone, check_features, unreachable
from nanoagent.messages import ImageBlock

GONE = "The gateway has stopped; start it again with `nanoagent gateway`, or use --local."


class GatewayClient:
    """One connection, watching one session. `on_event` gets every event of the session, this client's turns
    and other clients' alike; `ask`, set by whoever sends, answers approval questions (None: each is declined)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_event: Callable[[ev.Event], None]):
        self.reader = reader
        self.writer = writer
        self.on_event = on_event
        self.ask: Callable[[str], Awaitable[str]] | None = None
        # the files of the turn's working folder, where this client holds them (an editor's buffers): called with
        # ("read", path, None) for the text or ("write", path, text) for True; None, False or an error: the disk
        self.files: Callable[[str, str, str | None], Awaitable[str | bool | None]] | None = None
        self.on_gone: Callable[[], None] = lambda: None  # called once, when the gateway closes the connection
        self.gone = False
        self.welcome: dict[str, Any] = {}
        self._results: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._reading: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, path: Path, session: str, on_event: Callable[[ev.Event], None]) -> GatewayClient:
        try:
            reader, writer = await asyncio.open_unix_connection(str(path), limit=protocol.MAX_EVENT_LINE)
        except OSError as e:
            raise unreachable(path, e) from None
        client = cls(reader, writer, on_event)
        client.write(protocol.hello(session))
        line = await reader.readline()
        if not line:
            raise GatewayGone("The gateway closed the connection at once; see its log in logs/.")
        client.welcome = protocol.decode(line)
        if client.welcome.get("type") == "error":
            writer.close()
            raise NanoagentError(f"The gateway refused the session: {client.welcome.get('message')}")
        client._reading = asyncio.create_task(client._read())
        return client

    def write(self, message: dict[str, Any]) -> None:
        self.writer.write(protocol.encode(message))

    async def send(self, text: str, session: str | None = None, images: list[ImageBlock] | None = None,
                   workdir: str = "", profile: str = "") -> ev.TurnResult | None:
        """Send a message or slash command, with references to images already under the workspace's media/, for a
        turn working in `workdir` ("": the workspace) with its tools narrowed to `profile` ("": as the policy gives
        them); the turn's result (None: it joined the running turn)."""
        files = self._offered()
        check_features(self.welcome, images, workdir, profile, files)
        if self.gone:
            raise GatewayGone(GONE)
        request_id = f"r{next(self._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._results[request_id] = future
        self.write(protocol.send(request_id, session or str(self.welcome.get("session")), text, images, workdir,
                                 profile, files))
        try:
            reply = await future
        except asyncio.CancelledError:
            self.cancel(session)  # Ctrl-C here cancels the turn there
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()
            raise
        if reply["type"] == "error":
            raise NanoagentError(f"The gateway refused the message: {reply.get('message')}")
        return protocol.result_from_wire(reply)

    def _offered(self) -> tuple[str, ...]:
        return ("read", "write") if self.files is not None else ()

    async def _file(self, message: dict[str, Any]) -> None:
        """Answer the gateway's `file` question with `files`: the text read, or whether the write was taken."""
        op, path, text = message.get("op"), str(message.get("path", "")), message.get("text")
        answer: dict[str, Any] = {"type": "file_answer", "id": message.get("id")}
        try:
            got = await self.files(str(op), path, text if isinstance(text, str) else None) if self.files else None
        except Exception:  # noqa: BLE001 - whatever the holder said, the gateway uses the disk
            got = None
        if op == "read" and isinstance(got, str):
            answer["text"] = got
        elif op == "write" and got is True:
            answer["ok"] = True
        if not self.gone and not self.writer.is_closing():
            self.write(answer)

    def cancel(self, session: str | None = None) -> None:
        if not self.gone and not self.writer.is_closing():
            self.write({"type": "cancel", "session": session or self.welcome.get("session")})

    async def _read(self) -> None:
        try:
            while line := await self.reader.readline():
                try:
                    message = protocol.decode(line)
                except ValueError:
                    continue
                await self._dispatch(message)
        except (ConnectionError, ValueError):
            pass
        except asyncio.CancelledError:  # closed by this side
            self.gone = True
            raise
        finally:
            for future in self._results.values():
                if not future.done():
                    future.set_exception(GatewayGone(GONE_MID_TURN))
        if not self.gone:
            self.gone = True
            self.on_gone()

    async def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "event":
            event = protocol.event_from_wire(message.get("event") or {})
            if event is not None:
                self.on_event(event)
        elif kind in ("result", "error") and str(message.get("id")) in self._results:
            future = self._results.pop(str(message.get("id")))
            if not future.done():
                future.set_result(message)
        elif kind == "ask":
            answer = await self.ask(str(message.get("question", ""))) if self.ask else "n"
            self.write({"type": "answer", "id": message.get("id"), "text": answer})
        elif kind == "file":  # answered before the next line is read, as an ask is: the turn waits on it
            await self._file(message)

    async def close(self) -> None:
        self.gone = True
        if self._reading is not None:
            self._reading.cancel()
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
