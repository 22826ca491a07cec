"""The Mattermost link: the v4 REST API out and its websocket in, on aiohttp (a dependency of the gateway already).
Imported only when the channel runs.

Why no client library: `mattermostdriver` was last released in 2022 (requests and websockets, no asyncio REST);
`mattermostautodriver` is maintained, but its websocket loop catches every error and reconnects forever with no way to
tell the engine it fails, and its REST client retries 429s and 5xx under its own policy. The channel uses ten
endpoints; on aiohttp each call's deadline, rate limit, resend rule and health report are ours.

What arrives: the websocket's `posted` events. A DM is the person's own place, `mattermost:<user id>` (a thread in
it `mattermost:<user id>:<root id>`), as `home` gives it, so a target reaches them before they wrote (the DM
channel is found by POST /channels/direct). In channels (public, private, group messages) the bot answers posts
mentioning it (`@name`), or every post with `groupPolicy: "all"`, or none with `"off"`; a reply in a thread the bot
already serves needs no mention. A reply goes into the post's thread: each thread is a session
`mattermost:<channel id>:<root id>`. The bot's own posts, other bots' and webhooks', and system posts are ignored;
files come as `FileIn`s fetched from GET /files/{id}.

Exactly once: the websocket has no acknowledgement, so the last post handled in each channel is kept as a cursor in
the channel's state file (a channel's first post sets one just before it, before it is queued); after a start or a
reconnect the link reads each known channel's posts since its cursor (GET /channels/{id}/posts?since=), bounded
to the last hour, and each other channel of the bot's with a post since the websocket was last heard (its teams'
channels' `last_post_at`; at a start, `START_GRACE` seconds before it, for a post racing the websocket's opening).
A post may come twice (an event, the catch-up): its id is the post's id, and the engine keeps the first. What is
written in a channel the bot never heard from while nothing listens is not read back: a first start does not answer
old posts.

Sends: each post carries a `pending_post_id`, which the server uses to answer a repeat with the first post (for
30 s); a send that timed out is made once more at most, with the same id. A 429 is waited out for its Retry-After.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from nanoagent import keys
from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing, batches, record
from nanoagent.channels.mattermost.format import from_mattermost
from nanoagent.channels.state import state_file
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import aiohttp

    from nanoagent.channels.mattermost.settings import MattermostConfig
    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.mattermost")

NAME = "mattermost"
CONNECT_TIMEOUT = 30.0  # seconds for the websocket to open
RESENDS = 1  # a post that timed out is made once more at most (the server dedupes it by pending_post_id for 30 s)
CATCH_UP = 3600.0  # seconds of posts read after a start or a reconnect
KEEP_CURSORS = 7 * 86_400.0  # a channel or thread quiet for longer is forgotten (no catch-up there)
MAX_PLACES = 50  # channels read at most in one catch-up, the most recent first
MAX_DOWNLOAD = 50_000_000  # bytes; a bigger file is not fetched
START_GRACE = 10.0  # seconds before a start whose posts in channels with no cursor are read
KEEP_IDS = 2000  # ids of posts acknowledged, remembered to pass over a second copy at once
FILES_PER_POST = 5
DEFAULT_TIMING = Timing()


class Refused(Exception):
    """The server answered a call with an error (4xx, or a 5xx given up on): its status and error id."""

    def __init__(self, status: int, error: str):
        super().__init__(f"HTTP {status} {error}")
        self.status = status
        self.error = error


class MattermostLink:
    def __init__(self, settings: MattermostConfig, paths: Paths, timing: Timing = DEFAULT_TIMING,
                 connect_timeout: float = CONNECT_TIMEOUT):
        self.settings = settings
        self.timing = timing
        self.connect_timeout = connect_timeout
        self.ping_interval = min(10.0, timing.backoff[-1])  # the websocket's ping
        self.state = state_file(paths, NAME)
        self.queue: asyncio.Queue[list[Incoming]] = asyncio.Queue()
        self.done: OrderedDict[str, None] = OrderedDict()  # post ids acknowledged
        self.cursor: dict[str, str] = {}  # "<channel>" or "<channel>:<root>" -> create_at (ms) of the last handled
        self.names: dict[str, str] = {}
        self.dms: dict[str, str] = {}  # a person's id -> the DM channel's id
        self.kinds: dict[str, str] = {}  # a channel's id -> its type: D (a DM), G, O, P
        self.hellos = 0
        self.heard = 0  # ms: posts made before it were heard on the websocket (or came before this run)
        self.bot_id = ""
        self.bot_name = ""
        self.tasks: set[asyncio.Task[None]] = set()
        self.api: API | None = None

    # --- connecting -------------------------------------------------------------------------------------------

    async def connect(self) -> str:
        self.api = api = API(self.settings, self.timing)
        try:
            me = await api.checked("GET", "users/me")
            self.bot_id, self.bot_name = str(me.get("id") or ""), str(me.get("username") or "")
            self.cursor = (await asyncio.to_thread(self.state.read)).cursor.copy()
            self.heard = int((self.timing.now() - START_GRACE) * 1000)
            try:
                socket = await asyncio.wait_for(api.websocket(self.ping_interval), self.connect_timeout)
            except _network_errors() as e:
                raise NanoagentError(f"Mattermost's websocket at {self.settings.url} did not open "
                                     f"({type(e).__name__}); check channels.mattermost.url and that a proxy in front "
                                     "of the server passes websockets.") from None
        except BaseException:
            await api.close()
            self.api = None
            raise
        self._spawn(self._listen(socket))
        return f"@{self.bot_name}"

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.api is not None:
            await self.api.close()

    # --- what arrives -------------------------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        async for batch in batches(self.queue, await self._catch_up()):
            yield batch

    async def _listen(self, socket: aiohttp.ClientWebSocketResponse | None) -> None:
        """Events in the order they come; a closed websocket opened again, with backoff while it will not open."""
        import aiohttp

        failures = 0
        while True:
            if socket is None:
                try:
                    socket = await asyncio.wait_for(self._api().websocket(self.ping_interval), self.connect_timeout)
                except _network_errors() as e:
                    self.timing.report(f"Mattermost's websocket unreachable: {type(e).__name__}")
                    await asyncio.sleep(self.timing.pause(failures))
                    failures += 1
                    continue
            failures = 0
            async for message in socket:
                if message.type == aiohttp.WSMsgType.TEXT:
                    await self._on_event(_json(message.data))
            await socket.close()
            socket = None
            self.heard = int(self.timing.now() * 1000)
            log.info(record("mattermost_disconnected"))

    async def _on_event(self, event: dict[str, Any]) -> None:
        kind, data = event.get("event"), event.get("data") or {}
        if kind == "hello":
            self.hellos += 1
            self.timing.report(None)
            log.info(record("mattermost_connected", reconnect=self.hellos > 1))
            if self.hellos > 1:  # posts made while the websocket was away: read them since each cursor
                self._spawn(self._queue_catch_up())
        elif kind == "posted" and isinstance(data, dict):
            post = _json(data.get("post"))
            channel, ctype = str(post.get("channel_id") or ""), str(data.get("channel_type") or "")
            if channel and ctype:
                self.kinds[channel] = ctype
            mentions = _json(data.get("mentions"), [])
            incoming = await self._incoming(post, mentioned=isinstance(mentions, list) and self.bot_id in mentions)
            if incoming is not None and incoming.id not in self.done:
                await self._start_cursor(incoming)
                await self.queue.put([incoming])

    async def _incoming(self, post: dict[str, Any], mentioned: bool = False) -> Incoming | None:
        """A person's post as an `Incoming`, or None when it is not for the bot."""
        user, channel, text = str(post.get("user_id") or ""), str(post.get("channel_id") or ""), post.get("message")
        props = _dict(post.get("props"))
        if (not user or not channel or user == self.bot_id or post.get("type") or post.get("delete_at")
                or props.get("from_bot") == "true" or props.get("from_webhook") == "true" or not post.get("id")):
            return None
        text = str(text or "")
        im = await self._kind(channel) == "D"
        root = str(post.get("root_id") or "")
        if not im:
            known = root and f"{channel}:{root}" in self.cursor
            mentioned = mentioned or (bool(self.bot_name) and f"@{self.bot_name}".lower() in text.lower())
            policy = self.settings.group_policy
            if policy == "off" or not (policy == "all" or mentioned or known):
                return None
            root = root or str(post["id"])  # the answer goes into the post's thread
        infos = _dict(post.get("metadata")).get("files") or [{"id": f} for f in post.get("file_ids") or []]
        files = [_file(f) for f in infos if isinstance(f, dict) and f.get("id")]
        raw = {"id": str(post["id"]), "channel": channel, "at": str(post.get("create_at") or 0), "thread": root,
               "user": user, "name": await self._name(user), "text": from_mattermost(text, self.bot_name), "im": im,
               "files": [f.__dict__ for f in files]}
        return self.rebuild(raw)

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        """A DM's place is its person's id (as `home` gives it); the DM's own channel id is kept for replies."""
        try:
            im, user, channel = bool(raw.get("im")), str(raw["user"]), str(raw["channel"])
            place = keys.make(NAME, user if im else channel, raw.get("thread") or None)
            if im:
                self.dms[user] = channel
            files = [FileIn(**f) for f in raw.get("files") or []]
            return Incoming(id=str(raw["id"]), place=place, user=user, name=str(raw.get("name") or ""),
                            text=str(raw.get("text") or ""), raw=raw, private=im, files=files)
        except (KeyError, TypeError, ValueError):
            return None

    async def _kind(self, channel: str) -> str:
        if channel not in self.kinds:
            try:
                found = await self._api().call("GET", f"channels/{channel}", persistent=False)
                self.kinds[channel] = str(found.get("type") or "O")
            except _failures():
                return "O"
        return self.kinds[channel]

    async def _name(self, user: str) -> str:
        if user not in self.names:
            try:
                found = await self._api().call("GET", f"users/{user}", persistent=False, wait=False)
            except _failures():
                return user
            full = f"{found.get('first_name') or ''} {found.get('last_name') or ''}".strip()
            self.names[user] = str(found.get("nickname") or full or found.get("username") or user)
        return self.names[user]

    # --- the cursor -----------------------------------------------------------------------------------------------

    async def _start_cursor(self, item: Incoming) -> None:
        """A channel's first post: a cursor just before it, on disk before it is queued, so a crash before the engine
        stores it still finds it in the catch-up."""
        channel = str(item.raw.get("channel"))
        if channel not in self.cursor:
            before = {channel: str(int(item.raw.get("at") or 0) - 1)}
            self.cursor.update(before)
            await asyncio.to_thread(self.state.update, lambda state: _move_cursor(state.cursor, before, time.time()))

    async def acknowledge(self, items: list[Incoming]) -> None:
        moved: dict[str, str] = {}
        for item in items:
            self.done[item.id] = None
            at = str(item.raw.get("at") or "0")
            for place in _places(item):
                if int(at) > int(moved.get(place) or self.cursor.get(place) or 0):
                    moved[place] = at
        while len(self.done) > KEEP_IDS:
            self.done.popitem(last=False)
        if moved:
            self.cursor.update(moved)
            await asyncio.to_thread(self.state.update, lambda state: _move_cursor(state.cursor, moved, time.time()))

    # --- catching up ------------------------------------------------------------------------------------------------

    async def _queue_catch_up(self) -> None:
        caught = await self._catch_up()
        if caught:
            await self.queue.put(caught)

    async def _catch_up(self) -> list[Incoming]:
        """Posts made while nothing listened: each known channel's since its cursor, within the last `CATCH_UP`
        seconds; oldest first."""
        since = int((self.timing.now() - CATCH_UP) * 1000)
        recent = sorted(((place, int(at)) for place, at in self.cursor.items() if ":" not in place),
                        key=lambda item: -item[1])[:MAX_PLACES]
        found: dict[str, Incoming] = {}
        for channel, at in [*recent, *await self._active(self.heard)]:
            try:
                page = await self._api().call("GET", f"channels/{channel}/posts", persistent=False,
                                              params={"since": str(max(at, since))})
            except _failures() as e:
                log.warning(record("mattermost_catch_up_failed", error=_error(e)))
                continue
            posts = page.get("posts") if isinstance(page.get("posts"), dict) else {}
            for post in posts.values():
                if int(post.get("create_at") or 0) <= max(at, since) or post.get("id") in self.done:
                    continue
                incoming = await self._incoming(post)
                if incoming is not None:
                    found[incoming.id] = incoming
        caught = sorted(found.values(), key=lambda item: int(item.raw.get("at") or 0))
        if caught:
            log.info(record("mattermost_caught_up", messages=len(caught)))
        return caught

    async def _active(self, heard: int) -> list[tuple[str, int]]:
        """The bot's channels with no cursor and a post since `heard`, with it: (channel, heard)."""
        try:
            teams = await self._api().call("GET", "users/me/teams", persistent=False)
            found: dict[str, int] = {}
            for team in teams if isinstance(teams, list) else []:
                channels = await self._api().call("GET", f"users/me/teams/{team.get('id')}/channels", persistent=False)
                for channel in channels if isinstance(channels, list) else []:
                    self.kinds[str(channel.get("id"))] = str(channel.get("type") or "O")
                    if int(channel.get("last_post_at") or 0) > heard and str(channel.get("id")) not in self.cursor:
                        found[str(channel["id"])] = heard
        except _failures() as e:
            log.warning(record("mattermost_catch_up_failed", error=_error(e)))
            return []
        return sorted(found.items(), key=lambda item: item[0])[:MAX_PLACES]

    # --- what goes out ------------------------------------------------------------------------------------------

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        """Mattermost refuses no Markdown, so `chunk.plain` is not needed here."""
        channel = await self._channel(place, persistent)
        if channel is None:
            return None
        post = await self._api().quietly("POST", "posts", persistent, resends=RESENDS,
                                         json=self._api().post(channel, place.thread, chunk.body))
        return str(post["id"]) if post and post.get("id") else None

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        patched = await self._api().quietly("PUT", f"posts/{message_id}/patch", persistent,
                                            json={"message": chunk.body})
        return patched is not None

    async def delete(self, place: Place, message_id: str) -> None:
        await self._api().quietly("DELETE", f"posts/{message_id}", False)

    async def typing(self, place: Place) -> None:
        channel = await self._channel(place, False)
        if channel is not None:
            await self._api().quietly("POST", "users/me/typing", False, wait=False,
                                      json={"channel_id": channel, "parent_id": place.thread or ""})

    async def _channel(self, place: Place, persistent: bool) -> str | None:
        try:
            return await self._api().channel(place.chat, self.dms, self.kinds, persistent)
        except _failures() as e:
            log.warning(record("mattermost_call_failed", path="channels/direct", error=_error(e)))
            return None

    async def download(self, file: FileIn) -> bytes | None:
        if file.size is not None and file.size > MAX_DOWNLOAD:
            return None
        try:
            return await self._api().call("GET", f"files/{file.ref}", persistent=False, raw=True)
        except _failures() as e:
            log.warning(record("mattermost_download_failed", error=_error(e)))
            return None

    def _api(self) -> API:
        assert self.api is not None, "connect first"
        return self.api

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class API:
    """The v4 REST API at `<url>/api/v4/` with the bot's token (`Authorization: Bearer`), on one aiohttp session."""

    def __init__(self, settings: MattermostConfig, timing: Timing):
        import aiohttp

        self.settings = settings
        self.timing = timing
        self.base = settings.url.rstrip("/") + "/api/v4/"
        self.headers = {"Authorization": f"Bearer {(settings.token or '').strip()}"}
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self.me = ""

    async def close(self) -> None:
        await self.session.close()

    async def websocket(self, heartbeat: float) -> aiohttp.ClientWebSocketResponse:
        url = "ws" + self.base.removeprefix("http") + "websocket"
        return await self.session.ws_connect(url, headers=self.headers, heartbeat=heartbeat, autoping=True)

    def post(self, channel: str, root: str | None, message: str, files: Sequence[str] = ()) -> dict[str, Any]:
        """A new post's body; its `pending_post_id` makes a repeat of the same body answer with the first post."""
        pending = f"{self.me}:{time.time_ns() // 1000}"  # as Mattermost's own apps make it: <user id>:<time>
        return {"channel_id": channel, "root_id": root or "", "message": message, "file_ids": list(files),
                "pending_post_id": pending}

    async def channel(self, chat: str, dms: dict[str, str], kinds: dict[str, str], persistent: bool) -> str:
        """`chat` itself when it is a channel; for a person's id their DM channel (POST /channels/direct)."""
        if chat in dms:
            return dms[chat]
        if chat in kinds:
            return chat
        try:
            if not self.me:
                self.me = str((await self.call("GET", "users/me", persistent)).get("id") or "")
            opened = await self.call("POST", "channels/direct", persistent, json=[self.me, chat])
        except Refused as e:
            if e.status not in (400, 403, 404):
                raise
            kinds[chat] = "O"  # not a person: a channel's id
            return chat
        dms[chat] = str(opened.get("id") or chat)
        kinds[dms[chat]] = "D"
        return dms[chat]

    async def checked(self, method: str, path: str) -> dict[str, Any]:
        """A call made while connecting: a token the server refuses becomes one line naming the setting."""
        try:
            found = await self.call(method, path, persistent=False)
        except Refused as e:
            if e.status in (401, 403):
                raise NanoagentError("Mattermost refused channels.mattermost.token (HTTP "
                                     f"{e.status}): make a new token for the bot account under Integrations, Bot "
                                     "Accounts, or run `nanoagent channels add mattermost`.") from None
            raise NanoagentError(f"Mattermost answered {path} with HTTP {e.status} ({e.error}); check "
                                 "channels.mattermost.url.") from None
        except _network_errors() as e:
            raise NanoagentError(f"Cannot reach Mattermost at {self.settings.url} ({type(e).__name__}); check the "
                                 "network and channels.mattermost.url.") from None
        self.me = str(found.get("id") or "")
        return found

    async def quietly(self, method: str, path: str, persistent: bool, wait: bool = True, resends: int | None = None,
                      **kwargs: Any) -> Any:
        """A call whose failure is an answer (None), logged without its text."""
        try:
            return await self.call(method, path, persistent, wait=wait, resends=resends, **kwargs)
        except _failures() as e:
            log.warning(record("mattermost_call_failed", method=method, path=path.split("/")[0], error=_error(e)))
            return None

    async def call(self, method: str, path: str, persistent: bool, wait: bool = True, resends: int | None = None,
                   raw: bool = False, **kwargs: Any) -> Any:
        """One call within `Timing.timeout`: its JSON (or bytes, `raw`). A 429 is waited out for its Retry-After
        (unless `wait` is False) and the call made again; with `persistent`, so is a network failure or a 5xx, with
        backoff. With `resends` (a post) it waits `Timing.send_timeout`, and a call that timed out (it may have
        arrived) is made again that many times at most."""
        failures = 0
        deadline = self.timing.timeout if resends is None else self.timing.send_timeout
        while True:
            try:
                async with asyncio.timeout(deadline):
                    status, headers, body = await self._request(method, path, raw, **kwargs)
            except _network_errors() as e:
                self.timing.report(f"Mattermost unreachable: {type(e).__name__}")
                if isinstance(e, TimeoutError) and resends is not None:
                    resends -= 1
                    if resends < 0:
                        raise
                if not persistent:
                    raise
                error = type(e).__name__
            else:
                if status < 400:
                    self.timing.report(None)
                    return body
                if status >= 500:
                    self.timing.report(f"Mattermost answered HTTP {status}")
                if status == 429 and wait:
                    delay = _retry_after(headers)
                    log.warning(record("mattermost_rate_limited", path=path.split("/")[0], retry_after=delay))
                    await asyncio.sleep(delay)
                    continue
                if not (persistent and status >= 500):
                    raise Refused(status, str(body.get("id") or "") if isinstance(body, dict) else "")
                error = f"http {status}"
            delay = self.timing.pause(failures)
            failures += 1
            log.warning(record("mattermost_call_retry", path=path.split("/")[0], error=error, retry_in=delay))
            await asyncio.sleep(delay)

    async def _request(self, method: str, path: str, raw: bool, **kwargs: Any) -> tuple[int, Any, Any]:
        async with self.session.request(method, self.base + path, headers=self.headers, allow_redirects=False,
                                        **kwargs) as response:
            if raw and response.status < 400:
                data = await response.content.read(MAX_DOWNLOAD + 1)
                if len(data) > MAX_DOWNLOAD:
                    raise Refused(413, "too_large")
                return response.status, response.headers, data
            text = await response.text(errors="replace")
            return response.status, response.headers, _json(text)

    async def upload(self, channel: str, path: Path) -> str:
        """One file into the channel (POST /files): its id, for a post's `file_ids`."""
        import aiohttp

        from nanoagent.attachments import outgoing

        name, data, _ = outgoing(path)
        form = aiohttp.FormData()
        form.add_field("channel_id", channel)
        form.add_field("files", data, filename=name)
        uploaded = await self.call("POST", "files", persistent=False, resends=RESENDS, data=form)
        return str(uploaded["file_infos"][0]["id"])


def _file(info: dict[str, Any]) -> FileIn:
    media = str(info.get("mime_type") or "") or None
    kind = {"image": "photo", "audio": "audio", "video": "video"}.get((media or "").split("/")[0], "document")
    size = info.get("size")
    return FileIn(kind=kind, name=str(info.get("name") or "") or None, size=size if isinstance(size, int) else None,
                  ref=str(info["id"]), media_type=media)


def _places(item: Incoming) -> list[str]:
    """The cursors a post moves: its channel's, and in a channel its thread's (a thread the bot serves)."""
    channel = str(item.raw.get("channel") or "")
    return [channel, f"{channel}:{item.place.thread}"] if item.place.thread and not item.private else [channel]


def _move_cursor(cursor: dict[str, str], moved: dict[str, str], now: float) -> None:
    for place, at in moved.items():
        if int(at) > int(cursor.get(place) or 0):
            cursor[place] = at
    for place, at in list(cursor.items()):
        if int(at or 0) < (now - KEEP_CURSORS) * 1000:
            del cursor[place]


def _retry_after(headers: Any) -> float:
    for name in ("Retry-After", "X-RateLimit-Reset"):
        try:
            return max(0.0, float(headers.get(name)))
        except (TypeError, ValueError):
            continue
    return 1.0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json(text: Any, default: Any = None) -> Any:
    try:
        found = json.loads(text) if isinstance(text, str | bytes) else None
    except ValueError:
        found = None
    return found if found is not None else ({} if default is None else default)


def _error(e: BaseException) -> str:
    return f"http {e.status} {e.error}".strip() if isinstance(e, Refused) else type(e).__name__


def _failures() -> tuple[type[Exception], ...]:
    return (Refused, *_network_errors())


def _network_errors() -> tuple[type[Exception], ...]:
    import aiohttp

    return (TimeoutError, aiohttp.ClientError, OSError)


async def whoami(settings: MattermostConfig) -> str:
    """GET /users/me with a client of its own (`verify`): "@name"."""
    api = API(settings, Timing())
    try:
        return f"@{(await api.checked('GET', 'users/me')).get('username')}"
    finally:
        await api.close()


async def deliver(settings: MattermostConfig, place: Place, chunks: list[Chunk], files: Sequence[Path] = ()) -> None:
    """`chunks` posted to `place` (into its thread) through the REST API alone, then `files` there, a post holding
    up to five; DeliveryError when one did not arrive."""
    api = API(settings, Timing())
    try:
        channel = await api.channel(place.chat, {}, {}, persistent=False)
        for chunk in chunks:
            await api.call("POST", "posts", persistent=False, resends=RESENDS,
                           json=api.post(channel, place.thread, chunk.body))
        ids = [await api.upload(channel, path) for path in files]
        for start in range(0, len(ids), FILES_PER_POST):
            await api.call("POST", "posts", persistent=False, resends=RESENDS,
                           json=api.post(channel, place.thread, "", ids[start:start + FILES_PER_POST]))
    except Refused as e:
        raise DeliveryError(f"Mattermost refused the message to {place} (HTTP {e.status} {e.error}); check that the "
                            "bot is a member of that channel and channels.mattermost.token.") from None
    except _network_errors() as e:
        raise DeliveryError(f"Cannot reach Mattermost at {settings.url} ({type(e).__name__}); the message to "
                            f"{place} was not sent.") from None
    finally:
        await api.close()
