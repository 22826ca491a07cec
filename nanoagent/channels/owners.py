"""Who the owner is: the one definition every part that says "owner" uses (the people filter, tool profiles, the
user's own places for cron and the message tool, pairing, later features).

The owner is the person nanoagent works for. Sessions outside the chat channels (the terminal, HTTP, the heartbeat,
the owner's cron jobs) are the owner's. On a chat channel the owner is whoever `channels.<name>.owner` names (ids as
`allowFrom` takes them; `nanoagent channels add` asks "is this you?"), and the owner's sessions there are their
private chats: the place `Channel.home(id)` gives, which is how every channel keys a direct message. Everyone else
who is let in (`allowFrom`, pairing) is a guest, and every group chat is a party of its own, the owner's groups
included: anyone in a group writes its prompt. A channel that names no owner has none: everyone there is a guest.

A person is `<channel>:<chat>` (the thread dropped) or OWNER; a sub-agent's session is its parent's person and a
cron job's run (`cron:<id>:<made in>`) the person of the chat that made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import nanoagent.channels.registry as registry
from nanoagent import keys

if TYPE_CHECKING:
    from nanoagent.channels.base import Channel
    from nanoagent.config.schema import Config
    from nanoagent.keys import Place

OWNER = ""


def chat_person(key: str) -> str:
    """The party session `key` talks with, before asking who the owner is: `<channel>:<chat>` in a chat channel,
    else OWNER. A sub-agent's session is its parent's; a cron job's run the chat's that made it."""
    channel, chat = keys.chat_of(keys.underlying(key))
    return f"{channel}:{chat}" if channel in registry.names() else OWNER


def owner_ids(settings: object) -> list[str]:
    """`channels.<name>.owner`: the ids a channel's settings name as the owner ([] where it names none)."""
    return [str(user) for user in getattr(settings, "owner", None) or []]


def owner_places(channel: Channel, settings: object) -> list[Place]:
    """The owner's private chats on one channel: `Channel.home` of each id its settings name as the owner."""
    return [place for place in map(channel.home, owner_ids(settings)) if place is not None and not place.thread]


def owner_chats(channel: Channel, settings: object) -> frozenset[str]:
    """The chat parts of the owner's private chats' keys on one channel, casefolded (as `Owners` compares them)."""
    return frozenset(place.chat.casefold() for place in owner_places(channel, settings))


@dataclass(frozen=True)
class Owners:
    """The owner's private chats, per channel, as the chat part of their session keys (casefolded)."""

    chats: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, config: Config) -> Owners:
        """Read from `channels.<name>.owner` of every channel config.json has a block for (a channel without one, or
        whose settings carry no `owner`, has no owner); a channel without a block is not imported."""
        chats: dict[str, frozenset[str]] = {}
        for name in list(config.channels.blocks):
            channel = registry.get(name)
            chats[name] = owner_chats(channel, channel.settings(config))
        return cls(chats)

    def person_of(self, key: str) -> str:
        """The person session `key` talks with: OWNER for the owner's sessions (the terminal, HTTP, the heartbeat,
        the owner's private chats and what runs on their behalf), else `<channel>:<chat>`, a guest or a group."""
        person = chat_person(key)
        channel, chat = keys.chat_of(person)
        return OWNER if person == OWNER or chat.casefold() in self.chats.get(channel, ()) else person

    def is_owner(self, key: str) -> bool:
        return self.person_of(key) == OWNER

    def named(self, channel: str) -> bool:
        """Whether channel `channel` names an owner."""
        return bool(self.chats.get(channel))


NOBODY = Owners()  # no channel names an owner: every chat is a guest's
