"""Reading and writing single mails, without a server: who sent one, whether it is answered, its thread, its text
and files; and a reply with the headers that keep it in its thread.

A thread is one session, `email:<sender>:<12 hex of SHA-256 of its root Message-ID>`: the chat is the correspondent
(`chat_of`), so every thread with one person is that person's (`channels/owners.py`). The root is the first
Message-ID in `References`, else the one in `In-Reply-To` (or the thread that id is known to belong to), else the
mail's own. A reply we send carries the thread's references plus the mail it answers, so the person's answer to it
has the same root and lands in the same session.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage, Message
from email.utils import formatdate, getaddresses, make_msgid, parseaddr
from typing import Any, TypeVar

import nanoagent.channels.email.format as fmt
from nanoagent import keys
from nanoagent.channels.base import FileIn

NAME = "email"
MSGID = re.compile(r"<[^<>\s]+>")
MAX_REFERENCES = 20  # references a reply carries: the root and the latest ones
BULK = frozenset({"bulk", "list", "junk"})
MAX_TEXT = 50_000  # characters of a mail's text the model reads
T = TypeVar("T")


def thread_hash(root: str) -> str:
    return hashlib.sha256(root.strip().encode("utf-8", "replace")).hexdigest()[:12]


def message_id(msg: Message, data: bytes) -> str:
    """The mail's Message-ID, or for a mail without one a stable id made from its bytes."""
    found = MSGID.findall(str(msg.get("Message-ID") or ""))
    return found[0] if found else "<sha256-" + hashlib.sha256(data).hexdigest()[:32] + "@nanoagent.invalid>"


def sender(msg: Message) -> tuple[str, str]:
    """(address lower-cased, display name) of From."""
    name, address = parseaddr(str(msg.get("From") or ""))
    return address.strip().lower(), name.strip()


def ignored(msg: Message, own: str) -> str | None:
    """Why a mail gets no answer whoever sent it (RFC 3834: automatic mail and mailing lists), else None."""
    auto = str(msg.get("Auto-Submitted") or "").strip().lower()
    if auto and not auto.startswith("no"):
        return "auto_submitted"
    if msg.get("List-Id") or msg.get("List-Unsubscribe"):
        return "mailing_list"
    if str(msg.get("Precedence") or "").strip().lower() in BULK:
        return "bulk"
    if ambiguous_sender(msg):
        return "ambiguous_sender"
    address = sender(msg)[0]
    if not address or "@" not in address:
        return "no_sender"
    if address == own.lower():
        return "own_address"
    if address.split("@")[0] in ("mailer-daemon", "postmaster") or msg.get_content_type() == "multipart/report":
        return "bounce"
    if forged(msg):
        return "failed_authentication"
    return None


RESULT = re.compile(r"^\s*(dmarc|dkim|spf)\s*=\s*([a-z]+)\b(.*)$", re.I | re.S)
SIGNER = re.compile(r"\bheader\.d\s*=\s*([^\s;]+)|\bheader\.i\s*=\s*[^\s;@]*@([^\s;]+)", re.I)
ADDRESS_LIKE = re.compile(r"[^@\s<>\",;:()\[\]]+@[^@\s<>\",;:()\[\]]+")


def forged(msg: Message) -> bool:
    """Did the receiving server find the sender forged? Its `Authentication-Results` (the topmost one, which it adds)
    saying DMARC failed, or SPF failed where DMARC did not pass and no passing DKIM signature is aligned with the
    From domain (signed by it or a domain it is under, or above it): a signature of any other domain says nothing
    of who wrote From. Only what the server says is believed, and only the topmost header is read: a sender can
    write more below it, but not above."""
    headers = msg.get_all("Authentication-Results") or []
    if not headers:
        return False
    results: dict[str, list[tuple[str, str]]] = {}
    for part in str(headers[0]).split(";")[1:]:  # the first part names the server
        found = RESULT.match(part)
        if found:
            results.setdefault(found[1].lower(), []).append((found[2].lower(), found[3]))
    domain = sender(msg)[0].rpartition("@")[2]
    dmarc = {result for result, rest in results.get("dmarc", []) if _dmarc_for(rest) in ("", domain)}
    if "fail" in dmarc:
        return True
    if "pass" in dmarc or not any(result == "fail" for result, _ in results.get("spf", [])):
        return False
    return not any(result == "pass" and _aligned(_signer(rest), domain) for result, rest in results.get("dkim", []))


def _dmarc_for(properties: str) -> str:
    """The domain a DMARC result is for (`header.from`), "" when not said."""
    found = re.search(r"\bheader\.from\s*=\s*([^\s;]+)", properties, re.I)
    return found[1].strip(".").lower() if found else ""


def _signer(properties: str) -> str:
    found = SIGNER.search(properties)
    return (found[1] or found[2] or "").strip().strip(".").lower() if found else ""


def _aligned(signer: str, domain: str) -> bool:
    """DMARC's relaxed alignment, without the public-suffix list: the same domain, or one under the other (a
    verifier passes a signature only for a domain whose DNS publishes its key, so a bare suffix never signs)."""
    return bool(signer and domain and "." in signer) and (
        signer == domain or domain.endswith("." + signer) or signer.endswith("." + domain))


def ambiguous_sender(msg: Message) -> bool:
    """Is From anything but one clear address: several, one the parser had to guess, or one beside another address
    in its text (`owner@example.com <attacker@evil.net>`, `"owner@example.com" <attacker@evil.net>`), which a
    reader, a DMARC checker and `parseaddr` may each take for a different sender?"""
    header = msg.get("From")
    text = str(header or "")
    found = getaddresses([text])
    if len(found) != 1 or any(type(d).__name__ == "InvalidHeaderDefect" for d in getattr(header, "defects", ())):
        return True
    address = found[0][1].strip().lower()
    return {a.lower() for a in ADDRESS_LIKE.findall(text)} - {address} != set()


ADDRESS = re.compile(r"[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+")


def allowed(allow_from: list[str], address: str) -> bool:
    """Is `address` in `allowFrom`: an address, or `@domain` for everyone at that domain (case-insensitive)."""
    address = address.strip().lower()
    for entry in (e.strip().lower() for e in allow_from):
        if entry == address or (len(entry) > 1 and entry.startswith("@") and address.endswith(entry)):
            return True
    return False


@dataclass
class Thread:
    """What a reply in a thread needs: the correspondent, the subject, the last mail and the references."""

    to: str
    subject: str
    last: str  # the Message-ID a reply answers
    references: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"to": self.to, "subject": self.subject, "last": self.last, "references": self.references,
                "at": self.at}

    @classmethod
    def from_json(cls, data: Any) -> Thread | None:
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("to", "subject", "last")):
            return None
        refs = [r for r in data.get("references", []) if isinstance(r, str)]
        at = data.get("at")
        return cls(data["to"], data["subject"], data["last"], refs, float(at) if isinstance(at, int | float) else 0.0)

    def answered(self, msgid: str) -> None:
        """The thread after `msgid` joined it (theirs or ours): the next reply answers it."""
        self.last = msgid
        self.references = _bounded([*self.references, msgid])
        self.at = time.time()


def _bounded(refs: list[str]) -> list[str]:
    unique = list(dict.fromkeys(refs))
    return unique if len(unique) <= MAX_REFERENCES else [unique[0], *unique[-(MAX_REFERENCES - 1):]]


def root_of(msg: Message, own_id: str, known: dict[str, str] | None = None) -> str:
    """The thread's root Message-ID; `known` maps Message-IDs seen in threads to their thread's root, for clients
    that send In-Reply-To without References."""
    refs = MSGID.findall(str(msg.get("References") or ""))
    if refs:
        return refs[0]
    parent = MSGID.findall(str(msg.get("In-Reply-To") or ""))
    if parent:
        return (known or {}).get(parent[0], parent[0])
    return own_id


def chat_of(address: str) -> str:
    """The chat of a correspondent: their address lower-cased; an address a key cannot hold (characters beyond
    letters, digits and `.@+=-_`, or longer than `keys.MAX_ID`) is `addr-<24 hex of SHA-256 of it>`, with no `@`."""
    address = address.strip().lower()
    if keys.parse(f"{NAME}:{address}") == keys.Place(NAME, address):
        return address
    return "addr-" + hashlib.sha256(address.encode("utf-8", "replace")).hexdigest()[:24]


def place_of(address: str, root: str) -> keys.Place:
    """The session of the thread with root `root` that `address` writes in."""
    return keys.make(NAME, chat_of(address), thread_hash(root))


def thread_id(place: keys.Place) -> str:
    """Where the state keeps a thread's reply headers (`thread:<id>`): `<chat>:<hash>`; an older key `email:<hash>`
    (before a thread's key named its sender) is its hash alone."""
    return f"{place.chat}:{place.thread}" if place.thread else place.chat


def find_thread(threads: Mapping[str, T], place: keys.Place) -> tuple[str, T] | None:
    """The thread `place` names among `threads` (by id) and the id to keep it under from now on; None for a thread
    not known or for `email:<address>` (a new thread). Older state and keys are still read: state an older version
    wrote keeps a thread under its hash alone, and an older key `email:<hash>` names the thread of that hash."""
    if starts_thread(place):
        return None
    if place.thread:
        found = next((threads[i] for i in (thread_id(place), place.thread) if i in threads), None)
        return None if found is None else (thread_id(place), found)
    suffix = ":" + place.chat
    return next(((i, t) for i, t in threads.items() if i == place.chat or i.endswith(suffix)), None)


def starts_thread(place: keys.Place) -> bool:
    """Is `place` a person's own place, `email:<address>`, where mail sent starts a new thread?"""
    return not place.thread and "@" in place.chat


def text_of(msg: EmailMessage) -> str:
    """The person's words: text/plain preferred, else the HTML part as text; the quoted mail below them left out."""
    body = msg.get_body(("plain", "html"))
    if body is None:
        return ""
    try:
        content = body.get_content()
    except (LookupError, ValueError):  # an unknown charset: read it as UTF-8 with replacements
        payload = body.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    text = str(content).replace("\r\n", "\n")
    if body.get_content_type() == "text/html":
        text = fmt.html_text(text)
    text = fmt.without_quote(text)
    if len(text) > MAX_TEXT:  # kept in the channel's inbox file and sent to the model whole: bounded
        text = text[:MAX_TEXT] + f"\n[the rest of the mail, {len(text) - MAX_TEXT:,} characters, was left out]"
    return text


def files_of(msg: EmailMessage, uid: int) -> list[FileIn]:
    """The mail's attachments as `FileIn`s, each `ref` "<uid>:<index of its part in msg.walk()>"."""
    body = msg.get_body(("plain", "html"))
    found = []
    for index, part in enumerate(msg.walk()):
        if part.is_multipart() or part is body:
            continue
        disposition = part.get_content_disposition()
        media_type = part.get_content_type()
        if disposition != "attachment" and not (disposition == "inline" and part.get_filename()) \
                and not media_type.startswith("image/"):
            continue
        payload = part.get_payload(decode=True)
        size = len(payload) if isinstance(payload, bytes) else None
        kind = {"image": "photo", "audio": "audio", "video": "video"}.get(part.get_content_maintype(), "document")
        found.append(FileIn(kind, part.get_filename(), size, f"{uid}:{index}", media_type))
    return found


def part_bytes(msg: Message, index: int) -> bytes | None:
    for i, part in enumerate(msg.walk()):
        if i == index:
            payload = part.get_payload(decode=True)
            return payload if isinstance(payload, bytes) else None
    return None


def compose(own: str, to: str, subject: str, plain: str, html: str, thread: Thread | None) -> EmailMessage:
    """A mail from `own` to `to`: a reply in `thread` (In-Reply-To, References, `Re:` subject) or a new one; plain
    text with an HTML alternative; marked `Auto-Submitted: auto-replied` so other robots do not answer it."""
    msg = EmailMessage()
    msg["From"] = header_value(own)
    msg["To"] = header_value(to)
    msg["Subject"] = header_value(fmt.reply_subject(thread.subject) if thread else subject)
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain=own.rsplit("@", 1)[-1] if "@" in own else "nanoagent.invalid")
    if thread is not None:
        msg["In-Reply-To"] = header_value(thread.last)
        msg["References"] = header_value(" ".join(_bounded([*thread.references, thread.last])))
    msg["Auto-Submitted"] = "auto-replied"
    msg.set_content(plain)
    msg.add_alternative(html, subtype="html")
    return msg


CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")


def header_value(text: str) -> str:
    """A header value built from what a mail or a model wrote: line breaks and other control characters (a bare CR,
    an encoded word decoding to one) become spaces, so the value stays one header; `EmailMessage` refuses it else."""
    return " ".join(CONTROL.sub(" ", text).split())


def recipients(msg: Message) -> list[str]:
    """Everyone the mail went to (To and Cc), lower-cased."""
    return [a.lower() for _, a in getaddresses([str(msg.get("To") or ""), str(msg.get("Cc") or "")]) if a]
