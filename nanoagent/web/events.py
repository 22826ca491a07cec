"""Server-sent events on aiohttp: `EventStream` (the OpenAI stream and the app's live updates both write one), and
`GET /api/events?session=KEY`: a session's events as the terminal clients get them (`protocol.event_to_wire`),
one `data:` line each, with a comment line every KEEPALIVE seconds of silence so proxies keep the stream open.
Its connection is not counted among the clients' 64 (the HTTP side sees `text/event-stream` and counts it apart)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nanoagent.gateway import protocol

if TYPE_CHECKING:
    from nanoagent.agent import events as ev
    from nanoagent.web.context import WebContext

KEEPALIVE = 15.0  # seconds of silence before a comment line
WRITE_TIMEOUT = 30.0  # seconds a client may take to read what was written (a stalled reader is dropped)
MAX_PENDING = 10_000  # events waiting for a slow reader before its stream is dropped


class EventStream:
    """A `text/event-stream` response. What is added is sent by `flush`; after the client went away, `gone`."""

    def __init__(self, response: web.StreamResponse):
        self.response = response
        self.pending: list[bytes] = []
        self.ready = asyncio.Event()
        self.gone = False

    @classmethod
    async def open(cls, request: web.Request, headers: dict[str, str] | None = None) -> EventStream:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                               "X-Accel-Buffering": "no", **(headers or {})})
        if request.version < (1, 1):
            response.headers["Connection"] = "close"  # HTTP/1.0 has no chunks: the stream ends with the connection
        await response.prepare(request)
        return cls(response)

    def data(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        self._add(f"data: {text}\n\n")

    def comment(self, text: str) -> None:
        """A line every event-stream reader ignores: tool activity and keep-alives."""
        self._add(f": {' '.join(text.splitlines())}\n\n")

    def _add(self, text: str) -> None:
        if len(self.pending) >= MAX_PENDING:
            self.gone = True  # a reader this far behind is dropped rather than buffered without end
        if not self.gone:
            self.pending.append(text.encode())
            self.ready.set()

    async def flush(self) -> bool:
        """Send what was added; False once the client is gone (closed, reset, or not reading for WRITE_TIMEOUT)."""
        self.ready.clear()
        data, self.pending = b"".join(self.pending), []
        if data and not self.gone:
            try:
                async with asyncio.timeout(WRITE_TIMEOUT):
                    await self.response.write(data)
            except (ConnectionError, TimeoutError, RuntimeError):
                self.gone = True
        return not self.gone

    async def wait(self, timeout: float) -> None:
        """Until something is added, or `timeout` seconds."""
        if not self.ready.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self.ready.wait()
            except TimeoutError:
                pass

    async def end(self) -> None:
        await self.flush()
        if not self.gone:
            try:
                await self.response.write_eof()
            except (ConnectionError, RuntimeError):
                self.gone = True


def add_events(app: web.Application, ctx: WebContext) -> None:
    async def events(request: web.Request) -> web.StreamResponse:
        from nanoagent.web.api_chat import session_key, signed_in

        key = session_key(request.query.get("session", ""))  # the chat's check: no `..`, slash or control char
        out = await EventStream.open(request)
        out.comment("nanoagent events")
        ended = False

        def end() -> None:  # the sign-in ended: the stream stops at once
            nonlocal ended
            ended = True
            out.ready.set()

        def on_event(event: ev.Event) -> None:
            if not ended:
                out.data(protocol.event_to_wire(event))

        alive, release = signed_in(ctx, request, end)
        unwatch = ctx.hub.watch(key, on_event)
        try:
            while await out.flush():
                await out.wait(KEEPALIVE)
                if ended or (not out.pending and not alive()):
                    break
                if not out.pending:
                    out.comment("keep-alive")
        finally:
            unwatch()
            release()
        return out.response

    app.router.add_get("/api/events", events)


__all__ = ["EventStream", "add_events"]
