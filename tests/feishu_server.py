"""A Feishu / Lark open platform stand-in over real sockets, for tests: lark-oapi's client and the channel's long
connection talk to it as to open.feishu.cn.

One aiohttp server, run on an event loop of its own in a thread, serves:
- the REST endpoints the channel calls (`/open-apis/auth/v3/tenant_access_token/internal`, `bot/v3/info`,
  `contact/v3/users/{id}`, `im/v1/messages` (create with `receive_id_type` and `uuid`, PATCH, DELETE),
  `im/v1/images`, `im/v1/files`, `im/v1/messages/{id}/resources/{key}`), each but the token's checking the
  tenant_access_token (`Authorization: Bearer`) as the platform does (code 99991663 otherwise); a new message's
  `uuid` answers a repeat with the first message;
- the long connection: POST `/callback/ws/endpoint` with the app's id and secret gives a websocket URL with a
  `service_id`; on it each event is a pbbp2 `Frame` (lark-oapi's own protobuf: method 1, headers `type: event`,
  `message_id`, `sum`, `seq`, `trace_id`, the event's JSON as payload), answered by the client with the same frame
  carrying `{"code": 200}`; an event not answered is sent again on the next connection, as the platform does;
  a ping frame gets a pong.

Tests script people (`write`), read what the bot did (`shown`, `files_shown`), and inject trouble: `rate_limit`
(429 with code 99991400 and `x-ogw-ratelimit-reset`), `refuse` (code 230013: the bot cannot reach the person),
`slow`, and `down` (every call a 503, the websocket closed and refused).
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

from tests.conftest import PATIENCE
from tests.stand_in_base import Call, Scripted


def oid(prefix: str, seed: str) -> str:
    return f"{prefix}_{hashlib.sha256(seed.encode()).hexdigest()[:32]}"


APP_ID = "cli_a1b2c3d4e5f60001"
APP_SECRET = "feishu-app-secret-do-not-log-0123456789"
TOKEN = "t-feishu-tenant-token-do-not-log-987654"
BOT = oid("ou", "bot")
BOT_NAME = "nano"
OWNER = oid("ou", "ann")
STRANGER = oid("ou", "bob")
GROUP = oid("oc", "group")
USERS = {BOT: "nano", OWNER: "Ann Lee", STRANGER: "Bob Ray"}
SERVICE = 7
LIMIT = 30_000  # bytes of a message's content


@dataclass
class Message:
    id: str
    to: str  # the receive id: an open id or a chat id
    kind: str  # interactive | image | file
    content: dict[str, Any]
    uuid: str = ""
    edits: int = 0
    deleted: bool = False


@dataclass
class Pending:
    """An event sent on the long connection and not yet answered."""

    id: str
    payload: bytes
    answered: bool = False
    sent: int = 0
    # the connections it went out on: a connection opening while it is written gets it once (its unanswered
    # events on connect, or the push), not from both
    on: list[Any] = field(default_factory=list)


@dataclass
class FeishuServer:
    channel: str = "feishu"
    owner: str = OWNER
    stranger: str = STRANGER
    script: Scripted = field(default_factory=Scripted)

    def __post_init__(self) -> None:
        self.lock = self.script.cond
        self.messages: list[Message] = []
        self.files: dict[str, tuple[str, bytes]] = {}  # image or file key -> (name, bytes)
        self.events: list[Pending] = []
        self.connections = 0
        self.token = TOKEN  # the tenant_access_token now valid (`expire_token` makes a new one)
        self.parts = 1  # frames each event is sent in
        self._sockets: list[web.WebSocketResponse] = []
        self._seq = 0
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self._thread.start()
        started.wait(PATIENCE)

    # --- the server's life ------------------------------------------------------------------------------------

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        # the SDK's protobuf class frames the events, imported here: importing lark_oapi takes seconds and 140 MiB,
        # paid only where a stand-in runs (not where a test module is collected), and its `ws.client` takes the
        # current event loop at import (this thread's, not the test's)
        from lark_oapi.ws.pb.pbbp2_pb2 import Frame

        self.Frame = Frame
        app = web.Application(middlewares=[self._gate])
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._socket)
        app.router.add_get("/open-apis/bot/v3/info", self._bot)
        app.router.add_get("/open-apis/contact/v3/users/{user}", self._user)
        app.router.add_post("/open-apis/im/v1/messages", self._create)
        app.router.add_patch("/open-apis/im/v1/messages/{id}", self._patch)
        app.router.add_delete("/open-apis/im/v1/messages/{id}", self._delete)
        app.router.add_post("/open-apis/im/v1/images", self._upload)
        app.router.add_post("/open-apis/im/v1/files", self._upload)
        app.router.add_get("/open-apis/im/v1/messages/{id}/resources/{key}", self._resource)
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
        """`channels.feishu` pointing at this stand-in, enabled, the owner allowed."""
        return {"enabled": True, "appId": APP_ID, "appSecret": APP_SECRET, "apiBase": self.url,
                "allowFrom": [OWNER], "owner": [OWNER]}

    # --- scripting ----------------------------------------------------------------------------------------------

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              file: tuple[str, str, bytes] | None = None, mention: bool = True) -> str:
        """A person sends a message: in their private chat with the bot, or in the group mentioning the bot (unless
        `mention` is False). Text alone is a `text` message; with an image or a file, a `post` holding both (an
        image or file alone: an `image` or `file` message). The message's id."""
        mentions = []
        if not private and mention:
            text = f"@_user_1 {text}"
            mentions = [{"key": "@_user_1", "id": {"open_id": BOT, "union_id": oid("on", "bot"), "user_id": ""},
                         "name": BOT_NAME, "tenant_key": "tenant"}]
        attached: list[dict[str, Any]] = []
        if image is not None:
            attached.append({"tag": "img", "image_key": self.add_file("img", "", image)})
        if file is not None:
            attached.append({"tag": "file", "file_key": self.add_file("file", file[0], file[2]),
                             "file_name": file[0]})
        if attached and text.strip():
            kind, content = "post", {"title": "", "content": [[{"tag": "text", "text": text}], attached]}
        elif attached:
            one = attached[0]
            kind, content = ("image", {"image_key": one["image_key"]}) if one["tag"] == "img" else (
                "file", {"file_key": one["file_key"], "file_name": one["file_name"]})
        else:
            kind, content = "text", {"text": text}
        with self.lock:
            self._seq += 1
            message_id = oid("om", f"message{self._seq}{time.time_ns()}")
        event = {"schema": "2.0",
                 "header": {"event_id": oid("ev", message_id), "event_type": "im.message.receive_v1",
                            "create_time": str(int(time.time() * 1000)), "token": "", "app_id": APP_ID,
                            "tenant_key": "tenant"},
                 "event": {"sender": {"sender_id": {"open_id": user, "union_id": oid("on", user), "user_id": ""},
                                      "sender_type": "user", "tenant_key": "tenant"},
                           "message": {"message_id": message_id, "root_id": "", "parent_id": "",
                                       "create_time": str(int(time.time() * 1000)),
                                       "chat_id": oid("oc", "p2p" + user) if private else GROUP,
                                       "chat_type": "p2p" if private else "group", "message_type": kind,
                                       "content": json.dumps(content), "mentions": mentions}}}
        pending = Pending(message_id, json.dumps(event).encode())
        with self.lock:
            self.events.append(pending)
        asyncio.run_coroutine_threadsafe(self._push(pending), self.loop).result(10)
        return message_id

    def add_file(self, prefix: str, name: str, data: bytes) -> str:
        with self.lock:
            key = oid(prefix + "_v3", f"{prefix}{len(self.files)}")
            self.files[key] = (name, data)
        return key

    def rate_limit(self, calls: int, retry_after: float) -> None:
        self.script.rate_limit(calls, retry_after)

    def refuse(self, calls: int) -> None:
        self.script.refuse(calls)

    def slow(self, calls: int, seconds: float) -> None:
        self.script.slow(calls, seconds)

    def down(self, down: bool = True) -> None:
        """While down, every call is a 503 and the long connection is closed and refused."""
        self.script.down(down)
        if down:
            async def drop() -> None:
                for ws in list(self._sockets):
                    await ws.close()

            asyncio.run_coroutine_threadsafe(drop(), self.loop).result(10)

    # --- reading what happened ----------------------------------------------------------------------------------

    def bot_messages(self, to: str) -> list[Message]:
        with self.lock:
            return [m for m in self.messages if m.to == to and not m.deleted]

    def shown(self, user: str) -> list[str]:
        """The Markdown of the bot's cards in that person's private chat as they look now, oldest first."""
        return [shown_card(m.content) for m in self.bot_messages(user) if m.kind == "interactive"]

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        """The images and files the bot sent to that person: (name, bytes, shown as an image)."""
        found = []
        for m in self.bot_messages(user):
            if m.kind in ("image", "file"):
                name, data = self.files[m.content["image_key" if m.kind == "image" else "file_key"]]
                found.append((name, data, m.kind == "image"))
        return found

    def expire_token(self) -> None:
        """The tenant_access_token given so far is refused from now on (code 99991663); a new one is given."""
        with self.lock:
            self.token = f"{TOKEN}-{len(self.script.calls)}"

    def calls_to(self, method: str, path: str) -> list[Call]:
        with self.lock:
            return [c for c in self.script.calls if c.method == method and c.path == path]

    def edits(self) -> int:
        with self.lock:
            return sum(m.edits for m in self.messages)

    def unanswered(self) -> list[str]:
        with self.lock:
            return [e.id for e in self.events if not e.answered]

    # --- the long connection --------------------------------------------------------------------------------------

    async def _push(self, pending: Pending) -> None:
        for ws in [ws for ws in self._sockets if not ws.closed]:
            await self._send_event(ws, pending)

    async def _send_event(self, ws: web.WebSocketResponse, pending: Pending) -> None:
        """The event in `self.parts` frames (the platform splits a large payload), the last part first; once a
        connection."""
        if any(sent is ws for sent in pending.on):
            return
        pending.on.append(ws)
        size = -(-len(pending.payload) // self.parts)
        pieces = [pending.payload[at:at + size] for at in range(0, len(pending.payload), size)]
        pending.sent += 1
        for seq in reversed(range(len(pieces))):
            frame = self.Frame(SeqID=pending.sent, LogID=0, service=SERVICE, method=1, payload=pieces[seq])
            for key, value in (("type", "event"), ("message_id", pending.id), ("sum", str(len(pieces))),
                               ("seq", str(seq)), ("trace_id", oid("tr", pending.id))):
                frame.headers.add(key=key, value=value)
            try:
                await ws.send_bytes(frame.SerializeToString())
            except ConnectionError:
                return

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self.script.is_down or request.query.get("service_id") != str(SERVICE):
            return web.Response(status=503)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self.lock:
            self.connections += 1
            again = [e for e in self.events if not e.answered]
        self._sockets.append(ws)
        for pending in again:  # what the last connection left unanswered
            await self._send_event(ws, pending)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    await self._on_frame(ws, msg.data)
        finally:
            self._sockets.remove(ws)
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, data: bytes) -> None:
        frame = self.Frame()
        frame.ParseFromString(data)
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == 0 and headers.get("type") == "ping":
            pong = self.Frame(SeqID=0, LogID=0, service=SERVICE, method=0)
            pong.headers.add(key="type", value="pong")
            await ws.send_bytes(pong.SerializeToString())
        elif frame.method == 1 and json.loads(frame.payload or b"{}").get("code") == 200:
            with self.lock:
                for pending in self.events:
                    if pending.id == headers.get("message_id"):
                        pending.answered = True

    # --- REST -------------------------------------------------------------------------------------------------

    @web.middleware
    async def _gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """The outage, the token, scripted failures and late answers, before any endpoint."""
        sending = request.method == "POST" and request.path == "/open-apis/im/v1/messages"
        editing = request.method == "PATCH"
        with self.lock:
            self.script.record(Call(request.method, path=request.path))
            if self.script.is_down and request.path != "/ws":
                return web.Response(status=503, text="<html>503 Service Temporarily Unavailable</html>",
                                    content_type="text/html")
            open_paths = ("/open-apis/auth/v3/tenant_access_token/internal", "/callback/ws/endpoint", "/ws")
            if request.path not in open_paths and request.headers.get("Authorization") != f"Bearer {self.token}":
                return _error(401, 99991663, "Invalid access token for authorization.")
            limit = self.script.take_limit() if sending or editing else None
            if limit is not None:
                return web.json_response({"code": 99991400, "msg": "request trigger frequency limit"}, status=429,
                                         headers={"x-ogw-ratelimit-reset": f"{limit:g}"})
            if sending and self.script.take_refusal():
                return _error(400, 230013, "Bot has NO availability to this user.")
            late = self.script.take_delay() if sending else 0.0
        response = await handler(request)
        await asyncio.sleep(late)
        return response

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("app_id") != APP_ID or body.get("app_secret") != APP_SECRET:
            return _error(400, 10014, "app secret invalid")
        return web.json_response({"code": 0, "msg": "ok", "tenant_access_token": self.token,
                                  "expire": 7200})

    async def _endpoint(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("AppID") != APP_ID or body.get("AppSecret") != APP_SECRET:
            return _error(200, 1000040343, "app secret invalid")
        return web.json_response({"code": 0, "msg": "ok", "data": {
            "URL": f"ws://127.0.0.1:{self.port}/ws?device_id=d1&service_id={SERVICE}",
            "ClientConfig": {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": 120}}})

    async def _bot(self, request: web.Request) -> web.Response:
        return web.json_response({"code": 0, "msg": "ok", "bot": {"activate_status": 2, "app_name": BOT_NAME,
                                                                 "avatar_url": "", "ip_white_list": [],
                                                                 "open_id": BOT}})

    async def _user(self, request: web.Request) -> web.Response:
        user = request.match_info["user"]
        if user not in USERS:
            return _error(400, 41050, "no user authority error")
        return web.json_response({"code": 0, "msg": "success", "data": {"user": {"open_id": user,
                                                                                  "name": USERS[user]}}})

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        to, kind, key = str(body.get("receive_id") or ""), str(body.get("msg_type") or ""), str(body.get("uuid") or "")
        content = _json(body.get("content"))
        with self.lock:
            again = next((m for m in self.messages if key and m.uuid == key), None)
            if again is not None:
                return _message(again)
            id_type = request.query.get("receive_id_type")
            if (id_type == "open_id" and to not in USERS) or (id_type == "chat_id" and not to.startswith("oc_")):
                return _error(400, 230001, "Your request contains an invalid request parameter.")
            if kind not in ("interactive", "image", "file") or not content or len(str(body["content"])) > LIMIT:
                return _error(400, 230025, "The message content is invalid.")
            if kind == "interactive" and not shown_card(content).strip():
                return _error(400, 230099, "Failed to create card content.")
            made = Message(oid("om", f"bot{len(self.messages)}{time.time_ns()}"), to, kind, content, key)
            self.messages.append(made)
        return _message(made)

    async def _patch(self, request: web.Request) -> web.Response:
        content = _json((await request.json()).get("content"))
        with self.lock:
            found = next((m for m in self.messages if m.id == request.match_info["id"] and not m.deleted), None)
            if found is None:
                return _error(400, 230011, "The message was withdrawn.")
            if found.kind != "interactive" or not shown_card(content).strip():
                return _error(400, 230099, "Failed to create card content.")
            found.content, found.edits = content, found.edits + 1
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _delete(self, request: web.Request) -> web.Response:
        with self.lock:
            found = next((m for m in self.messages if m.id == request.match_info["id"]), None)
            if found is None:
                return _error(400, 230011, "The message was withdrawn.")
            found.deleted = True
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        image = request.path.endswith("/images")
        upload = form.get("image" if image else "file")
        if not isinstance(upload, web.FileField):
            return _error(400, 234001, "Invalid request param.")
        name = upload.filename if image else str(form.get("file_name") or upload.filename)
        key = self.add_file("img" if image else "file", name, upload.file.read())
        return web.json_response({"code": 0, "msg": "success", "data": {"image_key" if image else "file_key": key}})

    async def _resource(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["key"])
        if found is None or request.query.get("type") not in ("image", "file"):
            return _error(400, 234003, "File not in msg.")
        return web.Response(body=found[1], content_type=mimetypes.guess_type(found[0])[0] or "application/octet-stream")


def shown_card(content: dict[str, Any]) -> str:
    """A card's text as it shows: its markdown elements' Markdown, `&#60;` as `<`."""
    elements = (content.get("body") or {}).get("elements") or content.get("elements") or []
    return "\n".join(str(e.get("content") or "") for e in elements if e.get("tag") == "markdown").replace("&#60;", "<")


def _message(message: Message) -> web.Response:
    return web.json_response({"code": 0, "msg": "success", "data": {
        "message_id": message.id, "msg_type": message.kind, "create_time": str(int(time.time() * 1000)),
        "chat_id": message.to if message.to.startswith("oc_") else oid("oc", "p2p" + message.to),
        "sender": {"id": APP_ID, "id_type": "app_id", "sender_type": "app"},
        "body": {"content": json.dumps(message.content)}}})


def _json(text: Any) -> dict[str, Any]:
    try:
        found = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _error(status: int, code: int, msg: str) -> web.Response:
    return web.json_response({"code": code, "msg": msg}, status=status)


class StandIn(FeishuServer):
    """The Feishu / Lark stand-in as the shared channel cases (channel_harness.StandIn) use it."""


__all__ = ["APP_ID", "APP_SECRET", "BOT", "GROUP", "OWNER", "STRANGER", "TOKEN", "FeishuServer", "StandIn"]
