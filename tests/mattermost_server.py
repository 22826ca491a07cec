"""A Mattermost stand-in over real sockets, for tests: the channel's aiohttp client talks to it as to a server.

One aiohttp server, run on an event loop of its own in a thread, serves under `/api/v4/`:
- the REST endpoints the channel calls (users/me, users/{id}, channels/{id}, channels/direct, channels/{id}/posts
  with `since`, posts, posts/{id}/patch, DELETE posts/{id}, users/me/typing, files, files/{id}), each checking the
  bot's token (`Authorization: Bearer`) as Mattermost does (401 otherwise); a new post's `pending_post_id` answers a
  repeat with the first post;
- the websocket (`/api/v4/websocket`, the token in the same header): `hello` on connecting, then a `posted` event
  for each post made in a channel the bot is in. Nothing is sent again: a post made while no websocket is open is
  only in the channel's posts.

Tests script people (`write`), read what the bot did (`shown`, `thread`, `files_shown`, `calls_to`), and inject
trouble: `rate_limit` (429s with Retry-After), `refuse` (403s), `slow`, and `down` (every call a 503, the websocket
closed and refused).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import mimetypes
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web


def mid(seed: str) -> str:
    """A Mattermost id: 26 lowercase letters and digits."""
    return hashlib.sha256(seed.encode()).hexdigest()[:26]


TOKEN = "mm-bot-token-do-not-log-0123456789"
BOT = mid("bot")
BOT_NAME = "nano"
OWNER = mid("ann")
STRANGER = mid("bob")
TEAM = mid("team")
GENERAL = mid("town-square")
USERS = {BOT: ("nano", "Nano", ""), OWNER: ("ann", "Ann", "Lee"), STRANGER: ("bob", "Bob", "Ray")}
SENDS = ("POST posts", "PUT patch")
LIMIT = 16383


@dataclass
class Post:
    id: str
    channel: str
    user: str
    message: str
    create_at: int
    root_id: str = ""
    file_ids: list[str] = field(default_factory=list)
    pending: str = ""
    update_at: int = 0
    delete_at: int = 0
    edits: int = 0

    def json(self, files: dict[str, tuple[str, bytes]]) -> dict[str, Any]:
        infos = [_info(f, *files[f]) for f in self.file_ids if f in files]
        return {"id": self.id, "create_at": self.create_at, "update_at": self.update_at or self.create_at,
                "delete_at": self.delete_at, "edit_at": self.update_at if self.edits else 0, "user_id": self.user,
                "channel_id": self.channel, "root_id": self.root_id, "message": self.message, "type": "",
                "props": {"from_bot": "true"} if self.user == BOT else {}, "file_ids": self.file_ids,
                "pending_post_id": self.pending, "metadata": {"files": infos} if infos else {}}


@dataclass
class Failure:
    what: str  # "POST posts" | "PUT patch"
    status: int
    times: int
    retry_after: float | None = None


@dataclass
class Call:
    method: str
    path: str
    status: int


class MattermostServer:
    channel = "mattermost"
    owner = OWNER
    stranger = STRANGER

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.posts: list[Post] = []
        self.files: dict[str, tuple[str, bytes]] = {}
        self.channels: dict[str, dict[str, Any]] = {GENERAL: {"id": GENERAL, "type": "O", "name": "town-square",
                                                              "display_name": "Town Square", "team_id": TEAM}}
        self.failures: list[Failure] = []
        self.slowed: list[float] = []
        self.calls: list[Call] = []
        self.typing: list[tuple[str, str]] = []
        self.is_down = False
        self.connections = 0
        self._clock = 0
        self._seq = 0
        self._sockets: list[web.WebSocketResponse] = []
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)

    # --- the server's life ------------------------------------------------------------------------------------

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(middlewares=[self._gate])
        app.router.add_get("/api/v4/websocket", self._socket)
        app.router.add_get("/api/v4/users/me", self._me)
        app.router.add_get("/api/v4/users/{user}", self._user)
        app.router.add_get("/api/v4/users/me/teams", self._teams)
        app.router.add_get("/api/v4/users/me/teams/{team}/channels", self._channels)
        app.router.add_post("/api/v4/users/me/typing", self._typing)
        app.router.add_post("/api/v4/channels/direct", self._direct)
        app.router.add_get("/api/v4/channels/{channel}", self._channel)
        app.router.add_get("/api/v4/channels/{channel}/posts", self._channel_posts)
        app.router.add_post("/api/v4/posts", self._create)
        app.router.add_put("/api/v4/posts/{post}/patch", self._patch)
        app.router.add_delete("/api/v4/posts/{post}", self._delete)
        app.router.add_post("/api/v4/files", self._upload)
        app.router.add_get("/api/v4/files/{file}", self._file)
        self._runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        async def stop() -> None:
            for ws in list(self._sockets):
                await ws.close()
            await self._runner.cleanup()

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def settings(self) -> dict[str, Any]:
        """`channels.mattermost` pointing at this stand-in, enabled, the owner allowed."""
        return {"enabled": True, "url": self.url, "token": TOKEN, "allowFrom": [OWNER], "owner": [OWNER]}

    # --- scripting ----------------------------------------------------------------------------------------------

    def now(self) -> int:
        """Milliseconds, strictly increasing."""
        with self.lock:
            self._clock = max(self._clock + 1, int(time.time() * 1000))
            return self._clock

    def dm(self, user: str) -> str:
        """The DM channel between the bot and `user`, made on first use."""
        channel = mid("dm" + user)
        with self.lock:
            self.channels.setdefault(channel, {"id": channel, "type": "D", "name": "__".join(sorted((BOT, user))),
                                               "display_name": "", "team_id": ""})
        return channel

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              file: tuple[str, str, bytes] | None = None, channel: str | None = None, root_id: str = "",
              mention: bool = True) -> str:
        """A person posts: in their DM with the bot (`private`), or in a channel, mentioning the bot unless `mention`
        is False; in a thread when `root_id` is given. The post's id."""
        channel = channel or (self.dm(user) if private else GENERAL)
        if not private and mention and f"@{BOT_NAME}" not in text:
            text = f"@{BOT_NAME} {text}"
        files = []
        if image is not None:
            files.append(self.add_file("photo.png", image))
        if file is not None:
            files.append(self.add_file(file[0], file[2]))
        at = self.now()
        post = Post(mid(f"post{at}"), channel, user, text, at, root_id, files)
        with self.lock:
            self.posts.append(post)
        mentions = [BOT] if f"@{BOT_NAME}" in text else []
        data = {"channel_type": self.channels[channel]["type"], "channel_name": self.channels[channel]["name"],
                "sender_name": f"@{USERS[user][0]}", "team_id": TEAM, "post": json.dumps(post.json(self.files))}
        if mentions:
            data["mentions"] = json.dumps(mentions)
        self.event("posted", data, {"channel_id": channel})
        return post.id

    def event(self, kind: str, data: dict[str, Any], broadcast: dict[str, Any]) -> None:
        """An event on every open websocket (none open: nobody hears it)."""
        async def send() -> None:
            for ws in [ws for ws in self._sockets if not ws.closed]:
                self._seq += 1
                try:
                    await ws.send_str(json.dumps({"event": kind, "data": data, "broadcast": broadcast,
                                                  "seq": self._seq}))
                except ConnectionError:
                    pass

        asyncio.run_coroutine_threadsafe(send(), self.loop).result(10)

    def add_file(self, name: str, data: bytes) -> str:
        with self.lock:
            file_id = mid(f"file{len(self.files)}")
            self.files[file_id] = (name, data)
        return file_id

    def rate_limit(self, calls: int, retry_after: float) -> None:
        """The next `calls` posts and edits get a 429 with `Retry-After: retry_after`."""
        with self.lock:
            for what in SENDS:
                self.failures.append(Failure(what, 429, calls, retry_after))

    def refuse(self, calls: int) -> None:
        """The next `calls` new posts are refused for good (403: no permission to post); 0: none from now on."""
        with self.lock:
            self.failures = [f for f in self.failures if f.status != 403]
            if calls:
                self.failures.append(Failure("POST posts", 403, calls))

    def slow(self, calls: int, seconds: float) -> None:
        """The next `calls` new posts are answered `seconds` late, the post already made."""
        with self.lock:
            self.slowed += [seconds] * calls

    def down(self, down: bool = True) -> None:
        """While down, every call is a 503 and the websocket is closed and refused."""
        with self.lock:
            self.is_down = down
        if down:
            async def drop() -> None:
                for ws in list(self._sockets):
                    await ws.close()

            asyncio.run_coroutine_threadsafe(drop(), self.loop).result(10)

    # --- reading what happened ----------------------------------------------------------------------------------

    def bot_posts(self, channel: str, root_id: str | None = None) -> list[Post]:
        with self.lock:
            return sorted((p for p in self.posts if p.channel == channel and p.user == BOT and not p.delete_at
                           and (root_id is None or p.root_id == root_id)), key=lambda p: p.create_at)

    def shown(self, user: str) -> list[str]:
        """The text of the bot's posts in that person's DM as they look now, oldest first (posts of files alone
        show no text: `files_shown`)."""
        return [p.message for p in self.bot_posts(self.dm(user)) if p.message]

    def thread(self, channel: str, root_id: str) -> list[str]:
        return [p.message for p in self.bot_posts(channel, root_id)]

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        """The files the bot posted in that person's DM: (name, bytes, shown as an image)."""
        with self.lock:
            return [(self.files[f][0], self.files[f][1], _media(self.files[f][0]).startswith("image/"))
                    for p in self.bot_posts(self.dm(user)) for f in p.file_ids]

    def edits(self) -> int:
        with self.lock:
            return sum(p.edits for p in self.posts)

    def calls_to(self, method: str, path: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method and c.path == path]

    # --- the websocket --------------------------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self.lock:
            self.connections += 1
        self._sockets.append(ws)
        self._seq += 1
        await ws.send_str(json.dumps({"event": "hello", "data": {"server_version": "9.11.0"},
                                      "broadcast": {"user_id": BOT}, "seq": 0}))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    action = json.loads(msg.data)
                    await ws.send_str(json.dumps({"status": "OK", "seq_reply": action.get("seq")}))
        finally:
            self._sockets.remove(ws)
        return ws

    # --- REST -------------------------------------------------------------------------------------------------

    @web.middleware
    async def _gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """The token, the outage, scripted failures and late answers, before any endpoint."""
        what = {"/api/v4/posts": "POST posts"}.get(request.path, "PUT patch" if request.path.endswith("/patch")
                                                   else request.path)
        call = Call(request.method, request.path.removeprefix("/api/v4/"), 200)
        with self.lock:
            self.calls.append(call)
            if self.is_down:
                call.status = 503
                return web.Response(status=503, text="<html>Service Unavailable</html>", content_type="text/html")
            if request.headers.get("Authorization", "") != f"Bearer {TOKEN}":
                call.status = 401
                return _error(401, "api.context.session_expired.app_error")
            failure = next((f for f in self.failures if f.what == what and request.method in what), None)
            if failure is not None:
                failure.times -= 1
                if failure.times <= 0:
                    self.failures.remove(failure)
                call.status = failure.status
                if failure.status == 429:
                    return web.Response(status=429, text="limit exceeded\n",
                                        headers={"Retry-After": f"{failure.retry_after:g}", "X-Ratelimit-Limit": "10"})
                return _error(failure.status, "api.context.permissions.app_error")
            late = self.slowed.pop(0) if self.slowed and what == "POST posts" else 0.0
        response = await handler(request)
        call.status = response.status
        await asyncio.sleep(late)
        return response

    async def _me(self, request: web.Request) -> web.Response:
        return web.json_response(_user(BOT))

    async def _user(self, request: web.Request) -> web.Response:
        user = request.match_info["user"]
        return web.json_response(_user(user)) if user in USERS else _error(404, "app.user.missing_account.const")

    async def _teams(self, request: web.Request) -> web.Response:
        return web.json_response([{"id": TEAM, "name": "test", "display_name": "Test"}])

    async def _channels(self, request: web.Request) -> web.Response:
        """Every channel the bot is in (its DMs too, as Mattermost lists them in each team), with `last_post_at`."""
        with self.lock:
            last: dict[str, int] = {}
            for post in self.posts:
                last[post.channel] = max(last.get(post.channel, 0), post.create_at)
            return web.json_response([{**c, "last_post_at": last.get(c["id"], 0)} for c in self.channels.values()])

    async def _typing(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self.lock:
            self.typing.append((str(body.get("channel_id")), str(body.get("parent_id") or "")))
        return web.json_response({"status": "OK"})

    async def _direct(self, request: web.Request) -> web.Response:
        users = await request.json()
        if not (isinstance(users, list) and len(users) == 2 and all(u in USERS for u in users) and BOT in users):
            return _error(400, "api.context.invalid_body_param.app_error")
        other = next((u for u in users if u != BOT), BOT)
        return web.json_response(self.channels[self.dm(other)], status=201)

    async def _channel(self, request: web.Request) -> web.Response:
        found = self.channels.get(request.match_info["channel"])
        return web.json_response(found) if found else _error(404, "app.channel.get.existing.app_error")

    async def _channel_posts(self, request: web.Request) -> web.Response:
        channel = request.match_info["channel"]
        if channel not in self.channels:
            return _error(404, "app.channel.get.existing.app_error")
        since = int(request.query.get("since") or 0)
        with self.lock:
            found = sorted((p for p in self.posts if p.channel == channel
                            and max(p.update_at, p.create_at, p.delete_at) > since), key=lambda p: -p.create_at)
            return web.json_response({"order": [p.id for p in found], "posts": {p.id: p.json(self.files) for p in found},
                                      "next_post_id": "", "prev_post_id": ""})

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        channel, message = str(body.get("channel_id") or ""), str(body.get("message") or "")
        files, pending = [str(f) for f in body.get("file_ids") or []], str(body.get("pending_post_id") or "")
        with self.lock:
            again = next((p for p in self.posts if pending and p.pending == pending), None)
            if again is not None:
                return web.json_response(again.json(self.files), status=201)
            if channel not in self.channels:
                return _error(403, "api.context.permissions.app_error")
            if (not message.strip() and not files) or len(message) > LIMIT or any(f not in self.files for f in files):
                return _error(400, "model.post.is_valid.msg.app_error")
            post = Post(mid(f"post{self.now()}"), channel, BOT, message, self.now(), str(body.get("root_id") or ""),
                        files, pending)
            self.posts.append(post)
        return web.json_response(post.json(self.files), status=201)

    async def _patch(self, request: web.Request) -> web.Response:
        body = await request.json()
        message = str(body.get("message") or "")
        with self.lock:
            post = next((p for p in self.posts if p.id == request.match_info["post"] and not p.delete_at), None)
            if post is None:
                return _error(404, "app.post.get.app_error")
            if post.user != BOT:
                return _error(403, "api.context.permissions.app_error")
            if not message.strip() or len(message) > LIMIT:
                return _error(400, "model.post.is_valid.msg.app_error")
            post.message, post.update_at, post.edits = message, self.now(), post.edits + 1
            return web.json_response(post.json(self.files))

    async def _delete(self, request: web.Request) -> web.Response:
        with self.lock:
            post = next((p for p in self.posts if p.id == request.match_info["post"] and not p.delete_at), None)
            if post is None:
                return _error(404, "app.post.get.app_error")
            post.delete_at = self.now()
        return web.json_response({"status": "OK"})

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("files")
        if str(form.get("channel_id") or "") not in self.channels or not isinstance(upload, web.FileField):
            return _error(400, "api.file.upload_file.incorrect_channelId.app_error")
        file_id = self.add_file(upload.filename, upload.file.read())
        return web.json_response({"file_infos": [_info(file_id, *self.files[file_id])], "client_ids": []},
                                 status=201)

    async def _file(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["file"])
        if found is None:
            return _error(404, "app.file_info.get.app_error")
        return web.Response(body=found[1], content_type=_media(found[0]))


def _user(user: str) -> dict[str, Any]:
    name, first, last = USERS[user]
    return {"id": user, "username": name, "first_name": first, "last_name": last, "nickname": "",
            "is_bot": user == BOT}


def _media(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def _info(file_id: str, name: str, data: bytes) -> dict[str, Any]:
    return {"id": file_id, "name": name, "size": len(data), "mime_type": _media(name),
            "extension": name.rsplit(".", 1)[-1]}


def _error(status: int, error: str) -> web.Response:
    return web.json_response({"id": error, "message": error, "status_code": status, "request_id": mid(error)},
                             status=status)


class StandIn(MattermostServer):
    """The Mattermost stand-in as the shared channel cases (channel_harness.StandIn) use it."""


__all__ = ["BOT", "BOT_NAME", "GENERAL", "OWNER", "STRANGER", "TOKEN", "MattermostServer", "StandIn"]
