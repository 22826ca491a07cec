"""The Discord channel: direct messages, and guild channels where the bot is mentioned or replied to (or every message
with `groupPolicy: "all"`), threads as sessions of their own, through discord.py (the `discord` extra).

Importing this module imports no discord.py: `link`, `verify` and `deliver` do, when called. Places and the
catch-up are described in `link.py`; the markup in `format.py`.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from nanoagent.channels.base import Chunk, Link, Question, Route, Timing
from nanoagent.channels.discord.settings import ENV, DiscordConfig
from nanoagent.keys import Place, make

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

NO_EXTRA = "the Discord channel needs discord.py: pip install 'nanoagent[discord]'"


class DiscordChannel:
    name = "discord"
    title = "Discord"
    hint = "Discord: Markdown works, no tables, 2,000 characters a message"
    limit = 2000
    edits = True
    pairing = True
    settings_class = DiscordConfig
    env = ENV

    def settings(self, config: Config) -> DiscordConfig:
        return config.channels.of(self.name, DiscordConfig, self.env)

    def routes(self, settings: DiscordConfig) -> list[Route]:
        return []  # it connects out: no webhook

    def problem(self, settings: DiscordConfig) -> str | None:
        if not settings.token:
            from nanoagent.channels.discord.link import NO_TOKEN

            return NO_TOKEN
        if importlib.util.find_spec("discord") is None:
            return NO_EXTRA
        return None

    def allowed(self, settings: DiscordConfig, user: str) -> bool:
        return user.strip() in {str(a).strip() for a in settings.allow_from}

    def home(self, user: str) -> Place | None:
        """A DM's place is its person's id (the DM channel's own id is asked of Discord when a message goes there)."""
        try:
            return make(self.name, user.strip())
        except ValueError:
            return None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.discord.format import split

        return split(markdown, self.limit)

    def link(self, settings: DiscordConfig, paths: Paths, timing: Timing) -> Link:
        from nanoagent.channels.discord.link import DiscordLink

        return DiscordLink(settings, paths, timing)

    async def verify(self, settings: DiscordConfig) -> str:
        from nanoagent.channels.discord.link import verify

        return await verify(settings)

    async def deliver(self, settings: DiscordConfig, place: Place, text: str, files: Sequence[Path] = ()) -> None:
        from nanoagent.channels.discord.link import deliver

        await deliver(settings, place, self.split(text) if text.strip() or not files else [], files)

    def questions(self) -> list[Question]:
        return [Question("token", "Bot token (Developer Portal > your app > Bot > Reset Token; turn on the Message "
                                  "Content intent there)", secret=True)]


CHANNEL = DiscordChannel()
