"""The Slack channel: Socket Mode (no public URL) through slack-sdk, replies in mrkdwn streamed by `chat.update`.

This module imports no Slack library: `link`, `verify` and `deliver` import slack-sdk when called.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from nanoagent.channels.base import Chunk, Question, Route, Timing
from nanoagent.channels.slack.settings import ENV, SlackConfig

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.channels.slack.link import SlackLink
    from nanoagent.config.schema import Config
    from nanoagent.keys import Place
    from nanoagent.paths import Paths

LIMIT = 4000  # characters of mrkdwn a message holds (format.LIMIT, kept here so the format module loads lazily)


class SlackChannel:
    name = "slack"
    title = "Slack"
    hint = "Slack: mrkdwn (*bold*, _italic_, no tables, no headings)"
    limit = LIMIT
    edits = True
    pairing = True
    settings_class = SlackConfig
    env = ENV

    def settings(self, config: Config) -> SlackConfig:
        return config.channels.of(self.name, SlackConfig, self.env)

    def routes(self, settings: SlackConfig) -> list[Route]:
        return []  # it connects out: no webhook

    def problem(self, settings: SlackConfig) -> str | None:
        if not settings.bot_token:
            return ("channels.slack.enabled is true but there is no bot token: set SLACK_BOT_TOKEN or "
                    "channels.slack.botToken (the app's xoxb- token; `nanoagent channels add slack`).")
        if not settings.app_token:
            return ("channels.slack.enabled is true but there is no app-level token: set SLACK_APP_TOKEN or "
                    "channels.slack.appToken (an xapp- token with connections:write, for Socket Mode).")
        if importlib.util.find_spec("slack_sdk") is None or importlib.util.find_spec("aiohttp") is None:
            return "The Slack channel needs slack-sdk and aiohttp: pip install 'nanoagent[slack]'."
        return None

    def allowed(self, settings: SlackConfig, user: str) -> bool:
        return user.strip().upper() in {a.strip().upper() for a in settings.allow_from}

    def home(self, user: str) -> Place | None:
        """A person's DM is their id's place (`slack:U123`): the link finds the DM channel from it."""
        from nanoagent.keys import make

        try:
            return make(self.name, user.strip().upper())
        except ValueError:
            return None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.slack.format import split_markdown

        return split_markdown(markdown)

    def link(self, settings: SlackConfig, paths: Paths, timing: Timing) -> SlackLink:
        from nanoagent.channels.slack.link import SlackLink

        return SlackLink(settings, paths, timing)

    async def verify(self, settings: SlackConfig) -> str:
        """auth.test with the bot token: "@name"."""
        from nanoagent.channels.slack.link import web_call

        me = await web_call(settings, "auth_test", "botToken")
        return f"@{me.get('user') or me.get('user_id')}"

    async def deliver(self, settings: SlackConfig, place: Place, text: str, files: Sequence[Path] = ()) -> None:
        """Post `text` through the Web API alone (no socket): each piece into the place's thread, then the files
        uploaded there."""
        from nanoagent.channels.slack.link import deliver

        await deliver(settings, place, self.split(text) if text.strip() or not files else [], files)

    def questions(self) -> list[Question]:
        return [Question("botToken", "Bot token (xoxb-..., under OAuth & Permissions)", secret=True),
                Question("appToken", "App-level token with connections:write (xapp-..., under Basic Information)",
                         secret=True),
                Question("allowFrom", "Your Slack member id (U..., your profile's ⋯ menu, Copy member ID; Enter to "
                                      "pair instead)")]


CHANNEL = SlackChannel()

