"""People: whom a session talks to, the file of what the agent knows about them, and what they may be shown.

A person is one identity on one channel, `<channel>:<id>`, read from the session key: a private chat's key is
`<channel>:<user id>` (Telegram, Slack and Discord key a direct message by the user), a thread's key names its chat.
Email keys a thread by its root message, so each mail thread is a party of its own until its key names the sender.
A group chat is one party of its own (`<channel>:<group>`): what its members told the agent privately stays in their
own chats, and what was said in the group stays with the group. The owner (`OWNER`) is the person of every session
that is not in a chat channel (the terminal, HTTP, the heartbeat, the owner's cron jobs) and of USER.md, and sees
everything. A cron job made in a person's chat runs as that person, in `cron:<job id>:<person>`.

Each other person's facts live in `memory/people/<channel>-<id>.md` (0600, recorded by the memory git like USER.md).
In their chats that file stands in for USER.md: the prompt shows it, the file tools read and write it as `USER.md`,
and Dream folds their chats' history into it and nowhere else.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import nanoagent.channels.registry as registry
from nanoagent.paths import PEOPLE_DIR, safe_key

if TYPE_CHECKING:
    from nanoagent.memory.search import SearchHit

OWNER = ""
SUBAGENT = "subagent:"  # a sub-agent's session `subagent:<parent key>:<run id>` belongs to its parent's person
CRON = "cron:"  # a job's run: `cron:<job id>` the owner's, `cron:<job id>:<person>` for a job a person made
SHARED_FILES = ("SOUL.md", "memory/MEMORY.md")  # memory about no one person: every session may be shown it


def person_of(key: str) -> str:
    """The person session `key` talks with: `<channel>:<chat>` in a chat channel, else OWNER."""
    while key.startswith((SUBAGENT, CRON)):
        key = key[len(SUBAGENT):] if key.startswith(SUBAGENT) else key[len(CRON):].partition(":")[2]
    channel, _, rest = key.partition(":")
    if channel not in registry.names():
        return OWNER
    return f"{channel}:{rest.split(':', 1)[0]}"


def cron_key(job_id: str, created_by: str) -> str:
    """The session of a run of job `job_id`, made in session `created_by`: the job runs as the person who made it.
    Job ids hold no `:`, so the id is what lies between the first two; `cli`, `agent`, "" (older jobs) are the owner."""
    person = person_of(created_by)
    return f"{CRON}{job_id}" + (f":{person}" if person != OWNER else "")


def file_of(person: str) -> str:
    """The workspace-relative file of a person other than the owner (`telegram:42` -> memory/people/telegram-42.md).
    Channel names hold no `-`, and `safe_key` maps any id one-to-one onto letters, digits, `-`, `.` and `_xx`."""
    channel, _, chat = person.partition(":")
    return f"{PEOPLE_DIR}/{channel}-{safe_key(chat)}.md"


def user_file(key: str) -> str:
    """What USER.md stands for in session `key`: USER.md for the owner, else that person's file."""
    person = person_of(key)
    return "USER.md" if person == OWNER else file_of(person)


def aliases(key: str) -> tuple[tuple[str, str], ...]:
    """The file tools' aliases in session `key` (`TurnScope.aliases`): USER.md is the person's own file."""
    person = person_of(key)
    return () if person == OWNER else (("USER.md", file_of(person)),)


def hidden(key: str) -> tuple[str, ...]:
    """What the file tools neither read nor list in session `key` (`TurnScope.hidden`): for anyone but the owner,
    the owner's USER.md and all of memory/ (history, notes, other people's files; MEMORY.md is in their prompt),
    but for their own file, reached as USER.md."""
    return () if person_of(key) == OWNER else ("USER.md", "memory")


def search_filter(key: str) -> Callable[[SearchHit], bool] | None:
    """What memory search may show in session `key` (`MemorySearch.search(allow=)`); None: everything."""
    person = person_of(key)
    return None if person == OWNER else partial(can_see, person)


def may_write(key: str, relpath: str) -> bool:
    """Whether a turn of session `key` may change memory file `relpath`: the owner any, anyone else only their own
    file, so nothing said in one person's chat reaches what another is shown."""
    person = person_of(key)
    return person == OWNER or posixpath.normpath(relpath) == file_of(person)


def can_see(person: str, hit: SearchHit) -> bool:
    """Whether a search hit may be shown to `person`: the owner sees all; anyone else the shared files, their own
    file, and the history and sessions of their own chats."""
    if person == OWNER:
        return True
    if hit.kind == "file":  # SourceKind.FILE, without loading the index's module
        return hit.ref in SHARED_FILES or hit.ref == file_of(person)
    return person_of(hit.ref) == person  # a history entry's ref is the session it came from
