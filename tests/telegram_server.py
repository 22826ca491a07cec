"""A Telegram Bot API stand-in over real HTTP, for tests: python-telegram-bot and `nanoagent gateway` talk to it.

Tests script updates (`api.message(...)`), read what the bot did (`api.calls`, `api.chat(chat_id)`), and inject
trouble: the shared kinds of tests/stand_in_base.py (`rate_limit`: 429s with retry_after, `refuse`: the bot blocked,
`slow`, `down`: the whole server gone, then `api.up()` on the same port), a scripted error for a method
(`api.fail(...)`), methods the server does not know (`api.unknown`), HTML it refuses (any containing
`api.reject_marker`).

Like Telegram: getUpdates long-polls and forgets the updates below the offset it is given; text is checked after
parsing its HTML (at most 4,096 UTF-16 units, not empty, tags known and nested); an edit to the same content is
"message is not modified".
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.stand_in_base import Call, Scripted

TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre", "blockquote", "tg-spoiler",
        "span", "tg-emoji"}
BOT = {"id": 777000, "is_bot": True, "first_name": "Nano", "username": "nano_test_bot"}


@dataclass
class Failure:
    method: str
    status: int
    description: str
    retry_after: float | None = None
    times: int = 1


@dataclass
class Shown:
    """A message the bot sent, as it stands now."""

    message_id: int
    chat_id: int
    text: str  # the visible text (HTML parsed)
    raw: str  # what the bot sent
    parse_mode: str | None
    thread_id: int | None
    edits: int = 0


@dataclass
class _State:
    updates: list[dict[str, Any]] = field(default_factory=list)
    next_update: int = 5000
    next_message: int = 1
    chats: dict[int, dict[str, Any]] = field(default_factory=dict)


class BotAPI(Scripted):
    def __init__(self, token: str = "123456:TEST-token-do-not-log"):
        super().__init__()
        self.token = token
        self.state = _State()
        self.shown: dict[tuple[int, int], Shown] = {}
        self.failures: list[Failure] = []
        self.unknown: set[str] = set()
        self.reject_marker = "REJECT-HTML"
        self.files: dict[str, tuple[str, bytes]] = {}
        self.uploads: list[Upload] = []  # files the bot sent (sendPhoto, sendDocument), oldest first
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- the server's life ------------------------------------------------------------------------

    def up(self) -> None:
        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        with self.cond:
            self.is_down = False
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def down(self, down: bool = True) -> None:
        """Refuse connections from now on, and drop the long polls in flight; with False, `up` again."""
        if not down:
            self.up()
            return
        super().down()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def close(self) -> None:
        self.down()

    # --- scripting --------------------------------------------------------------------------------

    def message(self, text: str = "", *, user_id: int = 42, chat_id: int | None = None, chat_type: str = "private",
                name: str = "Ann", thread_id: int | None = None, reply_to_bot: bool = False,
                photo: bytes | None = None, document: tuple[str, bytes] | None = None,
                voice: bytes | None = None, caption: str | None = None, file_size: int | None = None) -> int:
        """Queue an update with a message from a user; its update_id."""
        chat_id = user_id if chat_id is None else chat_id
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        chat.update({"first_name": name} if chat_type == "private" else {"title": "Test group"})
        if thread_id:
            chat["is_forum"] = True
        with self.cond:
            self.state.chats[chat_id] = chat
            message_id = self._new_message_id()
        message: dict[str, Any] = {"message_id": message_id, "date": int(time.time()), "chat": chat,
                                   "from": {"id": user_id, "is_bot": False, "first_name": name}}
        if text:
            message["text"] = text
            mention = f"@{BOT['username']}"
            if mention in text:
                offset = len(text[:text.index(mention)].encode("utf-16-le")) // 2
                message["entities"] = [{"type": "mention", "offset": offset, "length": len(mention)}]
        if caption:
            message["caption"] = caption
        if thread_id:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to_bot:
            message["reply_to_message"] = {"message_id": 1, "date": int(time.time()), "chat": chat, "from": BOT,
                                           "text": "earlier"}
        if photo is not None:
            small, big = self.add_file("photos/small.jpg", photo[:10]), self.add_file("photos/file_7.jpg", photo)
            message["photo"] = [{"file_id": small, "file_unique_id": small + "u", "width": 9, "height": 9,
                                 "file_size": 10},
                                {"file_id": big, "file_unique_id": big + "u", "width": 99, "height": 99,
                                 "file_size": len(photo)}]
        if document is not None:
            file_id = self.add_file(f"documents/file_{len(self.files)}", document[1])  # a path of its own
            message["document"] = {"file_id": file_id, "file_unique_id": file_id + "u", "file_name": document[0],
                                   "file_size": file_size or len(document[1])}
        if voice is not None:
            file_id = self.add_file("voice/file_9.oga", voice)
            message["voice"] = {"file_id": file_id, "file_unique_id": file_id + "u", "duration": 2,
                                "file_size": len(voice)}
        return self.push({"message": message})

    def push(self, update: dict[str, Any]) -> int:
        with self.cond:
            self.state.next_update += 1
            update = {"update_id": self.state.next_update, **update}
            self.state.updates.append(update)
            self.cond.notify_all()
            return update["update_id"]

    def add_file(self, file_path: str, data: bytes) -> str:
        file_id = f"F{len(self.files)}x{abs(hash(file_path)) % 1000}"
        self.files[file_id] = (file_path, data)
        return file_id

    def fail(self, method: str, status: int, description: str, retry_after: float | None = None,
             times: int = 1) -> None:
        with self.cond:
            self.failures.append(Failure(method, status, description, retry_after, times))

    # --- reading what happened ----------------------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        with self.cond:
            return [c for c in self.calls if c.method == method and c.status == 200]

    def chat(self, chat_id: int) -> list[Shown]:
        """The bot's messages in a chat as they stand now, oldest first."""
        with self.cond:
            return sorted((s for s in self.shown.values() if s.chat_id == chat_id), key=lambda s: s.message_id)

    def texts(self, chat_id: int) -> list[str]:
        return [s.text for s in self.chat(chat_id)]

    @property
    def last_update_id(self) -> int:
        """The newest update scripted so far; 0 before the first."""
        with self.cond:
            return self.state.next_update if self.state.next_update > _State.next_update else 0

    def pending(self) -> list[int]:
        with self.cond:
            return [u["update_id"] for u in self.state.updates]

    # --- the API --------------------------------------------------------------------------------------

    def _new_message_id(self) -> int:
        self.state.next_message += 1
        return self.state.next_message

    def handle(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """(status, body), or None to drop the connection without an answer."""
        call = self.record(Call(method, params))
        with self.cond:
            retry_after = self.take_limit() if method in ("sendMessage", "editMessageText") else None
            if retry_after is not None:
                call.status = 429
                return 429, {"ok": False, "error_code": 429, "description": f"Too Many Requests: retry after "
                             f"{retry_after:g}", "parameters": {"retry_after": retry_after}}
            if method == "sendMessage" and self.take_refusal():
                call.status = 403
                return 403, {"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}
            slow = self.take_delay() if method == "sendMessage" else 0.0
            failure = next((f for f in self.failures if f.method == method), None)
            if failure is not None:
                failure.times -= 1
                if failure.times <= 0:
                    self.failures.remove(failure)
                call.status = failure.status
                body: dict[str, Any] = {"ok": False, "error_code": failure.status, "description": failure.description}
                if failure.retry_after is not None:
                    body["parameters"] = {"retry_after": failure.retry_after}
                return failure.status, body
            if method in self.unknown or not hasattr(self, f"_api_{method}"):
                call.status = 404
                return 404, {"ok": False, "error_code": 404, "description": "Not Found"}
        answer = getattr(self, f"_api_{method}")(params)
        call.status = answer[0] if answer is not None else 0
        time.sleep(slow)  # the message is in the chat already; the answer is late
        return answer

    def _api_getMe(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return _ok(BOT)

    def _api_deleteWebhook(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return _ok(True)

    def _api_setMyCommands(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return _ok(True)

    def _api_sendChatAction(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return _ok(True)

    def _api_getUpdates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        offset = int(params.get("offset") or 0)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        with self.cond:
            if offset:
                self.state.updates = [u for u in self.state.updates if u["update_id"] >= offset]
            while not self.state.updates and not self.is_down and time.monotonic() < deadline:
                self.cond.wait(deadline - time.monotonic())
            if self.is_down:
                return None
            return _ok(list(self.state.updates[:int(params.get("limit") or 100)]))

    def _api_sendMessage(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        chat_id = int(params["chat_id"])
        text, mode = str(params.get("text", "")), params.get("parse_mode")
        problem, visible = check_text(text, mode, self.reject_marker)
        if problem:
            return _bad(problem)
        thread = int(params["message_thread_id"]) if params.get("message_thread_id") else None
        with self.cond:
            shown = Shown(self._new_message_id(), chat_id, visible, text, mode, thread)
            self.shown[(chat_id, shown.message_id)] = shown
        return _ok(self._message(shown))

    def _api_editMessageText(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        chat_id, message_id = int(params["chat_id"]), int(params["message_id"])
        text, mode = str(params.get("text", "")), params.get("parse_mode")
        problem, visible = check_text(text, mode, self.reject_marker)
        if problem:
            return _bad(problem)
        with self.cond:
            shown = self.shown.get((chat_id, message_id))
            if shown is None:
                return _bad("Bad Request: message to edit not found")
            if shown.raw == text and shown.parse_mode == mode:
                return _bad("Bad Request: message is not modified: specified new message content and reply markup "
                            "are exactly the same as a current content and reply markup of the message")
            shown.text, shown.raw, shown.parse_mode = visible, text, mode
            shown.edits += 1
        return _ok(self._message(shown))

    def _api_deleteMessage(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            self.shown.pop((int(params["chat_id"]), int(params["message_id"])), None)
        return _ok(True)

    def _api_getFile(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            return _bad("Bad Request: invalid file_id")
        path, data = self.files[file_id]
        return _ok({"file_id": file_id, "file_unique_id": file_id + "u", "file_size": len(data), "file_path": path})

    def _message(self, shown: Shown) -> dict[str, Any]:
        chat = self.state.chats.get(shown.chat_id, {"id": shown.chat_id, "type": "private"})
        message = {"message_id": shown.message_id, "date": int(time.time()), "chat": chat, "from": BOT,
                   "text": shown.text}
        if shown.thread_id:
            message["message_thread_id"] = shown.thread_id
        return message

    # --- files the bot sends -------------------------------------------------------------------------------

    def _api_sendPhoto(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return self._upload("photo", params)

    def _api_sendDocument(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return self._upload("document", params)

    def _upload(self, kind: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        sent = params.get(kind)
        if not isinstance(sent, tuple):
            return _bad(f"Bad Request: there is no {kind} in the request")
        name, data = sent
        if kind == "photo" and not data.startswith((b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"RIFF")):
            return _bad("Bad Request: IMAGE_PROCESS_FAILED")
        chat_id = int(params["chat_id"])
        thread = int(params["message_thread_id"]) if params.get("message_thread_id") else None
        with self.cond:
            upload = Upload(self._new_message_id(), chat_id, kind, name, data, thread)
            self.uploads.append(upload)
        chat = self.state.chats.get(chat_id, {"id": chat_id, "type": "private"})
        file = {"file_id": f"out{upload.message_id}", "file_unique_id": f"outu{upload.message_id}",
                "file_size": len(data)}
        body: Any = ([{**file, "width": 1, "height": 1}] if kind == "photo" else {**file, "file_name": name})
        return _ok({"message_id": upload.message_id, "date": int(time.time()), "chat": chat, "from": BOT, kind: body})

    def received(self, chat_id: int) -> list[Upload]:
        """The files the bot sent to a chat, oldest first."""
        with self.cond:
            return [u for u in self.uploads if u.chat_id == chat_id]


@dataclass
class Upload:
    """A file the bot sent: as a photo or a document, under its name."""

    message_id: int
    chat_id: int
    kind: str  # "photo" | "document"
    name: str
    data: bytes
    thread_id: int | None


def check_text(text: str, mode: str | None, reject_marker: str) -> tuple[str, str]:
    """(what Telegram would say is wrong, or "", the visible text)."""
    visible = text
    if mode == "HTML":
        if reject_marker in text:
            return "Bad Request: can't parse entities: unsupported start tag \"x\" at byte offset 0", ""
        parser = _Checker()
        try:
            parser.feed(text)
            parser.close()
        except ValueError as e:
            return f"Bad Request: can't parse entities: {e}", ""
        if parser.stack:
            return f"Bad Request: can't parse entities: can't find end tag corresponding to start tag \"{parser.stack[-1]}\"", ""
        visible = "".join(parser.text)
    if not visible.strip():
        return "Bad Request: message text is empty", ""
    if len(visible.encode("utf-16-le")) // 2 > 4096:
        return "Bad Request: message is too long", ""
    return "", visible


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TAGS:
            raise ValueError(f"unsupported start tag \"{tag}\"")
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            raise ValueError(f"can't find start tag corresponding to end tag \"{tag}\"")
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _ok(result: Any) -> tuple[int, dict[str, Any]]:
    return 200, {"ok": True, "result": result}


def _bad(description: str) -> tuple[int, dict[str, Any]]:
    return 400, {"ok": False, "error_code": 400, "description": description}


def _handler(api: BotAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            prefix, asked = f"/file/bot{api.token}/", urllib.parse.unquote(self.path)
            if asked.startswith(prefix):
                path = asked[len(prefix):]
                found = next((data for p, data in api.files.values() if p == path), None)
                if found is not None:
                    self._send(200, found, "application/octet-stream")
                    return
            self._send(404, b"Not Found", "text/plain")

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            prefix = f"/bot{api.token}/"
            if not self.path.startswith(prefix):
                self._json(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
                return
            answer = api.handle(self.path[len(prefix):].split("?")[0], _params(raw, self.headers.get("content-type")))
            if answer is None:
                self.close_connection = True  # gone mid-request: no answer at all
                return
            self._json(*answer)

        def _json(self, status: int, body: dict[str, Any]) -> None:
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, data: bytes, kind: str) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


def _params(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """The request's parameters: python-telegram-bot posts a form whose non-string values are JSON (a multipart
    form when it uploads a file: a file's value is (its name, its bytes))."""
    if content_type and content_type.startswith("multipart/"):
        return _multipart(raw, content_type)
    if content_type and "json" in content_type:
        return json.loads(raw or b"{}")
    params: dict[str, Any] = {}
    for key, value in urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True):
        params[key] = value
    for key in ("allowed_updates", "commands"):
        if isinstance(params.get(key), str):
            params[key] = json.loads(params[key])
    return params


def _multipart(raw: bytes, content_type: str) -> dict[str, Any]:
    from email.parser import BytesParser
    from email.policy import HTTP

    form = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    params: dict[str, Any] = {}
    for part in form.iter_parts():  # type: ignore[attr-defined]
        key, data = part.get_param("name", header="content-disposition"), part.get_payload(decode=True) or b""
        filename = part.get_filename()
        params[str(key)] = (filename, data) if filename is not None else data.decode()
    return params


class StandIn:
    """Telegram for the shared channel cases (tests/channel_harness.py): the Bot API stand-in and its people."""

    channel = "telegram"
    owner = "42"
    stranger = "99"
    group = -1009

    def __init__(self, api: BotAPI | None = None) -> None:
        self.api = api or BotAPI()

    def settings(self) -> dict[str, Any]:
        return {"enabled": True, "token": self.api.token, "allowFrom": [self.owner], "owner": [self.owner], "apiBase": self.api.url}

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              file: tuple[str, str, bytes] | None = None) -> str:
        where: dict[str, Any] = {} if private else {"chat_id": self.group, "chat_type": "supergroup"}
        if not private:
            text = f"@{BOT['username']} {text}"
        if image is None and file is None:
            return str(self.api.message(text, user_id=int(user), **where))
        document = (file[0], file[2]) if file is not None else None  # Telegram states no type for a document here
        return str(self.api.message(caption=text, user_id=int(user), photo=image, document=document, **where))

    def shown(self, user: str) -> list[str]:
        return self.api.texts(int(user))

    def edits(self) -> int:
        return len(self.api.calls_to("editMessageText"))

    def rate_limit(self, calls: int, retry_after: float) -> None:
        self.api.rate_limit(calls, retry_after)

    def refuse(self, calls: int) -> None:
        self.api.refuse(calls)

    def slow(self, calls: int, seconds: float) -> None:
        self.api.slow(calls, seconds)

    def down(self, down: bool) -> None:
        self.api.down(down)

    def close(self) -> None:
        self.api.close()

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        """The files the bot sent to that person: (name, bytes, shown as an image)."""
        return [(u.name, u.data, u.kind == "photo") for u in self.api.received(int(user))]


__all__ = ["BOT", "BotAPI", "Shown", "StandIn", "check_text"]
