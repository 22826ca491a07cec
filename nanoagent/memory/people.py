"""People: whom a session talks to, the file of what the agent knows about them, and what they may be shown.

Who is the owner is decided in one place, `channels/owners.py`: the owner's sessions are those outside the chat
channels (the terminal, HTTP, the heartbeat, the owner's cron jobs) and their private chats on channels that name
them (`channels.<name>.owner`). Everyone else is a guest, `<channel>:<chat>`: a person in their private chat (Telegram,
Slack and Discord key a direct message by the user; email keys a thread `email:<sender>:<hash>`, so all of one
sender's threads are one person), or a group chat, a party of its own: what its members told the agent privately
stays in their own chats, and what was said in the group stays with the group. The owner sees everything. A cron
job made in a guest's chat runs as that guest, in `cron:<job id>:<person>`; a sub-agent as its parent's person.

Each guest's facts live in `memory/people/<channel>-<id>.md` (0600, recorded by the memory git like USER.md).
In their chats that file stands in for USER.md: the prompt shows it, the file tools read and write it as `USER.md`,
and Dream folds their chats' history into it and nowhere else. The functions below take the person, which the
loop reads once per turn (`TurnScope.person`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from nanoagent import keys
from nanoagent.channels.owners import OWNER, chat_person
from nanoagent.paths import PEOPLE_DIR, safe_key

if TYPE_CHECKING:
    from nanoagent.memory.search import SearchHit

__all__ = ["OWNER", "SHARED_FILES", "GUEST_HIDDEN", "aliases", "can_see", "cron_key", "file_of",
           "hidden", "may_write", "search_filter", "user_file"]

SHARED_FILES = ("SOUL.md", "memory/MEMORY.md")  # memory about no one person: every session may be shown it
# What a guest's turn neither reads nor lists, by file tool or command: the owner's USER.md, all of memory/ but their
# own file (history, notes, other people's files; MEMORY.md is in their prompt), and media/ (everyone's images).
GUEST_HIDDEN = ("USER.md", "memory", "media")


def cron_key(job_id: str, created_by: str) -> str:
    """The session of a run of job `job_id`, made in session `created_by`: the job runs as the chat that made it (the
    owner's chat or a guest's; `channels/owners.py` decides which at each run). Job ids hold no `:`, so the id is
    what lies between the first two; `cli`, `agent`, "" (older jobs) are the owner."""
    person = chat_person(created_by)
    return keys.cron_key(job_id, person)


def file_of(person: str) -> str:
    """The workspace-relative file of a guest (`telegram:42` -> memory/people/telegram-42.md).
    Channel names hold no `-`, and `safe_key` maps any id one-to-one onto letters, digits, `-`, `.` and `_xx`."""
    channel, chat = keys.chat_of(person)
    return f"{PEOPLE_DIR}/{channel}-{safe_key(chat)}.md"


def user_file(person: str) -> str:
    """What USER.md stands for with `person`: USER.md for the owner, else that guest's file."""
    return "USER.md" if person == OWNER else file_of(person)


def aliases(person: str) -> tuple[tuple[str, str], ...]:
    """The file tools' aliases in a turn with `person` (`TurnScope.aliases`): USER.md is a guest's own file."""
    return () if person == OWNER else (("USER.md", file_of(person)),)


def hidden(person: str) -> tuple[str, ...]:
    """What the file tools neither read nor list in a turn with `person` (`TurnScope.hidden`): nothing for the owner,
    GUEST_HIDDEN for anyone else (their own file stays reachable as USER.md)."""
    return () if person == OWNER else GUEST_HIDDEN


def search_filter(person: str) -> Callable[[SearchHit], bool] | None:
    """What memory search may show `person` (`MemorySearch.search(allow=)`); None: everything."""
    return None if person == OWNER else partial(can_see, person)


def may_write(person: str, relpath: str) -> bool:
    """Whether a turn with `person` may change memory file `relpath`: the owner any, anyone else only their own
    file, so nothing said in one person's chat reaches what another is shown, nor the owner's prompt."""
    return person == OWNER or posixpath.normpath(relpath) == file_of(person)


def can_see(person: str, hit: SearchHit) -> bool:
    """Whether a search hit may be shown to `person`: the owner sees all; a guest the shared files, their own file,
    and the history and sessions of their own chats (the owner's chats are never a guest's)."""
    if person == OWNER:
        return True
    if hit.kind == "file":  # SourceKind.FILE, without loading the index's module
        return hit.ref in SHARED_FILES or hit.ref == file_of(person)
    return chat_person(hit.ref) == person  # a history entry's ref is the session it came from
