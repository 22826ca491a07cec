"""The web app's pages and `/api/...` routes, mounted under `/` on the gateway's HTTP listener (`add_app`).

A placeholder until the app lands: one page that says the gateway is up and the visitor is signed in."""

from __future__ import annotations

from aiohttp import web

from nanoagent.web.context import WebContext

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>nanoagent</title></head>
<body><main><h1>nanoagent</h1><p id="signed-in">Signed in to this gateway.</p></main></body></html>
"""


def add_app(app: web.Application, ctx: WebContext) -> None:
    """Add the pages and `/api/...` routes (never under `/v1/`); the auth middleware already guards them."""

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    app.router.add_get("/", index)


__all__ = ["add_app"]
