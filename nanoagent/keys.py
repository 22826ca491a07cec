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


# --- the keys of sessions that are no chat -----------------------------------------------------------------------
# `subagent:<parent key>:<run id>` a sub-agent's run (nested: its parent may be a sub-agent's), `cron:<job id>` the
# owner's job's run and `cron:<job id>:<key of the chat that made it>` a chat's, `heartbeat`, `dream:<workspace>`.
# Every key form is read here, never split by hand.
SUBAGENT = "subagent"
CRON = "cron"
UNATTENDED = (CRON, "heartbeat")  # runs nobody is waiting at: no automatic recall, no questions
MACHINE = (CRON, SUBAGENT, "heartbeat", "dream")  # sessions the agent ran on its own, not a person's conversation


def kind(key: str) -> str:
    """A key's first part: the channel for a chat, `cli`, `http`, `web`, or a machine form (`cron`, `subagent`...)."""
    return key.split(":", 1)[0]


def is_machine(key: str) -> bool:
    return kind(key) in MACHINE


def subagent_key(parent: str, run_id: str) -> str:
    return f"{SUBAGENT}:{parent}:{run_id}"


def root_of(key: str) -> str:
    """The person's session a sub-agent's session belongs to: `subagent:subagent:cli:direct:a1:b2` -> `cli:direct`."""
    depth = 0
    while key.startswith(f"{SUBAGENT}:"):
        key, depth = key[len(SUBAGENT) + 1:], depth + 1
    return key.rsplit(":", depth)[0] if depth else key


def cron_key(job_id: str, made_in: str = "") -> str:
    """The session of a run of job `job_id`: `cron:<id>`, or `cron:<id>:<made_in>` for a job a chat made."""
    return f"{CRON}:{job_id}" + (f":{made_in}" if made_in else "")


def cron_job(key: str) -> str | None:
    """The job a cron run's session is for (`cron:<job id>[:<chat>]`); None for any other key. Job ids hold no `:`."""
    return key[len(CRON) + 1:].split(":", 1)[0] if key.startswith(f"{CRON}:") else None


def underlying(key: str) -> str:
    """The conversation a session stands for: a sub-agent's its parent's, a cron run's the chat that made the job
    ("" for the owner's job); any other key itself."""
    while True:
        key = root_of(key)
        if not key.startswith(f"{CRON}:"):
            return key
        key = key[len(CRON) + 1:].partition(":")[2]


def chat_of(key: str) -> tuple[str, str]:
    """(first part, second part) of a key: a chat key's channel and chat; ("", "") for an empty key."""
    first, _, rest = key.partition(":")
    return first, rest.split(":", 1)[0]
