"""A Slack stand-in over real sockets, for tests: slack-sdk's AsyncWebClient and its Socket Mode client talk to it.

One aiohttp server, run on an event loop of its own in a thread, serves:
- the Web API under `/api/<method>` (what the channel calls: auth.test, apps.connections.open, chat.postMessage,
  chat.update, chat.delete, conversations.history, conversations.replies, users.info, assistant.threads.setStatus),
  each checking its token as Slack does (the bot token; the app token for apps.connections.open);
- `url_private` file downloads under `/files-pri/`, only with the bot token;
- the Socket Mode websocket that apps.connections.open hands out: `hello` on connecting, then `events_api` envelopes
  for what people write. An envelope the app does not acknowledge within `redeliver_after` seconds is sent again
  (`retry_attempt` counting up) at most `retries` times, and dropped after that, as Slack does; an envelope that
  finds no connection counts as a failed attempt and is retried as soon as a websocket connects (not at the next
  tick of the redelivery timer), so what is written before the app connects arrives when it does; once its
  attempts are spent only the history has it.

Tests script people (`write`), read what the bot did (`shown`, `thread`, `calls_to`, `acks`), and inject trouble:
the shared kinds of tests/stand_in_base.py (`rate_limit`: the next sends or edits get `ratelimited` 429s with
Retry-After; `refuse`: `not_in_channel`; `slow`; `down`: every call a 503, the websocket closed and refused), and
`fail` (a Slack error for one method).
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.stand_in_base import Call, Scripted

BOT_TOKEN = "xoxb-1-test-bot-token-do-not-log"
APP_TOKEN = "xapp-1-test-app-token-do-not-log"
BOT_USER = "U0BOT"
BOT_ID = "B0BOT"
BOT_NAME = "nano"
TEAM = "T0TEAM"
GENERAL = "C0GENERAL"
OWNER = "U0ANN"
STRANGER = "U0BOB"
NAMES = {OWNER: "Ann", STRANGER: "Bob", BOT_USER: BOT_NAME}
SENDS = ("chat.postMessage", "chat.update")


@dataclass
class Message:
    channel: str
    ts: str
    user: str
    text: str
    thread_ts: str = ""
    bot_id: str = ""
    files: list[dict[str, Any]] = field(default_factory=list)
    edits: int = 0
    deleted: bool = False

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "message", "user": self.user, "text": self.text, "ts": self.ts}
        if self.thread_ts:
            out["thread_ts"] = self.thread_ts
        if self.bot_id:
            out["bot_id"] = self.bot_id
        if self.files:
            out["files"], out["subtype"] = self.files, "file_share"
        return out


@dataclass
class Envelope:
    id: str
    payload: dict[str, Any]
    kind: str = "events_api"
    attempts: int = 0
    sent_at: float = 0.0  # time.monotonic() of the last attempt
    acked_at: float | None = None
    first_sent: float | None = None
    missed: bool = False  # its last attempt found no websocket: the next connection gets it at once


@dataclass
class Failure:
    method: str
    status: int
    error: str
    retry_after: float | None = None
    times: int = 1


class SlackAPI(Scripted):
    channel = "slack"
    owner = OWNER
    stranger = STRANGER

    def __init__(self, redeliver_after: float = 3.0, retries: int = 3):
        super().__init__()
        self.redeliver_after = redeliver_after
        self.retries = retries
        self.lock = self.cond
        self.messages: list[Message] = []
        self.envelopes: list[Envelope] = []
        self.failures: list[Failure] = []
        self.files: dict[str, tuple[str, bytes]] = {}
        self.upload_lengths: dict[str, int] = {}  # file id -> the length files.getUploadURLExternal was told
        self.statuses: list[tuple[str, str, str]] = []  # assistant.threads.setStatus: channel, thread, status
        self.connections = 0  # websocket connections made so far
        self.socket_refused = False  # the websocket alone refuses (the Web API answers)
        self._clock = 0
        self._next_envelope = 0
        self._sockets: list[web.WebSocketResponse] = []
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self._thread.start()
        started.wait(10)

    # --- the server's life --------------------------------------------------------------------------------

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/files-pri/{team}/{file}/{name}", self._file)
        app.router.add_get("/socket", self._socket)
        app.router.add_post("/upload/{file}", self._upload)
        self._runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._redeliverer = self.loop.create_task(self._redeliver())
        started.set()
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/"

    def close(self) -> None:
        async def stop() -> None:
            self._redeliverer.cancel()
            for ws in list(self._sockets):
                await ws.close()
            await self._runner.cleanup()

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def settings(self) -> dict[str, Any]:
        """`channels.slack` pointing at this stand-in, enabled, the owner allowed."""
        return {"enabled": True, "botToken": BOT_TOKEN, "appToken": APP_TOKEN, "allowFrom": [OWNER], "owner": [OWNER],
                "apiBase": self.api_base}

    # --- scripting ----------------------------------------------------------------------------------------

    def ts(self) -> str:
        with self.lock:
            self._clock += 1
            return f"{int(time.time())}.{self._clock:06d}"

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              channel: str | None = None, thread_ts: str = "", mention: bool = True,
              file: tuple[str, str, bytes] | None = None) -> str:
        """A person writes: a DM (`private`), or in a channel, mentioning the bot unless `mention` is False; in
        a thread when `thread_ts` is given. Its ts."""
        channel = channel or (f"D{user}" if private else GENERAL)
        if not private and mention and f"<@{BOT_USER}>" not in text:
            text = f"<@{BOT_USER}> {text}"
        files = []
        if image is not None:
            files.append(self.add_file("photo.png", "image/png", image))
        if file is not None:
            files.append(self.add_file(*file))
        message = Message(channel, self.ts(), user, text, thread_ts, files=files)
        with self.lock:
            self.messages.append(message)
        event = {**message.json(), "channel": channel, "event_ts": message.ts,
                 "channel_type": "im" if channel.startswith("D") else "channel"}
        if thread_ts and thread_ts != message.ts:
            parent = self._find(channel, thread_ts)
            event["parent_user_id"] = parent.user if parent else user
        self.event(event)
        if not channel.startswith("D") and f"<@{BOT_USER}>" in text:
            mention_event = {k: v for k, v in event.items() if k not in ("channel_type", "subtype")}
            self.event({**mention_event, "type": "app_mention"})
        return message.ts

    def event(self, event: dict[str, Any]) -> str:
        """An events_api envelope for `event`, sent now if a websocket is connected; its envelope id."""
        return self.send_envelope("events_api", {
            "token": "verification-token", "team_id": TEAM, "api_app_id": "A0APP", "event": event,
            "type": "event_callback", "event_id": f"Ev{self._next_envelope + 1:08d}", "event_time": int(time.time())})

    def send_envelope(self, kind: str, payload: dict[str, Any]) -> str:
        """An envelope of `kind` (events_api, slash_commands, interactive), sent now if a websocket is connected."""
        with self.lock:
            self._next_envelope += 1
            envelope = Envelope(f"env-{self._next_envelope}", payload, kind=kind)
            self.envelopes.append(envelope)
        asyncio.run_coroutine_threadsafe(self._deliver(envelope), self.loop).result(10)
        return envelope.id

    def add_file(self, name: str, mimetype: str, data: bytes) -> dict[str, Any]:
        with self.lock:
            file_id = f"F{len(self.files) + 1:08d}"
            self.files[file_id] = (name, data)
        url = f"{self.url}/files-pri/{TEAM}-{file_id}/{file_id}/{urllib.parse.quote(name)}"
        return {"id": file_id, "name": name, "title": name, "mimetype": mimetype, "filetype": name.rsplit(".")[-1],
                "size": len(data), "mode": "hosted", "url_private": url, "url_private_download": url + "?download=1"}

    def fail(self, method: str, error: str, status: int = 200, times: int = 1) -> None:
        with self.lock:
            self.failures.append(Failure(method, status, error, None, times))

    def down(self, down: bool = True) -> None:
        """While down, every API call is a 503 and the websocket is closed and refused."""
        super().down(down)
        if down:
            async def drop() -> None:
                for ws in list(self._sockets):
                    await ws.close()

            asyncio.run_coroutine_threadsafe(drop(), self.loop).result(10)

    def disconnect(self) -> None:
        """Slack's `disconnect` message (refresh_requested) on every open websocket."""
        async def send() -> None:
            for ws in list(self._sockets):
                await ws.send_str(json.dumps({"type": "disconnect", "reason": "refresh_requested"}))

        asyncio.run_coroutine_threadsafe(send(), self.loop).result(10)

    # --- reading what happened ------------------------------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method and c.status == 200 and not c.error]

    def bot_messages(self, channel: str, thread_ts: str | None = None) -> list[Message]:
        """The bot's messages in a channel (in one thread, or outside threads with ""), as they stand now."""
        with self.lock:
            return [m for m in self.messages if m.channel == channel and m.user == BOT_USER and not m.deleted
                    and (thread_ts is None or m.thread_ts == thread_ts)]

    def shown(self, user: str) -> list[str]:
        """The bot's messages in that person's DM as they look now, oldest first."""
        return [m.text for m in self.bot_messages(f"D{user}")]

    def thread(self, channel: str, thread_ts: str) -> list[str]:
        return [m.text for m in self.bot_messages(channel, thread_ts)]

    def edits(self) -> int:
        with self.lock:
            return sum(m.edits for m in self.messages)

    def acked(self) -> list[Envelope]:
        with self.lock:
            return [e for e in self.envelopes if e.acked_at is not None]

    def unacked(self) -> list[Envelope]:
        with self.lock:
            return [e for e in self.envelopes if e.acked_at is None]

    # --- the websocket ----------------------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self.is_down or self.socket_refused:
            return web.Response(status=503, text="down")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self.lock:
            self.connections += 1
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1,
                                      "connection_info": {"app_id": "A0APP"},
                                      "debug_info": {"host": "stand-in", "approximate_connection_time": 3600}}))
        self._sockets.append(ws)  # after `hello`: nothing reaches the app before it
        with self.lock:
            missed = [e for e in self.envelopes if e.missed and e.acked_at is None]
        for envelope in missed:
            await self._deliver(envelope)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                envelope_id = data.get("envelope_id")
                with self.lock:
                    for envelope in self.envelopes:
                        if envelope.id == envelope_id and envelope.acked_at is None:
                            envelope.acked_at = time.monotonic()
        finally:
            self._sockets.remove(ws)
        return ws

    async def _deliver(self, envelope: Envelope) -> None:
        with self.lock:
            if envelope.acked_at is not None or envelope.attempts > self.retries:
                return
            envelope.attempts += 1
            envelope.sent_at = time.monotonic()
            envelope.first_sent = envelope.first_sent or envelope.sent_at
        sockets = [ws for ws in self._sockets if not ws.closed]
        envelope.missed = not sockets or self.is_down
        if envelope.missed:
            return  # a failed attempt: nobody listening
        message = {"envelope_id": envelope.id, "type": envelope.kind, "accepts_response_payload": False,
                   "retry_attempt": envelope.attempts - 1,
                   "retry_reason": "timeout" if envelope.attempts > 1 else "", "payload": envelope.payload}
        try:
            await sockets[-1].send_str(json.dumps(message))
        except ConnectionError:
            pass

    async def _redeliver(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            with self.lock:
                due = [e for e in self.envelopes if e.acked_at is None and e.attempts <= self.retries
                       and now - e.sent_at >= self.redeliver_after]
            for envelope in due:
                await self._deliver(envelope)

    # --- the Web API --------------------------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                params.update(await request.json())
            else:
                params.update(dict(await request.post()))
        call = self.record(Call(method, params))
        with self.lock:
            if self.is_down:
                call.status = 503
                return web.Response(status=503, text="<html>Service Unavailable</html>", content_type="text/html")
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            wanted = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
            if token != wanted:
                call.error = "invalid_auth"
                return web.json_response({"ok": False, "error": "invalid_auth"})
            failure = self._scripted_failure(method)
            if failure is not None:
                call.status, call.error = failure.status, failure.error
                headers = {"Retry-After": f"{failure.retry_after:g}"} if failure.retry_after is not None else {}
                return web.json_response({"ok": False, "error": failure.error}, status=failure.status,
                                         headers=headers)
            handler = getattr(self, "_api_" + method.replace(".", "_"), None)
            if handler is None:
                call.error = "unknown_method"
                return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
            body = handler(params)
            if not body.get("ok"):
                call.error = body.get("error", "?")
            late = self.take_delay() if method == "chat.postMessage" else 0.0
        await asyncio.sleep(late)
        return web.json_response(body)

    def _scripted_failure(self, method: str) -> Failure | None:
        """The trouble scripted for this call: a rate limit (sends and edits), a refusal (sends), a `fail`."""
        retry_after = self.take_limit() if method in SENDS else None
        if retry_after is not None:
            return Failure(method, 429, "ratelimited", retry_after)
        if method == "chat.postMessage" and self.take_refusal():
            return Failure(method, 200, "not_in_channel")
        failure = next((f for f in self.failures if f.method == method), None)
        if failure is not None:
            failure.times -= 1
            if failure.times <= 0:
                self.failures.remove(failure)
        return failure

    def _api_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": "https://test.slack.com/", "team": "Test", "user": BOT_NAME, "team_id": TEAM,
                "user_id": BOT_USER, "bot_id": BOT_ID}

    def _api_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/socket?ticket=t{len(self.calls)}"}

    def _api_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        text, channel = str(params.get("text") or ""), str(params.get("channel") or "")
        if channel.startswith("U"):
            channel = f"D{channel}"  # a person's id: their DM with the app
        problem = _check_text(text)
        if problem:
            return {"ok": False, "error": problem}
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        message = Message(channel, self.ts(), BOT_USER, text, str(params.get("thread_ts") or ""), bot_id=BOT_ID)
        self.messages.append(message)
        return {"ok": True, "channel": channel, "ts": message.ts, "message": message.json()}

    def _api_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        text = str(params.get("text") or "")
        problem = _check_text(text)
        if problem:
            return {"ok": False, "error": problem}
        message = self._find(str(params.get("channel")), str(params.get("ts")))
        if message is None or message.deleted:
            return {"ok": False, "error": "message_not_found"}
        if message.user != BOT_USER:
            return {"ok": False, "error": "cant_update_message"}
        message.text = text
        message.edits += 1
        return {"ok": True, "channel": message.channel, "ts": message.ts, "text": text}

    def _api_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._find(str(params.get("channel")), str(params.get("ts")))
        if message is None or message.deleted:
            return {"ok": False, "error": "message_not_found"}
        message.deleted = True
        return {"ok": True, "channel": message.channel, "ts": message.ts}

    def _api_conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        user = str(params.get("users") or "")
        if user not in NAMES:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "channel": {"id": f"D{user}"}}

    def _api_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel"))
        found = [m for m in self.messages if m.channel == channel and not m.deleted
                 and (not m.thread_ts or m.thread_ts == m.ts)]
        return self._page(found, params, newest_first=True)

    def _api_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel")), str(params.get("ts"))
        parent = self._find(channel, ts)
        if parent is None:
            return {"ok": False, "error": "thread_not_found"}
        replies = [m for m in self.messages if m.channel == channel and not m.deleted and m.thread_ts == ts
                   and m.ts != ts]
        page = self._page(replies, params, newest_first=False)
        page["messages"] = [{**parent.json(), "thread_ts": ts}, *page["messages"]]
        return page

    def _page(self, found: list[Message], params: dict[str, Any], newest_first: bool) -> dict[str, Any]:
        oldest, latest = float(params.get("oldest") or 0), float(params.get("latest") or 0)
        found = [m for m in found if float(m.ts) > oldest and (not latest or float(m.ts) < latest)]
        found.sort(key=lambda m: float(m.ts), reverse=newest_first)
        start, limit = int(params.get("cursor") or 0), int(params.get("limit") or 100)
        page = found[start:start + limit]
        more = start + limit < len(found)
        return {"ok": True, "messages": [m.json() for m in page], "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _api_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = str(params.get("user"))
        if user not in NAMES:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": {"id": user, "name": NAMES[user].lower(), "real_name": NAMES[user],
                                     "profile": {"display_name": NAMES[user], "real_name": NAMES[user]}}}

    def _api_assistant_threads_setStatus(self, params: dict[str, Any]) -> dict[str, Any]:
        self.statuses.append((str(params.get("channel_id")), str(params.get("thread_ts")),
                              str(params.get("status"))))
        return {"ok": True}

    def _find(self, channel: str, ts: str) -> Message | None:
        with self.lock:
            return next((m for m in self.messages if m.channel == channel and m.ts == ts), None)

    # --- files --------------------------------------------------------------------------------------------------

    async def _file(self, request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        with self.lock:
            self.record(Call("files-pri", {"file": request.match_info["file"]},
                             error="" if token == BOT_TOKEN else "not_authed"))
            if self.is_down:
                return web.Response(status=503)
            found = self.files.get(request.match_info["file"])
        if token != BOT_TOKEN:  # Slack answers a login page; a test wants to see the refusal plainly
            return web.Response(status=403, text="not_authed")
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found[1], content_type="application/octet-stream")

    # --- files the bot uploads (files_upload_v2: getUploadURLExternal, the upload, completeUploadExternal) -------

    def _api_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        name, length = str(params.get("filename") or ""), str(params.get("length") or "")
        if not name or not length.isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        with self.lock:
            file_id = f"F{len(self.files) + 1:08d}"
            self.files[file_id] = (name, b"")
            self.upload_lengths[file_id] = int(length)
        return {"ok": True, "upload_url": f"{self.url}/upload/{file_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        with self.lock:
            file_id = request.match_info["file"]
            self.record(Call("upload", {"file": file_id}))
            if file_id not in self.files or self.is_down:
                return web.Response(status=404 if not self.is_down else 503, text="Not Found")
            if len(data) != self.upload_lengths.get(file_id):
                return web.Response(status=400, text="length mismatch")
            self.files[file_id] = (self.files[file_id][0], data)
        return web.Response(text=f"OK - {len(data)}")

    def _api_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        listed = json.loads(str(params.get("files") or "[]"))
        channel = str(params.get("channel_id") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if any(f.get("id") not in self.files or not self.files[f["id"]][1] for f in listed):
            return {"ok": False, "error": "file_not_found"}
        shared = []
        for f in listed:
            name, data = self.files[f["id"]]
            shared.append({**self.add_file_json(f["id"], name, data), "title": f.get("title") or name})
        message = Message(channel, self.ts(), BOT_USER, str(params.get("initial_comment") or ""),
                          str(params.get("thread_ts") or ""), bot_id=BOT_ID, files=shared)
        self.messages.append(message)
        return {"ok": True, "files": [{"id": f["id"], "title": f["title"]} for f in shared]}

    def add_file_json(self, file_id: str, name: str, data: bytes) -> dict[str, Any]:
        """A file as Slack describes it, its type told by its name (Slack looks at both)."""
        mimetype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        url = f"{self.url}/files-pri/{TEAM}-{file_id}/{file_id}/{urllib.parse.quote(name)}"
        return {"id": file_id, "name": name, "mimetype": mimetype, "filetype": name.rsplit(".")[-1], "size": len(data),
                "mode": "hosted", "url_private": url, "url_private_download": url + "?download=1"}

    def uploaded(self, channel: str, thread_ts: str = "") -> list[tuple[str, bytes, str]]:
        """The files the bot shared in a channel (a DM: "D" + the person's id), or in one of its threads, oldest
        first: (name, bytes, mimetype)."""
        with self.lock:
            return [(f["name"], self.files[f["id"]][1], f["mimetype"]) for m in self.messages
                    if m.channel == channel and m.user == BOT_USER and m.thread_ts == thread_ts for f in m.files]


def _check_text(text: str) -> str:
    if not text.strip():
        return "no_text"
    if len(text) > 40_000:
        return "msg_too_long"
    return ""


class StandIn(SlackAPI):
    """The Slack stand-in as the shared channel cases (channel_harness.StandIn) use it."""

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        """The files the bot shared in that person's DM, in any thread: (name, bytes, shown as an image)."""
        with self.lock:
            return [(f["name"], self.files[f["id"]][1], f["mimetype"].startswith("image/")) for m in self.messages
                    if m.channel == f"D{user}" and m.user == BOT_USER for f in m.files]


__all__ = ["APP_TOKEN", "BOT_ID", "BOT_TOKEN", "BOT_USER", "GENERAL", "OWNER", "STRANGER", "SlackAPI", "StandIn"]
