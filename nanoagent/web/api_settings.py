"""The settings page's `/api/settings` (read-only): the model, each channel and its state, the MCP servers and their
tools, the skills and their trust. Keys never leave the gateway: no setting's value is sent, only what it is for."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from nanoagent.web.context import WebContext


def channels(ctx: WebContext) -> list[dict[str, Any]]:
    from nanoagent.channels import registry

    status = ctx.gateway.status() if ctx.gateway is not None else {}
    health = status.get("health") or {}
    running = status.get("components") or []
    out = []
    for name in registry.names():
        try:
            channel = registry.get(name)
        except ModuleNotFoundError:  # its folder is not part of this install
            continue
        settings = channel.settings(ctx.config)
        if not settings.enabled:
            state = "not enabled"
        elif problem := channel.problem(settings):
            state = f"cannot start: {problem}"
        elif name not in running:
            state = "enabled; the gateway did not start it (it reads config.json at start)"
        else:
            state = health.get(name) or "starting"
        out.append({"name": name, "enabled": bool(settings.enabled), "state": state})
    return out


def mcp_servers(ctx: WebContext) -> list[dict[str, Any]]:
    mcp = ctx.hub.mcp
    if mcp is None:
        return [{"name": name, "state": "not loaded", "tools": []} for name in ctx.config.mcp_servers]
    return [{"name": s.name, "state": s.state, "tools": [{"name": t.name, "description": t.description[:300]}
                                                          for t in s.tools or []]} for s in mcp.servers]


def skills(ctx: WebContext) -> list[dict[str, Any]]:
    from nanoagent.skills import SkillsLoader, SkillTrust

    trust = SkillTrust(ctx.paths.trusted_skills_file, lambda message: None)
    loader = SkillsLoader(ctx.paths.workspace / "skills", warn=lambda message: None, trust=trust)
    return [{"name": s.name, "source": s.source, "trust": str(loader.trust_state(s)), "available": s.available,
             "description": s.description} for s in loader.scan().skills]


def settings(ctx: WebContext) -> dict[str, Any]:
    http = ctx.config.gateway.http
    return {"model": ctx.hub.default_model, "workspace": str(ctx.paths.workspace),
            "http": {"host": http.host, "port": http.port}, "channels": channels(ctx),
            "mcp": mcp_servers(ctx), "skills": skills(ctx)}


def add_settings(app: web.Application, ctx: WebContext) -> None:
    async def read(request: web.Request) -> web.Response:
        return web.json_response(await asyncio.to_thread(settings, ctx))

    app.router.add_get("/api/settings", read)


__all__ = ["add_settings", "settings"]
