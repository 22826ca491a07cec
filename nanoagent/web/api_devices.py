"""The devices page's routes: the browsers signed in (`GET /api/devices`), signing one out (`DELETE
/api/devices/{id}`: its open event streams end at once), and pairing another (`POST /api/pair`: a one-time sign-in
link and its QR code, for a phone to scan)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

from nanoagent.web.auth import is_https
from nanoagent.web.pairing import LOOPBACK_ONLY, NO_QR, bases, is_loopback, qr_rows

if TYPE_CHECKING:
    from nanoagent.web.context import WebContext


def add_devices(app: web.Application, ctx: WebContext) -> None:
    async def listed(request: web.Request) -> web.Response:
        me = ctx.auth.session_of(request)
        return web.json_response({
            "idle_days": ctx.config.gateway.web.device_idle_days,
            "devices": [{"id": d.id, "name": d.name, "created": d.created, "last_used": d.last_used,
                         "host": d.host, "current": me is not None and me.device.id == d.id}
                        for d in ctx.auth.sessions.devices()]})

    async def revoke(request: web.Request) -> web.Response:
        device_id = request.match_info["id"]
        try:
            found = await ctx.auth.sessions.revoke(device_id)
        except (OSError, TimeoutError) as e:
            return web.json_response({"error": f"The devices file could not be written ({e}); try again."}, status=503)
        if not found:
            return web.json_response({"error": f"No device {device_id!r} is signed in; reload the list."}, status=404)
        return web.json_response({"revoked": device_id})

    async def pair(request: web.Request) -> web.Response:
        link, reachable = await _link(request, ctx, ctx.auth.codes.mint())
        try:
            rows = await asyncio.to_thread(qr_rows, link)
        except ImportError:
            return web.json_response({"url": link, "qr": None, "reachable": reachable, "note": NO_QR})
        return web.json_response({"url": link, "qr": rows, "reachable": reachable,
                                  "note": "" if reachable else LOOPBACK_ONLY})

    app.router.add_get("/api/devices", listed)
    app.router.add_delete("/api/devices/{id}", revoke)
    app.router.add_post("/api/pair", pair)


async def _link(request: web.Request, ctx: WebContext, code: str) -> tuple[str, bool]:
    """The sign-in link for another device and whether one can reach it: the address this page came from when that is
    not loopback (the other device is on the same side), else the listener's own (`pairing.bases`)."""
    try:
        name = urlsplit(f"http://{request.host}").hostname or ""
    except ValueError:
        name = ""
    if name and not is_loopback(name):
        return f"{'https' if is_https(request) else 'http'}://{request.host}/signin/{code}", True
    http = ctx.config.gateway.http
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    port = sockname[1] if isinstance(sockname, tuple) else http.port
    found = await asyncio.to_thread(bases, http.host, port, http.allowed_hosts)  # a route lookup for the LAN address
    if found:
        return f"{found[0]}/signin/{code}", True
    return f"http://{request.host}/signin/{code}", False


__all__ = ["add_devices"]
