"""Delivering a scheduled reply or a message to a target, from the gateway or from a process without one.

A place in a channel: through the registry, `Channel.deliver` with that channel's settings (its own client, the one
its gateway component uses, with no polling: a crontab `cron tick` can deliver while no gateway runs). A terminal
session: its log. Either way the text is also written to the target's session as an assistant message that starts
with a `⏰` line naming where it came from: the conversation there knows what was said, the terminal shows it, and it
is never taken for the user's words. A gateway watching that terminal session shows it at once (`listeners`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nanoagent.channels.registry as registry
from nanoagent import messages as msg
from nanoagent.channels.base import DeliveryError
from nanoagent.cron.targets import TERMINAL, Target
from nanoagent.errors import NanoagentError
from nanoagent.session.store import SessionStore

if TYPE_CHECKING:
    from nanoagent.config.schema import Config

__all__ = ["MAX_FILE_BYTES", "NOTE_MARK", "DeliveryError", "Outbox", "recent_notes"]

log = logging.getLogger("nanoagent.cron")
NOTE_MARK = "⏰ "
MAX_FILE_BYTES = 20 * 1024 * 1024  # a file the agent sends to a chat (Telegram's bots upload up to 50 MB, Discord 10)
REPAIRED = "Error: interrupted before this tool finished (nanoagent stopped); its effect is unknown."


@dataclass
class Outbox:
    sessions: SessionStore
    config: Config  # each channel's settings, under channels.<name>
    listeners: list[Callable[[str, str], None]] = field(default_factory=list)  # (session key, note) shown live
    lock_timeout: float = 120.0  # seconds to wait for a busy session before giving up on the note

    async def send(self, target: Target, text: str, source: str, files: Sequence[Path] = (), *,
                   note: bool = True) -> None:
        """Deliver `text` to `target`, marked as coming from `source` ("scheduled job 3f9a1c2e «tea»"), and
        `files` with it (checked by the caller: inside the workspace, under MAX_FILE_BYTES); a terminal session's
        note names them. Without `note`, the target's session gets no copy (a turn of that very session sent it).
        Raises DeliveryError when it did not arrive."""
        if target is None:
            return
        copy = f"{NOTE_MARK}{source}\n\n{text}"
        if files:
            copy += "\n\nFiles: " + ", ".join(path.name for path in files)
        if target.channel != TERMINAL:
            try:
                channel = registry.get(target.channel)
            except registry.UnknownChannel:
                raise DeliveryError(f"there is no channel called {target.channel!r} (channels: "
                                    f"{', '.join(registry.names())})") from None
            try:
                await channel.deliver(channel.settings(self.config), target, text, tuple(files))
            except DeliveryError:
                raise
            except NanoagentError as e:  # the channel cannot start (its extra is missing...): not delivered either
                raise DeliveryError(str(e)) from None
            try:
                if note:
                    await self._note(target.key, copy)
            except (NanoagentError, OSError) as e:  # it reached the chat; only the conversation's copy is missing
                log.warning("cron: delivered to %s but could not note it in the session: %s", target, e)
            return
        try:
            await self._note(target.key, copy)
        except (NanoagentError, OSError) as e:
            raise DeliveryError(f"could not write to the session {target.key}: {e}") from None
        for listener in list(self.listeners):
            listener(target.key, copy)

    async def _note(self, key: str, note: str) -> None:
        session = self.sessions.load(key)
        async with self.sessions.lock_async(session, timeout=self.lock_timeout):
            repairs = msg.closing_results(session.messages, REPAIRED)  # a turn killed mid-tool: close it first
            self.sessions.add_messages(session, [*repairs, msg.assistant(note)], sync=True)


def recent_notes(path: Path, limit: int = 262_144) -> list[str]:
    """The delivered notes at the end of a session file, after the user's last message (what a terminal opening
    the session has not seen): read from the last `limit` bytes only."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            tail = f.read()
    except OSError:
        return []
    notes: list[str] = []
    for line in reversed(tail.splitlines()[1:] if size > limit else tail.splitlines()):
        try:
            record = json.loads(line)
            message = record.get("message") if record.get("type") == "message" else None
        except (ValueError, AttributeError):
            continue
        if not isinstance(message, dict):
            continue
        if message.get("role") == "user":
            break
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, str) and content.startswith(NOTE_MARK):
            notes.append(content)
    return notes[::-1]
