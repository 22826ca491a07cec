"""The Telegram channel's own state: `$NANOAGENT_HOME/channels/telegram.json`, format version 1, mode 0600.

- `last_update_id`: the newest update taken into `inbox`. Polling asks Telegram for later updates only, which also
  tells Telegram to forget the earlier ones; so an update is confirmed only once it is on disk here.
- `inbox`: updates taken but not yet handled. A message is handled once it is in its session file (the loop writes
  it at the start of a turn, or when it joins a running one), or once it was answered without a turn (a command, a
  pairing code, a message that is ignored). After a restart the inbox is replayed: nothing is lost.
- `open_turns`: sessions whose turn started but whose reply has not reached the chat yet. After a restart the reply
  is delivered from the session file if the turn finished there, else the turn is resumed.
- `allowed` (user id -> name) and `pairing` (pending codes): the people `nanoagent pairing approve` let in, besides
  config's `channels.telegram.allowFrom`.

The gateway and `nanoagent pairing` both write it, each read-modify-write under the file's lock; every write is
atomic. Light on purpose: the pairing commands import it, never the telegram library.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from nanoagent.errors import NanoagentError
from nanoagent.fsutil import atomic_write, file_lock

VERSION = 1
CODE_TTL = 3600.0  # seconds a pairing code stays valid
MAX_PENDING = 50  # pending codes kept at most; past it no new one is made: strangers cannot grow the file
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I to misread
LOCK_TIMEOUT = 5.0

T = TypeVar("T")


@dataclass
class Pairing:
    code: str
    user_id: int
    chat_id: int
    name: str
    created: float

    def expired(self, now: float) -> bool:
        return now - self.created > CODE_TTL


@dataclass
class TelegramState:
    last_update_id: int = 0
    inbox: list[dict[str, Any]] = field(default_factory=list)
    open_turns: list[str] = field(default_factory=list)
    allowed: dict[int, str] = field(default_factory=dict)
    pairing: list[Pairing] = field(default_factory=list)

    # --- pairing ---------------------------------------------------------------------------------

    def pair(self, user_id: int, chat_id: int, name: str, now: float) -> str | None:
        """A new pairing code for an unknown user; None when they have one that is still valid (it was sent
        already: a stranger's every message must not get an answer), or when MAX_PENDING codes are pending: those
        who wrote first keep theirs, so a flood of strangers cannot push out a friend's code. A place frees up when
        a code is approved or expires."""
        self.pairing = [p for p in self.pairing if not p.expired(now)]
        if any(p.user_id == user_id for p in self.pairing) or self.pairing_full():
            return None
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
        self.pairing = [*self.pairing, Pairing(code, user_id, chat_id, name, now)]
        return code

    def pairing_full(self) -> bool:
        return len(self.pairing) >= MAX_PENDING

    def approve(self, code: str, now: float) -> Pairing:
        wanted = normalize_code(code)
        found = next((p for p in self.pairing if p.code == wanted), None)
        if found is None or found.expired(now):
            why = "has expired (codes last an hour)" if found else "is not pending"
            raise NanoagentError(f"The pairing code {code} {why}; ask them to message the bot again for a new one, "
                                 "and see `nanoagent pairing list`.")
        self.pairing.remove(found)
        self.allowed[found.user_id] = found.name
        return found

    def revoke(self, user_id: int) -> bool:
        return self.allowed.pop(user_id, None) is not None

    # --- the file's shape -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION, "last_update_id": self.last_update_id, "inbox": self.inbox,
            "open_turns": self.open_turns, "allowed": {str(k): v for k, v in self.allowed.items()},
            "pairing": [{"code": p.code, "user_id": p.user_id, "chat_id": p.chat_id, "name": p.name,
                         "created": p.created} for p in self.pairing],
        }

    @classmethod
    def from_json(cls, data: Any, path: Path) -> TelegramState:
        """The one tolerant reader: a value of the wrong shape is left out, never a reason to stop."""
        if not isinstance(data, dict):
            raise NanoagentError(f"{path} must hold a JSON object; move it away and restart the gateway (pending "
                                 "pairing codes and approvals are lost).")
        version = data.get("version")
        if isinstance(version, int) and version > VERSION:
            raise NanoagentError(f"{path} was written by a newer nanoagent (version {version}); upgrade nanoagent.")
        state = cls()
        if _is_int(data.get("last_update_id")):
            state.last_update_id = data["last_update_id"]
        state.inbox = [u for u in _list(data.get("inbox")) if isinstance(u, dict) and _is_int(u.get("update_id"))]
        state.open_turns = [k for k in _list(data.get("open_turns")) if isinstance(k, str)]
        allowed = data.get("allowed")
        if isinstance(allowed, dict):
            state.allowed = {int(k): str(v) for k, v in allowed.items() if k.lstrip("-").isdigit()}
        for p in _list(data.get("pairing")):
            if isinstance(p, dict) and isinstance(p.get("code"), str) and _is_int(p.get("user_id")) \
                    and _is_int(p.get("chat_id")) and isinstance(p.get("created"), int | float):
                state.pairing.append(Pairing(p["code"], p["user_id"], p["chat_id"], str(p.get("name", "")),
                                             float(p["created"])))
        return state


class StateFile:
    def __init__(self, path: Path):
        self.path = path

    def read(self) -> TelegramState:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return TelegramState()
        except (OSError, UnicodeDecodeError) as e:
            raise NanoagentError(f"Cannot read {self.path}: {e}; fix its permissions or move it away.") from None
        if not text.strip():
            return TelegramState()
        try:
            data = json.loads(text)
        except ValueError as e:
            raise NanoagentError(f"{self.path} is not valid JSON ({e}); fix it or move it away (pending pairing "
                                 "codes and approvals are lost).") from None
        return TelegramState.from_json(data, self.path)

    def update(self, change: Callable[[TelegramState], T]) -> T:
        """Read, change and write the state under its lock; returns what `change` returned. The lock is held for a
        read and a small atomic write, so a wait for it is short."""
        busy = NanoagentError(f"{self.path} stayed locked for {LOCK_TIMEOUT:g} s; is a `nanoagent pairing` command "
                              "stuck? End it and try again.")
        with file_lock(self.path.with_name(self.path.name + ".lock"), LOCK_TIMEOUT, busy):
            state = self.read()
            result = change(state)
            atomic_write(self.path, json.dumps(state.to_json(), ensure_ascii=False, indent=1) + "\n", mode=0o600)
            return result


def normalize_code(code: str) -> str:
    return "".join(c for c in code.upper() if c.isalnum())


def show_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}" if len(code) == 8 else code


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
