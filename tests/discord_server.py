"""A Discord stand-in over real sockets, for tests: discord.py and `nanoagent gateway` talk to it as they would to
Discord, at the `apiBase` the config names (`{url}/api/v10`).

An aiohttp server in a thread of its own serves the REST routes discord.py calls (`GET /gateway/bot`, `/users/@me`,
`/oauth2/applications/@me`, `/channels/{id}`, messages posted, edited, deleted and listed with `?after=` for the
catch-up, typing, a DM channel opened with `POST /users/@me/channels`, attachments by URL) and the gateway websocket
(HELLO, IDENTIFY -> READY and GUILD_CREATE, heartbeat ACKs, RESUME replaying what a session missed, dispatches).

Discord keeps no queue for a bot: what is written while no gateway session is connected is only in the history, which
is why the channel catches up from it after a restart. Before the bot was ever online, though, a person's message is
held until the first session is ready and only then written (the shared cases write as soon as the channel starts, as
a person would once the bot shows online; Telegram's and Slack's servers queue such a message).

Like Discord: ids are snowflakes carrying their time; a message holds at most 2,000 characters and is never empty;
a 429 carries the JSON body and headers Discord sends (`retry_after`, `X-RateLimit-*`, `Via`); dispatches follow the
intents given at IDENTIFY (guild messages, DMs, THREAD_CREATE with GUILDS), and a guild message's content is blank
without the message-content intent unless it mentions the bot; a gateway session that was never resumed misses what
happened while no one was connected (so a restarted gateway catches up from the history, as it must on Discord).

Tests script people (`api.write(...)`, `api.thread(...)`), read what the bot did (`api.shown(user)`,
`api.messages(channel)`, `api.calls`), and inject the shared kinds of trouble of tests/stand_in_base.py
(`api.rate_limit(...)`: 429s, `refuse`: a 403, `slow`, `api.down(True)`: every REST call a 503).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import mimetypes
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import WSMsgType, web

from tests.stand_in_base import Call, Scripted

TOKEN = "MTAxMDAw.discord-test-token.do-not-log"  # noqa: S105 - a test token, searched for in logs
EPOCH_MS = 1420070400000  # Discord's epoch, 2015-01-01
LIMIT = 2000
GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 0, 1 << 9, 1 << 12, 1 << 15
T = TypeVar("T")

_counter = itertools.count(1)


def snowflake(at: float | None = None) -> str:
    """A new id carrying the time `at` (now by default), as Discord makes them."""
    ms = int((time.time() if at is None else at) * 1000) - EPOCH_MS
    return str((ms << 22) | (next(_counter) % (1 << 22)))


def _iso(at: float | None = None) -> str:
    return datetime.datetime.fromtimestamp(time.time() if at is None else at, datetime.UTC).isoformat()


def _user(user_id: str, name: str, bot: bool = False) -> dict[str, Any]:
    return {"id": user_id, "username": name.lower(), "global_name": name, "discriminator": "0", "avatar": None,
            "bot": bot}


@dataclass
class _Session:
    id: str
    intents: int
    ws: web.WebSocketResponse | None
    seq: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)  # dispatches, kept for a RESUME


class DiscordAPI(Scripted):
    """The stand-in. Also the `StandIn` of tests/channel_harness.py."""

    channel = "discord"

    def __init__(self, token: str = TOKEN) -> None:
        super().__init__()
        self.token = token
        self.bot = _user(snowflake(), "Nano", bot=True)
        self.owner, self.stranger, self.other_bot = snowflake(), snowflake(), snowflake()
        self.users = {self.owner: _user(self.owner, "Ann"), self.stranger: _user(self.stranger, "Bob"),
                      self.other_bot: _user(self.other_bot, "Robo", bot=True), self.bot["id"]: self.bot}
        self.guild = snowflake()
        self.general = snowflake()
        self.channels: dict[str, dict[str, Any]] = {self.general: {
            "id": self.general, "type": 0, "guild_id": self.guild, "name": "general", "position": 0,
            "permission_overwrites": [], "nsfw": False, "parent_id": None, "topic": None, "last_message_id": None,
            "rate_limit_per_user": 0}}
        self.dms: dict[str, str] = {}  # user id -> DM channel id
        self.history: dict[str, list[dict[str, Any]]] = {}  # channel id -> messages, oldest first
        self.files: dict[str, bytes] = {}  # attachment path -> bytes
        self.edit_count = 0
        self.content_intent = True  # the Message Content intent is turned on in the Developer Portal
        self.sessions: dict[str, _Session] = {}
        self.held: list[Callable[[], Any]] = []  # writes made before the bot was ever online, made at its first READY
        self.resumed = 0
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="discord stand-in", daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self._run(self._start())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/v10"

    # --- the StandIn of the shared cases -------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        return {"enabled": True, "token": self.token, "allowFrom": [self.owner], "owner": [self.owner], "apiBase": self.api_base}

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              channel: str | None = None, mention: bool = True, reply_to: str | None = None,
              document: tuple[str, bytes] | None = None, at: float | None = None,
              file: tuple[str, str, bytes] | None = None) -> str:
        """A person sends a message: a DM (`private`), else in the guild's #general (or `channel`, a thread),
        mentioning the bot unless `mention` is False; `reply_to` a message id answers it; `at` backdates it; with an
        image, a text `document` (name, bytes) or a `file` (name, media type, bytes) attached. Its id."""
        message_id = snowflake(at)
        files = ([("image.png", image, "image/png")] if image is not None else []) + \
                ([(document[0], document[1], "text/plain; charset=utf-8")] if document is not None else []) + \
                ([(file[0], file[2], file[1])] if file is not None else [])

        def made() -> Any:
            return self._write(message_id, user, text, private, files, channel, mention, reply_to)

        def write() -> Any:
            if self.sessions or self.resumed:
                return made()
            self.held.append(made)
            return None

        self._sync(write)
        return message_id

    def shown(self, user: str) -> list[str]:
        """The bot's messages in the person's DM as they look now, oldest first."""
        return self._sync(lambda: [m["content"] for m in self.history.get(self.dms.get(user, ""), [])
                                   if m["author"]["id"] == self.bot["id"]])

    def edits(self) -> int:
        return self._sync(lambda: self.edit_count)

    def close(self) -> None:
        if self._runner is not None:
            self._run(self._stop())
            self._runner = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    # --- more scripting --------------------------------------------------------------------------------

    def thread(self, name: str = "a thread") -> str:
        """A person opens a thread under #general; its id (a thread is a channel on Discord)."""
        return self._sync(lambda: self._thread_create(name))

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """Every message in a channel as it stands now, oldest first."""
        return self._sync(lambda: [dict(m) for m in self.history.get(channel, [])])

    def dm(self, user: str) -> str:
        return self._sync(lambda: self._dm(user)["id"])

    def drop(self) -> None:
        """Close every gateway websocket as a network drop would (code 4000: the session may be resumed)."""
        async def drop() -> None:
            for session in self.sessions.values():
                ws, session.ws = session.ws, None
                if ws is not None:
                    await ws.close(code=4000)

        self._run(drop())

    def resumes(self) -> int:
        return self._sync(lambda: self.resumed)

    def calls_to(self, method: str, path_part: str) -> list[Call]:
        with self.cond:
            return [c for c in self.calls if c.method == method and path_part in c.path]

    def connected(self) -> int:
        """Gateway sessions with a websocket open and identified."""
        return self._sync(lambda: sum(1 for s in self.sessions.values() if s.ws is not None and not s.ws.closed))

    # --- the server's life (on its own loop) -------------------------------------------------------------

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def _sync(self, fn: Callable[[], T]) -> T:
        async def call() -> T:
            result = fn()
            if asyncio.iscoroutine(result):
                return await result  # type: ignore[no-any-return]
            return result

        return self._run(call())  # type: ignore[no-any-return]

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{path:.+}", self._attachment)
        app.router.add_route("*", "/api/v10/{path:.+}", self._rest)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        for session in self.sessions.values():
            if session.ws is not None:
                await session.ws.close(code=1001)
        assert self._runner is not None
        await self._runner.cleanup()

    # --- REST ------------------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        call = self.record(Call(request.method, path=path))
        response = await self._answer(request, path)
        call.status = response.status
        return response

    async def _answer(self, request: web.Request, path: str) -> web.StreamResponse:
        if self.is_down:
            return _error(503, 0, "upstream connect error or disconnect/reset before headers")
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return _error(401, 0, "401: Unauthorized")
        parts, method = path.strip("/").split("/"), request.method
        retry_after = self.take_limit() if method in ("POST", "PATCH") and parts[0] == "channels" and \
            parts[2:3] == ["messages"] else None
        if retry_after is not None:
            return _rate_limited(retry_after)
        if method == "POST" and parts[0] == "channels" and parts[2:] == ["messages"]:
            if self.take_refusal():  # the person blocks DMs
                return _error(403, 50007, "Cannot send messages to this user")
            late = self.take_delay() if parts[1] in self.channels else 0.0
            if late:
                response = await self._channel(request, self.channels[parts[1]], parts[2:])
                await asyncio.sleep(late)
                return response
        if path == "/gateway/bot" or path == "/gateway":
            return _ok({"url": f"ws://127.0.0.1:{self.port}/gateway", "shards": 1, "session_start_limit": {
                "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}})
        if path == "/users/@me" and method == "GET":
            return _ok(self.bot)
        if path == "/oauth2/applications/@me":
            return _ok({"id": self.bot["id"], "name": "Nano", "description": "", "icon": None, "bot_public": False,
                        "bot_require_code_grant": False, "owner": self.users[self.owner], "verify_key": "00",
                        "flags": 0, "team": None})
        if path == "/users/@me/channels" and method == "POST":
            body = await request.json()
            if str(body.get("recipient_id")) not in self.users:
                return _error(400, 50033, "Invalid Recipient(s)")
            return _ok(self._dm(str(body["recipient_id"])))
        if parts[0] == "users" and len(parts) == 2 and method == "GET":
            found = self.users.get(parts[1])
            return _ok(found) if found else _error(404, 10013, "Unknown User")
        if parts[0] == "channels" and len(parts) >= 2:
            channel = self.channels.get(parts[1])
            if channel is None:
                return _error(404, 10003, "Unknown Channel")
            return await self._channel(request, channel, parts[2:])
        return _error(404, 0, "404: Not Found")

    async def _channel(self, request: web.Request, channel: dict[str, Any], rest: list[str]) -> web.StreamResponse:
        method, cid = request.method, channel["id"]
        if not rest and method == "GET":
            return _ok(channel)
        if rest == ["typing"] and method == "POST":
            return web.Response(status=204, headers=_limits())
        if rest == ["messages"] and method == "GET":
            after, limit = request.query.get("after"), min(int(request.query.get("limit", 50)), 100)
            found = [m for m in self.history.get(cid, []) if after is None or int(m["id"]) > int(after)]
            found = found[:limit] if after is not None else found[-limit:]
            return _ok(list(reversed(found)))  # newest first, as Discord lists them
        if rest == ["messages"] and method == "POST" and request.content_type.startswith("multipart/"):
            return await self._upload(request, cid)
        if rest == ["messages"] and method == "POST":
            body = await _body(request)
            content = str(body.get("content") or "")
            problem = _check(content)
            if problem:
                return problem
            nonce = str(body.get("nonce") or "")
            same = next((m for m in self.history.get(cid, []) if nonce and body.get("enforce_nonce")
                         and m.get("nonce") == nonce and m["author"]["id"] == self.bot["id"]), None)
            if same is not None:  # enforce_nonce: the message sent before with this nonce, no new one
                return _ok(same)
            message = self._message(cid, self.bot, content)
            if nonce:
                message["nonce"] = nonce
            await self._dispatch("MESSAGE_CREATE", message)
            return _ok(message)
        if len(rest) == 2 and rest[0] == "messages":
            message = next((m for m in self.history.get(cid, []) if m["id"] == rest[1]), None)
            if message is None:
                return _error(404, 10008, "Unknown Message")
            if method == "DELETE":
                self.history[cid].remove(message)
                return web.Response(status=204, headers=_limits())
            if method == "PATCH":
                if message["author"]["id"] != self.bot["id"]:
                    return _error(403, 50005, "Cannot edit a message authored by another user")
                content = str((await _body(request)).get("content") or "")
                problem = _check(content)
                if problem:
                    return problem
                message.update(content=content, edited_timestamp=_iso())
                self.edit_count += 1
                return _ok(message)
            if method == "GET":
                return _ok(message)
        return _error(405, 0, "405: Method Not Allowed")

    async def _upload(self, request: web.Request, cid: str) -> web.StreamResponse:
        """A message with files (multipart: `payload_json` and `files[n]`): each kept as an attachment whose
        content type Discord derives from the file's name."""
        form = await request.post()
        body = json.loads(str(form.get("payload_json") or "{}"))
        content = str(body.get("content") or "")
        parts = [value for key, value in form.items() if key.startswith("files[") and isinstance(value, web.FileField)]
        if not parts:
            problem = _check(content)
            if problem:
                return problem
        attachments = [self._attach(cid, part.filename, part.file.read(),
                                    mimetypes.guess_type(part.filename)[0] or "application/octet-stream")
                       for part in parts]
        message = self._message(cid, self.bot, content, attachments=attachments)
        await self._dispatch("MESSAGE_CREATE", message)
        return _ok(message)

    def received(self, channel: str) -> list[tuple[str, bytes, str]]:
        """The files the bot sent to a channel (a DM's channel: `dm(user)`), oldest first: (name, bytes, content
        type)."""
        def found() -> list[tuple[str, bytes, str]]:
            return [(a["filename"], self.files[f"{channel}/{a['id']}/{a['filename']}"], a["content_type"])
                    for m in self.history.get(channel, []) if m["author"]["id"] == self.bot["id"]
                    for a in m["attachments"]]

        return self._sync(found)

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        """The files the bot sent to that person's DM: (name, bytes, shown as an image)."""
        return [(name, data, kind.startswith("image/")) for name, data, kind in self.received(self.dm(user))]

    async def _attachment(self, request: web.Request) -> web.StreamResponse:
        data = self.files.get(request.match_info["path"])
        if data is None or self.is_down:
            return web.Response(status=404 if data is None else 503, text="Not Found")
        return web.Response(body=data, content_type="application/octet-stream")

    # --- the gateway -------------------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None})
        session: _Session | None = None
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    break
                payload = json.loads(msg.data)
                op, data = payload.get("op"), payload.get("d")
                if op == 1:
                    await ws.send_json({"op": 11, "d": None, "s": None, "t": None})
                elif op == 2:
                    if data.get("token") != self.token:
                        await ws.close(code=4004, message=b"Authentication failed.")
                        break
                    if int(data.get("intents") or 0) & MESSAGE_CONTENT and not self.content_intent:
                        await ws.close(code=4014, message=b"Disallowed intent(s).")
                        break
                    session = _Session(uuid.uuid4().hex, int(data.get("intents") or 0), ws)
                    self.sessions[session.id] = session
                    await self._ready(session)
                elif op == 6:
                    session = self.sessions.get(str(data.get("session_id")))
                    if session is None or data.get("token") != self.token:
                        await ws.send_json({"op": 9, "d": False, "s": None, "t": None})
                        continue
                    session.ws = ws
                    self.resumed += 1
                    for sent in [s for s in session.sent if s["s"] > int(data.get("seq") or 0)]:
                        await ws.send_json(sent)
                    await self._send(session, "RESUMED", {})
        finally:
            if session is not None and session.ws is ws:
                session.ws = None
        return ws

    async def _ready(self, session: _Session) -> None:
        await self._send(session, "READY", {
            "v": 10, "user": self.bot, "guilds": [{"id": self.guild, "unavailable": True}],
            "session_id": session.id, "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway",
            "application": {"id": self.bot["id"], "flags": 0}, "private_channels": [], "relationships": [],
            "shard": [0, 1]})
        if session.intents & GUILDS:
            await self._send(session, "GUILD_CREATE", self._guild())
        held, self.held = self.held, []
        for write in held:
            await write()

    def _guild(self) -> dict[str, Any]:
        everyone = {"id": self.guild, "name": "@everyone", "permissions": "1024", "position": 0, "color": 0,
                    "hoist": False, "managed": False, "mentionable": False}
        return {"id": self.guild, "name": "Test guild", "icon": None, "owner_id": self.owner, "features": [],
                "roles": [everyone], "emojis": [], "stickers": [], "member_count": 3, "large": False,
                "unavailable": False, "joined_at": _iso(), "premium_tier": 0, "members": [], "presences": [],
                "voice_states": [], "stage_instances": [], "guild_scheduled_events": [],
                "channels": [c for c in self.channels.values() if c.get("guild_id") and c["type"] == 0],
                "threads": [c for c in self.channels.values() if c["type"] == 11]}

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        for session in list(self.sessions.values()):
            if _wants(session.intents, event, data):
                await self._send(session, event, _as_seen(session.intents, event, data, self.bot["id"]))

    async def _send(self, session: _Session, event: str, data: dict[str, Any]) -> None:
        session.seq += 1
        payload = {"op": 0, "t": event, "s": session.seq, "d": data}
        session.sent = [*session.sent[-999:], payload]
        if session.ws is not None and not session.ws.closed:
            try:
                await session.ws.send_json(payload)
            except (ConnectionError, RuntimeError):
                session.ws = None

    # --- state ---------------------------------------------------------------------------------------------

    def _dm(self, user: str) -> dict[str, Any]:
        if user not in self.dms:
            cid = self.dms[user] = snowflake()
            self.channels[cid] = {"id": cid, "type": 1, "recipients": [self.users[user]], "last_message_id": None}
        return self.channels[self.dms[user]]

    def _thread_create(self, name: str) -> str:
        cid = snowflake()
        self.channels[cid] = {"id": cid, "type": 11, "guild_id": self.guild, "parent_id": self.general,
                              "owner_id": self.owner, "name": name, "message_count": 0, "member_count": 1,
                              "rate_limit_per_user": 0, "last_message_id": None,
                              "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                                  "archive_timestamp": _iso(), "locked": False}}
        self.loop.create_task(self._dispatch("THREAD_CREATE", {**self.channels[cid], "newly_created": True}))
        return cid

    def _message(self, cid: str, author: dict[str, Any], content: str, message_id: str | None = None,
                 **extra: Any) -> dict[str, Any]:
        channel = self.channels[cid]
        message_id = message_id or snowflake()
        at = ((int(message_id) >> 22) + EPOCH_MS) / 1000
        message = {"id": message_id, "channel_id": cid, "author": author, "content": content, "timestamp": _iso(at),
                   "edited_timestamp": None, "tts": False, "mention_everyone": False, "mentions": [],
                   "mention_roles": [], "attachments": [], "embeds": [], "pinned": False, "type": 0, "flags": 0,
                   **extra}
        if channel.get("guild_id"):
            message["guild_id"] = channel["guild_id"]
        self.history.setdefault(cid, []).append(message)
        self.history[cid].sort(key=lambda m: int(m["id"]))
        channel["last_message_id"] = message["id"]
        return message

    async def _write(self, message_id: str, user: str, text: str, private: bool, files: list[tuple[str, bytes, str]],
                     channel: str | None, mention: bool, reply_to: str | None) -> None:
        cid = self._dm(user)["id"] if private and channel is None else channel or self.general
        guild = bool(self.channels[cid].get("guild_id"))
        content = f"<@{self.bot['id']}> {text}" if guild and mention else text
        extra: dict[str, Any] = {"mentions": [self.bot] if guild and mention else []}
        if reply_to is not None:
            replied = next(m for m in self.history.get(cid, []) if m["id"] == reply_to)
            extra.update(type=19, message_reference={"message_id": reply_to, "channel_id": cid},
                         referenced_message=replied)
        extra["attachments"] = [self._attach(cid, name, data, kind) for name, data, kind in files]
        message = self._message(cid, self.users[user], content, message_id=message_id, **extra)
        await self._dispatch("MESSAGE_CREATE", message)

    def _attach(self, cid: str, name: str, data: bytes, kind: str) -> dict[str, Any]:
        aid = snowflake()
        path = f"{cid}/{aid}/{name}"
        self.files[path] = data
        url = f"{self.url}/attachments/{path}"
        return {"id": aid, "filename": name, "size": len(data), "url": url, "proxy_url": url, "content_type": kind}


def _wants(intents: int, event: str, data: dict[str, Any]) -> bool:
    if event == "MESSAGE_CREATE":
        return bool(intents & (GUILD_MESSAGES if data.get("guild_id") else DIRECT_MESSAGES))
    if event.startswith("THREAD_"):
        return bool(intents & GUILDS)
    return True


def _as_seen(intents: int, event: str, data: dict[str, Any], bot_id: str) -> dict[str, Any]:
    """Without the message-content intent a guild message arrives blank unless it mentions the bot."""
    if event != "MESSAGE_CREATE" or intents & MESSAGE_CONTENT or not data.get("guild_id") \
            or data["author"]["id"] == bot_id or any(u["id"] == bot_id for u in data["mentions"]):
        return data
    return {**data, "content": "", "attachments": [], "embeds": []}


def _check(content: str) -> web.Response | None:
    if not content.strip():
        return _error(400, 50006, "Cannot send an empty message")
    if len(content) > LIMIT:
        return _json({"code": 50035, "message": "Invalid Form Body", "errors": {"content": {"_errors": [
            {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}}, 400)
    return None


async def _body(request: web.Request) -> dict[str, Any]:
    """A message's JSON: the body, or the `payload_json` part of a multipart upload."""
    if request.content_type.startswith("multipart/"):
        form = await request.post()
        return dict(json.loads(str(form.get("payload_json") or "{}")))
    return dict(await request.json())


def _limits(remaining: int = 4, reset_after: float = 1.0) -> dict[str, str]:
    return {"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}", "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": "abcd1234", "Via": "1.1 google"}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON with Discord's exact content type (discord.py reads a body as JSON only then)."""
    return web.Response(body=json.dumps(body).encode(), status=status,
                        headers={**(headers or _limits()), "Content-Type": "application/json"})


def _ok(body: Any) -> web.Response:
    return _json(body)


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"message": message, "code": code}, status)


def _rate_limited(retry_after: float) -> web.Response:
    headers = {**_limits(0, retry_after), "Retry-After": str(max(1, round(retry_after))), "X-RateLimit-Scope": "user"}
    return _json({"message": "You are being rate limited.", "retry_after": retry_after, "global": False}, 429, headers)


StandIn = DiscordAPI

__all__ = ["TOKEN", "DiscordAPI", "StandIn", "snowflake"]
