"""One grammar for session keys and delivery targets, for every channel: `<channel>:<chat>[:<thread>]`.

Ids are strings (Slack's `thread_ts` is no number; an email thread is a short hash of its root Message-ID), each at
most `MAX_ID` characters of letters, digits and `-_.@+=`, so a key always makes a file name (`paths.session_file`).
The terminal's sessions follow it too (`cli:direct`).

Patterns name sessions in settings (`telegram:*`, `slack:C123*`): `*` stands for any run of characters, everything
else is literal. Every matching rule applies; where two set the same thing the more specific one wins, which is the
one with the longer literal prefix (the characters before its first `*`); on a tie, the one written later.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

MAX_ID = 64
_ID = rf"[\w.@+=-]{{1,{MAX_ID}}}"
KEY = re.compile(rf"([a-z][a-z0-9_]{{0,31}}):({_ID})(?::({_ID}))?")
T = TypeVar("T")


@dataclass(frozen=True)
class Place:
    """Where a conversation lives: a channel, a chat in it and, where the app has them, a thread."""

    channel: str
    chat: str
    thread: str = ""

    @property
    def key(self) -> str:
        """The session key, which is also the target written to reach it."""
        return f"{self.channel}:{self.chat}" + (f":{self.thread}" if self.thread else "")

    def __str__(self) -> str:
        return self.key


def parse(key: str) -> Place | None:
    """The place a key or target names; None when it does not follow the grammar."""
    match = KEY.fullmatch(key.strip())
    if match is None:
        return None
    return Place(match.group(1), match.group(2), match.group(3) or "")


def make(channel: str, chat: str | int, thread: str | int | None = None) -> Place:
    """A place from an app's ids (numbers become their digits); ValueError when an id cannot be part of a key."""
    place = Place(channel, str(chat), "" if thread in (None, "", 0) else str(thread))
    if parse(place.key) != place:
        raise ValueError(f"{place.key!r} is not a valid session key")
    return place


def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def matches(pattern: str, key: str) -> bool:
    """Does the key-pattern `pattern` (`telegram:*`, `slack:C123*`, `cli:direct`) name session `key`?"""
    return _pattern(pattern).fullmatch(key) is not None


def specificity(pattern: str) -> int:
    """How specific a pattern is: the length of its literal prefix."""
    return len(pattern.split("*", 1)[0])


def matching(key: str, rules: Iterable[tuple[str, T]]) -> list[T]:
    """The values of every rule whose pattern matches `key`, least specific first: applied in this order, a more
    specific rule overrides what a broader one set."""
    found = [(specificity(p), i, value) for i, (p, value) in enumerate(rules) if matches(p, key)]
    return [value for _, _, value in sorted(found, key=lambda item: (item[0], item[1]))]
