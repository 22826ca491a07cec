"""Mail servers for tests, over real sockets: a real SMTP server (aiosmtpd) that records what it receives, and a
small IMAP4rev1 stand-in speaking what aioimaplib sends, so a test delivers a message into the mailbox and sees the
email channel read it and answer by SMTP.

The IMAP stand-in knows CAPABILITY (IDLE offered or not), LOGIN, SELECT, UID SEARCH (ALL, UNSEEN, a UID range),
UID FETCH (BODY.PEEK[], RFC822, FLAGS, UID), UID STORE +FLAGS, IDLE/DONE (new mail pushed as `* N EXISTS`), NOOP and
LOGOUT. `MailStandIn` puts both together with the `StandIn` methods the shared channel cases use.

Trouble is injected with `down(True)` (IMAP connections dropped and refused, SMTP answers 421) and
`rate_limit(calls, retry_after)` (SMTP answers 451 "try again later" to the next `calls` messages and to every one
until `retry_after` seconds passed).
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import logging
import re
import select
import socket
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import make_msgid, parseaddr
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from nanoagent.channels.email.mail import place_of
from tests.stand_in_base import Scripted

logging.getLogger("mail.log").setLevel(logging.ERROR)  # aiosmtpd's own chatter (a deprecation note per login)
USER, PASSWORD = "bot@example.org", "mail-secret-do-not-log"
SEEN = "\\Seen"
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\([^)]*\)|\S+')


@dataclass
class Stored:
    uid: int
    data: bytes
    flags: set[str] = field(default_factory=set)


class Mailbox:
    """One IMAP folder; thread-safe. `waiters` are the wake-up sockets of connections in IDLE."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.messages: list[Stored] = []
        self.uidvalidity = 1
        self.uidnext = 1
        self.waiters: set[socket.socket] = set()

    def add(self, data: bytes, flags: set[str] | None = None) -> int:
        with self.lock:
            uid = self.uidnext
            self.uidnext += 1
            self.messages.append(Stored(uid, data, set(flags or ())))
            for waiter in list(self.waiters):
                try:
                    waiter.send(b"x")
                except OSError:
                    pass
            self.lock.notify_all()
            return uid

    def get(self, uid: int) -> Stored | None:
        with self.lock:
            return next((m for m in self.messages if m.uid == uid), None)

    def seen(self, uid: int) -> bool:
        stored = self.get(uid)
        return stored is not None and SEEN in stored.flags

    def wait_seen(self, uid: int, timeout: float = 10.0) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: any(m.uid == uid and SEEN in m.flags for m in self.messages), timeout)


class ImapServer:
    """The IMAP stand-in on 127.0.0.1, one thread per connection."""

    def __init__(self, mailbox: Mailbox | None = None, *, idle: bool = True, user: str = USER,
                 password: str = PASSWORD, tls: ssl.SSLContext | None = None, starttls: bool = False):
        self.mailbox = mailbox or Mailbox()
        self.idle = idle
        self.refuse_idle = False  # IDLE offered in CAPABILITY, then answered NO (servers that misconfigure it)
        self.tls = tls  # with starttls: offered by STARTTLS, else TLS from the first byte
        self.starttls = starttls
        self.user, self.password = user, password
        self.commands: list[str] = []  # every command's name as received ("LOGIN", "UID FETCH", ...)
        self.logins = 0
        self.is_down = False
        self._conns: set[socket.socket] = set()
        self._server = _Threading(("127.0.0.1", 0), _imap_handler(self))
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def down(self, down: bool) -> None:
        """While down, every connection is dropped at once and open ones are closed."""
        self.is_down = down
        if down:
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.down(True)
        self._server.shutdown()
        self._server.server_close()


class _Threading(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _imap_handler(server: ImapServer) -> type[socketserver.BaseRequestHandler]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            if server.is_down:
                return
            server._conns.add(sock)
            try:
                if server.tls is not None and not server.starttls:
                    sock = server.tls.wrap_socket(sock, server_side=True)
                _Session(server, sock).run()
            except (OSError, ssl.SSLError):
                pass
            finally:
                server._conns.discard(sock)

    return Handler


class _Session:
    def __init__(self, server: ImapServer, sock: socket.socket):
        self.server, self.sock, self.box = server, sock, server.mailbox
        self.buffer = b""
        self.authed = False
        self.known = 0  # messages the client was told exist
        self.secure = server.tls is not None and not server.starttls

    def run(self) -> None:
        self.out("* OK [CAPABILITY IMAP4rev1] stand-in ready")
        while True:
            line = self.line()
            if line is None:
                return
            tag, _, rest = line.partition(" ")
            words = _TOKEN.findall(rest)
            if not words:
                self.out(f"{tag} BAD no command")
                continue
            name = words[0].upper()
            args = words[1:]
            if name == "UID" and args:
                name, args = f"UID {args[0].upper()}", args[1:]
            self.server.commands.append(name)
            if not self.command(tag, name, args):
                return

    def command(self, tag: str, name: str, args: list[str]) -> bool:
        caps = "IMAP4rev1 AUTH=PLAIN" + (" IDLE" if self.server.idle else "")
        offers_tls = self.server.tls is not None and not self.secure
        if offers_tls:
            caps += " STARTTLS LOGINDISABLED"
        if name == "CAPABILITY":
            self.out(f"* CAPABILITY {caps}", f"{tag} OK CAPABILITY completed")
        elif name == "STARTTLS" and offers_tls and self.server.tls is not None:
            self.out(f"{tag} OK begin TLS now")
            self.sock = self.server.tls.wrap_socket(self.sock, server_side=True)
            self.secure = True
        elif name == "LOGIN" and offers_tls:
            self.out(f"{tag} NO [PRIVACYREQUIRED] STARTTLS first")
        elif name == "LOGIN":
            user, password = (_unquote(a) for a in (args + ["", ""])[:2])
            if user == self.server.user and password == self.server.password:
                self.authed = True
                self.server.logins += 1
                self.out(f"{tag} OK LOGIN completed")
            else:
                self.out(f"{tag} NO [AUTHENTICATIONFAILED] Invalid credentials")
        elif name == "LOGOUT":
            self.out("* BYE logging out", f"{tag} OK LOGOUT completed")
            return False
        elif name == "NOOP":
            self.exists()
            self.out(f"{tag} OK NOOP completed")
        elif not self.authed:
            self.out(f"{tag} NO log in first")
        elif name in ("SELECT", "EXAMINE"):
            with self.box.lock:
                count, validity, uidnext = len(self.box.messages), self.box.uidvalidity, self.box.uidnext
            self.known = count
            self.out(f"* {count} EXISTS", "* 0 RECENT", "* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)",
                     f"* OK [UIDVALIDITY {validity}] UIDs valid", f"* OK [UIDNEXT {uidnext}] predicted next UID",
                     f"{tag} OK [READ-WRITE] SELECT completed")
        elif name == "UID SEARCH":
            self.out("* SEARCH" + "".join(f" {m.uid}" for m in self.search(args)), f"{tag} OK SEARCH completed")
        elif name == "UID FETCH":
            self.fetch(tag, args)
        elif name == "UID STORE":
            self.store(tag, args)
        elif name == "IDLE":
            return self.idle(tag)
        else:
            self.out(f"{tag} BAD {name} not known here")
        return True

    def search(self, args: list[str]) -> list[Stored]:
        words = [a.upper() for a in args]
        if words[:1] == ["CHARSET"]:
            words = words[2:]
        with self.box.lock:
            found = list(self.box.messages)
        i = 0
        while i < len(words):
            word = words[i]
            if word == "UNSEEN":
                found = [m for m in found if SEEN not in m.flags]
            elif word == "SEEN":
                found = [m for m in found if SEEN in m.flags]
            elif word == "UID" and i + 1 < len(words):
                i += 1
                uids = _uid_set(words[i], found)
                found = [m for m in found if m.uid in uids]
            i += 1
        return found

    def fetch(self, tag: str, args: list[str]) -> None:
        with self.box.lock:
            messages = list(self.box.messages)
        uids = _uid_set(args[0], messages) if args else set()
        items = " ".join(args[1:]).upper()
        for seq, stored in enumerate(messages, 1):
            if stored.uid not in uids:
                continue
            body = "BODY[]" if "BODY.PEEK[]" in items or "BODY[]" in items else ("RFC822" if "RFC822" in items else "")
            if body and "PEEK" not in items:
                stored.flags.add(SEEN)
            flags = " ".join(sorted(stored.flags))
            head = f"* {seq} FETCH (UID {stored.uid} FLAGS ({flags})"
            if body:
                self.send(f"{head} {body} {{{len(stored.data)}}}\r\n".encode() + stored.data + b")\r\n")
            else:
                self.out(head + ")")
        self.out(f"{tag} OK FETCH completed")

    def store(self, tag: str, args: list[str]) -> None:
        with self.box.lock:
            messages = list(self.box.messages)
            uids = _uid_set(args[0], messages) if args else set()
            what = args[1].upper() if len(args) > 1 else ""
            flags = {f for f in " ".join(args[2:]).strip("()").split() if f}
            for seq, stored in enumerate(messages, 1):
                if stored.uid in uids:
                    if what.startswith("+FLAGS"):
                        stored.flags |= flags
                    elif what.startswith("-FLAGS"):
                        stored.flags -= flags
                    elif what.startswith("FLAGS"):
                        stored.flags = set(flags)
                    if not what.endswith(".SILENT"):
                        self.out(f"* {seq} FETCH (UID {stored.uid} FLAGS ({' '.join(sorted(stored.flags))}))")
            self.box.lock.notify_all()
        self.out(f"{tag} OK STORE completed")

    def idle(self, tag: str) -> bool:
        if not self.server.idle or self.server.refuse_idle:
            self.out(f"{tag} NO IDLE not available")
            return True
        wake_r, wake_w = socket.socketpair()
        with self.box.lock:
            self.box.waiters.add(wake_w)
        try:
            self.out("+ idling")
            self.exists()
            while True:
                if b"\r\n" in self.buffer:
                    line = self.line()
                    if line is None:
                        return False
                    if line.strip().upper() == "DONE":
                        self.out(f"{tag} OK IDLE terminated")
                        return True
                    continue
                pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
                ready, _, _ = select.select([self.sock, wake_r], [], [], 0 if pending else None)
                if pending:
                    ready.append(self.sock)
                if wake_r in ready:
                    wake_r.recv(64)
                    self.exists()
                if self.sock in ready:
                    data = self.sock.recv(65536)
                    if not data:
                        return False
                    self.buffer += data
        finally:
            with self.box.lock:
                self.box.waiters.discard(wake_w)
            wake_r.close()
            wake_w.close()

    def exists(self) -> None:
        with self.box.lock:
            count = len(self.box.messages)
        if count != self.known:
            self.known = count
            self.out(f"* {count} EXISTS")

    def line(self) -> str | None:
        while b"\r\n" not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line.decode("utf-8", "replace")

    def out(self, *lines: str) -> None:
        self.send("".join(f"{line}\r\n" for line in lines).encode())

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _unquote(word: str) -> str:
    if len(word) >= 2 and word[0] == word[-1] == '"':
        return re.sub(r"\\(.)", r"\1", word[1:-1])
    return word


def _uid_set(spec: str, messages: list[Stored]) -> set[int]:
    """The UIDs an IMAP sequence set names; `*` is the highest UID (so `n:*` always holds it, as servers do)."""
    top = max((m.uid for m in messages), default=0)
    uids: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition(":")
        a = top if low == "*" else int(low)
        b = a if not high else (top if high == "*" else int(high))
        uids.update(range(min(a, b), max(a, b) + 1))
    return uids


# --- SMTP ------------------------------------------------------------------------------------------------------------


@dataclass
class Received:
    sender: str
    recipients: list[str]
    data: bytes
    at: float  # time.monotonic()

    @property
    def message(self) -> EmailMessage:
        parsed: EmailMessage = email.message_from_bytes(self.data, policy=email.policy.default)  # type: ignore[assignment]
        return parsed

    def text(self) -> str:
        body = self.message.get_body(("plain",))
        text: str = body.get_content() if body is not None else ""  # type: ignore[attr-defined]
        return text.replace("\r\n", "\n")

    def files(self) -> list[tuple[str, bytes, str]]:
        """The mail's attachments: (file name, bytes, content type)."""
        return [(str(part.get_filename()), part.get_payload(decode=True), part.get_content_type())
                for part in self.message.iter_attachments()]


class SmtpServer(Scripted):
    """aiosmtpd on 127.0.0.1 in its own thread, recording every message; AUTH LOGIN/PLAIN without TLS (loopback).
    The shared trouble (tests/stand_in_base.py) as SMTP has it: down, a 421; a rate limit, 451s for `retry_after`
    seconds from the first; a refusal, a 550; slow, the answer to DATA late."""

    def __init__(self, *, user: str = USER, password: str = PASSWORD, tls: ssl.SSLContext | None = None,
                 starttls: bool = False):
        super().__init__()
        self.user, self.password = user, password
        self.received: list[Received] = []
        self.attempts = 0  # MAIL FROM commands seen, refused ones included
        self.logins = 0
        self.refused = 0
        self.refuse_until = 0.0  # a rate limit refuses every mail until then
        self.port = _free_port()
        if tls is None:
            kwargs: dict[str, Any] = {"auth_require_tls": False}
        elif starttls:
            kwargs = {"tls_context": tls, "require_starttls": True}
        else:
            kwargs = {"ssl_context": tls, "auth_require_tls": False}  # TLS from the first byte: aiosmtpd cannot tell
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port, ready_timeout=10,
                                     authenticator=self._authenticate, **kwargs)
        self.controller.start()

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = (isinstance(data, LoginPassword) and data.login.decode() == self.user
              and data.password.decode() == self.password)
        self.logins += ok
        return AuthResult(success=ok, handled=False)  # not handled: aiosmtpd answers 535

    async def handle_MAIL(self, server: Any, session: Any, envelope: Any, address: str, options: list[str]) -> str:
        with self.cond:
            self.attempts += 1
            if self.is_down:
                self.refused += 1
                return "421 4.3.0 service not available"
            retry_after = self.take_limit()
            if retry_after is not None:
                self.refuse_until = max(self.refuse_until, time.monotonic() + retry_after)
            if retry_after is not None or time.monotonic() < self.refuse_until:
                self.refused += 1
                return "451 4.7.1 rate limited, try again later"
            if self.take_refusal():
                self.refused += 1
                return "550 5.7.1 relaying denied"
        envelope.mail_from = address
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.cond:
            self.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.content),
                                          time.monotonic()))
            self.cond.notify_all()
            late = self.take_delay()
        await asyncio.sleep(late)
        return "250 Message accepted"

    def wait(self, count: int, timeout: float = 15.0) -> list[Received]:
        """The first `count` messages received, waiting for them up to `timeout` seconds."""
        with self.cond:
            self.cond.wait_for(lambda: len(self.received) >= count, timeout)
            return list(self.received)

    def close(self) -> None:
        self.controller.stop()


# --- messages ----------------------------------------------------------------------------------------------------------


def letter(sender: str, text: str, *, to: str = USER, subject: str = "Hello", reply_to: EmailMessage | None = None,
           headers: dict[str, str] | None = None, image: bytes | None = None, html: str | None = None,
           attachments: list[tuple[str, str, bytes]] | None = None, message_id: str | None = "") -> EmailMessage:
    """A mail as a person's client writes it; `reply_to` makes it an answer in that message's thread."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = email.utils.formatdate(localtime=False)
    if message_id is not None:
        msg["Message-ID"] = message_id or make_msgid(domain=sender.rsplit("@", 1)[-1].strip(">"))
    if reply_to is not None:
        parent = reply_to["Message-ID"]
        refs = (reply_to.get("References") or "").split()
        msg.replace_header("Subject", "Re: " + re.sub(r"^(re:\s*)+", "", str(reply_to["Subject"]), flags=re.I))
        msg["In-Reply-To"] = parent
        msg["References"] = " ".join([*refs, parent])
    for name, value in (headers or {}).items():
        msg[name] = value
    msg.set_content(text)
    if html is not None:
        msg.add_alternative(html, subtype="html")
    if image is not None:
        msg.add_attachment(image, maintype="image", subtype="png", filename="picture.png")
    for name, media_type, data in attachments or []:
        maintype, _, subtype = media_type.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return msg


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


class MailStandIn:
    """A mailbox reached by IMAP and an SMTP server, for the email channel: the shared cases' `StandIn`."""

    channel = "email"
    owner = "owner@example.com"
    stranger = "stranger@elsewhere.net"

    def __init__(self, *, idle: bool = True):
        self.imap = ImapServer(idle=idle)
        self.smtp = SmtpServer()
        self.sent: dict[str, EmailMessage] = {}  # what was delivered to the mailbox, by Message-ID
        self.written: list[tuple[float, EmailMessage]] = []  # what people wrote with `write`, and when

    def settings(self, **extra: Any) -> dict[str, Any]:
        server = {"host": "127.0.0.1", "user": USER, "password": PASSWORD, "security": "none"}
        return {"enabled": True, "imap": {**server, "port": self.imap.port},
                "smtp": {**server, "port": self.smtp.port}, "allowFrom": [self.owner], "owner": [self.owner], "pollSeconds": 5, **extra}

    def deliver(self, msg: EmailMessage) -> int:
        """Put a mail in the inbox; its UID."""
        self.sent[str(msg["Message-ID"])] = msg
        return self.imap.mailbox.add(bytes(msg))

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              file: tuple[str, str, bytes] | None = None) -> str:
        """`user` writes to the bot, answering the latest mail between them when there is one (so it stays in the
        thread), else starting a thread whose subject is the text's first line; not private: others in Cc; `file`
        (name, media type, bytes) attached."""
        ours = [(r.at, r.message) for r in list(self.smtp.received) if user in r.recipients]
        theirs = [(at, m) for at, m in self.written if address_of(str(m["From"])) == user]
        last = max([*ours, *theirs], key=lambda pair: pair[0], default=(0.0, None))[1]
        subject = text.strip().split("\n")[0][:60] or "(no subject)"
        headers = {} if private else {"Cc": "friend@example.net, another@example.net"}
        msg = letter(user, text, image=image, reply_to=last, subject=subject, headers=headers,
                     attachments=[file] if file is not None else None)
        self.written.append((time.monotonic(), msg))
        self.deliver(msg)
        return str(msg["Message-ID"])

    def session(self, user: str) -> str:
        """The session key of the thread `write` keeps `user` in: their address and the hash of their first mail's
        Message-ID."""
        first = next(m for _, m in self.written if address_of(str(m["From"])) == user)
        return place_of(user, str(first["Message-ID"])).key

    def shown(self, user: str) -> list[str]:
        return [r.text().rstrip("\n") for r in list(self.smtp.received) if user in r.recipients]

    def files_shown(self, user: str) -> list[tuple[str, bytes, bool]]:
        """The files mailed to that person: (name, bytes, an image)."""
        return [(name, data, kind.startswith("image/")) for r in list(self.smtp.received) if user in r.recipients
                for name, data, kind in r.files()]

    def edits(self) -> int:
        return 0

    def refuse(self, calls: int) -> None:
        self.smtp.refuse(calls)

    def slow(self, calls: int, seconds: float) -> None:
        self.smtp.slow(calls, seconds)

    def rate_limit(self, calls: int, retry_after: float) -> None:
        self.smtp.rate_limit(calls, retry_after)

    def down(self, down: bool) -> None:
        self.imap.down(down)
        self.smtp.down(down)

    def close(self) -> None:
        self.imap.close()
        self.smtp.close()


def address_of(header: str) -> str:
    return parseaddr(header)[1].lower()


def certificate(folder: Path) -> ssl.SSLContext:
    """A server context with a self-signed certificate for 127.0.0.1 and localhost; `folder/cert.pem` is what a
    client trusts (SSL_CERT_FILE)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                       serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context


StandIn = MailStandIn  # the name the shared channel cases look for
