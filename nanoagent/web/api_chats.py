"""Managing chats from the web app: titles (the first words of a chat's first message, a model's when
`gateway.web.modelTitles` is on, or the person's own), rename, delete (`SessionStore.remove`, as `sessions rm`: the
spend ledger keeps what it cost), search by title and content (the memory index, the owner's chats only), and the
model a chat uses (the `/model` command itself, sent through the Hub).

Every route works on saved sessions; a temporary chat (/incognito) is neither renamed, deleted nor found: /new ends
it, and nothing said there is searchable."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nanoagent.errors import NanoagentError
from nanoagent.web.api_chat import BadRequest, Rooms, _json_body, session_key, session_rows

if TYPE_CHECKING:
    from nanoagent.session.store import Session
    from nanoagent.web.context import WebContext

log = logging.getLogger("nanoagent.web")
MAX_QUERY = 200  # characters of a search
MAX_RESULTS = 30
_MODEL_NAME = re.compile(r"[\w.:@+/-]{1,200}")


class Conflict(web.HTTPConflict):
    def __init__(self, message: str) -> None:
        super().__init__(text=json.dumps({"error": message}), content_type="application/json")


class NotFound(web.HTTPNotFound):
    def __init__(self, message: str) -> None:
        super().__init__(text=json.dumps({"error": message}), content_type="application/json")


def saved(ctx: WebContext, key: str) -> Session:
    """Saved session `key`, as `sessions rm` finds it: 404 when there is none, 409 for a temporary chat."""
    store = ctx.hub.sessions
    if key in store.temporary:
        raise Conflict("This chat is temporary (incognito): it has no title to keep, and /new ends it.")
    if key not in store.keys():
        raise NotFound(f"No saved chat {key!r}; it may have been deleted.")
    return store.load(key)


def _not_running(ctx: WebContext, key: str, what: str) -> None:
    if ctx.hub.busy(key):
        raise Conflict(f"This chat is answering; {what} it once the reply ends (or press Stop).")


def search_chats(ctx: WebContext, query: str) -> list[dict[str, Any]]:
    """The owner's saved chats whose title holds `query`, then those whose messages match it in the memory index
    (keyword search: no embedding call per search), each once with its best snippet. A guest's chat is never among
    them: its words are the guest's (people apart), whoever reads the page."""
    from nanoagent.channels.owners import Owners
    from nanoagent.memory.search import MemorySearch, SourceKind
    from nanoagent.session.titles import title_of

    owners = Owners.of(ctx.config)
    rows = {row["key"]: row for row in session_rows(ctx) if not row["incognito"] and owners.is_owner(row["key"])}
    needle = query.casefold()
    found = [_result(row, "title", "") for row in rows.values() if needle in row["title"].casefold()]
    searcher = MemorySearch(ctx.paths)
    try:
        hits = searcher.search(query, MAX_RESULTS * 2,
                               allow=lambda hit: hit.kind is SourceKind.SESSION and owners.is_owner(hit.ref))
    finally:
        searcher.close()
    seen = {result["key"] for result in found}
    saved_keys = set(ctx.hub.sessions.keys())
    for hit in hits:
        if hit.ref in seen or hit.ref not in saved_keys:  # a deleted session the index has not dropped yet
            continue
        seen.add(hit.ref)
        row = rows.get(hit.ref)
        if row is None:  # older than the sidebar's list
            session = ctx.hub.sessions.load(hit.ref)
            row = {"key": hit.ref, "title": title_of(session), "channel": hit.ref.split(":", 1)[0], "last_active": 0}
        found.append(_result(row, hit.role or "content", hit.snippet))
    return found[:MAX_RESULTS]


def _result(row: dict[str, Any], where: str, snippet: str) -> dict[str, Any]:
    return {"key": row["key"], "title": row["title"] or row["key"], "channel": row["channel"],
            "last_active": row["last_active"], "where": where, "snippet": snippet}


def model_choices(ctx: WebContext, session: Session) -> list[str]:
    """What the picker offers: the session's model, the default, the fallbacks, the background model and the models
    this session already used; any other name can be typed."""
    d = ctx.config.defaults
    names = [ctx.hub.model_for(session), ctx.hub.default_model, *d.fallback_models, d.background_model or "",
             *(record.model for record in session.usage)]
    return list(dict.fromkeys(name for name in names if name))


async def name_new_chat(ctx: WebContext, rooms: Rooms, key: str) -> None:
    """After a new chat's first turn: its title from one short model call, kept unless its person named it
    meanwhile. A failed call leaves the first words (logged, not shown: the chat itself went well)."""
    store = ctx.hub.sessions
    try:
        title = await ctx.hub.model_title(key)
    except NanoagentError as e:
        log.warning(json.dumps({"event": "web_title_failed", "error": type(e).__name__}))
        return
    if not title or key in store.temporary:
        return
    session = store.load(key)
    async with store.lock_async(session):  # a turn started meanwhile: written once it ends
        if session.meta.title or not session.path.exists():  # renamed or deleted meanwhile
            return
        store.set_title(session, title)
    rooms.announce({"type": "sessions", "key": key})


def add_chats(app: web.Application, ctx: WebContext, rooms: Rooms) -> None:
    from nanoagent.session.store import SessionBusy
    from nanoagent.session.titles import MAX_CHARS, clean

    if ctx.config.gateway.web.model_titles:
        rooms.name_chat = lambda key: name_new_chat(ctx, rooms, key)

    async def rename(request: web.Request) -> web.Response:
        key = session_key(request.match_info["key"])
        given = (await _json_body(request)).get("title")
        title = clean(given) if isinstance(given, str) else ""
        if not title:
            raise BadRequest(f"Give the chat a title: a line of text, up to {MAX_CHARS} characters.")
        session = await asyncio.to_thread(saved, ctx, key)
        _not_running(ctx, key, "rename")

        def write() -> None:
            with store.lock(session, timeout=0):
                store.set_title(session, title)

        store = ctx.hub.sessions
        try:
            await asyncio.to_thread(write)
        except SessionBusy:
            raise Conflict("Another nanoagent process is using this chat; rename it when it finishes.") from None
        rooms.announce({"type": "sessions", "key": key})
        return web.json_response({"key": key, "title": title})

    async def delete(request: web.Request) -> web.Response:
        key = session_key(request.match_info["key"])
        session = await asyncio.to_thread(saved, ctx, key)
        _not_running(ctx, key, "delete")
        try:
            await asyncio.to_thread(ctx.hub.sessions.remove, session)
        except SessionBusy:
            raise Conflict("Another nanoagent process is using this chat; delete it when it finishes.") from None
        rooms.announce({"type": "sessions", "key": key})
        return web.json_response({"removed": key})

    async def search(request: web.Request) -> web.Response:
        query = " ".join(request.query.get("q", "").split())[:MAX_QUERY]
        results = await asyncio.to_thread(search_chats, ctx, query) if query else []
        return web.json_response({"query": query, "results": results})

    async def model(request: web.Request) -> web.Response:
        key = session_key(request.match_info["key"])
        session = await asyncio.to_thread(ctx.hub.session, key)
        return web.json_response({"model": ctx.hub.model_for(session), "default": ctx.hub.default_model,
                                  "choices": model_choices(ctx, session)})

    async def switch(request: web.Request) -> web.Response:
        """`/model NAME` itself, through the Hub: the same check of the name and its provider's key, the same
        refusal (one line) and the same record in the session."""
        key = session_key(request.match_info["key"])
        name = (await _json_body(request)).get("model")
        if not isinstance(name, str) or not _MODEL_NAME.fullmatch(name.strip()):
            raise BadRequest("Name a model as provider/model, such as anthropic/claude-sonnet-4-5.")
        try:
            turn = await ctx.hub.send(key, f"/model {name.strip()}")
        except NanoagentError as e:
            raise BadRequest(str(e)) from None
        if turn is None or turn.refused:
            raise BadRequest(turn.reply if turn is not None else "The model was not switched; try again.")
        return web.json_response({"model": turn.model or name.strip(), "message": turn.reply})

    app.router.add_put("/api/sessions/{key}/title", rename)
    app.router.add_delete("/api/sessions/{key}", delete)
    app.router.add_get("/api/chats/search", search)
    app.router.add_get("/api/sessions/{key}/model", model)
    app.router.add_put("/api/sessions/{key}/model", switch)


__all__ = ["add_chats", "model_choices", "name_new_chat", "saved", "search_chats"]
