"""A stand-in of Meta's WhatsApp Business Cloud API (the Graph API's WhatsApp part) over real HTTP, for tests: the
WhatsApp channel's link and `nanoagent gateway` talk to it on loopback as they would to graph.facebook.com, and it
delivers what people write as Meta does: a webhook POST, signed with the app secret, to the gateway's HTTP listener.

The Graph side, under `/v24.0/`, every call with `Authorization: Bearer <token>` (else 401, error 190):
- `GET /{phone number id}?fields=...`: the business number (`display_phone_number`, `verified_name`, `id`).
- `POST /{phone number id}/messages`: a send (`type` text, image, audio, document; `recipient_type` individual or
  group) answered with `messages[0].id` (a wamid); or `status: read` for a message id (a read receipt, with
  `typing_indicator` a typing indicator). A person's chat takes a free-form message only within 24 hours of their
  last message (else 400, error 131047). Scripted trouble as Graph answers it: a rate limit is 429 with error 130429
  and `Retry-After`; a refusal 400 with error 131026 (undeliverable); down, every call 503.
- `POST /{phone number id}/media` (multipart: `file`, `type`, `messaging_product`): the media's id.
- `GET /{media id}`: its `url` (here `/media-bytes/{id}`, which needs the token too), `mime_type`, `file_size`.

The people's side: `write` queues a notification (`entry[].changes[].value` with `metadata`, `contacts`,
`messages`); one thread posts them in order, each to `/channels/whatsapp/webhook` with `X-Hub-Signature-256`, and
sends it again (after 50 ms) until the gateway answers 200, as Meta sends again what got no 200. A group message
(the Groups API) carries `group_id` and mentions the business as WhatsApp writes a mention: `@<its digits>`.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import hmac
import json
import queue
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.stand_in_base import Call, Scripted

VERSION = "v24.0"
PHONE_ID = "106540352242922"
BUSINESS = "15550000999"  # the business number's digits
TOKEN = "EAAG-stand-in-access-token"
SECRET = "stand-in-app-secret"
VERIFY = "stand-in-verify-token"
GROUP_ID = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAz/+NjM0MDQ2OTQyMzM4MjAZD"  # holds "+" and "/"
WINDOW = 24 * 3600
PEOPLE = {"15550000001": "Ann", "15550000002": "Bo"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Sent:
    """A message the bot sent: to a person's number or a group."""

    to: str
    group: bool
    kind: str
    text: str = ""
    file: tuple[str, bytes, str] | None = None  # name, bytes, media type


@dataclass
class Graph:
    scripted: Scripted = field(default_factory=Scripted)
    sent: list[Sent] = field(default_factory=list)
    read: list[str] = field(default_factory=list)  # message ids marked read
    typing: list[str] = field(default_factory=list)  # message ids a typing indicator hung on
    media: dict[str, tuple[str, bytes, str]] = field(default_factory=dict)  # id -> name, bytes, media type
    heard: dict[str, float] = field(default_factory=dict)  # number -> their last message's time
    count: int = 0
    port: int = 0
    httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{VERSION}"

    def up(self) -> None:
        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        self.httpd = httpd
        threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def next_id(self, prefix: str) -> str:
        with self.scripted.cond:
            self.count += 1
            return f"{prefix}{self.count:06d}"

    def keep(self, name: str, data: bytes, kind: str) -> str:
        id = self.next_id("77")
        with self.scripted.cond:
            self.media[id] = (name, data, kind)
        return id

    # --- answering ---------------------------------------------------------------------------------------

    def message(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        """A send or a read receipt: (status, answer, headers)."""
        if body.get("status") == "read":
            with self.scripted.cond:
                self.read.append(str(body.get("message_id")))
                if body.get("typing_indicator"):
                    self.typing.append(str(body.get("message_id")))
            return 200, {"success": True}, {}
        to, group, kind = str(body.get("to")), body.get("recipient_type") == "group", str(body.get("type"))
        self.scripted.record(Call("messages", body, path=to))
        if (wait := self.scripted.take_limit()) is not None:
            return 429, _error(130429, "Rate limit hit"), {"Retry-After": f"{wait:g}"}
        if self.scripted.take_refusal():
            return 400, _error(131026, "Message undeliverable"), {}
        if not group and self.heard.get(to, 0.0) < time.time() - WINDOW:
            return 400, _error(131047, "Re-engagement message"), {}
        part = body.get(kind) if isinstance(body.get(kind), dict) else {}
        sent = Sent(to, group, kind, text=str(part.get("body") or "") if kind == "text" else "")
        if kind != "text":
            sent.file = self.media.get(str(part.get("id")))
            if sent.file is None:
                return 400, _error(131053, "Media upload error"), {}
        with self.scripted.cond:
            self.sent.append(sent)
        time.sleep(self.scripted.take_delay())
        return 200, {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}],
                     "messages": [{"id": self.next_id("wamid.OUT")}]}, {}


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "Ab1"}}


def _handler(graph: Graph) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def refused(self) -> bool:
            """Down (503), or no token (401): answered; False when the call may go on."""
            if graph.scripted.is_down:
                self.answer(503, _error(2, "Service temporarily unavailable"))
                return True
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.answer(401, _error(190, "Invalid OAuth access token"))
                return True
            return False

        def do_GET(self) -> None:
            path = urllib.parse.urlparse(self.path).path.strip("/").split("/")
            if self.refused():
                return
            if path == [VERSION, PHONE_ID]:
                self.answer(200, {"display_phone_number": "+1 555-000-0999", "verified_name": "Nano",
                                  "id": PHONE_ID})
            elif len(path) == 2 and path[0] == VERSION and path[1] in graph.media:
                name, data, kind = graph.media[path[1]]
                self.answer(200, {"url": f"http://127.0.0.1:{graph.port}/media-bytes/{path[1]}", "mime_type": kind,
                                  "sha256": hashlib.sha256(data).hexdigest(), "file_size": len(data),
                                  "id": path[1], "messaging_product": "whatsapp"})
            elif len(path) == 2 and path[0] == "media-bytes" and path[1] in graph.media:
                name, data, kind = graph.media[path[1]]
                self.send_bytes(200, data, kind)
            else:
                self.answer(404, _error(100, "Unsupported get request"))

        def do_POST(self) -> None:
            path = urllib.parse.urlparse(self.path).path.strip("/").split("/")
            data = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.refused():
                return
            if path == [VERSION, PHONE_ID, "messages"]:
                status, answer, headers = graph.message(json.loads(data or b"{}"))
                self.answer(status, answer, headers)
            elif path == [VERSION, PHONE_ID, "media"]:
                form = _form(self.headers.get("content-type") or "", data)
                name, content, kind = form["file"]
                self.answer(200, {"id": graph.keep(name, content, kind)})
            else:
                self.answer(404, _error(100, "Unsupported post request"))

        def answer(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            self.send_bytes(status, json.dumps(body).encode(), "application/json", headers)

        def send_bytes(self, status: int, data: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True

    return Handler


def _form(content_type: str, data: bytes) -> dict[str, tuple[str, bytes, str]]:
    """A multipart form's parts by name: (file name, bytes, media type)."""
    parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + data)
    parts = {}
    for part in parsed.iter_parts():
        name = part.get_param("name", header="content-disposition")
        parts[str(name)] = (part.get_filename() or "", part.get_payload(decode=True) or b"", part.get_content_type())
    return parts


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class StandIn:
    """WhatsApp for the shared channel cases (tests/channel_harness.py): the Graph API, and people writing through
    Meta's webhook to the gateway's HTTP listener (on `gateway_port`, which `config` turns on)."""

    channel = "whatsapp"
    owner = "15550000001"
    stranger = "15550000002"

    def __init__(self) -> None:
        self.graph = Graph()
        self.graph.up()
        self.gateway_port = free_port()
        self.notifications: queue.Queue[bytes | None] = queue.Queue()
        self.closed = threading.Event()
        self.poster = threading.Thread(target=self.post_all, daemon=True)
        self.poster.start()

    def settings(self) -> dict[str, Any]:
        return {"enabled": True, "phoneNumberId": PHONE_ID, "accessToken": TOKEN, "appSecret": SECRET,
                "verifyToken": VERIFY, "apiBase": self.graph.url, "allowFrom": [f"+{self.owner}"],
                "owner": [f"+{self.owner}"]}

    def config(self) -> dict[str, Any]:
        return {"gateway": {"http": {"enabled": True, "port": self.gateway_port}}}

    @property
    def webhook(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}/channels/whatsapp/webhook"

    # --- the people's side ---------------------------------------------------------------------------

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              file: tuple[str, str, bytes] | None = None, at: float | None = None) -> str:
        """`at`: when they wrote (the notification's timestamp), now unless given."""
        id = self.graph.next_id("wamid.IN")
        sent = time.time() if at is None else at
        message: dict[str, Any] = {"from": user, "id": id, "timestamp": str(int(sent)), "type": "text"}
        if not private:
            text = f"@{BUSINESS} {text}"
            message["group_id"] = GROUP_ID
        attached = (("", "image/png", image) if image is not None else None) or file
        if attached is not None:
            name, kind, data = attached
            major = kind.partition("/")[0]
            # WhatsApp's audio takes no caption: an audio file with words goes as a document, as the app sends it
            message["type"] = "image" if major == "image" else "audio" if major == "audio" and not text else \
                "document"
            media = {"id": self.graph.keep(name, data, kind), "mime_type": kind,
                     "sha256": hashlib.sha256(data).hexdigest()}
            if message["type"] == "document":
                media["filename"] = name
            if message["type"] == "audio":
                media["voice"] = True
            if text and message["type"] != "audio":
                media["caption"] = text
            message[message["type"]] = media
        else:
            message["text"] = {"body": text}
        if private:
            with self.graph.scripted.cond:
                self.graph.heard[user] = max(self.graph.heard.get(user, 0.0), sent)
        value = {"messaging_product": "whatsapp",
                 "metadata": {"display_phone_number": BUSINESS, "phone_number_id": PHONE_ID},
                 "contacts": [{"profile": {"name": PEOPLE.get(user, "Someone")}, "wa_id": user}],
                 "messages": [message]}
        body = {"object": "whatsapp_business_account",
                "entry": [{"id": "102290129340398", "changes": [{"value": value, "field": "messages"}]}]}
        self.notifications.put(json.dumps(body).encode())
        return id

    def post_all(self) -> None:
        """Each notification in turn, sent again until the gateway answers 200 (Meta's retries, faster)."""
        while (body := self.notifications.get()) is not None:
            while not self.post(body) and not self.closed.is_set():
                time.sleep(0.05)

    def post(self, body: bytes) -> bool:
        request = urllib.request.Request(self.webhook, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-Hub-Signature-256": sign(body)})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    # --- what the bot shows ----------------------------------------------------------------------------

    def to(self, user: str) -> list[Sent]:
        with self.graph.scripted.cond:
            return [s for s in self.graph.sent if s.to == user and not s.group]

    def shown(self, user: str) -> list[str]:
        return [s.text for s in self.to(user) if s.text]

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        return [(s.file[0], s.file[1], s.kind == "image") for s in self.to(user) if s.file is not None]

    def edits(self) -> int:
        return 0  # the Cloud API has no edit call: a bot cannot edit

    def rate_limit(self, calls: int, retry_after: float) -> None:
        self.graph.scripted.rate_limit(calls, retry_after)

    def refuse(self, calls: int) -> None:
        self.graph.scripted.refuse(calls)

    def slow(self, calls: int, seconds: float) -> None:
        self.graph.scripted.slow(calls, seconds)

    def down(self, down: bool) -> None:
        self.graph.scripted.down(down)

    def close(self) -> None:
        self.closed.set()
        self.notifications.put(None)
        self.graph.close()


__all__ = ["BUSINESS", "GROUP_ID", "PHONE_ID", "SECRET", "TOKEN", "VERIFY", "Graph", "StandIn", "sign"]
