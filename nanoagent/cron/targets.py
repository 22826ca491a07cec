"""Where a scheduled reply or a message goes, and which places count as the user's own.

A target is `telegram:<chat id>` (a forum topic: `telegram:<chat id>:<topic id>`), `cli:<session>` (a terminal
session's log, e.g. `cli:direct`), or `none`. The user's own: Telegram chats of the people in `allowFrom` or
approved by pairing (their private chats), terminal sessions, and the chat the current conversation is in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nanoagent.errors import NanoagentError

_TELEGRAM = re.compile(r"telegram:(-?\d+)(?::(\d+))?")
_CLI = re.compile(r"cli:([\w.-]{1,100})")


class TargetError(NanoagentError):
    pass


@dataclass(frozen=True)
class Target:
    channel: str  # telegram | cli | none
    chat: str = ""
    thread: int | None = None

    @property
    def key(self) -> str:
        """The session the target's conversation lives in ("" for none)."""
        if self.channel == "none":
            return ""
        return f"{self.channel}:{self.chat}" + (f":{self.thread}" if self.thread else "")

    def __str__(self) -> str:
        return self.key or "none"


NONE = Target("none")


def parse_target(text: str) -> Target:
    value = text.strip()
    if value.lower() in ("none", ""):
        return NONE
    if match := _TELEGRAM.fullmatch(value):
        return Target("telegram", match.group(1), int(match.group(2)) if match.group(2) else None)
    if match := _CLI.fullmatch(value):
        return Target("cli", match.group(1))
    raise TargetError(f"Cannot deliver to {text!r}: use telegram:<chat id> (telegram:<chat id>:<topic id> for a "
                      "forum topic), cli:<session> such as cli:direct, or none.")


def target_of_session(key: str) -> Target | None:
    """The target a conversation's own chat is; None for sessions that are no chat (cron:, heartbeat, http:...)."""
    try:
        target = parse_target(key)
    except TargetError:
        return None
    return target if target.channel != "none" else None


@dataclass(frozen=True)
class Access:
    """Who counts as the user: `allowFrom` and the people approved by pairing (read at each check)."""

    allow_from: tuple[int, ...]
    approved: Callable[[], set[int]]

    @classmethod
    def from_config(cls, allow_from: list[str], telegram_state: Path) -> Access:
        def approved() -> set[int]:
            from nanoagent.channels.state import StateFile

            try:
                return {int(user) for user in StateFile(telegram_state).read().allowed if user.isdigit()}
            except (NanoagentError, OSError):
                return set()

        return cls(tuple(int(a) for a in allow_from if a.strip().lstrip("-").isdigit()), approved)

    def users(self) -> list[int]:
        return sorted({*self.allow_from, *self.approved()})

    def check(self, target: Target, current: str) -> None:
        """Refuse a target that is not one of the user's own places (TargetError says which are)."""
        if target.channel in ("none", "cli") or target.key == current:
            return
        if target.channel == "telegram" and int(target.chat) in self.users():
            return
        own = ", ".join(f"telegram:{u}" for u in self.users()) or "none yet"
        raise TargetError(f"{target} is not one of the user's own chats (Telegram: {own}; terminal sessions "
                          "cli:<name>). Only those, and the chat this conversation is in, can be written to.")

    def resolve(self, text: str) -> Target:
        """A target as written; "telegram" alone means the user's private chat when there is exactly one user."""
        if text.strip().lower() == "telegram":
            users = self.users()
            if len(users) != 1:
                raise TargetError("Say which Telegram chat: " + (", ".join(f"telegram:{u}" for u in users)
                                                                 if users else "nobody is allowed in Telegram yet."))
            return Target("telegram", str(users[0]))
        return parse_target(text)
