"""The chat's `/api/...` routes: the sessions of every channel, one conversation, sending (messages, slash commands,
images), Stop, approval answers, and the live stream of a session.

The live stream is the one the terminal clients get: the Hub's watchers of a session (`Hub.watch`) turned into
server-sent events, so every tab on a session sees the same turn as it runs. Approval questions go the way a
terminal's do: the web sender's `ask` (the same callable a socket client gives `Hub.send`) shows the question to
every tab of the session and waits for the first answer, which comes back by POST. Whatever a model or tool wrote
goes to the page as text, or as HTML made by `web.markdown.render`, never as markup of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nanoagent import keys
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import read_beneath
from nanoagent.web.live import LiveReply
from nanoagent.web.markdown import render

if TYPE_CHECKING:

    from nanoagent.agent import events as ev
    from nanoagent.messages import ImageBlock, Message
    from nanoagent.session.store import Session
    from nanoagent.web.context import WebContext

log = logging.getLogger("nanoagent.web")
KEEPALIVE = 15.0  # seconds of silence before a comment line keeps the stream open through proxies
MAX_QUEUED = 10_000  # events waiting for a tab that stopped reading before its stream is dropped
MAX_LISTED = 200  # sessions the list reads, the most recently active first (each is a file read)
_BAD_NAME = re.compile(r"\.\.|[/\\\x00-\x1f\x7f]")
BODY_IDLE = 30.0  # seconds a request body may go without a byte: then 408 and the connection closes
MAX_JSON = 10 * 1024 * 1024  # bytes of a JSON body (the listener refuses a longer Content-Length before)


class BadRequest(web.HTTPBadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(text=json.dumps({"error": message}), content_type="application/json")


class BodyStalled(web.HTTPRequestTimeout):
    """The body stopped coming (BODY_IDLE seconds without a byte): its connection slot is given back."""

    def __init__(self) -> None:
        super().__init__(text=json.dumps({"error": f"The request's body stopped coming for {BODY_IDLE:g} s; send it "
                                                   "again."}), content_type="application/json")
        self.force_close()


async def read_body(request: web.Request, cap: int) -> bytes | None:
    """The request's body as it comes, None once it is over `cap` bytes (the rest unread); BodyStalled when no byte
    comes for BODY_IDLE seconds. `read(n)` returns what has arrived so far, so it reads on to the end."""
    chunks: list[bytes] = []
    size = 0
    while size <= cap:
        try:
            chunk = await asyncio.wait_for(request.content.read(cap + 1 - size), BODY_IDLE)
        except TimeoutError:
            raise BodyStalled from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return None if size > cap else b"".join(chunks)


def session_key(raw: str) -> str:
    """A session key from the page (`web:x`, or a machine's such as `heartbeat`): refused (400) when it holds `..`, a
    slash or a control character, or cannot name a session file."""
    from nanoagent.paths import check_session_key

    if not raw.strip() or _BAD_NAME.search(raw):
        raise BadRequest(f"{raw[:60]!r} is not a session name: use a key such as web:default, without `..`, "
                         "slashes or control characters.")
    try:
        return check_session_key(raw)
    except NanoagentError as e:
        raise BadRequest(str(e)) from None


@dataclass
class Question:
    key: str
    text: str
    answer: asyncio.Future[str]


@dataclass
class Rooms:
    """Every open tab's stream, by session, and the approval questions waiting for an answer."""

    streams: dict[str, set[asyncio.Queue[dict[str, Any] | None]]] = field(default_factory=dict)
    questions: dict[str, Question] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    sends: set[asyncio.Task[None]] = field(default_factory=set)
    lives: dict[str, LiveReply] = field(default_factory=dict)  # the reply rendering as it streams, while a tab watches
    name_chat: Callable[[str], Awaitable[None]] | None = None  # names a new chat after its first turn (api_chats)

    def open(self, key: str) -> asyncio.Queue[dict[str, Any] | None]:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.streams.setdefault(key, set()).add(queue)
        self.lives.setdefault(key, LiveReply())
        return queue

    def close(self, key: str, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        queues = self.streams.get(key, set())
        queues.discard(queue)
        if not queues:
            self.lives.pop(key, None)

    def post(self, key: str, message: dict[str, Any]) -> None:
        for queue in list(self.streams.get(key, ())):
            if queue.qsize() >= MAX_QUEUED:
                queue.put_nowait(None)  # that tab stopped reading: its stream ends, a reload catches up
                self.close(key, queue)
            else:
                queue.put_nowait(message)

    def announce(self, message: dict[str, Any]) -> None:
        """To every open tab of every session (a new chat for their sessions lists)."""
        for key in list(self.streams):
            self.post(key, message)

    def asker(self, key: str):  # noqa: ANN201 - an Ask
        """The `ask` a web send gives the Hub: the question goes to every tab of the session; the first answer
        counts. A question nobody answers waits, as a terminal's does, until /stop cancels the turn."""

        async def ask(question: str) -> str:
            qid = f"q{next(self.ids)}-{os.urandom(4).hex()}"
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            self.questions[qid] = Question(key, question, future)
            self.post(key, {"type": "ask", "id": qid, "question": question})
            try:
                return await future
            finally:
                self.questions.pop(qid, None)
                self.post(key, {"type": "answered", "id": qid})

        return ask

    def pending(self, key: str) -> list[dict[str, str]]:
        return [{"type": "ask", "id": qid, "question": q.text} for qid, q in self.questions.items() if q.key == key]


# --- reading sessions ---------------------------------------------------------------------------------------------


def _session(ctx: WebContext, key: str) -> Session:
    """The session as the gateway's loop sees it: the temporary one while /incognito lasts."""
    temporary = ctx.hub.sessions.temporary.get(key)
    return temporary if temporary is not None else ctx.hub.sessions.load(key)


def _preview(session: Session) -> str:
    from nanoagent.messages import is_user, shown_text, strip_runtime_context

    last = next((m for m in reversed(session.messages) if is_user(m)), None)
    text = " ".join(strip_runtime_context(shown_text(last)).split()) if last is not None else ""
    return text[:80] + ("…" if len(text) > 80 else "")


def session_rows(ctx: WebContext) -> list[dict[str, Any]]:
    """Every saved session of every channel, the most recently active first."""
    from nanoagent.session.titles import title_of
    from nanoagent.usage import session_total

    store = ctx.hub.sessions
    stamps: dict[str, float] = {}
    for key in store.keys():
        with contextlib.suppress(OSError):
            stamps[key] = os.stat(store.path_for(key)).st_mtime
    for key in store.temporary:  # a temporary chat (/incognito) is listed while it lasts, as active now
        stamps[key] = time.time()
    rows = []
    for key in sorted(stamps, key=stamps.__getitem__, reverse=True)[:MAX_LISTED]:
        session = _session(ctx, key)
        total = session_total(session.usage)
        rows.append({"key": key, "channel": keys.kind(key), "messages": len(session.messages),
                     "last_active": stamps[key], "preview": _preview(session), "cost": total.cost,
                     "machine": keys.is_machine(key), "busy": ctx.hub.busy(key),
                     "incognito": session.meta.incognito, "title": title_of(session)})
    return rows


def tool_view(name: str, arguments: dict[str, Any], result: str, error: str | None) -> dict[str, Any]:
    """A tool call as the page folds it: its line, and its output as text (an edit's as diff lines)."""
    from nanoagent.messages import unwrap_untrusted

    text = unwrap_untrusted(result)
    diff = name in ("write_file", "edit_file") and error is None
    if diff:
        head, _, rest = text.partition("\n")
        if name == "write_file" and not rest.strip():
            rest = "\n".join("+" + line for line in str(arguments.get("content", "")).splitlines())
        text = rest or head
    return {"name": name, "args": _short_args(arguments), "ok": error is None, "error": error or "",
            "output": text[:20_000], "diff": diff}


def _short_args(arguments: dict[str, Any], width: int = 100) -> str:
    parts = []
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(str(text).split())
        parts.append(f"{key}={text[:50] + '…' if len(text) > 50 else text}")
    joined = " ".join(parts)
    return joined if len(joined) <= width else joined[: width - 1] + "…"


def message_views(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation as the page shows it: the person's messages, and each reply with its parts in the order they
    came (text, a tool call folded, more text), the assistant messages of one answer (split by tool results) joined
    into one view, as the terminal shows a turn. `text` is a reply's Markdown, for its copy button."""
    from nanoagent.messages import (
        calls_of,
        images_of,
        is_assistant,
        is_tool,
        is_user,
        parse_arguments,
        strip_runtime_context,
        text_of,
    )

    results = {m["tool_call_id"]: m for m in messages if is_tool(m)}
    views: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None  # the reply being joined, until the person speaks again
    for message in messages:
        if is_user(message):
            images = [{"path": i["path"], "name": i.get("name", "")} for i in images_of(message)]
            views.append({"role": "user", "text": strip_runtime_context(message["content"]), "images": images,
                          **_voice_note(strip_runtime_context(message["content"]))})
            reply = None
        elif is_assistant(message):
            if reply is None:
                reply = {"role": "assistant", "parts": [], "text": ""}
                views.append(reply)
            text = text_of(message)
            if text.strip():
                reply["parts"].append({"kind": "text", "html": render(text)})
                reply["text"] += ("\n\n" if reply["text"] else "") + text
            for call in calls_of(message):
                arguments, _ = parse_arguments(call["arguments"])
                done = results.get(call["id"])
                error = None if done is None or not done.get("is_error") else text_of(done)
                reply["parts"].append({"kind": "tool", **tool_view(call["name"], arguments, text_of(done) if done
                                                                   else "", error)})
    return views


_VOICE = re.compile(r"\[voice note saved as (media/voice-[0-9a-f]{16}\.\w+); its transcript follows\]\n(.*)", re.S)


def _voice_note(text: str) -> dict[str, str]:
    """A voice note sent from the page, as the page shows it: its transcript as text (still escaped as the model got
    it) and where the recording is kept; {} for any other message (one that says it was not transcribed included)."""
    from nanoagent.messages import unwrap_untrusted

    found = _VOICE.fullmatch(text)
    return {"text": unwrap_untrusted(found.group(2)), "voice": found.group(1)} if found else {}


# --- the routes ---------------------------------------------------------------------------------------------------


def add_chat(app: web.Application, ctx: WebContext, rooms: Rooms) -> None:
    async def sessions(request: web.Request) -> web.Response:
        return web.json_response({"sessions": await asyncio.to_thread(session_rows, ctx)})

    async def conversation(request: web.Request) -> web.Response:
        from nanoagent.session.titles import title_of

        key = session_key(request.match_info["key"])
        session = await asyncio.to_thread(_session, ctx, key)
        return web.json_response({"key": key, "title": title_of(session), "incognito": session.meta.incognito,
                                  "busy": ctx.hub.busy(key),
                                  "model": ctx.hub.model_for(session), "messages": message_views(session.messages),
                                  "questions": rooms.pending(key)})

    async def send(request: web.Request) -> web.Response:
        from nanoagent.attachments import AttachmentError, verify
        from nanoagent.gateway.protocol import attachments_from_wire

        key = session_key(request.match_info["key"])
        body = await _json_body(request)
        text = body.get("text")
        if not isinstance(text, str) or not (text.strip() or body.get("attachments")):
            raise BadRequest("Say something: the message is empty.")
        images, problem = attachments_from_wire(body.get("attachments"))
        if problem:
            raise BadRequest(problem)
        try:
            verify(ctx.paths.workspace, images)
            if images:
                ctx.hub.check_images(key, images)
        except (AttachmentError, NanoagentError) as e:
            raise BadRequest(str(e)) from None
        start_send(ctx, rooms, key, text, images)
        return web.json_response({"accepted": True}, status=202)

    async def stop(request: web.Request) -> web.Response:
        key = session_key(request.match_info["key"])
        return web.json_response({"stopped": ctx.hub.cancel(key)})

    async def answer(request: web.Request) -> web.Response:
        key = session_key(request.match_info["key"])
        body = await _json_body(request)
        question = rooms.questions.get(str(body.get("id", "")))
        if question is None or question.key != key:
            return web.json_response({"error": "That question was already answered or its turn ended."}, status=409)
        if not question.answer.done():
            question.answer.set_result({"yes": "y", "always": "a"}.get(str(body.get("answer")), "n"))  # as typed
        return web.json_response({"answered": True})

    async def upload(request: web.Request) -> web.Response:
        from nanoagent.attachments import sniff, store_image
        from nanoagent.messages import IMAGE_TYPES

        cap = ctx.config.tools.attachments.max_image_bytes
        if (request.content_length or 0) > cap:
            return too_big(cap)
        data = await read_body(request, cap)
        if data is None:
            return too_big(cap)
        kind = sniff(data)
        if kind not in IMAGE_TYPES:
            raise BadRequest("Only PNG, JPEG, GIF and WebP images can be attached.")
        name = re.sub(r"[^\w.\- ]", "_", request.headers.get("X-File-Name", ""))[:100]
        image = await asyncio.to_thread(store_image, ctx.paths.workspace, data, kind, name)
        return web.json_response({"attachment": image})

    async def media(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if not re.fullmatch(r"image-[0-9a-f]{16}\.(png|jpg|gif|webp)", name):
            raise web.HTTPNotFound()
        data = await asyncio.to_thread(read_beneath, ctx.paths.workspace, f"media/{name}")
        if data is None:  # missing, or a link (symbolic or hard, media/ itself too) that could lead out of it
            raise web.HTTPNotFound()
        kind = {"jpg": "image/jpeg"}.get(name.rsplit(".", 1)[1], f"image/{name.rsplit('.', 1)[1]}")
        return web.Response(body=data, content_type=kind, headers={"Cache-Control": "private, max-age=86400"})

    async def events(request: web.Request) -> web.StreamResponse:
        from nanoagent.gateway import protocol

        key = session_key(request.match_info["key"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                               "Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        await response.prepare(request)
        queue = rooms.open(key)
        live = rooms.lives[key]

        def on_event(event: ev.Event) -> None:
            if queue.qsize() >= MAX_QUEUED:
                return
            wire = protocol.event_to_wire(event)
            md = live.wire(event)
            if md is not None:  # a TextDelta: the reply's blocks it finished, and its open tail, as HTML
                wire = {**wire, "md": md}
            if wire["kind"] == "MessageAdded" and not event.agent:  # as the page shows it: text, or rendered
                views = message_views([wire["message"]])  # none for a tool result: the page folds those in
                wire = {**wire, "message": None, "view": views[0] if views else None}
            queue.put_nowait({"type": "event", "event": wire})

        # signing out (or the sign-in expiring) ends the stream at once: nothing more reaches that tab
        alive, release = signed_in(ctx, request, lambda: queue.put_nowait(None))
        unwatch = ctx.hub.watch(key, on_event)
        try:
            await _write(response, {"type": "hello", "busy": ctx.hub.busy(key), "live": live.snapshot()})
            for question in rooms.pending(key):
                await _write(response, question)
            while True:
                try:
                    message = await asyncio.wait_for(queue.get(), KEEPALIVE)
                except TimeoutError:
                    if not alive():
                        break
                    await response.write(b": keep-alive\n\n")
                    continue
                if message is None:
                    break
                await _write(response, message)
        except (ConnectionError, RuntimeError):
            pass  # the tab went away
        finally:
            unwatch()
            release()
            rooms.close(key, queue)
        return response

    app.router.add_get("/api/sessions", sessions)
    app.router.add_get("/api/sessions/{key}", conversation)
    app.router.add_post("/api/sessions/{key}/messages", send)
    app.router.add_post("/api/sessions/{key}/stop", stop)
    app.router.add_post("/api/sessions/{key}/answer", answer)
    app.router.add_get("/api/sessions/{key}/events", events)
    app.router.add_post("/api/uploads", upload)
    app.router.add_get("/api/media/{name}", media)


def start_send(ctx: WebContext, rooms: Rooms, key: str, text: str, images: list[ImageBlock]) -> None:
    """Send in the background: the request returns at once, the result goes to every tab of the session."""
    task = asyncio.create_task(_send(ctx, rooms, key, text, images), name=f"web send {key}")
    rooms.sends.add(task)
    task.add_done_callback(rooms.sends.discard)


async def _send(ctx: WebContext, rooms: Rooms, key: str, text: str, images: list[ImageBlock]) -> None:
    """A message or command from a tab: its result goes to every tab of the session (a slash command's reply is not
    an event)."""
    from nanoagent.agent import events as ev
    from nanoagent.gateway.hub import HubClosed

    started = time.monotonic()
    store = ctx.hub.sessions
    new = key not in store.temporary and not ctx.hub.session(key).messages  # (/model may have made its file)
    first = new

    def announce(event: ev.Event) -> None:  # a new chat joins every tab's sessions list once its message is stored
        nonlocal new
        if new and isinstance(event, ev.TurnStarted):
            new = False
            rooms.announce({"type": "sessions", "key": key})

    try:
        turn = await ctx.hub.send(key, text, sink=announce, ask=rooms.asker(key), images=images or None)
    except (HubClosed, NanoagentError) as e:
        rooms.post(key, {"type": "error", "message": str(e)})
        return
    except Exception as e:  # noqa: BLE001 - every send gets an answer; the log gets the kind of failure
        log.error(json.dumps({"event": "web_send_failed", "error": type(e).__name__}))
        rooms.post(key, {"type": "error", "message": f"the message failed inside the gateway ({type(e).__name__}); "
                                                      "see its log in logs/"})
        return
    if turn is None:  # it joined the running turn: every tab shows it now, not when the turn takes it in
        rooms.post(key, {"type": "joined", "text": text})
        return
    command = turn.result is None
    # a command's reply is plain text laid out in columns (/help, /status): the page shows it as text
    rooms.post(key, {"type": "result", "command": command, "refused": turn.refused,
                     "text": turn.reply if command else "", "error": (turn.result.error or "") if turn.result
                     else "", "elapsed": round(time.monotonic() - started, 3)})
    if first and not command and not turn.failed and rooms.name_chat is not None:  # a first turn that went well
        await rooms.name_chat(key)


def signed_in(ctx: WebContext, request: web.Request,
              ender: Callable[[], None]) -> tuple[Callable[[], bool], Callable[[], None]]:
    """`WebAuth.hold` for a stream: `ender` runs when the request's sign-in ends. A bare app (no auth): always on."""
    if ctx.auth is None:
        return (lambda: True), (lambda: None)
    return ctx.auth.hold(request, ender)


async def _write(response: web.StreamResponse, message: dict[str, Any]) -> None:
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    await response.write(f"data: {data}\n\n".encode())


async def _json_body(request: web.Request) -> dict[str, Any]:
    data = await read_body(request, MAX_JSON)
    try:
        body = json.loads(data) if data is not None else None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequest("The body must be a JSON object.") from None
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    return body


def too_big(cap: int) -> web.Response:
    return web.json_response({"error": f"The image is over {cap / 1_000_000:.0f} MB "
                                       "(tools.attachments.maxImageBytes); attach a smaller one."}, status=413)


__all__ = ["BodyStalled", "Rooms", "add_chat", "read_body", "signed_in", "message_views", "session_key", "session_rows", "start_send", "too_big",
           "tool_view"]
