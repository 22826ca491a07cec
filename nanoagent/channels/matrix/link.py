"""The Matrix link: the client-server API through matrix-nio's `AsyncClient`. Imported only when the channel runs.

Signing in: with `accessToken`, that token (whoami says who it is); with a password, one login whose access token
and device id are kept in the channel's state file (private, 0600), so each start reuses the same device instead of
adding one to the account; a kept token the homeserver no longer takes is replaced by a new login on that device.

Receiving: `/sync` long-polls; its `next_batch` token is the cursor, kept in the state file once the engine wrote the
batch to its inbox (`acknowledge`), so a restart syncs from there and catches up on what came meanwhile. The very
first start (no cursor) takes only messages of the last `FIRST_WINDOW` seconds, not every room's history. A room the
bot joined on an invite marked `is_direct` (as clients mark a direct chat), or opened itself for a person, is that
person's direct chat (kept in the state file); any other room is a group under groupPolicy (the bot mentioned by
its id, as clients' pills put it in `m.mentions`). Invites are joined only when the inviter is in allowFrom or is the owner;
others are declined. The bot's own events, `m.notice`s (other bots' output), edits and state changes are skipped.
An encrypted room cannot be read (nanoagent runs matrix-nio without its e2e extra): the first encrypted message
there from someone let in gets one line saying so.

Sending: `m.notice` events (the Matrix convention for a bot's output, which other bots do not answer) with `body`
(the Markdown) and `formatted_body` (Matrix HTML); a thread's reply carries its `m.thread` relation; a streaming
reply is edited by `m.replace`. Each send has its own transaction id, reused when the call is made again: the
homeserver takes a transaction once, so a send that timed out can be repeated without a duplicate. matrix-nio waits
out a 429 (`M_LIMIT_EXCEEDED`) for its `retry_after_ms` itself; a network failure or a 5xx is retried here with
backoff when the call is persistent. Files go through the content repository (upload, then an `m.image` or `m.file`
event; downloads of `mxc://` URIs with the session's token).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing, record
from nanoagent.channels.matrix.ids import from_key, to_key
from nanoagent.channels.state import StateFile, state_file
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place, make

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nio import AsyncClient

    from nanoagent.channels.matrix.settings import MatrixConfig
    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.matrix")

NAME = "matrix"
CURSOR = "next_batch"
FIRST_WINDOW = 60.0  # seconds of messages the very first start takes
MAX_DOWNLOAD = 50_000_000  # bytes; a bigger file is not fetched
HTML = "org.matrix.custom.html"
MEDIA = {"m.image": "photo", "m.file": "document", "m.audio": "audio", "m.video": "video"}
ENCRYPTED = ("This room is end-to-end encrypted, and nanoagent cannot read encrypted rooms: write to it in a room "
             "without encryption (a new direct chat with encryption turned off).")


def make_client(settings: MatrixConfig, timing: Timing) -> AsyncClient:
    """A client whose calls fail at the first network error (ours retry, with backoff) and which keeps no store."""
    from nio import AsyncClient, AsyncClientConfig

    logging.getLogger("nio").setLevel(logging.ERROR)  # it logs each 429 and each retry; ours are JSON records
    config = AsyncClientConfig(max_timeouts=0, request_timeout=timing.timeout, store_sync_tokens=False,
                               encryption_enabled=False)
    return AsyncClient(settings.homeserver.rstrip("/"), settings.user_id or "", config=config)


class MatrixLink:
    def __init__(self, settings: MatrixConfig, paths: Paths, timing: Timing):
        self.settings = settings
        self.timing = timing
        self.state = state_file(paths, NAME)
        self.client: AsyncClient | None = None
        self.user_id = ""
        self.dms: dict[str, str] = {}  # a person's id -> their direct chat's room id
        self.fetched: str | None = None  # next_batch of the last sync given
        self.saved: str | None = None  # next_batch in the state file
        self.told: set[str] = set()  # encrypted rooms told, this run, that they cannot be read

    async def connect(self) -> str:
        self.client = await signed_in(self.settings, self.state, self.timing, persistent=True)
        self.user_id = self.client.user_id
        cursor = self.state.read().cursor
        self.dms = {key[3:]: room for key, room in cursor.items() if key.startswith("dm:")}
        self.told = {key[10:] for key in cursor if key.startswith("encrypted:")}
        return self.user_id

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def _client(self) -> AsyncClient:
        assert self.client is not None, "connect first"
        return self.client

    # --- receiving ------------------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        from nio import SyncResponse

        client = self._client()
        since = self.saved = self.state.read().cursor.get(CURSOR) or None
        oldest = self.timing.now() - FIRST_WINDOW if since is None else 0.0
        failures = 0
        while True:
            response = await call(self.timing, "sync", functools.partial(
                client.sync, timeout=self.timing.poll * 1000, since=since), True,
                deadline=self.timing.poll + self.timing.timeout)
            if not isinstance(response, SyncResponse):
                await self.refused_sync(response, failures)
                failures += 1
                continue
            failures = 0
            for room_id, invite in response.rooms.invite.items():
                await self.invited(room_id, invite.invite_state)
            items = []
            for room_id, joined in response.rooms.join.items():
                for event in joined.timeline.events:
                    source = getattr(event, "source", None) or {}
                    if float(source.get("origin_server_ts") or 0) / 1000 >= oldest:
                        items += await self.taken(room_id, source)
            since = self.fetched = response.next_batch
            yield items

    async def refused_sync(self, response: Any, failures: int) -> None:
        code = getattr(response, "status_code", None)
        if code in ("M_UNKNOWN_TOKEN", "M_MISSING_TOKEN"):
            await asyncio.to_thread(self.state.update, forget_session)
            raise NanoagentError("The Matrix homeserver no longer accepts the bot's session (signed out): restart "
                                 "the gateway to sign in again, or set a new channels.matrix.accessToken.")
        self.timing.report(f"the Matrix homeserver refused /sync ({code})")
        await asyncio.sleep(self.timing.pause(failures))

    async def taken(self, room_id: str, source: dict[str, Any]) -> list[Incoming]:
        """A timeline event as the messages it holds (none, or one)."""
        if source.get("sender") == self.user_id:
            return []
        if source.get("type") == "m.room.encrypted":
            await self.cannot_read(room_id, str(source.get("sender") or ""))
            return []
        room = self._client().rooms.get(room_id)
        sender = str(source.get("sender") or "")
        name = room.user_name(sender) if room is not None else None
        item = self.incoming({"room": room_id, "event": source, "private": self.dms.get(sender) == room_id,
                              "name": name or ""})
        return [item] if item is not None else []

    def incoming(self, raw: dict[str, Any]) -> Incoming | None:
        """A person's message in the channel's words; None for anything else (the bot's own, a notice, an edit)."""
        event, room_id = raw["event"], str(raw["room"])
        content = event.get("content") or {}
        sender = str(event.get("sender") or "")
        relation = content.get("m.relates_to") or {}
        msgtype = content.get("msgtype")
        if (event.get("type") != "m.room.message" or not sender or sender == self.user_id or msgtype == "m.notice"
                or relation.get("rel_type") == "m.replace"):
            return None
        thread = str(relation.get("event_id") or "") if relation.get("rel_type") == "m.thread" else ""
        private = bool(raw.get("private"))
        place = _place(to_key(sender.casefold()) if private else to_key(room_id), to_key(thread) if thread else "")
        if place is None:
            return None
        text, files = _text_and_files(content)
        mentioned = self.user_id in ((content.get("m.mentions") or {}).get("user_ids") or []) or (
            self.user_id.casefold() in text.casefold())
        policy = self.settings.group_policy
        addressed = private or policy == "all" or (policy == "mention" and mentioned)
        text = re.sub(rf"(?<![\w@]){re.escape(self.user_id)}:?", "", text, flags=re.IGNORECASE)
        return Incoming(id=str(event.get("event_id") or ""), place=place, user=sender,
                        name=str(raw.get("name") or sender), text=" ".join(text.split(" ")).strip(), raw=raw,
                        private=private, addressed=addressed, files=files)

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        return self.incoming(raw)

    async def acknowledge(self, items: list[Incoming]) -> None:
        """The batch is on disk: the next start syncs after it."""
        if self.fetched is None or self.fetched == self.saved:
            return
        done = self.saved = self.fetched
        await asyncio.to_thread(self.state.update, lambda s: s.cursor.__setitem__(CURSOR, done))

    async def invited(self, room_id: str, events: list[Any]) -> None:
        """Join a room an allowed person invited the bot to; decline anyone else's invite."""
        from nio import JoinResponse

        inviter, direct = "", False
        for event in events:  # nio's InviteMemberEvent (its `source` lost its content when parsed)
            if getattr(event, "state_key", None) == self.user_id and getattr(event, "membership", "") == "invite":
                inviter = str(getattr(event, "sender", "") or "")
                direct = (getattr(event, "content", None) or {}).get("is_direct") is True
        client = self._client()
        welcome = self.welcome(inviter)
        answer = await call(self.timing, "join" if welcome else "leave",
                            lambda: client.join(room_id) if welcome else client.room_leave(room_id), False)
        log.info(record("matrix_invite_" + ("accepted" if welcome else "declined"), direct=direct))
        if welcome and direct and isinstance(answer, JoinResponse):
            await self.remember_dm(inviter, room_id)

    def welcome(self, user: str) -> bool:
        people = [*self.settings.allow_from, *self.settings.owner, *self.state.read().allowed]
        return bool(user) and user.casefold() in {p.strip().casefold() for p in people}

    async def cannot_read(self, room_id: str, sender: str) -> None:
        if room_id in self.told or not self.welcome(sender):
            return
        self.told.add(room_id)
        log.warning(record("matrix_encrypted_room"))
        await self.put(room_id, {"msgtype": "m.notice", "body": ENCRYPTED}, persistent=False)
        await asyncio.to_thread(self.state.update, lambda s: s.cursor.__setitem__(f"encrypted:{room_id}", "told"))

    async def remember_dm(self, user: str, room_id: str) -> None:
        self.dms[user] = room_id
        await asyncio.to_thread(self.state.update, lambda s: s.cursor.__setitem__(f"dm:{user}", room_id))

    async def download(self, file: FileIn) -> bytes | None:
        from nio import DownloadResponse

        if not file.ref.startswith("mxc://") or (file.size or 0) > MAX_DOWNLOAD:
            return None
        client = self._client()
        found = await call(self.timing, "download", lambda: client.download(mxc=file.ref), False, deadline=120.0)
        if not isinstance(found, DownloadResponse) or not isinstance(found.body, bytes):
            log.warning(record("matrix_download_failed", error=getattr(found, "status_code", None)))
            return None
        return found.body if len(found.body) <= MAX_DOWNLOAD else None

    # --- sending --------------------------------------------------------------------------------------

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        room = await self.room_of(place, persistent)
        if room is None:
            return None
        return await self.put(room, {**_shown(chunk), **_thread(place)}, persistent)

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        room = await self.room_of(place, persistent)
        if room is None:
            return False
        new = _shown(chunk)
        content = {**new, "body": "* " + new["body"], "formatted_body": "* " + new["formatted_body"],
                   "m.new_content": new, "m.relates_to": {"rel_type": "m.replace", "event_id": message_id}}
        return await self.put(room, content, persistent) is not None

    async def delete(self, place: Place, message_id: str) -> None:
        room = await self.room_of(place, False)
        if room is not None:
            client = self._client()
            await call(self.timing, "redact", lambda: client.room_redact(room, message_id), False)

    async def typing(self, place: Place) -> None:
        room = self.dms.get(from_key(place.chat, "!")) if "@" in place.chat else from_key(place.chat, "!")
        if room is not None:
            client = self._client()
            wait = int(self.timing.typing * 1000) + 2000
            await call(self.timing, "typing", lambda: client.room_typing(room, True, timeout=wait), False)

    async def put(self, room: str, content: dict[str, Any], persistent: bool) -> str | None:
        """Send one `m.room.message`; its event id, or None when it was refused or could not be sent. The call made
        again keeps its transaction id, so the homeserver takes it at most once."""
        from nio import RoomSendResponse

        client, txn = self._client(), uuid.uuid4().hex
        sent = await call(self.timing, "send", lambda: client.room_send(room, "m.room.message", content, tx_id=txn),
                          persistent, deadline=self.timing.send_timeout)
        if isinstance(sent, RoomSendResponse):
            return str(sent.event_id)
        if sent is not None:
            log.warning(record("matrix_send_refused", error=getattr(sent, "status_code", None)))
        return None

    async def room_of(self, place: Place, persistent: bool) -> str | None:
        """The room a place is in: a room's id, or a person's direct chat (opened, and the person invited, when
        there is none yet)."""
        from nio import RoomCreateResponse, RoomPreset

        if "@" not in place.chat:
            return from_key(place.chat, "!")
        user = from_key(place.chat, "!")
        if user in self.dms:
            return self.dms[user]
        client = self._client()
        made = await call(self.timing, "createRoom", lambda: client.room_create(
            is_direct=True, invite=[user], preset=RoomPreset.trusted_private_chat), persistent)
        if not isinstance(made, RoomCreateResponse):
            log.warning(record("matrix_dm_refused", error=getattr(made, "status_code", None)))
            return None
        await self.remember_dm(user, made.room_id)
        return str(made.room_id)

    async def send_file(self, place: Place, path: Path) -> None:
        """One file into the place: uploaded to the content repository, then an `m.image` (its bytes an image's)
        or an `m.file` event pointing at it; DeliveryError when either is refused."""
        import io
        import mimetypes

        from nio import UploadResponse

        from nanoagent.attachments import outgoing

        name, data, image = outgoing(path)
        kind = image or mimetypes.guess_type(name)[0] or "application/octet-stream"
        client = self._client()
        uploaded = await call(self.timing, "upload", lambda: client.upload(
            io.BytesIO(data), content_type=kind, filename=name, filesize=len(data)), False, deadline=120.0)
        response = uploaded[0] if isinstance(uploaded, tuple) else uploaded
        room = await self.room_of(place, False)
        if not isinstance(response, UploadResponse) or room is None:
            raise DeliveryError(f"The Matrix homeserver did not take {name} for {place}; it was not sent.")
        content = {"msgtype": "m.image" if image else "m.file", "body": name, "filename": name,
                   "url": response.content_uri, "info": {"mimetype": kind, "size": len(data)}, **_thread(place)}
        if await self.put(room, content, False) is None:
            raise DeliveryError(f"The Matrix homeserver refused {name} for {place}; it was not sent.")


async def call(timing: Timing, what: str, make_call: Callable[[], Awaitable[Any]], persistent: bool,
               deadline: float | None = None) -> Any:
    """One call through matrix-nio, within `deadline` (`Timing.timeout`): its response (an error response for a
    refusal), or None when the network failed or the homeserver answered 5xx and the call is not `persistent`;
    when it is, such a call is made again after the backoff's pause until it goes through."""
    import aiohttp

    failures = 0
    while True:
        try:
            async with asyncio.timeout(deadline or timing.timeout):
                response = await make_call()
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            problem = f"the Matrix homeserver is unreachable ({type(e).__name__})"
        else:
            answered = response[0] if isinstance(response, tuple) else response
            transport = getattr(answered, "transport_response", None)
            status = getattr(transport, "status", 200) or 200
            if status < 500:
                timing.report(None)
                return response
            problem = f"the Matrix homeserver answered HTTP {status}"
        timing.report(problem)
        if failures == 0:
            log.warning(record("matrix_call_failed", call=what, problem=problem))
        if not persistent:
            return None
        await asyncio.sleep(timing.pause(failures))
        failures += 1


async def signed_in(settings: MatrixConfig, state: StateFile, timing: Timing, persistent: bool) -> AsyncClient:
    """A client signed in as the bot: by `accessToken`, else by the session kept in the state file, else by a new
    password login on the kept device (the session kept for the next start). NanoagentError when refused."""
    from nio import LoginResponse

    client = make_client(settings, timing)
    try:
        if settings.access_token:
            if not await _whoami(client, settings.access_token, timing, persistent):
                raise NanoagentError("The Matrix homeserver refused channels.matrix.accessToken (MATRIX_ACCESS_TOKEN):"
                                     " make a new one (Element: Settings, Help & About, Access Token).")
            return client
        kept = state.read().cursor
        if kept.get("session.user") == settings.user_id and kept.get("session.token"):
            if await _whoami(client, kept["session.token"], timing, persistent):
                return client
            client.device_id = kept.get("session.device") or ""  # the same device, signed in again
        password = settings.password or ""
        answer = await call(timing, "login", lambda: client.login(password, device_name=settings.device_name),
                            persistent)
        if not isinstance(answer, LoginResponse):
            raise NanoagentError(_unreachable(settings) if answer is None else
                                 f"The Matrix homeserver refused the password of {settings.user_id} "
                                 f"({getattr(answer, 'status_code', 'refused')}): check channels.matrix.password "
                                 "(MATRIX_PASSWORD) and channels.matrix.userId.")
        session = {"session.user": settings.user_id or "", "session.device": answer.device_id,
                   "session.token": answer.access_token}
        await asyncio.to_thread(state.update, lambda s: s.cursor.update(session))
        return client
    except BaseException:
        await client.close()
        raise


async def _whoami(client: AsyncClient, token: str, timing: Timing, persistent: bool) -> bool:
    """Sign the client in with `token`: True when the homeserver knows it (the client then knows who it is)."""
    from nio import WhoamiResponse

    client.access_token = token
    answer = await call(timing, "whoami", client.whoami, persistent)
    if answer is None:
        raise NanoagentError(f"Cannot reach the Matrix homeserver at {client.homeserver}: check the network and "
                             "channels.matrix.homeserver.")
    if not isinstance(answer, WhoamiResponse):
        return False
    client.user_id, client.device_id = answer.user_id, answer.device_id or client.device_id
    return True


def forget_session(state: Any) -> None:
    state.cursor.pop("session.token", None)


def _unreachable(settings: MatrixConfig) -> str:
    return (f"Cannot reach the Matrix homeserver at {settings.homeserver}: check the network and "
            "channels.matrix.homeserver.")


def _place(chat: str, thread: str) -> Place | None:
    """The place of a chat and thread; without the thread when its id cannot be part of a key; None when the chat's
    cannot."""
    for parts in ((chat, thread), (chat, "")):
        try:
            return make(NAME, *parts)
        except ValueError:
            continue
    return None


def _text_and_files(content: dict[str, Any]) -> tuple[str, list[FileIn]]:
    """A message's text (a media message's caption: its body when a `filename` differs from it) and files."""
    body = str(content.get("body") or "")
    msgtype = str(content.get("msgtype") or "")
    url = content.get("url")
    if msgtype not in MEDIA or not isinstance(url, str):
        if (content.get("m.relates_to") or {}).get("m.in_reply_to"):  # a reply's fallback quote, if a client sent one
            body = re.sub(r"\A(?:> .*\n)+\n", "", body)
        return body, []
    info = content.get("info") or {}
    filename = content.get("filename")
    caption = body if isinstance(filename, str) and filename != body else ""
    kind = "voice note" if "org.matrix.msc3245.voice" in content else MEDIA[msgtype]
    size = info.get("size")
    return caption, [FileIn(kind, str(filename or body) or None, size if isinstance(size, int) else None, url,
                            str(info.get("mimetype") or "") or None)]


def _shown(chunk: Chunk) -> dict[str, Any]:
    return {"msgtype": "m.notice", "body": chunk.plain, "format": HTML, "formatted_body": chunk.body}


def _thread(place: Place) -> dict[str, Any]:
    if not place.thread:
        return {}
    root = from_key(place.thread, "$")
    return {"m.relates_to": {"rel_type": "m.thread", "event_id": root, "is_falling_back": True,
                             "m.in_reply_to": {"event_id": root}}}


async def verify(settings: MatrixConfig) -> str:
    """The bot's id, checked with one call: whoami with the access token; with a password, a login whose new
    device is signed out again at once."""
    from nio import LoginResponse

    client = make_client(settings, Timing())
    try:
        if settings.access_token:
            if not await _whoami(client, settings.access_token, Timing(), persistent=False):
                raise NanoagentError("The Matrix homeserver refused channels.matrix.accessToken: make a new one.")
            return client.user_id
        password = settings.password or ""
        answer = await call(Timing(), "login", lambda: client.login(password, device_name=settings.device_name),
                            False)
        if not isinstance(answer, LoginResponse):
            raise NanoagentError(_unreachable(settings) if answer is None else
                                 f"The Matrix homeserver refused the password of {settings.user_id}: check "
                                 "channels.matrix.password and channels.matrix.userId.")
        await call(Timing(), "logout", client.logout, False)
        return str(answer.user_id)
    finally:
        await client.close()


async def deliver(settings: MatrixConfig, paths: Paths, place: Place, chunks: list[Chunk],
                  files: Sequence[Path] = ()) -> None:
    """`chunks` sent to `place`, then `files`, with the gateway's kept session; DeliveryError when one did not
    arrive."""
    link = MatrixLink(settings, paths, Timing())
    try:
        link.client = await signed_in(settings, link.state, link.timing, persistent=False)
        link.user_id = link.client.user_id
        link.dms = {key[3:]: room for key, room in link.state.read().cursor.items() if key.startswith("dm:")}
        for chunk in chunks:
            if await link.send(place, chunk, persistent=False) is None:
                raise DeliveryError(f"The Matrix homeserver did not take the message to {place}: check that the bot "
                                    "is in that room, and channels.matrix.homeserver.")
        for path in files:
            await link.send_file(place, path)
    except DeliveryError:
        raise
    except NanoagentError as e:
        raise DeliveryError(str(e)) from None
    finally:
        await link.close()
