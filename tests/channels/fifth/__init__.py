"""A fifth channel, as small as the contract allows: what a new chat app brings to nanoagent, one folder (this one:
`CHANNEL`, its settings class and variable in `settings.py`) and a stand-in of its API (`tests/fifth_server.py`).
`tests/channel_folders.py` puts it where the registry looks, as if it were `nanoagent/channels/fifth/`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nanoagent.channels.fifth.settings import ENV, FifthConfig

from nanoagent.channels.base import Chunk, DeliveryError, Question, Route
from nanoagent.errors import NanoagentError

RECEIVED: list[Any] = []  # the events Fifth's webhook took, in this process


class Fifth:
    name = "fifth"
    title = "Fifth"
    hint = "Fifth shows plain text only."
    limit = 1000
    edits = False
    pairing = True
    settings_class = FifthConfig
    env = ENV

    def settings(self, config: Any) -> FifthConfig:
        return config.channels.of("fifth", FifthConfig, ENV)  # "fifth": the channels a test makes like it share it

    def routes(self, settings: FifthConfig) -> list[Route]:
        """With a webhook secret, Fifth posts its events to `/channels/fifth/events`, signed: the body's HMAC-SHA256
        under the secret in `X-Fifth-Signature`, checked before anything else (401 when wrong)."""
        secret = settings.webhook_secret
        if not secret:
            return []

        async def events(request: Any) -> Any:
            import hashlib
            import hmac

            from aiohttp import web

            body = await request.read()
            signed = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(request.headers.get("X-Fifth-Signature", ""), signed):
                return web.json_response({"error": "bad signature"}, status=401)
            RECEIVED.append(json.loads(body))
            return web.json_response({"ok": True}, status=202)

        return [Route("POST", "events", events)]

    def problem(self, settings: FifthConfig) -> str | None:
        return None if settings.token else "no token: set channels.fifth.token (`nanoagent channels add fifth`)"

    def allowed(self, settings: FifthConfig, user: str) -> bool:
        return user in settings.allow_from

    def home(self, user: str) -> None:
        return None

    def split(self, markdown: str) -> list[Chunk]:
        return [Chunk(markdown[i:i + self.limit], markdown[i:i + self.limit])
                for i in range(0, len(markdown), self.limit)]

    def link(self, settings: FifthConfig, paths: Any, timing: Any) -> Any:
        raise NotImplementedError("the command line never connects")

    async def verify(self, settings: FifthConfig) -> str:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(f"{settings.api_base}/me", headers={"Authorization": settings.token or ""})
        try:
            with await asyncio.to_thread(urllib.request.urlopen, request, timeout=10) as answer:
                return "@" + json.load(answer)["name"]
        except urllib.error.HTTPError as e:
            raise NanoagentError(f"Fifth refused the token (HTTP {e.code}); copy it again from Fifth's settings") from None
        except urllib.error.URLError as e:
            raise NanoagentError(f"cannot reach {settings.api_base} ({e.reason})") from None

    async def deliver(self, settings: FifthConfig, place: Any, text: str, files: Any = ()) -> None:
        raise DeliveryError("the fifth channel delivers nothing outside a gateway")

    def questions(self) -> list[Question]:
        return [Question("apiBase", "API base URL", default="https://fifth.invalid"),
                Question("token", "Bot token", secret=True),
                Question("allowFrom", "Your user id (more than one: separate them with commas)")]


CHANNEL = Fifth()
