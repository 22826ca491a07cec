"""The route Meta posts WhatsApp's notifications to, on the gateway's HTTP listener: `/channels/whatsapp/webhook`.

GET is the verify-token handshake Meta makes when the webhook is set up (`hub.mode=subscribe`, `hub.verify_token`,
`hub.challenge`): the challenge is echoed when the token is the configured one, else 403. POST carries the
notifications: its `X-Hub-Signature-256` (`sha256=` and the body's HMAC-SHA256 under the app secret) is checked
before anything else, in constant time, and a request without the right one gets 401 and is not read further. The
listener refuses a body over its limit (413) before it is read and answers 404 for any other path (`gateway/http.py`).

A signed notification's messages go to the running link (`link.ACTIVE`), and the POST gets 200 only once they are in
the inbox on disk: Meta sends again what got no 200 (for days), so a gateway stopped, starting, or killed before the
write loses nothing (503 meanwhile); the engine keeps the first of a message that comes twice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from typing import TYPE_CHECKING, Any

from nanoagent.channels.base import Route, record

if TYPE_CHECKING:
    from nanoagent.channels.whatsapp.settings import WhatsAppConfig

log = logging.getLogger("nanoagent.channels.whatsapp")

PATH = "webhook"
CHALLENGE = re.compile(r"[\w.-]{1,128}")  # Meta's challenge is a number; anything else is not echoed


def signed(body: bytes, header: str, secret: str | None) -> bool:
    """Whether `header` is `sha256=` and the body's HMAC-SHA256 under `secret` (compared in constant time)."""
    if not secret:
        return False
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(header.strip().lower().encode(), expected.encode())


def routes(settings: WhatsAppConfig) -> list[Route]:
    async def handshake(request: Any) -> Any:
        from aiohttp import web

        query = request.query
        token, challenge = query.get("hub.verify_token", ""), query.get("hub.challenge", "")
        if (query.get("hub.mode") == "subscribe" and settings.verify_token and CHALLENGE.fullmatch(challenge)
                and hmac.compare_digest(token.encode(), settings.verify_token.encode())):
            log.info(record("whatsapp_webhook_verified"))
            return web.Response(text=challenge, content_type="text/plain")
        log.warning(record("whatsapp_webhook_verify_refused",
                           fix="type the same verify token in Meta's webhook form as in channels.whatsapp.verifyToken"))
        return web.json_response({"error": "the verify token does not match"}, status=403)

    async def notified(request: Any) -> Any:
        from aiohttp import web

        from nanoagent.channels.whatsapp.link import ACTIVE

        body = await request.read()  # bounded by the listener (413 over its limit, before any byte is read)
        if not signed(body, request.headers.get("X-Hub-Signature-256", ""), settings.app_secret):
            log.warning(record("whatsapp_webhook_unsigned", fix="check channels.whatsapp.appSecret against the "
                               "app's secret (App settings > Basic)"))
            return web.json_response({"error": "the signature does not match"}, status=401)
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return web.json_response({"error": "the body is no JSON"}, status=400)
        link = ACTIVE.get(settings.phone_number_id)  # none while the channel is not connected: Meta sends it again
        if link is None or not await link.notified(payload if isinstance(payload, dict) else {}):
            return web.json_response({"error": "not saved yet; send it again"}, status=503)
        return web.json_response({"ok": True})

    return [Route("GET", PATH, handshake), Route("POST", PATH, notified)]
