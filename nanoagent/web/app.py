"""The web app, mounted under `/` on the gateway's HTTP listener (`add_app`): the page (`static/index.html`, its CSS
and script, written by hand and shipped in the wheel: no build step) and the JSON routes under `/api/` it reads:
chat (`api_chat`), managing chats (`api_chats`), memory (`api_memory`), schedules (`api_schedules`), usage (`api_usage`), settings
(`api_settings`), devices (`api_devices`). The auth middleware of `web/auth.py` guards every route before it gets here."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from nanoagent.web.api_chat import Rooms, add_chat
from nanoagent.web.api_chats import add_chats
from nanoagent.web.api_devices import add_devices
from nanoagent.web.api_memory import add_memory
from nanoagent.web.api_schedules import add_schedules
from nanoagent.web.api_settings import add_settings
from nanoagent.web.api_usage import add_usage
from nanoagent.web.api_voice import add_voice
from nanoagent.web.context import WebContext

STATIC = Path(__file__).parent / "static"
ROOMS = web.AppKey("rooms", Rooms)


def add_app(app: web.Application, ctx: WebContext) -> None:
    """Add the pages and `/api/...` routes (never under `/v1/`)."""
    rooms = app[ROOMS] = Rooms()

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Content-Type": "text/html; charset=utf-8"})

    async def closing(app: web.Application) -> None:  # open streams end, so the listener can stop
        for queues in rooms.streams.values():
            for queue in list(queues):
                queue.put_nowait(None)
        for question in rooms.questions.values():
            if not question.answer.done():
                question.answer.set_result("n")  # nobody can answer any more: a no, as a terminal gone
        for task in rooms.sends:
            task.cancel()

    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC, follow_symlinks=False)
    add_chat(app, ctx, rooms)
    add_voice(app, ctx, rooms)
    add_chats(app, ctx, rooms)
    add_memory(app, ctx)
    add_schedules(app, ctx)
    add_usage(app, ctx)
    add_settings(app, ctx)
    add_devices(app, ctx)
    app.on_shutdown.append(closing)


__all__ = ["add_app"]
