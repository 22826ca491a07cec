"""The Mattermost channel: a bot account's token, the v4 REST API and its websocket (aiohttp), replies in Markdown
streamed by editing the post.

This module imports no client library: `link`, `verify` and `deliver` import aiohttp when called.
"""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING

from nanoagent.channels.base import Chunk, Question, Route, Timing
from nanoagent.channels.mattermost.settings import ENV, MattermostConfig

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.channels.mattermost.link import MattermostLink
    from nanoagent.config.schema import Config
    from nanoagent.keys import Place
    from nanoagent.paths import Paths

LIMIT = 16383  # characters a post holds (format.LIMIT, kept here so the format module loads lazily)
USER_ID = re.compile(r"^[a-z0-9]{26}$")  # Mattermost's ids: 26 lowercase letters and digits


class MattermostChannel:
    name = "mattermost"
    title = "Mattermost"
    hint = "Mattermost: Markdown (tables, headings and code blocks render)"
    limit = LIMIT
    edits = True
    pairing = True
    settings_class = MattermostConfig
    env = ENV

    def settings(self, config: Config) -> MattermostConfig:
        return config.channels.of(self.name, MattermostConfig, self.env)

    def routes(self, settings: MattermostConfig) -> list[Route]:
        return []  # it connects out: no webhook

    def problem(self, settings: MattermostConfig) -> str | None:
        if not settings.url.startswith(("https://", "http://")):
            return ("channels.mattermost.enabled is true but there is no server address: set MATTERMOST_URL or "
                    "channels.mattermost.url (https://chat.example.com; `nanoagent channels add mattermost`).")
        if not settings.token:
            return ("channels.mattermost.enabled is true but there is no token: set MATTERMOST_TOKEN or "
                    "channels.mattermost.token (the bot account's access token, under Integrations, Bot Accounts).")
        if importlib.util.find_spec("aiohttp") is None:
            return "The Mattermost channel needs aiohttp: pip install 'nanoagent[mattermost]'."
        return None

    def allowed(self, settings: MattermostConfig, user: str) -> bool:
        return user.strip().lower() in {a.strip().lower() for a in settings.allow_from}

    def home(self, user: str) -> Place | None:
        """A person's DM is their id's place (`mattermost:<user id>`): the link finds the DM channel from it."""
        from nanoagent.keys import make

        user = user.strip().lower()
        return make(self.name, user) if USER_ID.match(user) else None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.mattermost.format import split_markdown

        return split_markdown(markdown)

    def link(self, settings: MattermostConfig, paths: Paths, timing: Timing) -> MattermostLink:
        from nanoagent.channels.mattermost.link import MattermostLink

        return MattermostLink(settings, paths, timing)

    async def verify(self, settings: MattermostConfig) -> str:
        """GET /users/me with the token: "@name"."""
        from nanoagent.channels.mattermost.link import whoami

        return await whoami(settings)

    async def deliver(self, settings: MattermostConfig, place: Place, text: str, files: Sequence[Path] = ()) -> None:
        """Post `text` through the REST API alone (no websocket): each piece into the place's thread, then the files
        there in one more post."""
        from nanoagent.channels.mattermost.link import deliver

        await deliver(settings, place, self.split(text) if text.strip() or not files else [], files)

    def questions(self) -> list[Question]:
        return [Question("url", "The server's address (https://chat.example.com)"),
                Question("token", "The bot account's access token (Integrations, Bot Accounts)", secret=True),
                Question("allowFrom", "Your Mattermost user id (your profile, ⋯, Copy user ID; Enter to pair "
                                      "instead)")]


CHANNEL = MattermostChannel()
