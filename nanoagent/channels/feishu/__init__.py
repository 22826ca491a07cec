"""The Feishu / Lark channel: a custom app's bot, events over the open platform's long connection (a websocket the
app opens, so no public address is needed), replies as cards of Markdown streamed by updating the card, on aiohttp
(why not the official SDK: `link.py`). Feishu (China, open.feishu.cn) and Lark (international, open.larksuite.com) are one API on
two hosts: `host` picks one.

This module imports no client library: `link`, `verify` and `deliver` import aiohttp when called.
"""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING

from nanoagent.channels.base import Chunk, Question, Route, Timing
from nanoagent.channels.feishu.settings import ENV, FeishuConfig

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.channels.feishu.link import FeishuLink
    from nanoagent.config.schema import Config
    from nanoagent.keys import Place
    from nanoagent.paths import Paths

LIMIT = 8000  # characters of Markdown in one card (format.LIMIT, kept here so the format module loads lazily)
OPEN_ID = re.compile(r"^ou_[0-9a-zA-Z]{8,64}$")  # a person's open id, the same for them in every chat with this app


class FeishuChannel:
    name = "feishu"
    title = "Feishu / Lark"
    hint = "Feishu/Lark card: Markdown (headings, lists, tables and code blocks render)"
    limit = LIMIT
    edits = True
    pairing = True
    settings_class = FeishuConfig
    env = ENV

    def settings(self, config: Config) -> FeishuConfig:
        return config.channels.of(self.name, FeishuConfig, self.env)

    def routes(self, settings: FeishuConfig) -> list[Route]:
        return []  # events come over the long connection the app opens: no webhook

    def problem(self, settings: FeishuConfig) -> str | None:
        if not settings.app_id or not settings.app_secret:
            return ("channels.feishu.enabled is true but the app's credentials are missing: set FEISHU_APP_ID and "
                    "FEISHU_APP_SECRET or channels.feishu.appId and appSecret (`nanoagent channels add feishu`).")
        if importlib.util.find_spec("aiohttp") is None:
            return "The Feishu / Lark channel needs aiohttp: pip install 'nanoagent[feishu]'."
        return None

    def allowed(self, settings: FeishuConfig, user: str) -> bool:
        return user.strip() in {a.strip() for a in settings.allow_from}

    def home(self, user: str) -> Place | None:
        """A person's private chat is their open id's place (`feishu:ou_...`): a message to it goes by open id."""
        from nanoagent.keys import make

        user = user.strip()
        return make(self.name, user) if OPEN_ID.match(user) else None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.feishu.format import split_markdown

        return split_markdown(markdown)

    def link(self, settings: FeishuConfig, paths: Paths, timing: Timing) -> FeishuLink:
        from nanoagent.channels.feishu.link import FeishuLink

        return FeishuLink(settings, paths, timing)

    async def verify(self, settings: FeishuConfig) -> str:
        """One call: a tenant_access_token for the app id and secret; the app's id on success."""
        from nanoagent.channels.feishu.link import check_credentials

        return await check_credentials(settings)

    async def deliver(self, settings: FeishuConfig, place: Place, text: str, files: Sequence[Path] = ()) -> None:
        """Send `text` as cards through the REST API alone (no websocket), then each file as an image or a file
        message."""
        from nanoagent.channels.feishu.link import deliver

        await deliver(settings, place, self.split(text) if text.strip() or not files else [], files)

    def questions(self) -> list[Question]:
        return [Question("host", "feishu (open.feishu.cn, China) or lark (open.larksuite.com)", default="feishu"),
                Question("appId", "The app's App ID (cli_..., under Credentials & Basic Info)"),
                Question("appSecret", "The app's App Secret", secret=True),
                Question("allowFrom", "Your open id (ou_...; Enter to pair instead)")]


CHANNEL = FeishuChannel()
