"""The memory page's `/api/...` routes: the memory files rendered, the Dream log with each edit's diff, undoing an
edit (the same `MemoryGit.restore` as `dream-restore`, with its conflict message), and memory search. "Dream now"
is the `/dream` command sent through the chat routes, so its progress streams like a turn's."""

from __future__ import annotations

import asyncio
import os
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nanoagent.errors import NanoagentError
from nanoagent.fsutil import read_beneath
from nanoagent.web.api_chat import BadRequest
from nanoagent.web.markdown import render

if TYPE_CHECKING:
    from nanoagent.memory.gitlog import MemoryCommit, MemoryGit
    from nanoagent.web.context import WebContext

DREAM_SESSION = "web:dream"  # where the page's "Dream now" runs /dream and watches its progress


def memory_path(raw: str) -> str:
    """A memory file's workspace-relative path from the page; 400 for `..`, an absolute path or any other file."""
    from nanoagent.paths import is_memory_file

    if ".." in raw.split("/") or raw.startswith("/") or "\\" in raw or not is_memory_file(raw):
        raise BadRequest(f"{raw[:80]!r} is not a memory file (SOUL.md, USER.md, memory/MEMORY.md, a skill's SKILL.md, "
                         "a person's file or a dated note).")
    return raw


def _commit(c: MemoryCommit) -> dict[str, Any]:
    return {"sha": c.sha, "short": c.short, "time": c.time.isoformat(timespec="seconds"), "files": list(c.files),
            "summary": c.summary, "author": c.author}


def add_memory(app: web.Application, ctx: WebContext) -> None:
    def git() -> MemoryGit:
        from nanoagent.memory.gitlog import MemoryGit

        return MemoryGit(ctx.paths.workspace, ctx.paths.memory_git_dir)

    def read(relpath: str) -> dict[str, Any]:
        # a symbolic link anywhere on the way (skills/evil -> elsewhere, even one swapped in meanwhile), or a hard
        # link, reads as missing: the page never shows a file from outside the workspace
        data = read_beneath(ctx.paths.workspace, relpath)
        if data is None:
            refused = os.path.lexists(ctx.paths.workspace / relpath)  # there, but not a plain file of the workspace
            return {"path": relpath, "exists": False, "html": "", **({"refused": True} if refused else {})}
        text = data.decode("utf-8", errors="replace")
        return {"path": relpath, "exists": True, "html": render(text), "text": text}

    async def files(request: web.Request) -> web.Response:
        from nanoagent.paths import MEMORY_FILES

        return web.json_response({"files": [await asyncio.to_thread(read, f) for f in MEMORY_FILES],
                                  "dream_session": DREAM_SESSION})

    async def one_file(request: web.Request) -> web.Response:
        relpath = memory_path(request.query.get("path", ""))
        shown = await asyncio.to_thread(read, relpath)
        if shown.get("refused"):
            return web.json_response({**shown, "error": f"{relpath} is not in the workspace (or is a link out of it)."},
                                     status=404)
        return web.json_response(shown)

    async def log(request: web.Request) -> web.Response:
        try:
            n = max(1, min(200, int(request.query.get("n", "50"))))
        except ValueError:
            raise BadRequest("n must be a number of edits.") from None
        commits = await asyncio.to_thread(lambda: git().log(n))
        return web.json_response({"commits": [_commit(c) for c in commits]})

    async def diff(request: web.Request) -> web.Response:
        sha = _sha(request.match_info["sha"])
        try:
            text = await asyncio.to_thread(lambda: git().show(sha))
        except NanoagentError as e:
            return web.json_response({"error": str(e)}, status=404)
        return web.json_response({"sha": sha, "diff": text})

    async def restore(request: web.Request) -> web.Response:
        sha = _sha(request.match_info["sha"])
        try:
            made = await asyncio.to_thread(lambda: git().restore(sha))
        except NanoagentError as e:  # RestoreConflict among them: nothing was changed
            return web.json_response({"error": f"Cannot restore: {e}"}, status=409)
        return web.json_response({"commit": _commit(made), "message": f"{made.summary}\nChanged "
                                  f"{', '.join(made.files)}; recorded as {made.short}."})

    async def search(request: web.Request) -> web.Response:
        from nanoagent.memory.embeddings import metered_settings
        from nanoagent.memory.search import MemorySearch

        query = request.query.get("q", "").strip()
        if not query:
            return web.json_response({"hits": []})

        def run() -> list[dict[str, Any]]:
            searcher = MemorySearch(ctx.paths, metered_settings(ctx.config, ctx.paths))
            try:
                return [_hit(h.to_dict()) for h in searcher.search(query, 12)]
            finally:
                searcher.close()

        return web.json_response({"hits": await asyncio.to_thread(run)})

    app.router.add_get("/api/memory", files)
    app.router.add_get("/api/memory/file", one_file)
    app.router.add_get("/api/dream-log", log)
    app.router.add_get("/api/dream-log/{sha}", diff)
    app.router.add_post("/api/dream-log/{sha}/restore", restore)
    app.router.add_get("/api/memory/search", search)


def _hit(hit: dict[str, Any]) -> dict[str, Any]:
    """A search hit with where the page links it: a memory file at its lines, or the session it came from."""
    kind, ref = hit["kind"], hit["ref"]
    if kind == "file":
        link = f"#/memory/file/{ref}"
    elif kind == "session" or (kind == "history" and ":" in ref):
        link = f"#/chat/{ref}"
    else:
        link = ""
    return {"source": hit["source"], "kind": kind, "snippet": hit["snippet"], "link": link, "score": hit["score"]}


def _sha(raw: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{4,40}", raw):
        raise BadRequest("Give an edit's sha (hex digits), as the Dream log lists it.")
    return raw


__all__ = ["DREAM_SESSION", "add_memory", "memory_path"]
