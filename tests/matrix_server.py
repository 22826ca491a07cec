"""A Matrix homeserver stand-in over real HTTP, for tests: matrix-nio and `nanoagent gateway` talk to it.

It speaks the client-server API endpoints the channel uses: login (a device kept when its id is given again),
logout, whoami, sync (long-polling up to its `timeout`, `since` a position in one event stream, `full_state`),
createRoom, join, leave, send (a transaction id taken once: sent again, the same event), typing, redact, and the
content repository (upload, authenticated download). People (`@ann:localhost`...) write through `write`; each
person's direct chat is a room they made and invited the bot to (`is_direct`), and the group is one room where
the owner invited the bot. As a homeserver does, a room the bot joins comes in the next sync with its history.

Trouble to inject: 429s (`M_LIMIT_EXCEEDED` with `retry_after_ms`), sends refused (403 `M_FORBIDDEN`), sends
answered late, the whole server down (connections refused; up again on the same port).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SERVER = "localhost"
BOT = f"@nano:{SERVER}"
PASSWORD = "correct horse battery staple"
API = "/_matrix/client/v3/"


@dataclass
class Room:
    id: str
    members: dict[str, str] = field(default_factory=dict)  # user -> join | invite | leave
    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (position, event)
    joined_at: int = 0  # the bot's join's position


class Homeserver:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.position = 0
        self.rooms: dict[str, Room] = {}
        self.tokens: dict[str, str] = {}  # access token -> device id
        self.logins = 0
        self.txns: dict[tuple[str, str, str], str] = {}  # (device, room, txn) -> event id
        self.media: dict[str, tuple[str, bytes]] = {}  # media id -> (type, bytes)
        self.limited: list[float] = []  # retry_after of each next send to answer with a 429
        self.refusing = 0  # new messages still to refuse (403)
        self.slowed: list[float] = []  # seconds each next send waits before answering
        self.port = 0
        self.is_down = False
        self._httpd: ThreadingHTTPServer | None = None
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        with self.cond:
            self.is_down = False
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def down(self) -> None:
        with self.cond:
            self.is_down = True
            self.cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # --- the room's life -----------------------------------------------------------------------------

    def event(self, room: Room, sender: str, type: str, content: dict[str, Any], state_key: str | None = None) -> str:
        """Append an event (under the lock); its id."""
        self.position += 1
        event: dict[str, Any] = {"type": type, "sender": sender, "content": content, "room_id": room.id,
                                 "event_id": "$" + secrets.token_urlsafe(32)[:43],
                                 "origin_server_ts": int(time.time() * 1000)}
        if state_key is not None:
            event["state_key"] = state_key
            room.members[state_key] = content["membership"]
            if state_key == BOT and content["membership"] == "join":
                room.joined_at = self.position
        room.events.append((self.position, event))
        self.cond.notify_all()
        return str(event["event_id"])

    def room(self, creator: str, direct: bool) -> Room:
        """A room `creator` made and invited the bot to."""
        room = Room(f"!{secrets.token_hex(9)}:{SERVER}")
        self.rooms[room.id] = room
        self.event(room, creator, "m.room.member", {"membership": "join"}, creator)
        self.event(room, creator, "m.room.member", {"membership": "invite", "is_direct": direct}, BOT)
        return room

    def bot_messages(self, room: Room) -> list[dict[str, Any]]:
        """The bot's messages in `room` as they stand now (the latest edit's content), oldest first."""
        with self.cond:
            mine = [e for _, e in room.events if e["sender"] == BOT and e["type"] == "m.room.message"]
        edits = {e["content"]["m.relates_to"]["event_id"]: e["content"]["m.new_content"] for e in mine
                 if (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.replace"}
        return [edits.get(e["event_id"], e["content"]) for e in mine
                if (e["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"]

    # --- the API -------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], token: str, body: bytes,
               kind: str) -> tuple[int, Any]:
        if path == API + "login" and method == "POST":
            return self.login(json.loads(body or b"{}"))
        device = self.tokens.get(token)
        if device is None:
            return 401, {"errcode": "M_UNKNOWN_TOKEN", "error": "Unknown access token"}
        parts = [urllib.parse.unquote(p) for p in path.split("/")]
        if path.startswith("/_matrix/media/v3/upload"):
            media = secrets.token_hex(8)
            with self.cond:
                self.media[media] = (kind, body)
            return 200, {"content_uri": f"mxc://{SERVER}/{media}"}
        if path.startswith("/_matrix/client/v1/media/download/"):
            found = self.media.get(parts[7])
            return (200, found) if found else (404, {"errcode": "M_NOT_FOUND", "error": "no such media"})
        rest, data = parts[4:], json.loads(body or b"{}") if method in ("POST", "PUT") else {}
        if rest == ["account", "whoami"]:
            return 200, {"user_id": BOT, "device_id": device}
        if rest == ["logout"]:
            self.tokens.pop(token, None)
            return 200, {}
        if rest == ["sync"]:
            return 200, self.sync(int(query.get("since") or 0), float(query.get("timeout") or 0) / 1000,
                                  query.get("full_state") == "true")
        if rest == ["createRoom"]:
            with self.cond:
                room = self.room(BOT, True)
                for user in data.get("invite", []):  # people here join at once
                    self.event(room, user, "m.room.member", {"membership": "join"}, user)
                self.event(room, BOT, "m.room.member", {"membership": "join"}, BOT)
            return 200, {"room_id": room.id}
        if rest[0] == "join" or rest[-1:] == ["leave"]:
            room_id = rest[1]
            with self.cond:
                room = self.rooms.get(room_id)
                if room is None or room.members.get(BOT) not in ("invite", "join"):
                    return 403, {"errcode": "M_FORBIDDEN", "error": "not invited"}
                self.event(room, BOT, "m.room.member", {"membership": "join" if rest[0] == "join" else "leave"}, BOT)
            return 200, {"room_id": room_id}
        if len(rest) >= 3 and rest[0] == "rooms" and rest[1] in self.rooms:
            room = self.rooms[rest[1]]
            if rest[2] == "send":
                return self.send(room, device, rest[3], rest[4], data)
            if rest[2] in ("typing", "redact"):
                return 200, {"event_id": "$redacted"} if rest[2] == "redact" else {}
        return 404, {"errcode": "M_UNRECOGNIZED", "error": f"{method} {path} is not known here"}

    def login(self, data: dict[str, Any]) -> tuple[int, Any]:
        user = (data.get("identifier") or {}).get("user") or data.get("user")
        if user not in (BOT, "nano") or data.get("password") != PASSWORD:
            return 403, {"errcode": "M_FORBIDDEN", "error": "Invalid username or password"}
        token, device = "syt_" + secrets.token_hex(16), data.get("device_id") or "DEV" + secrets.token_hex(4).upper()
        with self.cond:
            self.tokens[token] = device
            self.logins += 1
        return 200, {"user_id": BOT, "access_token": token, "device_id": device}

    def send(self, room: Room, device: str, type: str, txn: str, content: dict[str, Any]) -> tuple[int, Any]:
        with self.cond:
            if room.members.get(BOT) != "join":
                return 403, {"errcode": "M_FORBIDDEN", "error": "not in the room"}
            if self.limited:
                wait = self.limited.pop(0)
                return 429, {"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests",
                             "retry_after_ms": int(wait * 1000)}
            editing = (content.get("m.relates_to") or {}).get("rel_type") == "m.replace"
            if self.refusing and not editing:
                self.refusing -= 1
                return 403, {"errcode": "M_FORBIDDEN", "error": "refused"}
            key = (device, room.id, txn)
            if key not in self.txns:
                self.txns[key] = self.event(room, BOT, type, content)
            event_id = self.txns[key]
            delay = self.slowed.pop(0) if self.slowed and not editing else 0.0
        time.sleep(delay)  # taken at once, answered late
        return 200, {"event_id": event_id}

    def sync(self, since: int, timeout: float, full: bool) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                answer = self._sync(since, full)
                left = deadline - time.monotonic()
                if full or answer["rooms"]["join"] or answer["rooms"]["invite"] or left <= 0 or self.is_down:
                    return answer
                self.cond.wait(left)

    def _sync(self, since: int, full: bool) -> dict[str, Any]:
        join, invite = {}, {}
        for room in self.rooms.values():
            membership = room.members.get(BOT)
            fresh = room.joined_at > since
            if membership == "join":
                timeline = [e for p, e in room.events if p > since or fresh]
                state = [e for _, e in room.events if "state_key" in e] if full or fresh else []
                if timeline or state:
                    join[room.id] = {"timeline": {"events": timeline, "limited": False}, "state": {"events": state},
                                     "summary": {"m.joined_member_count": list(room.members.values()).count("join"),
                                                 "m.invited_member_count": list(room.members.values()).count("invite")}}
            elif membership == "invite" and any(p > since for p, e in room.events if e.get("state_key") == BOT):
                invite[room.id] = {"invite_state": {"events": [
                    {k: v for k, v in e.items() if k in ("type", "sender", "state_key", "content")}
                    for _, e in room.events if "state_key" in e]}}
        return {"next_batch": str(self.position), "rooms": {"join": join, "invite": invite, "leave": {}}}


def _handler(server: Homeserver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def do_PUT(self) -> None:
            self._answer("PUT")

        def _answer(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if server.is_down:  # a connection kept open from before: dropped, as a stopped server's would be
                self.close_connection = True
                return
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            token = (self.headers.get("authorization") or "").removeprefix("Bearer ").strip()
            status, answer = server.handle(method, url.path, query, token, body,
                                           self.headers.get("content-type") or "application/octet-stream")
            if server.is_down:  # gone while the request waited (a long poll): no answer at all
                self.close_connection = True
                return
            kind, data = answer if isinstance(answer, tuple) else ("application/json", json.dumps(answer).encode())
            try:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return Handler


class _Text(HTMLParser):
    """The visible text of a message's HTML: blocks and `<br>` as line ends."""

    BLOCKS = {"p", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "ul", "ol", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible(content: dict[str, Any]) -> str:
    if content.get("format") != "org.matrix.custom.html":
        return str(content.get("body") or "").strip()
    parser = _Text()
    parser.feed(str(content.get("formatted_body") or ""))
    return "".join(parser.parts).strip()


class StandIn:
    """Matrix for the shared channel cases (tests/channel_harness.py): the homeserver and its people."""

    channel = "matrix"
    owner = f"@ann:{SERVER}"
    stranger = f"@bob:{SERVER}"

    def __init__(self) -> None:
        self.server = Homeserver()
        self.dms: dict[str, Room] = {}
        self.group: Room | None = None

    def settings(self) -> dict[str, Any]:
        return {"enabled": True, "homeserver": self.server.url, "userId": BOT, "password": PASSWORD,
                "allowFrom": [self.owner], "owner": [self.owner]}

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              file: tuple[str, str, bytes] | None = None) -> str:
        server = self.server
        with server.cond:
            if private:
                room = self.dms.get(user) or self.dms.setdefault(user, server.room(user, True))
            else:
                if self.group is None:
                    self.group = server.room(self.owner, False)
                room = self.group
                if room.members.get(user) != "join":
                    server.event(room, user, "m.room.member", {"membership": "join"}, user)
            content: dict[str, Any] = {"msgtype": "m.text", "body": text}
            if not private:
                content = {"msgtype": "m.text", "body": f"{BOT}: {text}", "m.mentions": {"user_ids": [BOT]}}
            if image is not None or file is not None:
                name, kind, data = file if file is not None else ("image.png", "image/png", image or b"")
                media = secrets.token_hex(8)
                server.media[media] = (kind, data)
                msgtype = "m.image" if kind.startswith("image/") else "m.audio" if kind.startswith("audio/") else "m.file"
                content = {**content, "msgtype": msgtype, "filename": name, "url": f"mxc://{SERVER}/{media}",
                           "info": {"mimetype": kind, "size": len(data)}}
            return server.event(room, user, "m.room.message", content)

    def session(self, user: str) -> str:
        """A person's direct chat's session key (the channel's `home`)."""
        local, _, host = user[1:].partition(":")
        return f"matrix:{local}@{host}"

    def shown(self, user: str) -> list[str]:
        room = self.dms.get(user)
        if room is None:
            return []
        return [visible(c) for c in self.server.bot_messages(room) if c.get("msgtype") in ("m.notice", "m.text")]

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        room = self.dms.get(user)
        found = [c for c in self.server.bot_messages(room) if c.get("msgtype") in ("m.image", "m.file")] if room else []
        return [(c["body"], self.server.media[c["url"].rsplit("/", 1)[1]][1], c["msgtype"] == "m.image")
                for c in found]

    def edits(self) -> int:
        with self.server.cond:
            return sum(1 for room in self.server.rooms.values() for _, e in room.events
                       if (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.replace")

    def rate_limit(self, calls: int, retry_after: float) -> None:
        with self.server.cond:
            self.server.limited += [retry_after] * calls

    def refuse(self, calls: int) -> None:
        with self.server.cond:
            self.server.refusing = calls

    def slow(self, calls: int, seconds: float) -> None:
        with self.server.cond:
            self.server.slowed += [seconds] * calls

    def down(self, down: bool) -> None:
        if down:
            self.server.down()
        else:
            self.server.up()

    def close(self) -> None:
        self.server.down()


__all__ = ["BOT", "PASSWORD", "Homeserver", "StandIn", "visible"]
