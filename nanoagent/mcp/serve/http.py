"""The MCP server over streamable HTTP at `/mcp` on the gateway's listener, behind its bearer token (the one in
run/http-token, checked as `/v1/` checks it: a wrong or missing token is a 401 before anything is read).

The `mcp` SDK serves ASGI and the listener is aiohttp: each request is handed to the SDK's session manager as one
ASGI call (the body read first, the answer collected whole). The manager runs stateless with JSON answers: every
POST stands alone, so nothing lives between requests and a restart of the gateway loses nothing. It starts at the
first request (the SDK costs ~0.6 s to import: a gateway whose `/mcp` nobody asks never loads it) and stops with
the listener. A question is a turn given to the hub, as a channel's message is; its spend counts as "mcp".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nanoagent.agent import events as ev
from nanoagent.agent.events import TurnResult
from nanoagent.keys import Place
from nanoagent.mcp.serve import mcp_server
from nanoagent.mcp.serve.tools import SOURCE, Doors, serve_tools

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from nanoagent.web.context import WebContext

PATH = "/mcp"
SKIPPED_HEADERS = {"content-length", "transfer-encoding", "connection"}  # aiohttp sets its own


def add_mcp(app: web.Application, ctx: WebContext, check: Callable[[web.Request], None]) -> None:
    """Serve the MCP server at PATH; `check` refuses a request without the token (raising what the listener
    answers)."""
    served = _Served(ctx)

    async def handle(request: web.Request) -> web.StreamResponse:
        check(request)
        return await served.handle(request)

    app.router.add_route("*", PATH, handle)
    app.on_cleanup.append(lambda app: served.stop())


class _Served:
    def __init__(self, ctx: WebContext):
        self.ctx = ctx
        self.manager: StreamableHTTPSessionManager | None = None
        self.holder: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()
        self.started = asyncio.Lock()

    async def start(self) -> StreamableHTTPSessionManager:
        async with self.started:
            if self.manager is None:
                await asyncio.to_thread(_import_sdk)  # not on the event loop
                from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

                ctx = self.ctx
                doors = Doors(self.ask, self.deliver, self.jobs_changed)
                server = mcp_server(serve_tools(ctx.config, ctx.paths, doors), ctx.hub.workspace)
                manager = StreamableHTTPSessionManager(server, json_response=True, stateless=True)
                running = asyncio.Event()
                self.holder = asyncio.create_task(self._hold(manager, running), name="mcp serve")
                await running.wait()
                self.manager = manager
            return self.manager

    async def _hold(self, manager: StreamableHTTPSessionManager, running: asyncio.Event) -> None:
        async with manager.run():
            running.set()
            await self.stopping.wait()

    async def stop(self) -> None:
        self.stopping.set()
        if self.holder is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.holder

    async def handle(self, request: web.Request) -> web.StreamResponse:
        manager = await self.start()
        body = await request.read()
        answer = _Answer()
        await manager.handle_request(_scope(request), _receiver(body), answer.send)
        return web.Response(status=answer.status, body=bytes(answer.body), headers=answer.headers)

    # --- the doors: the hub, the message tool's delivery, the scheduler ------------------------------------------

    async def ask(self, key: str, question: str) -> TurnResult | None:
        from nanoagent.errors import NanoagentError
        from nanoagent.gateway.hub import HubClosed
        from nanoagent.spend import working_as

        try:
            with working_as("mcp", key):
                return await self.ctx.hub.send(key, question)
        except HubClosed as e:
            raise NanoagentError(str(e)) from None

    async def deliver(self, target: Place, text: str) -> None:
        from nanoagent.agent.build import build_outbox

        hub = self.ctx.hub
        outbox = build_outbox(self.ctx.config, self.ctx.paths)
        outbox.listeners.append(lambda key, note: hub.publish(key, ev.Notice(note, session=key)))  # shown live
        await outbox.send(target, text, SOURCE)

    def jobs_changed(self) -> None:
        from nanoagent.cron.store import JobStore

        JobStore(self.ctx.paths.cron_jobs_file).changed()


class _Answer:
    """What the SDK answered, collected whole (its answers are JSON, never a stream, in this mode)."""

    def __init__(self) -> None:
        self.status = 500
        self.headers: list[tuple[str, str]] = []
        self.body = bytearray()

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])
                            if k.decode("latin-1").lower() not in SKIPPED_HEADERS]
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")


def _receiver(body: bytes) -> Callable[[], Any]:
    """The ASGI `receive` of a request whose body was read: the body, then (once the answer is sent) nothing more
    ever comes, as from a client that waits."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # cancelled with the request
        return {"type": "http.disconnect"}

    return receive


def _scope(request: web.Request) -> dict[str, Any]:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request.method,
            "scheme": request.scheme, "path": request.path, "raw_path": request.raw_path.encode("latin-1"),
            "query_string": request.query_string.encode("latin-1"), "root_path": "",
            "headers": [(k.lower(), v) for k, v in request.raw_headers],
            "client": tuple(peer[:2]) if isinstance(peer, tuple) else None, "server": None}


def _import_sdk() -> None:
    import mcp.server.streamable_http_manager  # noqa: F401
