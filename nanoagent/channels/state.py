"""A channel's own state: `$NANOAGENT_HOME/channels/<name>.json`, format version 2, mode 0600.

- `inbox`: messages taken from the app but not yet handled, each the `raw` JSON of an `Incoming` under `"id"` (a
  string). A message is acknowledged to the app only once it is here. It is handled once it is in its session file
  (the loop writes it at the start of a turn, or when it joins a running one), or once it was answered without a turn
  (a command, a pairing code, a message that is ignored). After a restart the inbox is replayed: nothing is lost.
- `seen`: the ids of the latest messages taken (at most `MAX_SEEN`), so one the app sends again is not taken twice.
- `cursor`: the channel's own bookmarks (Telegram's last update id, a chat's last message handled for catch-up,
  IMAP's last UID), strings by name.
- `open_turns`: sessions whose turn started but whose reply has not reached the chat yet. After a restart the reply
  is delivered from the session file if the turn finished there, else the turn is resumed.
- `allowed` (user id -> name) and `pairing` (pending codes): the people `nanoagent pairing approve` let in, besides
  config's `channels.<name>.allowFrom`. An approval holds for this channel only.
- `outbox`: finished replies the app did not accept (a refusal, a rate limit past the link's patience), each an
  `Undelivered`: how many of its messages arrived, how often it was refused or raised, when it is tried next (each
  refusal doubles the wait, up to ten minutes). The engine sends them again (`Timing.sweep`) until the app takes
  them; none is dropped.
- `parked`: a message or a reply whose handling raised `PARK_AFTER` times in a row, set aside so the channel goes
  on (`Parked`: a message's inbox JSON, or a reply's text, and the error). `nanoagent channels retry <name>` puts
  them back (in the inbox, in the outbox).
- `replies`: when each reply the engine let through went out, per thread (`"thread:<session key>"`) and per sender
  (`"sender:<user id>"`), for `channels.replyLimit`; times older than its window are dropped.

Version 1 was Telegram's file (numeric ids, `last_update_id`); it is read and written back as version 2.

The gateway and `nanoagent pairing` both write it, each read-modify-write under the file's lock; every write is
atomic. Light on purpose: the CLI and cron import it, never an app's library.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import nanoagent.channels.registry as registry
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import atomic_write, file_lock

if TYPE_CHECKING:
    from nanoagent.paths import Paths

VERSION = 2
CODE_TTL = 3600.0  # seconds a pairing code stays valid
MAX_PENDING = 50  # pending codes kept at most; past it no new one is made: strangers cannot grow the file
MAX_SEEN = 1000  # ids of taken messages remembered, to drop one the app sends again
PARK_AFTER = 3  # a message or reply whose handling raised this many times in a row is parked
MAX_ERROR = 200  # characters of an error kept with a parked item or an outbox entry
UNTAKEN = "the app did not take it"  # an outbox entry's reason when its link gave none (`Link.why_refused`)
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I to misread
LOCK_TIMEOUT = 5.0

T = TypeVar("T")


@dataclass
class Pairing:
    code: str
    user: str  # the sender's id in the app
    chat: str  # the private chat the code was sent to
    name: str
    created: float

    def expired(self, now: float) -> bool:
        return now - self.created > CODE_TTL


@dataclass
class Undelivered:
    """A finished reply the app did not take, in the outbox until it does."""

    id: str
    key: str  # the session whose reply it is (its chat)
    text: str  # the reply's Markdown, split again when sent
    skip: int = 0  # its first messages that arrived
    tries: int = 1  # sends the app did not take
    failures: int = 0  # sends that raised, in a row (`PARK_AFTER` of them park it)
    error: str = ""
    since: float = 0.0  # wall clock
    next: float = 0.0  # not tried again before this (wall clock)


@dataclass
class Parked:
    """A message or a reply whose handling raised `PARK_AFTER` times in a row, set aside so the channel goes on."""

    kind: str  # "message" | "reply"
    id: str
    key: str
    error: str  # the last exception's type and words
    failures: int
    at: float  # wall clock
    raw: dict[str, Any] | None = None  # a message: its inbox JSON
    text: str | None = None  # a reply: its Markdown


@dataclass
class ChannelState:
    inbox: list[dict[str, Any]] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    cursor: dict[str, str] = field(default_factory=dict)
    open_turns: list[str] = field(default_factory=list)
    allowed: dict[str, str] = field(default_factory=dict)
    pairing: list[Pairing] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # session keys of the group chats, as the link told them
    outbox: list[Undelivered] = field(default_factory=list)  # replies the app has not taken yet
    parked: list[Parked] = field(default_factory=list)  # messages and replies set aside after failures
    replies: dict[str, list[float]] = field(default_factory=dict)  # `channels.replyLimit`'s counts

    def set_group(self, key: str, group: bool) -> None:
        """Record whether the chat of session `key` is a group chat (its turns get `tools.groupProfile`)."""
        self.groups = [k for k in self.groups if k != key] + ([key] if group else [])

    # --- the inbox ------------------------------------------------------------------------------

    def take(self, raws: list[dict[str, Any]]) -> list[str]:
        """Put messages (each with a string "id") in the inbox; the ids of those not taken before."""
        seen = set(self.seen)
        fresh = []
        for raw in raws:
            if raw["id"] not in seen:
                seen.add(raw["id"])
                fresh.append(raw)
        self.inbox.extend(fresh)
        self.seen = [*self.seen, *(raw["id"] for raw in fresh)][-MAX_SEEN:]
        return [raw["id"] for raw in fresh]

    def handled(self, ids: set[str]) -> None:
        self.inbox = [raw for raw in self.inbox if raw["id"] not in ids]

    # --- the outbox and what is parked ------------------------------------------------------------

    def queue(self, id: str, key: str, text: str, skip: int, error: str, now: float) -> None:
        """Keep a reply the app did not take, to send again (its first `skip` messages arrived)."""
        if all(entry.id != id for entry in self.outbox):
            self.outbox.append(Undelivered(id, key, text, skip, error=error[:MAX_ERROR], since=now))

    def undelivered(self, id: str) -> Undelivered | None:
        return next((entry for entry in self.outbox if entry.id == id), None)

    def unqueue(self, id: str) -> None:
        self.outbox = [entry for entry in self.outbox if entry.id != id]

    def park_message(self, id: str, key: str, error: str, failures: int, now: float) -> bool:
        """Move a message from the inbox to `parked`; False when it is not in the inbox (handled meanwhile)."""
        raw = next((m for m in self.inbox if m["id"] == id), None)
        if raw is None:
            return False
        self.inbox.remove(raw)
        self.parked.append(Parked("message", id, key, error[:MAX_ERROR], failures, now, raw=raw))
        return True

    def park_reply(self, id: str, key: str, text: str, error: str, failures: int, now: float) -> None:
        self.unqueue(id)
        self.parked.append(Parked("reply", id, key, error[:MAX_ERROR], failures, now, text=text))

    def retry(self) -> tuple[int, int]:
        """Put every parked item back: messages in the inbox, replies in the outbox; the outbox is tried at once.
        (messages, replies)."""
        messages = [p for p in self.parked if p.raw is not None]
        replies = [p for p in self.parked if p.text is not None]
        self.inbox.extend(p.raw for p in messages if p.raw is not None and all(m["id"] != p.id for m in self.inbox))
        for p in replies:
            self.queue(p.id, p.key, p.text or "", 0, p.error, p.at)
        self.parked = []
        for entry in self.outbox:
            entry.next = 0.0
        return len(messages), len(replies)

    def backlog(self, name: str) -> str | None:
        """What waits in the outbox and is parked, in one line with the fix; None when nothing does."""
        parts = []
        if self.outbox:
            reasons = sorted({entry.error for entry in self.outbox if entry.error and entry.error != UNTAKEN})
            parts.append(_count(len(self.outbox), "reply", "replies") + " waiting in the outbox for the app to take"
                         + "".join(f" ({reason})" for reason in reasons[:2]))
        if self.parked:
            parts.append(_count(len(self.parked), "item") + " parked after failing (see the gateway's log; "
                         f"`nanoagent channels retry {name}` tries again)")
        return "; ".join(parts) or None

    # --- `channels.replyLimit` -----------------------------------------------------------------------

    def count_reply(self, counters: list[str], now: float, window: float) -> None:
        for name in counters:
            self.replies[name] = [*self.recent(name, now, window), now]
        self.replies = {k: v for k, v in self.replies.items() if v and v[-1] > now - window}

    def recent(self, counter: str, now: float, window: float) -> list[float]:
        return [t for t in self.replies.get(counter, []) if t > now - window]

    # --- pairing ---------------------------------------------------------------------------------

    def pair(self, user: str, chat: str, name: str, now: float) -> str | None:
        """A new pairing code for an unknown user; None when they have one that is still valid (it was sent
        already: a stranger's every message must not get an answer), or when MAX_PENDING codes are pending: those
        who wrote first keep theirs, so a flood of strangers cannot push out a friend's code. A place frees up when
        a code is approved, denied or expires."""
        self.pairing = [p for p in self.pairing if not p.expired(now)]
        if any(p.user == user for p in self.pairing) or self.pairing_full():
            return None
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
        self.pairing = [*self.pairing, Pairing(code, user, chat, name, now)]
        return code

    def pairing_full(self) -> bool:
        return len(self.pairing) >= MAX_PENDING

    def pending(self, code: str, now: float) -> Pairing:
        wanted = normalize_code(code)
        found = next((p for p in self.pairing if p.code == wanted), None)
        if found is None or found.expired(now):
            why = "has expired (codes last an hour)" if found else "is not pending"
            raise NanoagentError(f"The pairing code {code} {why}; ask them to message the bot again for a new one, "
                                 "and see `nanoagent pairing list`.")
        return found

    def approve(self, code: str, now: float) -> Pairing:
        found = self.pending(code, now)
        self.pairing.remove(found)
        self.allowed[found.user] = found.name
        return found

    def deny(self, code: str, now: float) -> Pairing:
        """Drop a pending code: its holder stays out; writing again gets them a new code, which can be denied too."""
        found = self.pending(code, now)
        self.pairing.remove(found)
        return found

    def revoke(self, user: str) -> bool:
        return self.allowed.pop(user, None) is not None

    # --- the file's shape -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION, "inbox": self.inbox, "seen": self.seen, "cursor": self.cursor,
            "open_turns": self.open_turns, "allowed": self.allowed, "groups": self.groups,
            "outbox": [asdict(entry) for entry in self.outbox], "replies": self.replies,
            "parked": [{k: v for k, v in asdict(p).items() if v is not None} for p in self.parked],
            "pairing": [{"code": p.code, "user": p.user, "chat": p.chat, "name": p.name, "created": p.created}
                        for p in self.pairing],
        }

    @classmethod
    def from_json(cls, data: Any, path: Path) -> ChannelState:
        """The one tolerant reader: a value of the wrong shape is left out, never a reason to stop."""
        if not isinstance(data, dict):
            raise NanoagentError(f"{path} must hold a JSON object; move it away and restart the gateway (pending "
                                 "pairing codes and approvals are lost).")
        version = data.get("version")
        if isinstance(version, int) and version > VERSION:
            raise NanoagentError(f"{path} was written by a newer nanoagent (version {version}); upgrade nanoagent.")
        state = cls()
        if version == 1:
            _from_version_1(state, data)
        state.inbox = [m for m in [*state.inbox, *_list(data.get("inbox"))]
                       if isinstance(m, dict) and isinstance(m.get("id"), str)]
        seen = [s for s in _list(data.get("seen")) if isinstance(s, str)]
        state.seen = [*seen, *(m["id"] for m in state.inbox if m["id"] not in seen)][-MAX_SEEN:]  # taken: seen
        cursor = data.get("cursor")
        if isinstance(cursor, dict):
            state.cursor.update({k: v for k, v in cursor.items() if isinstance(v, str)})
        state.open_turns = [k for k in _list(data.get("open_turns")) if isinstance(k, str)]
        state.groups = [k for k in _list(data.get("groups")) if isinstance(k, str)]
        state.outbox = [entry for entry in map(_undelivered, _list(data.get("outbox"))) if entry is not None]
        state.parked = [p for p in map(_parked, _list(data.get("parked"))) if p is not None]
        replies = data.get("replies")
        if isinstance(replies, dict):
            state.replies = {k: [float(t) for t in v if isinstance(t, int | float)]
                             for k, v in replies.items() if isinstance(v, list)}
        allowed = data.get("allowed")
        if isinstance(allowed, dict):
            state.allowed = {str(k): str(v) for k, v in allowed.items()}
        for p in _list(data.get("pairing")):
            user, chat = _id(p.get("user", p.get("user_id"))), _id(p.get("chat", p.get("chat_id")))
            if isinstance(p.get("code"), str) and user and chat and isinstance(p.get("created"), int | float):
                state.pairing.append(Pairing(p["code"], user, chat, str(p.get("name", "")), float(p["created"])))
        return state


def _from_version_1(state: ChannelState, data: dict[str, Any]) -> None:
    """Telegram's file before every channel shared the format: updates keyed by a numeric `update_id`, and the last
    one taken in `last_update_id`."""
    for update in _list(data.get("inbox")):
        if isinstance(update, dict) and _id(update.get("update_id")):
            state.inbox.append({**update, "id": _id(update["update_id"])})
    if _id(data.get("last_update_id")):
        state.cursor["last_update_id"] = _id(data["last_update_id"])
    data.pop("inbox", None)


def _id(value: Any) -> str:
    """An id written as a number or a string, as a string; "" for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) and value else ""


class StateFile:
    def __init__(self, path: Path):
        self.path = path

    def read(self) -> ChannelState:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ChannelState()
        except (OSError, UnicodeDecodeError) as e:
            raise NanoagentError(f"Cannot read {self.path}: {e}; fix its permissions or move it away.") from None
        if not text.strip():
            return ChannelState()
        try:
            data = json.loads(text)
        except ValueError as e:
            raise NanoagentError(f"{self.path} is not valid JSON ({e}); fix it or move it away (pending pairing "
                                 "codes and approvals are lost).") from None
        return ChannelState.from_json(data, self.path)

    def update(self, change: Callable[[ChannelState], T]) -> T:
        """Read, change and write the state under its lock; returns what `change` returned. The lock is held for a
        read and a small atomic write, so a wait for it is short."""
        busy = NanoagentError(f"{self.path} stayed locked for {LOCK_TIMEOUT:g} s; is a `nanoagent pairing` command "
                              "stuck? End it and try again.")
        with file_lock(self.path.with_name(self.path.name + ".lock"), LOCK_TIMEOUT, busy):
            state = self.read()
            result = change(state)
            atomic_write(self.path, json.dumps(state.to_json(), ensure_ascii=False, indent=1) + "\n", mode=0o600)
            return result


def state_file(paths: Paths, channel: str) -> StateFile:
    return StateFile(paths.channels_dir / f"{channel}.json")


def recorded_groups(paths: Paths) -> tuple[list[str], list[str]]:
    """The session keys every registered channel's state records as group chats (`ChannelState.groups`), for a
    process with no channel connected (`cron run`, `cron tick`, a gateway before its channels connect); and a line
    for each state file that cannot be read."""
    keys: list[str] = []
    problems: list[str] = []
    for channel in registry.names():
        file = state_file(paths, channel)
        if not file.path.exists():
            continue
        try:
            keys.extend(file.read().groups)
        except NanoagentError as e:
            problems.append(str(e))
    return keys, problems


def backlog(paths: Paths, name: str) -> str | None:
    """What a channel's outbox holds and what is parked, in one line (`channels list`, `gateway status`)."""
    file = state_file(paths, name)
    if not file.path.exists():
        return None
    try:
        return file.read().backlog(name)
    except NanoagentError as e:
        return str(e)


def normalize_code(code: str) -> str:
    return "".join(c for c in code.upper() if c.isalnum())


def show_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}" if len(code) == 8 else code


def _undelivered(data: Any) -> Undelivered | None:
    if not _shaped(data, {"id": str, "key": str, "text": str}):
        return None
    entry = Undelivered(data["id"], data["key"], data["text"], error=str(data.get("error") or ""))
    for name, kind in (("skip", int), ("tries", int), ("failures", int), ("since", float), ("next", float)):
        if _shaped(data, {name: kind}):
            setattr(entry, name, kind(data[name]))
    return entry


def _parked(data: Any) -> Parked | None:
    if not _shaped(data, {"kind": str, "id": str, "key": str, "error": str, "failures": int, "at": float}):
        return None
    raw, text = data.get("raw"), data.get("text")
    if not (isinstance(raw, dict) and isinstance(raw.get("id"), str) or isinstance(text, str)):
        return None
    return Parked(data["kind"], data["id"], data["key"], data["error"], data["failures"], float(data["at"]),
                  raw=raw if isinstance(raw, dict) else None, text=text if isinstance(text, str) else None)


def _shaped(value: Any, fields: dict[str, type]) -> bool:
    """A dict holding each field with a value of its type (an int does for a float; a bool for neither)."""
    return isinstance(value, dict) and all(
        isinstance(value.get(k), int | float if t is float else t) and not isinstance(value.get(k), bool)
        for k, t in fields.items())


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
