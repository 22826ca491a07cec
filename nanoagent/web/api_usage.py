"""The usage page's `/api/usage`: the rows of `nanoagent usage --json` (the same records, the same `summarize`, the
same `rows_json`), their sums per day, session, model and channel, the spend ledger by source (`usage --by source`'s
`by_json`), each session's context use, and the budget panel's figures from `budget_figures`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nanoagent import keys
from nanoagent.web.api_chat import BadRequest

if TYPE_CHECKING:
    from nanoagent.usage import Total
    from nanoagent.web.context import WebContext

CONTEXT_SESSIONS = 12  # the most recent sessions whose context use is measured (each costs a count of its prompt)


def report(ctx: WebContext, days: int | None) -> dict[str, Any]:
    from nanoagent.agent.subagents import usage_records
    from nanoagent.usage import Total, rows_json, summarize, total_json

    rows = summarize(usage_records(ctx.hub.sessions), days=days)
    groups: dict[str, dict[str, Total]] = {"day": {}, "session": {}, "model": {}, "channel": {}}
    for day, key, model, total in rows:
        channel = keys.kind(key)
        for group, name in (("day", day), ("session", key), ("model", model), ("channel", channel)):
            groups[group].setdefault(name, Total()).merge(total)
    by = {group: [{"name": name, **total_json(total)} for name, total in sums.items()]
          for group, sums in groups.items()}
    for group in ("session", "model", "channel"):
        by[group].sort(key=lambda row: -(row["cost"] or 0))
    return {**rows_json(rows), "by": by, "ledger": ledger_sources(ctx, days), "context": context_use(ctx),
            "budget": budget_figures(ctx)}


def ledger_sources(ctx: WebContext, days: int | None) -> dict[str, Any]:
    """The spend ledger's calls by source (kind of work and model), as `nanoagent usage --by source --json` gives
    them: deleted sessions, transcriptions and embeddings included."""
    from nanoagent.spend.caps import ledger_for
    from nanoagent.spend.sources import by_json, read_calls

    ledger = ledger_for(ctx.paths, ctx.config.defaults.timezone)
    return by_json(read_calls(ledger.file, ledger.calendar, days), "source")


def context_use(ctx: WebContext) -> list[dict[str, Any]]:
    """The prompt the next turn of each recent session would send, against its model's window (as /status says)."""
    import os

    store = ctx.hub.sessions
    recent = sorted(store.keys(), key=lambda k: os.stat(store.path_for(k)).st_mtime, reverse=True)
    out = []
    for key in [k for k in recent if keys.kind(k) != keys.SUBAGENT][:CONTEXT_SESSIONS]:
        session = store.temporary.get(key) or store.load(key)
        if not session.messages:
            continue
        model, used, window = ctx.hub.context_use(session)
        out.append({"session": key, "model": model, "used": used, "window": window})
    return out


def budget_figures(ctx: WebContext) -> dict[str, Any]:
    """The budget panel: what `nanoagent budget --json` gives (`spend.view.spend_view`): every cap (name, period,
    limit, spent, reserved, resets_at, forecast, setting), today's and this month's spend and the time zone, and
    the lines `nanoagent budget` prints."""
    from nanoagent.spend.view import spend_view

    view = spend_view(ctx.config, ctx.paths)
    return {**view.to_json(), "lines": view.lines()}


def add_usage(app: web.Application, ctx: WebContext) -> None:
    async def usage(request: web.Request) -> web.Response:
        raw = request.query.get("days", "")
        try:
            days = int(raw) if raw else None
        except ValueError:
            raise BadRequest("days must be a whole number.") from None
        return web.json_response(await asyncio.to_thread(report, ctx, days))

    app.router.add_get("/api/usage", usage)


__all__ = ["add_usage", "budget_figures", "ledger_sources", "report"]
