"""Where a scheduled reply or a message goes, and which places count as the user's own.

A target is a place in the one key grammar (`keys.py`): `<channel>:<chat>[:<thread>]` in any registered
channel, `cli:<session>` (a terminal session's log, e.g. `cli:direct`), or `none` (None here). A channel's name
alone means the owner's private chat there when there is exactly one. The user's own places: in each channel, the
owner's private chats (`channels.<name>.owner`, `channels/owners.py`), terminal sessions, and the chat the current
conversation is in; the owner's conversations may also write to the people they let in (`allowFrom`, pairing), a
guest's only to its own chat. A channel is asked through the registry only when a target
names it, so a target in the terminal imports none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import nanoagent.channels.registry as registry
import nanoagent.keys as keys
from nanoagent.channels.owners import OWNER, Owners, chat_person, owner_ids
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place

if TYPE_CHECKING:
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

TERMINAL = "cli"  # terminal sessions: `cli:<session>`
Target = Place | None  # None: `none`, deliver nowhere (the job only acts)


class TargetError(NanoagentError):
    pass


def target_text(target: Target) -> str:
    """A target as it is written and stored: its key, or "none"."""
    return target.key if target is not None else "none"


def usage() -> str:
    """How to write a target, naming the registered channels."""
    return (f"use <channel>:<chat id> (<channel>:<chat id>:<thread id> for a thread; <channel> is one of "
            f"{', '.join(registry.names())}), cli:<session> such as cli:direct, or none")


def parse_target(text: str) -> Target:
    """A target as written in full (a stored job's target, `--to`); TargetError saying how to write one."""
    value = text.strip()
    if value.lower() in ("none", ""):
        return None
    place = keys.parse(value)
    if place is None or place.channel not in (TERMINAL, *registry.names()):
        raise TargetError(f"Cannot deliver to {text!r}: {usage()}.")
    return place


def target_of_session(key: str) -> Place | None:
    """The place a conversation's own chat is; None for sessions that are no chat (cron:, heartbeat, http:...)."""
    try:
        return parse_target(key)
    except TargetError:
        return None


@dataclass(frozen=True)
class Access:
    """Who counts as the user, per channel: read at each check from config and the channels' state files."""

    config: Config
    paths: Paths

    def places(self, name: str) -> list[Place]:
        """The user's own private chats in channel `name`: the owner's (`channels.<name>.owner`,
        `channels/owners.py`)."""
        return self._homes(name, owner_ids(registry.get(name).settings(self.config)))

    def guests(self, name: str) -> list[Place]:
        """The private chats of the people let in on channel `name` (its `allowFrom` and those approved by
        pairing): places the owner may have the agent write to, a guest may not."""
        return self._homes(name, [*registry.get(name).settings(self.config).allow_from, *self._approved(name)])

    def _homes(self, name: str, users: list[str]) -> list[Place]:
        channel = registry.get(name)
        found: list[Place] = []
        for user in users:
            place = channel.home(str(user))
            if place is not None and place not in found:
                found.append(place)
        return found

    def _approved(self, name: str) -> list[str]:
        from nanoagent.channels.state import state_file

        try:
            return list(state_file(self.paths, name).read().allowed)
        except (NanoagentError, OSError):
            return []

    def check(self, target: Target, current: str) -> None:
        """Refuse a target that is not one of the user's own places (TargetError says which are). The chat the
        current conversation is in is always allowed; a guest's conversation may write nowhere else, the owner's
        also to the people they let in."""
        if target is None or target.key == current:
            return
        guest = Owners.of(self.config).person_of(current) != OWNER
        if guest and (target.channel == TERMINAL or chat_person(target.key) != chat_person(current)):
            raise TargetError(f"{target} is not this chat: from a guest's chat the agent writes only to that chat "
                              f"({place_of(current)}).")
        if target.channel == TERMINAL:
            return
        own = self.places(target.channel)
        own += [place for place in ([] if guest else self.guests(target.channel)) if place not in own]
        if any(place.chat == target.chat for place in own):  # a thread in their chat is theirs too
            return
        title = registry.get(target.channel).title
        listed = ", ".join(place.key for place in own) or "none yet"
        raise TargetError(f"{target} is not one of the user's own chats ({title}: {listed}; terminal sessions "
                          "cli:<name>). Only those, and the chat this conversation is in, can be written to.")

    def resolve(self, text: str) -> Target:
        """A target as written; a channel's name alone means the owner's private chat there when there is exactly
        one."""
        name = text.strip().lower()
        if name in registry.names():
            own = self.places(name)
            if len(own) != 1:
                title = registry.get(name).title
                raise TargetError(f"Say which {title} chat: " + (", ".join(place.key for place in own) if own else
                                  f"no {title} user is named as you yet (channels.{name}.owner, or `nanoagent "
                                  f"channels add {name}`)."))
            return own[0]
        return parse_target(text)


def place_of(key: str) -> str:
    """A session's chat as a target, for a message ("this chat")."""
    return chat_person(key) or key
