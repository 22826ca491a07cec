"""The WhatsApp channel: a business phone number on Meta's official WhatsApp Business Cloud API (the Graph API).

`CHANNEL` is what the rest of nanoagent knows of it; `webhook.py` serves the route Meta posts incoming messages to, on
the gateway's HTTP listener (`/channels/whatsapp/webhook`: the verify-token handshake, every POST's signature checked
with the app secret before anything else); `link.py` is the connection the shared engine drives (the webhook's messages
in, the Graph API's REST calls out, over httpx: a dependency already, so the channel needs no library of its own);
`format.py` turns Markdown into WhatsApp's text markup. Sessions are `whatsapp:<number's digits>` for a private chat
and `whatsapp:g.<group id>` for a group of the Groups API. The Cloud API cannot edit a sent message: replies go
whole, a long one in several messages. A free-form message reaches a person only within 24 hours of their last one.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from nanoagent.channels.base import Chunk, Question, Route, Timing
from nanoagent.channels.whatsapp.settings import ENV, WhatsAppConfig
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.channels.whatsapp.link import WhatsAppLink
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

NUMBER = re.compile(r"[1-9]\d{6,14}")  # E.164's digits, as WhatsApp's wa_id writes a number


class WhatsApp:
    name = "whatsapp"
    title = "WhatsApp"
    hint = ("WhatsApp: plain text with *bold*, _italic_, ~strikethrough~ and ```monospace```; no tables or headings; "
            "write links as bare URLs")
    limit = 4096
    edits = False
    pairing = True
    settings_class = WhatsAppConfig
    env = ENV

    def settings(self, config: Config) -> WhatsAppConfig:
        return config.channels.of(self.name, WhatsAppConfig, self.env)

    def routes(self, settings: WhatsAppConfig) -> list[Route]:
        """Meta's webhook: GET for the verify-token handshake, POST for the notifications (signed)."""
        from nanoagent.channels.whatsapp.webhook import routes

        return routes(settings)

    def problem(self, settings: WhatsAppConfig) -> str | None:
        where = "channels.whatsapp"
        if not settings.phone_number_id.isdigit():
            return (f"{where}.phoneNumberId is not set to the business number's id: copy \"Phone number ID\" from "
                    "the app's WhatsApp > API Setup page in Meta's dashboard.")
        for key, value in (("accessToken", settings.access_token), ("appSecret", settings.app_secret),
                           ("verifyToken", settings.verify_token)):
            if not value:
                return f"{where}.{key} is not set: set it (docs/channels/whatsapp.md says where it comes from)."
        if not re.match(r"https?://[^/\s]+", settings.api_base):
            return f"{where}.apiBase {settings.api_base!r} is no http(s) address: leave it out for Meta's Graph API."
        for key, entries in (("allowFrom", settings.allow_from), ("owner", settings.owner)):
            wrong = next((entry for entry in entries if not user_id(entry)), None)
            if wrong is not None:
                return (f"{where}.{key} holds {wrong!r}, which is no phone number: write it with its country code, "
                        "like \"+15557654321\".")
        return None

    def allowed(self, settings: WhatsAppConfig, user: str) -> bool:
        return bool(user_id(user)) and user_id(user) in {user_id(entry) for entry in settings.allow_from}

    def home(self, user: str) -> Place | None:
        return Place(self.name, user_id(user)) if user_id(user) else None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.whatsapp.format import split

        return split(markdown, self.limit)

    def link(self, settings: WhatsAppConfig, paths: Paths, timing: Timing) -> WhatsAppLink:
        from nanoagent.channels.whatsapp.link import WhatsAppLink

        return WhatsAppLink(settings, paths, timing)

    async def verify(self, settings: WhatsAppConfig) -> str:
        """One Graph API call: the business number the id names, read with the access token."""
        from nanoagent.channels.whatsapp.link import whoami

        if (problem := self.problem(settings)) is not None:
            raise NanoagentError(problem)
        return await whoami(settings)

    async def deliver(self, settings: WhatsAppConfig, place: Place, text: str, files: Sequence[Path] = ()) -> None:
        from nanoagent.channels.whatsapp.link import deliver

        await deliver(settings, place, text, files)

    def questions(self) -> list[Question]:
        return [Question("phoneNumberId", "Phone number ID (Meta's dashboard: WhatsApp > API Setup)"),
                Question("accessToken", "Access token (a system user's permanent token)", secret=True),
                Question("appSecret", "App secret (App settings > Basic)", secret=True),
                Question("verifyToken", "Verify token (any string; type the same in Meta's webhook form)", secret=True),
                Question("allowFrom", "Your own WhatsApp number, with its country code (+15557654321)")]


def user_id(entry: str) -> str:
    """A phone number as WhatsApp's wa_id writes it (its digits, no "+"); "" for anything else."""
    digits = re.sub(r"[\s().-]", "", entry).removeprefix("+")
    return digits if NUMBER.fullmatch(digits) else ""


CHANNEL = WhatsApp()
