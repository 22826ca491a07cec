"""The WhatsApp channel's `Link`: notifications in through the webhook (`webhook.py`), the Graph API out (httpx).

What arrives: the webhook hands each signed notification to the running link (`ACTIVE`, by phone number id), which
gives its messages (each's id its `wamid`) to the engine as one batch and answers Meta only once the engine
acknowledged them (in the inbox on disk): until then Meta keeps it and sends it again, Meta's queue the catch-up.

Who is who: a sender is their number's digits (`wa_id`); a private chat is `whatsapp:<digits>`, a group of the
Groups API `whatsapp:g.<group_id>` (`-` and `_` for `+` and `/`). In a group the bot answers a mention of its number
(`@<digits>`, as WhatsApp writes a mention into the text), a reply to its message, or all with `groupPolicy: "all"`.

What goes out: every call goes through `api`. Each private message handled is marked as read (read receipts; the
Groups API has none). A rate limit (HTTP 429, or Graph's throttling codes) is waited out for its `Retry-After`, else
the backoff; Graph unreachable or answering 5xx fails the call (tried again with backoff when persistent). The Cloud
API has no idempotency key for a message, so a send whose answer timed out after it went out is sent once more at
most. The 24-hour customer-service window: a person's private chat takes a free-form message only within 24 hours of
their last message (`HEARD`, kept in the state file). Outside it a reply is not sent: one log line says so, the
engine keeps it in the outbox (`channels list` shows why), and it goes once they write again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mimetypes
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing, record
from nanoagent.channels.calls import RateLimited, Unreachable, retried
from nanoagent.channels.state import state_file
from nanoagent.channels.whatsapp.format import split, to_whatsapp
from nanoagent.channels.whatsapp.settings import WhatsAppConfig
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place, make

if TYPE_CHECKING:
    from pathlib import Path

    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.whatsapp")

ACTIVE: dict[str, WhatsAppLink] = {}  # phone number id -> the link running in this process, for the webhook
HEARD = "heard"  # the state's cursor: {number: unix time of their last message}, as JSON
GROUP = "g."  # a group chat's prefix in its session key
WINDOW = 24 * 3600.0  # seconds after a person's last message that a free-form message may reach them
ACK_WAIT = 15.0  # seconds a notification waits to be on disk before Meta is told to send it again
TYPING_EVERY = 20.0  # seconds between typing indicators in one chat (WhatsApp shows one for up to 25 s)
RATE_LIMIT_CODES = {4, 80007, 130429, 131056}  # Graph's throttling errors
WINDOW_CODE = 131047  # "more than 24 hours have passed since the recipient last replied"
TOKEN_CODES = {190}  # the access token expired or was revoked
FIELDS = {"fields": "display_phone_number,verified_name"}
SHOWN = {"image/jpeg", "image/png"}  # the images WhatsApp shows as one (others go as documents)
PLAYED = {"audio/ogg", "audio/mpeg", "audio/aac", "audio/mp4", "audio/amr"}  # the audio it plays
CLOSED = ("WhatsApp's 24-hour window is closed for {key} (their last message is over 24 hours old): the reply waits "
          "in the outbox until they write again")


class Refused(Exception):
    """Graph refused the request (a number not on WhatsApp, the window closed, a token revoked...)."""

    def __init__(self, status: int, code: int | None, message: str):
        super().__init__(f"HTTP {status}, error {code}: {message}")
        self.status, self.code = status, code


def masked(number: str) -> str:
    shown = digits(number)
    return f"+{shown[:2]}…{shown[-4:]}" if len(shown) > 8 else number


def chat_of(group_id: str) -> str:
    return GROUP + group_id.replace("+", "-").replace("/", "_")


def target(place: Place) -> dict[str, str]:
    """The `to` and `recipient_type` of a message to `place`."""
    if place.chat.startswith(GROUP):
        return {"recipient_type": "group",
                "to": place.chat.removeprefix(GROUP).replace("-", "+").replace("_", "/")}
    return {"recipient_type": "individual", "to": place.chat}


class Graph:
    """Calls to the Graph API at `apiBase` with the access token."""

    def __init__(self, settings: WhatsAppConfig, timeout: float):
        self.settings = settings
        self.client = httpx.AsyncClient(base_url=settings.api_base.rstrip("/") + "/", timeout=timeout,
                                        headers={"Authorization": f"Bearer {settings.access_token or ''}"})

    async def call(self, method: str, path: str, timeout: float | None = None, **kwargs: Any) -> Any:
        """The answer's JSON; RateLimited, Refused or Unreachable as Graph answered; httpx's errors when it could
        not be reached or did not answer in time."""
        response = await self.client.request(method, path.lstrip("/"), **kwargs,
                                             timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        if response.status_code >= 500:
            raise Unreachable(f"the Graph API answered HTTP {response.status_code}")
        error = _error(response)
        if response.status_code == 429 or (error is not None and error[0] in RATE_LIMIT_CODES):
            raise RateLimited(_retry_after(response))
        if response.status_code >= 400:
            code, message = error or (None, response.reason_phrase)
            raise Refused(response.status_code, code, message)
        return response.json() if response.headers.get("content-type", "").startswith("application/json") \
            else response.content

    async def send(self, place: Place, message: dict[str, Any], timeout: float | None = None) -> str:
        answer = await self.call("POST", f"{self.settings.phone_number_id}/messages", timeout=timeout,
                                 json={"messaging_product": "whatsapp", **target(place), **message})
        return str(answer["messages"][0]["id"])

    async def upload(self, name: str, data: bytes, media: str) -> str:
        answer = await self.call("POST", f"{self.settings.phone_number_id}/media",
                                 data={"messaging_product": "whatsapp", "type": media},
                                 files={"file": (name, data, media)})
        return str(answer["id"])

    async def close(self) -> None:
        await self.client.aclose()


def _error(response: httpx.Response) -> tuple[int | None, str] | None:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    if not isinstance(error, dict):
        return None
    code = error.get("code")
    return (code if isinstance(code, int) else None), " ".join(str(error.get("message") or "").split())[:200]


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None


class WhatsAppLink:
    def __init__(self, settings: WhatsAppConfig, paths: Paths, timing: Timing):
        self.settings = settings
        self.state = state_file(paths, "whatsapp")
        self.timing = timing
        self.graph = Graph(settings, timing.timeout)
        self.business = ""  # the business number's digits (a mention of it in a group)
        self.notifications: asyncio.Queue[tuple[list[Incoming], asyncio.Future[None]]] = asyncio.Queue()
        self.given: list[asyncio.Future[None]] = []  # the notifications of the batch given last, to acknowledge
        self.heard: dict[str, float] = _heard(self.state.read().cursor.get(HEARD, ""))
        self.last: dict[str, tuple[str, float]] = {}  # private chat -> its last message's id, when typing showed
        self.closed: set[str] = set()  # chats whose closed window is logged already
        self.refusals: dict[str, str] = {}  # a chat's key -> why its last reply was not taken

    async def connect(self) -> str:
        try:
            found = await self.api(lambda: self.graph.call("GET", self.settings.phone_number_id, params=FIELDS), True)
        except Refused as e:
            raise NanoagentError(_refusal(self.settings, e)) from None
        self.business = digits(found.get("display_phone_number"))
        ACTIVE[self.settings.phone_number_id] = self
        return _who(found)

    async def close(self) -> None:
        if ACTIVE.get(self.settings.phone_number_id) is self:
            del ACTIVE[self.settings.phone_number_id]
        await self.graph.close()

    # --- receiving ------------------------------------------------------------------------------------

    async def notified(self, payload: dict[str, Any]) -> bool:
        """A signed notification's messages given to the engine; True once they are on disk."""
        items = [item for raw in raws(payload, self.settings.phone_number_id) if (item := self.incoming(raw))]
        if not items:
            return True
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.notifications.put_nowait((items, done))
        try:
            async with asyncio.timeout(ACK_WAIT):
                await asyncio.shield(done)
        except TimeoutError:
            return False
        return True

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        while True:
            items, done = await self.notifications.get()
            self.given.append(done)
            yield items

    async def acknowledge(self, items: list[Incoming]) -> None:
        """On disk now: Meta may forget the notification; the window opens again; each private message read."""
        private = [item for item in items if item.private]
        for item in private:
            self.heard[item.user] = max(self.heard.get(item.user, 0.0), _sent_at(item.raw))
            self.last[item.place.chat] = (item.id, 0.0)
            self.closed.discard(item.place.key)
        horizon = self.timing.now() - WINDOW
        heard = json.dumps({user: at for user, at in self.heard.items() if at > horizon})
        await asyncio.to_thread(self.state.update, lambda s: s.cursor.__setitem__(HEARD, heard))
        for done in [d for d in self.given if not d.done()]:
            done.set_result(None)
        self.given.clear()
        await asyncio.gather(*(self.receipt(item.id) for item in private))

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        return self.incoming({k: v for k, v in raw.items() if k != "id"})

    def incoming(self, raw: dict[str, Any]) -> Incoming | None:
        """The message a notification's entry holds, in the channel's words; None for anything else."""
        message = raw.get("message")
        if not isinstance(message, dict) or not message.get("id"):
            return None
        user = digits(message.get("from"))
        business = str(raw.get("business") or "")
        if not user or user == business:
            return None
        text, files = content(message)
        group = message.get("group_id")
        mentioned = bool(business) and re.search(rf"@{business}\b", text) is not None
        text = re.sub(rf"\s?@{business}\b", "", text).strip() if mentioned else text.strip()
        if not text and not files:
            return None
        context = message.get("context")
        replied = isinstance(context, dict) and digits(context.get("from")) == business
        addressed = not group or self.settings.group_policy == "all" or (
            self.settings.group_policy == "mention" and (mentioned or replied))
        return Incoming(id=str(message["id"]), place=make("whatsapp", chat_of(str(group)) if group else user),
                        user=user, name=str(raw.get("name") or f"+{user}"), text=text, raw=raw,
                        private=not group, addressed=addressed, files=files)

    async def download(self, file: FileIn) -> bytes | None:
        try:
            found = await self.api(lambda: self.graph.call("GET", file.ref), True)
            data = await self.api(lambda: self.graph.call("GET", str(found["url"])), True)
        except (Refused, KeyError, TypeError) as e:
            log.warning(record("whatsapp_download_failed", error=type(e).__name__))
            return None
        return data if isinstance(data, bytes) else None

    # --- sending --------------------------------------------------------------------------------------

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        text = {"body": to_whatsapp(chunk.body), "preview_url": False}
        return await self.post(place, {"type": "text", "text": text}, persistent)

    async def send_file(self, place: Place, name: str, data: bytes, image: str | None) -> str | None:
        """A file uploaded, then sent: a JPEG or PNG as an image, audio WhatsApp plays as audio, else a document."""
        media = image or mimetypes.guess_type(name)[0] or "application/octet-stream"
        kind = "image" if media in SHOWN else "audio" if media in PLAYED else "document"
        try:
            id = await self.api(lambda: self.graph.upload(name, data, media))
        except Refused as e:
            return self.refused(place, f"WhatsApp refused the file {name} ({str(e)[:120]})", logged=True)
        named = {"filename": name} if kind == "document" else {}
        return None if id is None else await self.post(place, {"type": kind, kind: {"id": id, **named}}, False)

    async def post(self, place: Place, message: dict[str, Any], persistent: bool) -> str | None:
        if self.window_closed(place):
            return self.refused(place, CLOSED.format(key=place.key))
        try:
            sent = await self.api(lambda: self.graph.send(place, message, self.timing.send_timeout), persistent,
                                  resends=1)
        except Refused as e:
            if e.code == WINDOW_CODE:
                return self.refused(place, CLOSED.format(key=place.key))
            log.warning(record("whatsapp_send_refused", key=place.key, error=str(e)[:160]))
            return self.refused(place, f"WhatsApp refused it ({str(e)[:120]})", logged=True)
        if sent is not None:
            self.refusals.pop(place.key, None)
        return sent

    def window_closed(self, place: Place) -> bool:
        """A private chat whose person last wrote over 24 hours ago (one never heard from: Graph decides)."""
        at = self.heard.get(place.chat)
        return not place.chat.startswith(GROUP) and at is not None and at < self.timing.now() - WINDOW

    def refused(self, place: Place, why: str, logged: bool = False) -> str | None:
        """Not sent (None): why, for the outbox (`why_refused`); a closed window logged once per closing."""
        self.refusals[place.key] = why
        if not logged and place.key not in self.closed:
            self.closed.add(place.key)
            log.warning(record("whatsapp_window_closed", key=place.key,
                               fix="a reply reaches them once they write again; only approved templates may open a "
                                   "chat outside the window, and nanoagent sends none"))
        return None

    def why_refused(self, place: Place) -> str | None:
        return self.refusals.get(place.key)

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        return False  # the Cloud API cannot edit a message (the channel says `edits = False`: replies go whole)

    async def delete(self, place: Place, message_id: str) -> None:
        return None

    async def typing(self, place: Place) -> None:
        """WhatsApp's typing indicator hangs on the person's last message (it marks it read too)."""
        id, shown = self.last.get(place.chat, ("", 0.0))
        if id and self.timing.clock() - shown >= TYPING_EVERY:
            self.last[place.chat] = (id, self.timing.clock())
            await self.receipt(id, typing=True)

    async def receipt(self, id: str, typing: bool = False) -> None:
        body = {"messaging_product": "whatsapp", "status": "read", "message_id": id,
                **({"typing_indicator": {"type": "text"}} if typing else {})}
        try:
            await self.api(lambda: self.graph.call("POST", f"{self.settings.phone_number_id}/messages", json=body))
        except Refused:
            pass  # a receipt the chat can do without

    async def api(self, call: Callable[[], Awaitable[Any]], persistent: bool = False,
                  resends: int | None = None) -> Any:
        """One call, tried as `channels.calls.retried` tries it; Refused is raised to the caller."""
        return await retried(call, self.timing, log, "whatsapp", f"the Graph API unreachable at {self.settings.api_base}",
                             persistent, resends)


def raws(payload: dict[str, Any], phone_number_id: str) -> list[dict[str, Any]]:
    """Each message a notification holds for this number, with its sender's name and the business number."""
    found = []
    for change in (_dict(c) for e in _list(payload.get("entry")) for c in _list(_dict(e).get("changes"))):
        value = _dict(change.get("value"))
        metadata = _dict(value.get("metadata"))
        if change.get("field") != "messages" or str(metadata.get("phone_number_id") or "") != phone_number_id:
            continue  # no message, or one to another number of the same app
        names = {str(c.get("wa_id")): str(_dict(c.get("profile")).get("name") or "")
                 for c in map(_dict, _list(value.get("contacts")))}
        business = digits(metadata.get("display_phone_number"))
        found += [{"message": m, "name": names.get(str(m.get("from"))) or "", "business": business}
                  for m in map(_dict, _list(value.get("messages")))]
    return found


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def digits(value: Any) -> str:
    return re.sub(r"\D", "", str(value or ""))


def content(message: dict[str, Any]) -> tuple[str, list[FileIn]]:
    """A message's text and files: text, a caption, a button's or a list's answer; images, voice notes (audio with
    `voice`), audio, video, stickers and documents, fetched by their media id."""
    kind = str(message.get("type") or "")
    part = _dict(message.get(kind))
    if kind == "text":
        return str(part.get("body") or ""), []
    if kind in ("button", "interactive"):
        answer = part.get("button_reply") or part.get("list_reply") or part
        return str(answer.get("text") or answer.get("title") or "") if isinstance(answer, dict) else "", []
    if kind in ("image", "sticker", "audio", "video", "document") and part.get("id"):
        shown = {"image": "photo", "sticker": "photo", "video": "video", "document": "document"}.get(kind) or (
            "voice note" if part.get("voice") else "audio")
        return str(part.get("caption") or ""), [FileIn(shown, part.get("filename") or None, None, str(part["id"]),
                                                       str(part.get("mime_type") or "") or None)]
    return "", []


def _sent_at(raw: dict[str, Any]) -> float:
    stamp = str(_dict(raw.get("message")).get("timestamp") or "")
    return float(stamp) if stamp.isdigit() else 0.0


def _heard(text: str) -> dict[str, float]:
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): float(v) for k, v in found.items() if isinstance(v, int | float)} if isinstance(found, dict) else {}


def _who(found: Any) -> str:
    number = masked(str(_dict(found).get("display_phone_number") or ""))
    return f"{_dict(found).get('verified_name') or 'WhatsApp'} ({number})"


def _refusal(settings: WhatsAppConfig, e: Refused) -> str:
    if e.code in TOKEN_CODES or e.status == 401:
        return ("Meta refused channels.whatsapp.accessToken (expired or revoked): make a system user's permanent "
                "token with whatsapp_business_messaging and put it there.")
    return (f"Meta refused the phone number id {settings.phone_number_id} ({e}); copy \"Phone number ID\" from the "
            "app's WhatsApp > API Setup page.")


async def whoami(settings: WhatsAppConfig) -> str:
    """The business number the settings name (`channels add`, `doctor`); NanoagentError saying what is wrong."""
    graph = Graph(settings, Timing().timeout)
    try:
        return _who(await graph.call("GET", settings.phone_number_id, params=FIELDS))
    except Refused as e:
        raise NanoagentError(_refusal(settings, e)) from None
    except (httpx.HTTPError, Unreachable, RateLimited) as e:
        raise NanoagentError(f"Cannot reach the Graph API at {settings.api_base} ({type(e).__name__}); check the "
                             "network, or leave channels.whatsapp.apiBase out.") from None
    finally:
        await graph.close()


async def deliver(settings: WhatsAppConfig, place: Place, text: str, files: Sequence[Path]) -> None:
    """`text` then each file to `place` from a process with no gateway (one try each, the window respected);
    DeliveryError when one did not arrive."""
    from nanoagent.attachments import outgoing
    from nanoagent.paths import Paths

    link = WhatsAppLink(settings, Paths.from_env(), Timing())
    try:
        for chunk in split(text) if text.strip() or not files else []:
            if await link.send(place, chunk, False) is None:
                raise DeliveryError(f"The message to {place.key} was not sent: {_why(link, place)}")
        for path in files:
            if await link.send_file(place, *outgoing(path)) is None:
                raise DeliveryError(f"The file {path.name} for {place.key} was not sent: {_why(link, place)}")
    finally:
        await link.close()


def _why(link: WhatsAppLink, place: Place) -> str:
    return link.why_refused(place) or f"the Graph API could not be reached at {link.settings.api_base}"
