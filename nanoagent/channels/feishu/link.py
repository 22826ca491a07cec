"""The Feishu / Lark link: events in over the open platform's long connection, the IM API out, on aiohttp (the
gateway's own). Imported only when the channel runs.

Not the official SDK (lark-oapi) at run time: importing it costs 143 MiB resident, it makes a new HTTP client for
every call, and its websocket client blocks the event loop and answers events before they are stored (measured and
listed in docs/decisions/channels.md, "Feishu / Lark"). The channel needs a token call, eight IM endpoints and the
connection's frame (`frames.py`); the tests' stand-in frames events with lark-oapi's own protobuf class.

The long connection: POST /callback/ws/endpoint with the app's id and secret gives the websocket's URL (with its
`service_id`) and the pings' interval; each event arrives as a data frame, and is answered (`{"code": 200}` on the
same frame) only once the engine stored it (`acknowledge`): an event not answered is sent again by the platform, on
this connection or the next, so a gateway killed before the inbox write gets the message again. Events that are
not for the bot are answered at once.

What arrives: `im.message.receive_v1`. A private chat (`p2p`) is the person's own place, `feishu:<open id>`, as
`home` gives it; a group chat is `feishu:<chat id>`, where the bot answers messages mentioning it (or every message
with `groupPolicy: "all"`, none with `"off"`). Other apps' and bots' messages are ignored. Images, files, audio and
videos come as `FileIn`s fetched from the message's resources.

Sends: a reply is an interactive card (format.card) updated in place by PATCH for streaming; each new message
carries a `uuid`, which the platform keeps for an hour and answers a repeat of with the first message, so every try
of one message carries the same uuid and a send that failed in any way (a timeout included) is made again. A rate
limit (HTTP 429, or code 99991400) is waited out for `x-ogw-ratelimit-reset` seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mimetypes
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

from nanoagent import keys
from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing, batches, record
from nanoagent.channels.feishu.format import card, from_feishu
from nanoagent.channels.feishu.frames import CONTROL, DATA, Frame
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place

if TYPE_CHECKING:
    from pathlib import Path

    import aiohttp

    from nanoagent.channels.feishu.settings import FeishuConfig
    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.feishu")

NAME = "feishu"
CONNECT_TIMEOUT = 30.0  # seconds for the websocket to open
MAX_DOWNLOAD = 50_000_000  # bytes; a bigger file is not taken
KEEP_IDS = 2000  # ids of messages acknowledged, remembered to answer a second delivery at once
MAX_PARTS, KEEP_PARTS = 64, 32  # frames one payload may be split in; payloads being put together at once
RATE_LIMITED = 99991400  # the platform's code for "request trigger frequency limit"
TOKEN_CODES = {99991661, 99991663, 99991668}  # the tenant_access_token is missing, invalid or expired
RENEW_BEFORE = 300.0  # seconds before a token's expiry it is fetched again
FILES = {"image": "photo", "file": "document", "audio": "audio", "media": "video"}  # message type -> FileIn.kind
DEFAULT_TIMING = Timing()


class Refused(Exception):
    """The platform answered with an error: its HTTP status, its code and message."""

    def __init__(self, status: int, code: int, msg: str):
        super().__init__(f"HTTP {status} code {code}")
        self.status, self.code, self.msg = status, code, msg


class API:
    """The open platform's REST API at the host with the app's tenant_access_token, on one aiohttp session (whose
    connections the long connection's websocket shares)."""

    def __init__(self, settings: FeishuConfig, timing: Timing):
        import aiohttp

        self.settings = settings
        self.timing = timing
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self.token = ""
        self.expires = 0.0

    async def close(self) -> None:
        await self.session.close()

    async def tenant_token(self) -> str:
        """The app's tenant_access_token (POST /open-apis/auth/v3/tenant_access_token/internal), kept until shortly
        before it expires."""
        if self.token and self.timing.clock() < self.expires:
            return self.token
        found = await self.call("POST", "/open-apis/auth/v3/tenant_access_token/internal", False, token=False,
                                body={"app_id": self.settings.app_id, "app_secret": self.settings.app_secret})
        self.token = str(found.get("tenant_access_token") or "")
        self.expires = self.timing.clock() + max(60.0, float(found.get("expire") or 7200) - RENEW_BEFORE)
        return self.token

    async def checked(self, bot: bool = True) -> dict[str, Any]:
        """The token, then (with `bot`) the bot's own open id and name (GET /open-apis/bot/v3/info); a refusal is
        one line naming the settings."""
        try:
            await self.tenant_token()
            return dict((await self.call("GET", "/open-apis/bot/v3/info", False)).get("bot") or {}) if bot else {}
        except Refused as e:
            raise NanoagentError(refused(self.settings, e)) from None
        except _network_errors() as e:
            raise NanoagentError(f"Cannot reach {self.settings.base} ({type(e).__name__}); check the network and "
                                 "channels.feishu.host.") from None

    async def quietly(self, method: str, uri: str, persistent: bool, **kwargs: Any) -> Any:
        """A call whose failure is an answer (None), logged without its text."""
        try:
            return await self.call(method, uri, persistent, **kwargs)
        except _failures() as e:
            log.warning(record("feishu_call_failed", method=method, path=_path(uri), error=_error(e)))
            return None

    async def call(self, method: str, uri: str, persistent: bool, *, queries: Sequence[tuple[str, str]] = (),
                   body: Any = None, form: Callable[[], aiohttp.FormData] | None = None, token: bool = True,
                   wait: bool = True, send: bool = False, raw: bool = False) -> Any:
        """One call within `Timing.timeout` (a `send`: `Timing.send_timeout`): the answer's JSON (its bytes with
        `raw`). A rate limit is waited out (unless `wait` is False); with `persistent`, so are network failures and
        5xx, with backoff. A token the platform calls expired is fetched again once."""
        failures, renewed = 0, False
        while True:
            try:
                async with asyncio.timeout(self.timing.send_timeout if send else self.timing.timeout):
                    status, headers, content = await self._request(method, uri, queries, body, form, token)
                found = _json(content) if not (raw and status < 400) else {}
                code = int(found.get("code") or 0) if isinstance(found, dict) else 0
            except _network_errors() as e:
                self.timing.report(f"{self.settings.base} unreachable: {type(e).__name__}")
                if not persistent:
                    raise
                error = type(e).__name__
            else:
                if status < 400 and code == 0:
                    self.timing.report(None)
                    return content if raw else found
                if status >= 500:
                    self.timing.report(f"{self.settings.base} answered HTTP {status}")
                if (status == 429 or code == RATE_LIMITED) and wait:
                    delay = _retry_after(headers)
                    log.warning(record("feishu_rate_limited", path=_path(uri), retry_after=delay))
                    await asyncio.sleep(delay)
                    continue
                if code in TOKEN_CODES and token and not renewed:
                    self.token, renewed = "", True
                    continue
                if status < 500 or not persistent:
                    raise Refused(status, code, str(found.get("msg") or "") if isinstance(found, dict) else "")
                error = f"http {status}"
            delay = self.timing.pause(failures)
            failures += 1
            log.warning(record("feishu_call_retry", path=_path(uri), error=error, retry_in=delay))
            await asyncio.sleep(delay)

    async def _request(self, method: str, uri: str, queries: Sequence[tuple[str, str]], body: Any,
                       form: Callable[[], aiohttp.FormData] | None, token: bool) -> tuple[int, dict[str, str], bytes]:
        headers = {"Authorization": f"Bearer {await self.tenant_token()}"} if token else {}
        async with self.session.request(method, self.settings.base + uri, params=list(queries), headers=headers,
                                        json=body if form is None else None, data=form() if form else None,
                                        allow_redirects=False) as response:
            content = await response.content.read(MAX_DOWNLOAD + 1)
            return response.status, {k.lower(): v for k, v in response.headers.items()}, content

    async def send(self, place: Place, kind: str, content: str, persistent: bool = False) -> str:
        """A new message (`kind`: interactive, image, file) to a person (their open id) or a group (`oc_`): its id.
        Every try carries the same uuid, so a repeat of a message that arrived answers with the first."""
        to = "chat_id" if place.chat.startswith("oc_") else "open_id"
        made = await self.call("POST", "/open-apis/im/v1/messages", persistent, send=True,
                               queries=[("receive_id_type", to)],
                               body={"receive_id": place.chat, "msg_type": kind, "content": content,
                                     "uuid": str(uuid.uuid4())})
        return str(_data(made).get("message_id") or "")

    async def upload(self, path: Path) -> tuple[str, str]:
        """One file uploaded for a message: ("image", its content) when its bytes are an image's, else ("file", ...)."""
        import aiohttp

        from nanoagent.attachments import outgoing

        name, data, image = outgoing(path)
        kind = "image" if image else "file"
        fields = {"image_type": "message"} if image else {"file_type": "stream", "file_name": name}

        def form() -> aiohttp.FormData:
            made = aiohttp.FormData()
            for key, value in fields.items():
                made.add_field(key, value)
            made.add_field(kind, data, filename=name)
            return made

        uploaded = await self.call("POST", f"/open-apis/im/v1/{kind}s", False, send=True, form=form)
        key = f"{kind}_key"
        return kind, json.dumps({key: _data(uploaded).get(key)})

    async def endpoint(self) -> tuple[str, int]:
        """The long connection's websocket URL and the pings' interval (POST /callback/ws/endpoint)."""
        found = await self.call("POST", "/callback/ws/endpoint", False, token=False,
                                body={"AppID": self.settings.app_id, "AppSecret": self.settings.app_secret})
        data = _data(found)
        return str(data.get("URL") or ""), int((data.get("ClientConfig") or {}).get("PingInterval") or 120)


class FeishuLink:
    def __init__(self, settings: FeishuConfig, paths: Paths, timing: Timing = DEFAULT_TIMING):
        self.settings = settings
        self.timing = timing
        self.queue: asyncio.Queue[list[Incoming]] = asyncio.Queue()
        self.unanswered: dict[str, list[Frame]] = {}  # a message's id -> its event frames, answered once stored
        self.done: OrderedDict[str, None] = OrderedDict()  # ids of messages acknowledged
        self.parts: dict[str, list[bytes]] = {}  # a payload sent in several frames, by its message id
        self.names: dict[str, str] = {}
        self.bot_id = ""
        self.tasks: set[asyncio.Task[None]] = set()
        self.api: API | None = None
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.service = 0

    # --- connecting -------------------------------------------------------------------------------------------

    async def connect(self) -> str:
        self.api = API(self.settings, self.timing)
        bot = await self.api.checked()
        self.bot_id = str(bot.get("open_id") or "")
        try:
            ping = await asyncio.wait_for(self._open(), CONNECT_TIMEOUT)
        except _connect_errors() as e:
            await self.close()
            raise NanoagentError(f"The long connection to {self.settings.base} did not open ({_error(e)}); check "
                                 "that the app's event subscription uses the long connection (Events & Callbacks) "
                                 "and channels.feishu.host.") from None
        self._spawn(self._listen(ping))
        return f"@{bot.get('app_name') or self.settings.app_id}"

    async def _open(self) -> int:
        url, ping = await self._api().endpoint()
        query = parse_qs(urlparse(url).query)
        self.service = int((query.get("service_id") or ["0"])[0])
        self.socket = await self._api().session.ws_connect(url, autoping=True)
        return ping

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.socket is not None:
            await self.socket.close()
        if self.api is not None:
            await self.api.close()

    # --- what arrives -------------------------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        async for batch in batches(self.queue):
            yield batch

    async def _listen(self, ping: int) -> None:
        """Frames in the order they come, pings every `ping` seconds; a closed connection opened again (a new
        endpoint each time), with backoff while it will not open."""
        import aiohttp

        failures = 0
        while True:
            socket = self.socket
            if socket is None:
                try:
                    ping = await asyncio.wait_for(self._open(), CONNECT_TIMEOUT)
                except _connect_errors() as e:
                    self.timing.report(f"the long connection to {self.settings.base} failed: {_error(e)}")
                    await asyncio.sleep(self.timing.pause(failures))
                    failures += 1
                    continue
                socket = self.socket
                self.timing.report(None)
                log.info(record("feishu_connected", reconnect=True))
            assert socket is not None
            failures = 0
            pinging = asyncio.get_running_loop().create_task(self._ping(socket, ping))
            try:
                async for message in socket:
                    if message.type == aiohttp.WSMsgType.BINARY:
                        await self._on_frame(message.data)
            finally:
                pinging.cancel()
            await socket.close()
            self.socket = None
            log.info(record("feishu_disconnected"))

    async def _ping(self, socket: aiohttp.ClientWebSocketResponse, every: int) -> None:
        while not socket.closed:
            await asyncio.sleep(max(1, every))
            await socket.send_bytes(Frame(service=self.service, method=CONTROL, headers=[("type", "ping")]).encode())

    async def _on_frame(self, data: bytes) -> None:
        try:
            frame = Frame.decode(data)
        except ValueError:
            log.warning(record("feishu_bad_frame", size=len(data)))
            return
        if frame.method != DATA or frame.header("type") != "event":
            return  # a control frame (pong), or a card's callback
        payload = self._whole(frame)
        if payload is None:
            return
        incoming = await self._incoming(_json(payload))
        if incoming is None or incoming.id in self.done:
            await self._answer(frame)
            return
        self.unanswered.setdefault(incoming.id, []).append(frame)
        await self.queue.put([incoming])

    def _whole(self, frame: Frame) -> bytes | None:
        """The event's payload, once every part of one sent in several frames came."""
        total, seq, key = int(frame.header("sum", "1")), int(frame.header("seq", "0")), frame.header("message_id")
        if total <= 1:
            return frame.payload
        if not 0 <= seq < total or total > MAX_PARTS:
            return None
        while len(self.parts) >= KEEP_PARTS and key not in self.parts:
            self.parts.pop(next(iter(self.parts)))  # the oldest payload left unfinished
        parts = self.parts.setdefault(key, [b""] * total)
        parts[seq] = frame.payload
        if not all(parts):
            return None
        return b"".join(self.parts.pop(key))

    async def _answer(self, frame: Frame) -> None:
        frame.payload = json.dumps({"code": 200}).encode()
        socket = self.socket
        if socket is not None and not socket.closed:
            try:
                await socket.send_bytes(frame.encode())
            except (ConnectionError, RuntimeError):
                pass  # not answered: the platform sends the event again, and the engine keeps the first

    async def acknowledge(self, items: list[Incoming]) -> None:
        for item in items:
            self.done[item.id] = None
            for frame in self.unanswered.pop(item.id, []):
                await self._answer(frame)
        while len(self.done) > KEEP_IDS:
            self.done.popitem(last=False)

    async def _incoming(self, event: dict[str, Any]) -> Incoming | None:
        """A person's message as an `Incoming`, or None when it is not for the bot."""
        if (event.get("header") or {}).get("event_type") != "im.message.receive_v1":
            return None
        body = event.get("event") or {}
        sender, message = body.get("sender") or {}, body.get("message") or {}
        user = str((sender.get("sender_id") or {}).get("open_id") or "")
        chat, kind = str(message.get("chat_id") or ""), str(message.get("message_type") or "")
        if sender.get("sender_type") != "user" or not user or not chat or not message.get("message_id"):
            return None
        mentions = [m for m in message.get("mentions") or [] if isinstance(m, dict)]
        p2p = message.get("chat_type") == "p2p"
        mentioned = any((m.get("id") or {}).get("open_id") == self.bot_id for m in mentions)
        policy = self.settings.group_policy
        if not p2p and (policy == "off" or not (policy == "all" or mentioned)):
            return None
        content = _json(message.get("content"))
        content = content if isinstance(content, dict) else {}
        files = _files(str(message["message_id"]), kind, content)
        raw = {"id": str(message["message_id"]), "chat": chat, "p2p": p2p, "user": user, "name": await self._name(user),
               "text": from_feishu(kind, content, mentions, self.bot_id) if kind in ("text", "post") else "",
               "files": [f.__dict__ for f in files]}
        return self.rebuild(raw)

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        """A private chat's place is its person's open id (as `home` gives it), a group's its chat id."""
        try:
            p2p, user = bool(raw.get("p2p")), str(raw["user"])
            place = keys.make(NAME, user if p2p else str(raw["chat"]))
            files = [FileIn(**f) for f in raw.get("files") or []]
            return Incoming(id=str(raw["id"]), place=place, user=user, name=str(raw.get("name") or user),
                            text=str(raw.get("text") or ""), raw=raw, private=p2p, files=files)
        except (KeyError, TypeError, ValueError):
            return None

    async def _name(self, user: str) -> str:
        """A person's name (the contact API; without its permission, their open id)."""
        if user not in self.names:
            found = await self._api().quietly("GET", f"/open-apis/contact/v3/users/{user}", False, wait=False,
                                              queries=[("user_id_type", "open_id")])
            self.names[user] = str((_data(found).get("user") or {}).get("name") or "") or user
        return self.names[user]

    # --- what goes out ------------------------------------------------------------------------------------------

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        """A card; Feishu takes any Markdown in it, so `chunk.plain` is not needed."""
        try:
            return await self._api().send(place, "interactive", card(chunk.body), persistent) or None
        except _failures() as e:
            log.warning(record("feishu_send_failed", error=_error(e)))
            return None

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        patched = await self._api().quietly("PATCH", f"/open-apis/im/v1/messages/{message_id}", persistent,
                                            body={"content": card(chunk.body)})
        return patched is not None

    async def delete(self, place: Place, message_id: str) -> None:
        await self._api().quietly("DELETE", f"/open-apis/im/v1/messages/{message_id}", False)

    async def typing(self, place: Place) -> None:
        """Bots have no typing indicator on Feishu: the card appearing at the first word is the sign."""

    async def download(self, file: FileIn) -> bytes | None:
        message, key, kind = file.ref.split("/", 2)
        data = await self._api().quietly("GET", f"/open-apis/im/v1/messages/{message}/resources/{key}", False,
                                         raw=True, queries=[("type", kind)])
        return data if isinstance(data, bytes) and len(data) <= MAX_DOWNLOAD else None

    def _api(self) -> API:
        assert self.api is not None, "connect first"
        return self.api

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _files(message: str, kind: str, content: dict[str, Any]) -> list[FileIn]:
    """A message's files: the image, file, audio or video it is, or the images and files inside a post."""
    if kind in FILES:
        key = str(content.get("image_key") if kind == "image" else content.get("file_key") or "")
        return [_file(message, FILES[kind], key, content.get("file_name"))] if key else []
    found = []
    for paragraph in content.get("content") or [] if kind == "post" else []:
        for element in paragraph if isinstance(paragraph, list) else []:
            if isinstance(element, dict) and element.get("image_key") and element.get("tag") == "img":
                found.append(_file(message, "photo", str(element["image_key"]), None))
            elif isinstance(element, dict) and element.get("file_key"):
                found.append(_file(message, "document", str(element["file_key"]), element.get("file_name")))
    return found


def _file(message: str, kind: str, key: str, name: Any) -> FileIn:
    name = str(name or "") or None
    if kind == "document" and name and (mimetypes.guess_type(name)[0] or "").startswith("image/"):
        kind = "photo"
    return FileIn(kind=kind, name=name, size=None, ref=f"{message}/{key}/{'image' if kind == 'photo' and not name else 'file'}")


def refused(settings: FeishuConfig, e: Refused) -> str:
    return (f"{settings.base} refused channels.feishu.appId and appSecret (HTTP {e.status}, code {e.code}); copy "
            "both from the app's Credentials & Basic Info page, check channels.feishu.host (feishu or lark), or run "
            "`nanoagent channels add feishu`.")


def _retry_after(headers: dict[str, str]) -> float:
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        try:
            return max(0.0, float(headers.get(name) or ""))
        except ValueError:
            continue
    return 1.0


def _data(found: Any) -> dict[str, Any]:
    data = found.get("data") if isinstance(found, dict) else None
    return data if isinstance(data, dict) else {}


def _json(text: Any) -> Any:
    try:
        found = json.loads(text) if isinstance(text, str | bytes) else None
    except ValueError:
        found = None
    return found if found is not None else {}


def _path(uri: str) -> str:
    return "/".join(uri.split("/")[:5])


def _error(e: BaseException) -> str:
    return f"http {e.status} code {e.code}" if isinstance(e, Refused) else type(e).__name__


def _failures() -> tuple[type[Exception], ...]:
    return (Refused, *_network_errors())


def _connect_errors() -> tuple[type[Exception], ...]:
    import aiohttp

    return (*_failures(), aiohttp.WSServerHandshakeError)


def _network_errors() -> tuple[type[Exception], ...]:
    import aiohttp

    return (TimeoutError, aiohttp.ClientError, OSError)


async def check_credentials(settings: FeishuConfig) -> str:
    """One call (`verify`): a tenant_access_token for the app id and secret; the app's id."""
    api = API(settings, Timing())
    try:
        await api.checked(bot=False)
    finally:
        await api.close()
    return settings.app_id


async def deliver(settings: FeishuConfig, place: Place, chunks: list[Chunk], files: Sequence[Path] = ()) -> None:
    """`chunks` as cards to `place` through the REST API alone, then each file as an image or a file message;
    DeliveryError when one did not arrive."""
    api = API(settings, Timing())
    try:
        for chunk in chunks:
            await api.send(place, "interactive", card(chunk.body))
        for path in files:
            await api.send(place, *await api.upload(path))
    except Refused as e:
        raise DeliveryError(f"Feishu refused the message to {place} (HTTP {e.status}, code {e.code}); check that the "
                            "bot is in that chat and the app may send messages (im:message:send_as_bot).") from None
    except _network_errors() as e:
        raise DeliveryError(f"Cannot reach {settings.base} ({type(e).__name__}); the message to {place} was not "
                            "sent.") from None
    finally:
        await api.close()
