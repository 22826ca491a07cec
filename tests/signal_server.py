"""A stand-in of signal-cli's JSON-RPC daemon over real HTTP (`signal-cli daemon --http`), for tests: the Signal
channel's link and `nanoagent gateway` talk to it on loopback as they would to signal-cli.

As signal-cli does: `POST /api/v1/rpc` takes one JSON-RPC request (`application/json`, else 415) and answers it with
HTTP 200, errors included (-1 a user error, -5 a rate limit whose results say RATE_LIMIT_FAILURE, -32601 a method it
does not know, -32602 an account it does not have); `GET /api/v1/events` is a stream of server-sent `receive` events,
each with an id `<start time>-<sequence>`, the last 1,000 kept, those after a known `Last-Event-ID` sent first (all
kept ones for an unknown id); a `:` keep-alive line while nothing comes; `GET /api/v1/check` answers 200. A message
is an envelope as signal-cli writes it: `sourceNumber` (null for a person whose number is private), `sourceUuid`,
`dataMessage` with `message`, `mentions` (U+FFFC in the text where each stands), `attachments`, `groupInfo`.

People: the owner has a number; the stranger only a UUID (their number is private), so both kinds of id are used.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BOT = "+15550000999"
BOT_UUID = "99999999-0000-4000-8000-000000000999"
GROUP_ID = base64.b64encode(bytes([0xFB, 0xEF, 0xFF]) * 10 + b"\x00\x01").decode()  # holds "+" and "/"
KEPT = 1000


@dataclass(frozen=True)
class Person:
    number: str | None
    uuid: str
    name: str


PEOPLE = [Person("+15550000001", "aaaaaaaa-0000-4000-8000-000000000001", "Ann"),
          Person(None, "bbbbbbbb-0000-4000-8000-000000000002", "Bo")]


@dataclass
class Sent:
    """A message the bot sent: to a person (by their number or UUID) or a group."""

    to: Person | None
    group: str | None
    text: str
    styles: list[str]
    files: list[tuple[str, bytes, str]]  # name, bytes, media type
    timestamp: int
    edit: bool = False


@dataclass
class Daemon:
    account: str = BOT
    started: int = field(default_factory=lambda: int(time.time() * 1000))
    cond: threading.Condition = field(default_factory=threading.Condition)
    events: list[tuple[int, str]] = field(default_factory=list)  # sequence, data
    sequence: int = 0
    sent: list[Sent] = field(default_factory=list)
    typing: list[dict[str, Any]] = field(default_factory=list)
    attachments: dict[str, bytes] = field(default_factory=dict)
    limited: list[float] = field(default_factory=list)  # retryAfterSeconds of each next send refused as rate limited
    refusing: int = 0  # sends still to be refused for good
    slowed: list[float] = field(default_factory=list)  # seconds each next send answers late, having sent
    is_down: bool = False
    port: int = 0
    clock: int = 0
    httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        with self.cond:
            self.is_down = False
        self.httpd = httpd
        threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def down(self) -> None:
        """Connections refused from now on; the event streams in flight end."""
        with self.cond:
            self.is_down = True
            self.cond.notify_all()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def timestamp(self) -> int:
        with self.cond:
            self.clock = max(self.clock + 1, int(time.time() * 1000))
            return self.clock

    # --- what comes in ------------------------------------------------------------------------------------

    def push(self, envelope: dict[str, Any]) -> None:
        data = json.dumps({"envelope": envelope, "account": self.account})
        with self.cond:
            self.sequence += 1
            self.events = [*self.events, (self.sequence, data)][-KEPT:]
            self.cond.notify_all()

    def after(self, last: str | None) -> int:
        """The sequence a client's Last-Event-ID stands for: 0 for an unknown id (every kept event is sent)."""
        prefix = f"{self.started}-"
        if last and last.startswith(prefix) and last[len(prefix):].isdigit():
            return int(last[len(prefix):])
        return 0 if last else self.sequence

    def stream(self, last: str | None, write: Any) -> None:
        """Write events after `last` as they come, until the client leaves or the daemon goes down."""
        done = self.after(last)
        while True:
            with self.cond:
                fresh = [(s, d) for s, d in self.events if s > done]
                if not fresh and not self.is_down:
                    self.cond.wait(0.5)
                    fresh = [(s, d) for s, d in self.events if s > done]
                if self.is_down:
                    return
            chunk = "".join(f"id:{self.started}-{s}\nevent:receive\ndata:{d}\n\n" for s, d in fresh) or ":\n"
            if not write(chunk.encode()):
                return
            if fresh:
                done = fresh[-1][0]

    # --- the JSON-RPC methods -----------------------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("account") not in (None, self.account):
            return _error(-32602, "Specified account does not exist")
        found = getattr(self, f"rpc_{method}", None)
        if found is None:
            return _error(-32601, "Method not implemented")
        return found(params)

    def rpc_listGroups(self, params: dict[str, Any]) -> dict[str, Any]:
        return _result([{"id": GROUP_ID, "name": "Test group", "isMember": True, "isBlocked": False,
                         "members": [{"number": p.number, "uuid": p.uuid} for p in PEOPLE]}])

    def rpc_sendTyping(self, params: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            self.typing.append(params)
        return _result({})

    def rpc_getAttachment(self, params: dict[str, Any]) -> dict[str, Any]:
        data = self.attachments.get(str(params.get("id")))
        if data is None:
            return _error(-32603, f"An error occurred reading attachment: {params.get('id')}")
        return _result({"data": base64.b64encode(data).decode()})

    def rpc_send(self, params: dict[str, Any]) -> dict[str, Any]:
        recipients, group = _listed(params.get("recipient")), params.get("groupId")
        people = [person_of(r) for r in recipients]
        if (not recipients) == (not group) or None in people or (group and group != GROUP_ID):
            return _error(-1, "Invalid recipient or group")
        text, files = str(params.get("message") or ""), [_file(a) for a in _listed(params.get("attachments"))]
        styles = _listed(params.get("textStyle"))
        if not text and not files:
            return _error(-1, "Sending empty message is not allowed, either a message, attachment or sticker must be "
                              "given.")
        if any(not _fits(style, text) for style in styles):
            return _error(-1, f"Invalid textStyle syntax ({styles}) expected 'start:length:STYLE'")
        with self.cond:
            if self.limited:
                wait = self.limited.pop(0)
                return _error(-5, "Failed to send message due to rate limiting", {"response": {
                    "timestamp": 0, "results": [{"type": "RATE_LIMIT_FAILURE", "retryAfterSeconds": wait}]}})
            if self.refusing:
                self.refusing -= 1
                return _error(-1, f"The user {recipients[0] if recipients else group} is not registered.")
            slow = self.slowed.pop(0) if self.slowed else 0.0
        sent = Sent(people[0] if people else None, group, text, styles, files, self.timestamp(),
                    edit=params.get("editTimestamp") is not None)
        with self.cond:
            self.sent.append(sent)
        time.sleep(slow)  # the message went out; the answer is late
        return _result({"timestamp": sent.timestamp, "results": [
            {"recipientAddress": {"number": p.number, "uuid": p.uuid}, "type": "SUCCESS"} for p in people or PEOPLE]})


def person_of(id: str) -> Person | None:
    return next((p for p in PEOPLE if id in (p.number, p.uuid)), None)


def _listed(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)] if value else []


def _fits(style: str, text: str) -> bool:
    start, _, rest = style.partition(":")
    length, _, name = rest.partition(":")
    units = len(text.encode("utf-16-le")) // 2
    return (start.isdigit() and length.isdigit() and int(start) + int(length) <= units
            and name in ("BOLD", "ITALIC", "SPOILER", "STRIKETHROUGH", "MONOSPACE"))


def _file(attachment: str) -> tuple[str, bytes, str]:
    """A data URI of `send` (data:<type>;filename=<name>;base64,<data>) as (name, bytes, media type)."""
    head, _, data = attachment.partition(",")
    if not head.startswith("data:") or not head.endswith(";base64"):
        raise ValueError("the stand-in takes attachments as data URIs only")
    kind, *params = head.removeprefix("data:").removesuffix(";base64").split(";")
    name = next((p.partition("=")[2] for p in params if p.startswith("filename=")), "")
    return name, base64.b64decode(data), kind


def _result(result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result}


def _error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": {"code": code, "message": message, "data": data}}


def _handler(daemon: Daemon) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = urllib.parse.urlparse(self.path).path
            if path == "/api/v1/check":
                self._send(200, b"", "text/plain")
                return
            if path != "/api/v1/events":
                self._send(404, b"", "text/plain")
                return
            self.close_connection = True
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            daemon.stream(self.headers.get("Last-Event-ID"), self._write)

        def _write(self, data: bytes) -> bool:
            try:
                self.wfile.write(data)
                self.wfile.flush()
                return True
            except OSError:
                return False

        def do_POST(self) -> None:
            if urllib.parse.urlparse(self.path).path != "/api/v1/rpc":
                self._send(404, b"", "text/plain")
                return
            if not (self.headers.get("content-type") or "").startswith("application/json"):
                self._send(415, b"", "text/plain")
                return
            request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            answer = daemon.call(str(request.get("method")), request.get("params") or {})
            self._send(200, json.dumps({**answer, "id": request.get("id")}).encode(), "application/json")

        def _send(self, status: int, data: bytes, kind: str) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                self.close_connection = True

    return Handler


class StandIn:
    """Signal for the shared channel cases (tests/channel_harness.py): signal-cli's daemon and its people."""

    channel = "signal"
    owner = PEOPLE[0].number or ""
    stranger = PEOPLE[1].uuid

    def __init__(self) -> None:
        self.daemon = Daemon()
        self.daemon.up()

    def settings(self) -> dict[str, Any]:
        return {"enabled": True, "account": BOT, "apiBase": self.daemon.url, "allowFrom": [self.owner],
                "owner": [self.owner]}

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              file: tuple[str, str, bytes] | None = None) -> str:
        person = person_of(user)
        assert person is not None, user
        stamp = self.daemon.timestamp()
        message: dict[str, Any] = {"timestamp": stamp, "message": text or None, "expiresInSeconds": 0,
                                   "viewOnce": False, "mentions": [], "attachments": []}
        if not private:
            message["message"] = f"\ufffc {text}"
            message["mentions"] = [{"name": "Nano", "number": BOT, "uuid": BOT_UUID, "start": 0, "length": 1}]
            message["groupInfo"] = {"groupId": GROUP_ID, "groupName": "Test group", "revision": 3, "type": "DELIVER"}
        for name, kind, data in ([(None, "image/png", image)] if image is not None else []) + (
                [file] if file is not None else []):
            id = f"att{stamp}{len(message['attachments'])}"
            self.daemon.attachments[id] = data
            message["attachments"].append({"contentType": kind, "filename": name, "id": id, "size": len(data)})
        self.daemon.push({"source": person.number or person.uuid, "sourceNumber": person.number,
                          "sourceUuid": person.uuid, "sourceName": person.name, "sourceDevice": 1,
                          "timestamp": stamp, "dataMessage": message})
        return f"{person.uuid}:{stamp}"

    def to(self, user: str) -> list[Sent]:
        person = person_of(user)
        with self.daemon.cond:
            return [s for s in self.daemon.sent if s.to is not None and s.to == person]

    def shown(self, user: str) -> list[str]:
        return [s.text for s in self.to(user) if s.text]

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        return [(name, data, kind.startswith("image/")) for s in self.to(user) for name, data, kind in s.files]

    def edits(self) -> int:
        with self.daemon.cond:
            return sum(s.edit for s in self.daemon.sent)

    def rate_limit(self, calls: int, retry_after: float) -> None:
        with self.daemon.cond:
            self.daemon.limited += [retry_after] * calls

    def refuse(self, calls: int) -> None:
        with self.daemon.cond:
            self.daemon.refusing = calls

    def slow(self, calls: int, seconds: float) -> None:
        with self.daemon.cond:
            self.daemon.slowed += [seconds] * calls

    def down(self, down: bool) -> None:
        if down:
            self.daemon.down()
        else:
            self.daemon.up()

    def close(self) -> None:
        self.daemon.down()


__all__ = ["BOT", "GROUP_ID", "PEOPLE", "Daemon", "StandIn"]
