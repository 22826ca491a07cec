"""The Signal channel's `Link`: signal-cli's JSON-RPC daemon over HTTP (`signal-cli daemon --http`), through httpx.

What arrives: `GET {apiBase}/api/v1/events`, a stream of server-sent events, one `receive` event per envelope
signal-cli got from Signal. Each event has an id, and signal-cli keeps its last 1,000 events: a client that comes
back with `Last-Event-ID` first gets those after it. That id is the acknowledgement: it is kept in the state file's
cursor only once the engine wrote the message to the inbox, so a restart asks for what came after the last message
on disk. signal-cli restarted in between knows no such id and sends all it kept; a message's id (`<sender>:<its
timestamp>`, Signal's own identity of a message) lets the engine keep the first of any that come twice.

Who is who: a sender is their Signal UUID when `allowFrom` or `owner` names that UUID, else their number when
signal-cli knows it, else their UUID; a private chat is `signal:<that id>`, a group `signal:group.<its id>` (the
base64 id with `-_` for `+/`). In a group the bot answers a mention of itself, a quote of its message, or everything
with `groupPolicy: "all"`. Messages the account sent itself (from the phone it is linked to), receipts, typing,
reactions and group changes are not messages for the agent.

What goes out: every call is a JSON-RPC request posted to `{apiBase}/api/v1/rpc`. A rate limit (signal-cli's error
-5, or a send result RATE_LIMIT_FAILURE) is waited out for its `retryAfterSeconds`, else the backoff; a daemon that
cannot be reached fails the call (tried again with backoff when persistent). Signal has no idempotency key for a
message, so a send whose answer timed out after it went out is sent once more at most.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import mimetypes
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing, record
from nanoagent.channels.calls import RateLimited, Unreachable, reason, retried
from nanoagent.channels.signal.format import split, styled
from nanoagent.channels.signal.settings import SignalConfig
from nanoagent.channels.state import state_file
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place, make

if TYPE_CHECKING:
    from pathlib import Path

    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.signal")

CURSOR = "last_event_id"
GROUP = "group."  # a group chat's prefix in its session key
RATE_LIMIT_ERROR = -5
MENTION = "\ufffc"  # where signal-cli's text holds a mention
FIRST_CATCH_UP = 600.0  # seconds of messages a first start takes from those signal-cli kept
MAX_RETRY_AFTER = 60.0  # a delivery with no gateway waits out a rate limit up to this long
ATTEMPTS = 3  # a delivery's tries of one message through network failures


class Refused(Exception):
    """signal-cli answered the call with an error (an unregistered number, a group the account is not in)."""


def normal(user: str) -> str:
    """A number or UUID as ids are compared: without spaces, a UUID in lower case."""
    return "".join(user.split()).lower()


def masked(account: str) -> str:
    """The account as health and the log show it: enough to tell which, not the whole number."""
    return f"{account[:3]}…{account[-4:]}" if len(account) > 8 else account


def chat_of(group_id: str) -> str:
    return GROUP + group_id.replace("+", "-").replace("/", "_")


def target(place: Place) -> dict[str, Any]:
    """The `send` parameters that name `place`: a group's id, or a person's number or UUID."""
    if place.chat.startswith(GROUP):
        return {"groupId": place.chat.removeprefix(GROUP).replace("-", "+").replace("_", "/")}
    return {"recipient": [place.chat]}


class Rpc:
    """JSON-RPC calls to signal-cli's daemon at `apiBase`, for the account the settings name."""

    def __init__(self, settings: SignalConfig, timeout: float):
        self.settings = settings
        self.client = httpx.AsyncClient(base_url=settings.api_base.rstrip("/"), timeout=timeout)
        self.ids = 0

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        """The call's result; RateLimited, Refused or Unreachable as signal-cli answered; httpx's errors when the
        daemon could not be reached or did not answer in time."""
        self.ids += 1
        request = {"jsonrpc": "2.0", "id": self.ids, "method": method,
                   "params": {**params, "account": self.settings.account}}
        response = await self.client.post("/api/v1/rpc", json=request,
                                          timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        if response.status_code >= 500:
            raise Unreachable(f"signal-cli answered HTTP {response.status_code}")
        if response.status_code != 200:
            raise Refused(f"signal-cli answered HTTP {response.status_code} to {method}")
        answer = response.json()
        error = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(error, dict):
            data = error.get("data") if isinstance(error.get("data"), dict) else {}
            failed = _results((data.get("response") or {}) if isinstance(data, dict) else {})
            if error.get("code") == RATE_LIMIT_ERROR or any(r.get("type") == "RATE_LIMIT_FAILURE" for r in failed):
                raise RateLimited(_retry_after(failed))
            raise Refused(str(error.get("message") or f"error {error.get('code')}")[:200])
        result = answer.get("result")
        _check_sent(result)
        return result

    async def close(self) -> None:
        await self.client.aclose()


def _results(result: Any) -> list[dict[str, Any]]:
    found = result.get("results") if isinstance(result, dict) else None
    return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []


def _retry_after(results: list[dict[str, Any]]) -> float | None:
    waits = [float(r["retryAfterSeconds"]) for r in results if isinstance(r.get("retryAfterSeconds"), int | float)]
    return max(waits) if waits else None


def _check_sent(result: Any) -> None:
    """A send that reached nobody raises as its first result says; one that reached anyone (a group's member) is sent."""
    results = _results(result)
    if not results or any(r.get("type") == "SUCCESS" for r in results):
        return
    kind = str(results[0].get("type"))
    if kind == "RATE_LIMIT_FAILURE":
        raise RateLimited(_retry_after(results))
    if kind == "NETWORK_FAILURE":
        raise Unreachable("signal-cli could not reach Signal's servers")
    raise Refused(f"Signal did not take the message: {kind}")


class SignalLink:
    def __init__(self, settings: SignalConfig, paths: Paths, timing: Timing):
        self.settings = settings
        self.state = state_file(paths, "signal")
        self.timing = timing
        self.rpc = Rpc(settings, timing.timeout)
        self.account = normal(settings.account)
        self.named = {normal(user) for user in [*settings.allow_from, *settings.owner]}
        self.fetched: str | None = None  # the event id that acknowledges the batch given last

    async def connect(self) -> str:
        """The daemon answers for the account (`listGroups` reads signal-cli's own store: no call to Signal)."""
        try:
            await self.api("listGroups", {}, persistent=True)
        except Refused as e:
            raise NanoagentError(f"signal-cli refused the account {self.settings.account}: {e}. Check "
                                 "channels.signal.account and that signal-cli is linked (signal-cli listAccounts).") \
                from None
        return masked(self.settings.account)

    async def close(self) -> None:
        await self.rpc.close()

    # --- receiving ------------------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        last = self.state.read().cursor.get(CURSOR) or None
        # with no cursor yet (a first start), every event kept is asked for, by an id no daemon gave, and of those only
        # the messages of the last minutes are taken, until the first message gives a cursor
        since = None if last else self.timing.now() - FIRST_CATCH_UP
        failures = 0
        while True:
            try:
                async for id, event in self.events(last or "none"):
                    failures = 0
                    last = id or last
                    item = self.incoming(event)
                    if item is not None and (since is None or self.fetched or _sent_at(event) >= since):
                        self.fetched = id
                        yield [item]
            except (httpx.HTTPError, Unreachable) as e:
                if failures == 0:
                    log.warning(record("signal_events_failed", error=type(e).__name__))
                self.timing.report(f"signal-cli unreachable at {self.settings.api_base}: {reason(e)}")
            await asyncio.sleep(self.timing.pause(failures))
            failures += 1

    async def events(self, last: str | None) -> AsyncIterator[tuple[str | None, dict[str, Any]]]:
        """The `receive` events of one connection to the event stream, after `last`: (its id, its JSON)."""
        headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last else {})}
        timeout = httpx.Timeout(self.timing.timeout, read=max(60.0, self.timing.timeout))  # keep-alives: every 15 s
        async with self.rpc.client.stream("GET", "/api/v1/events", params={"account": self.settings.account},
                                          headers=headers, timeout=timeout) as response:
            if response.status_code != 200:
                raise Unreachable(f"the event stream answered HTTP {response.status_code}")
            self.timing.report(None)
            id, kind, data = None, None, []
            async for line in response.aiter_lines():
                if line:
                    field, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if field == "id":
                        id = value
                    elif field == "event":
                        kind = value
                    elif field == "data":
                        data.append(value)
                    continue
                if data and kind in (None, "receive"):
                    try:
                        yield id, json.loads("\n".join(data))
                    except json.JSONDecodeError:
                        log.warning(record("signal_event_unreadable"))
                id, kind, data = None, None, []

    async def acknowledge(self, items: list[Incoming]) -> None:
        """On disk now: the next start asks for the events after this one."""
        done = self.fetched
        if done:
            await asyncio.to_thread(self.state.update, lambda s: s.cursor.__setitem__(CURSOR, done))

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        return self.incoming({k: v for k, v in raw.items() if k != "id"})

    def incoming(self, event: dict[str, Any]) -> Incoming | None:
        """The message an event holds, in the channel's words; None for anything else."""
        envelope = event.get("envelope")
        message = envelope.get("dataMessage") if isinstance(envelope, dict) else None
        if not isinstance(envelope, dict) or not isinstance(message, dict):
            return None
        uuid = normal(str(envelope.get("sourceUuid") or ""))
        number = normal(str(envelope.get("sourceNumber") or ""))
        if not (uuid or number) or self.account in (uuid, number):
            return None
        files = files_of(message)
        text, mentioned = self.without_mentions(str(message.get("message") or ""), message.get("mentions"))
        if not text and not files:
            return None
        user = uuid if uuid in self.named or not number else number
        group = (message.get("groupInfo") or {}).get("groupId") if isinstance(message.get("groupInfo"), dict) else None
        addressed = not group or self.settings.group_policy == "all" or (
            self.settings.group_policy == "mention" and (mentioned or self.quoted(message)))
        name = str(envelope.get("sourceName") or number or uuid)
        return Incoming(id=f"{uuid or number}:{message.get('timestamp') or envelope.get('timestamp')}",
                        place=make("signal", chat_of(str(group)) if group else user), user=user, name=name,
                        text=text, raw=event, private=not group, addressed=addressed, files=files)

    def is_me(self, *ids: Any) -> bool:
        return any(normal(str(id)) == self.account for id in ids if id)

    def without_mentions(self, text: str, mentions: Any) -> tuple[str, bool]:
        """The text with the bot's mentions taken out and others' shown by name; whether the bot was mentioned."""
        coded = text.encode("utf-16-le")
        mentioned = False
        found = [m for m in mentions if isinstance(m, dict)] if isinstance(mentions, list) else []
        for mention in sorted(found, key=lambda m: -int(m.get("start") or 0)):
            start, length = int(mention.get("start") or 0), int(mention.get("length") or 1)
            me = self.is_me(mention.get("number"))
            mentioned |= me
            shown = "" if me else "@" + str(mention.get("name") or mention.get("number") or mention.get("uuid"))
            coded = coded[:2 * start] + shown.encode("utf-16-le") + coded[2 * (start + length):]
        return re.sub(r"[ \t]{2,}", " ", coded.decode("utf-16-le", "replace").replace(MENTION, "")).strip(), mentioned

    def quoted(self, message: dict[str, Any]) -> bool:
        quote = message.get("quote")
        return isinstance(quote, dict) and self.is_me(quote.get("authorNumber"), quote.get("author"))

    async def download(self, file: FileIn) -> bytes | None:
        try:
            found = await self.api("getAttachment", {"id": file.ref})
            return base64.b64decode(found["data"]) if isinstance(found, dict) else None
        except (Refused, KeyError, TypeError, binascii.Error) as e:
            log.warning(record("signal_download_failed", error=type(e).__name__))
            return None

    # --- sending --------------------------------------------------------------------------------------

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        text, styles = styled(chunk.body)
        try:
            sent = await self.api("send", {**target(place), "message": text, "textStyle": styles}, persistent,
                                  resends=1, timeout=self.timing.send_timeout)
        except Refused as e:
            log.warning(record("signal_send_refused", error=str(e)[:120]))
            return None
        return str(sent.get("timestamp") or "") or "sent" if isinstance(sent, dict) else None

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        return False  # Signal cannot edit a message (the channel says `edits = False`: replies go whole)

    async def delete(self, place: Place, message_id: str) -> None:
        return None

    async def typing(self, place: Place) -> None:
        try:
            await self.api("sendTyping", target(place))
        except Refused:
            pass  # a typing indicator the chat can do without

    async def api(self, method: str, params: dict[str, Any], persistent: bool = False, resends: int | None = None,
                  timeout: float | None = None) -> Any:
        """One call, tried as `channels.calls.retried` tries it; Refused is raised to the caller."""
        return await retried(lambda: self.rpc.call(method, params, timeout), self.timing, log, "signal",
                             f"signal-cli unreachable at {self.settings.api_base}", persistent, resends, method=method)


def files_of(message: dict[str, Any]) -> list[FileIn]:
    """Images, voice notes (audio with no file name), audio, video and other files, fetched by their id."""
    found: list[FileIn] = []
    for item in message.get("attachments") or []:
        if not isinstance(item, dict) or not item.get("id"):
            continue
        media = str(item.get("contentType") or "") or None
        major = (media or "").partition("/")[0]
        name = item.get("filename") or None
        kind = {"image": "photo", "video": "video"}.get(major) or (
            ("audio" if name else "voice note") if major == "audio" else "document")
        found.append(FileIn(kind, name, item.get("size") if isinstance(item.get("size"), int) else None,
                            str(item["id"]), media))
    return found


def data_uri(name: str, data: bytes, media: str | None) -> str:
    """A file as the `attachments` of `send` take it without sharing a folder with signal-cli (RFC 2397, with the
    file name signal-cli reads)."""
    kind = media or mimetypes.guess_type(name)[0] or "application/octet-stream"
    safe = "".join("_" if c in ";,=" or c.isspace() else c for c in name)
    return f"data:{kind};filename={safe};base64,{base64.b64encode(data).decode()}"


def _sent_at(event: dict[str, Any]) -> float:
    """When the event's envelope was sent, in seconds since the epoch (0 when it says not)."""
    envelope = event.get("envelope")
    stamp = envelope.get("timestamp") if isinstance(envelope, dict) else None
    return stamp / 1000 if isinstance(stamp, int | float) else 0.0


async def deliver(settings: SignalConfig, place: Place, text: str, files: Sequence[Path]) -> None:
    """`text` then each file to `place` from a process with no gateway; DeliveryError when one did not arrive."""
    from nanoagent.attachments import outgoing

    rpc = Rpc(settings, Timing().timeout)
    try:
        for chunk in split(text) if text.strip() or not files else []:
            body, styles = styled(chunk.body)
            await _persist(rpc, {**target(place), "message": body, "textStyle": styles}, place)
        for path in files:
            name, data, image = outgoing(path)
            await _persist(rpc, {**target(place), "message": "", "attachments": [data_uri(name, data, image)]},
                           place, name)
    finally:
        await rpc.close()


async def _persist(rpc: Rpc, params: dict[str, Any], place: Place, name: str = "") -> None:
    what = f"the file {name}" if name else "the message"
    for attempt in range(ATTEMPTS):
        started = time.monotonic()
        try:
            await rpc.call("send", params, Timing().send_timeout)
            return
        except RateLimited as e:
            if (e.wait or 0) > MAX_RETRY_AFTER:
                raise DeliveryError(f"Signal kept asking to wait ({e.wait:g} s); {what} was not sent") from None
            await asyncio.sleep(e.wait if e.wait is not None else 1.0 + attempt)
        except Refused as e:
            raise DeliveryError(f"signal-cli refused {what} for {place.key}: {e}") from None
        except (httpx.HTTPError, Unreachable) as e:
            if attempt == ATTEMPTS - 1 or time.monotonic() - started > Timing().timeout:  # it may have arrived
                raise DeliveryError(f"signal-cli could not be reached at {rpc.settings.api_base} "
                                    f"({type(e).__name__}); {what} was not sent") from None
            await asyncio.sleep(1.0 + 2 * attempt)
    raise DeliveryError(f"Signal kept asking to wait; {what} was not sent")
