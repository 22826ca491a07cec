"""The Slack link: Socket Mode in, the Web API out, through slack-sdk (`SocketModeClient` on aiohttp, and
`AsyncWebClient` at `channels.slack.apiBase`). Imported only when the channel runs.

What arrives: `message` events in a DM are private messages; in channels (public, private, group DMs) the bot
answers `app_mention`s, or every message with `groupPolicy: "all"`, or none with `"off"`; a reply in a thread the bot
already serves needs no mention. A reply goes into the message's thread, and each thread is a session
`slack:<channel>:<thread_ts>`; a DM is the person's own place, `slack:<user id>` (a thread in it
`slack:<user id>:<thread_ts>`), as `home` gives it, so a target `slack:U123` reaches them before they wrote; the DM
channel's id comes from their messages or `conversations.open`. The bot's own messages, other bots',
edits, deletions and joins are ignored; files come as `FileIn`s to fetch from `url_private` with the bot token.

Exactly once: an envelope is acknowledged on the websocket only once the engine put its message in the inbox
(`acknowledge`), and the last message handled in each chat and thread is kept as a catch-up cursor in the channel's
state file. Slack redelivers an envelope not acknowledged within 3 s, and drops it after a few tries (or at once
when no socket is connected): after a restart or a reconnect the link reads each known chat's history
(`conversations.history`, `conversations.replies`) after its cursor, bounded to the last hour. Because that catch-up
covers a message the cursor has not passed, an envelope still waiting for the engine after `ACK_DEADLINE` seconds is
acknowledged anyway: Slack stops resending it, and a restart still finds it in the history (a chat with no cursor
yet gets one just before it). A message may therefore come twice (an event, a redelivery, the history): its id is
`<channel>:<ts>` however it came, and the engine keeps the first. A chat the bot never heard from has no cursor, so
what is written there while nothing listens is not read back: Slack has no "new messages anywhere" call.

Commands: Slack takes a message starting with `/` for one of its own commands, so nanoagent's come as a slash command
registered in the app (`/nanoagent stop`, scope `commands`; no request URL in Socket Mode), or typed after a space.

Typing: Slack's Web API has no typing indicator for bots; in a thread the link sets the assistant status
(`assistant.threads.setStatus`, "is thinking…"), which apps with the Agents & AI Apps feature show and Slack clears
when the reply is posted. The first refusal (an app without that feature) turns it off for the run; a DM outside
threads shows nothing.

Rate limits: a `ratelimited` 429 is waited out for its Retry-After, then the call is made again; SDK retries are off.

Scopes the app needs: connections:write (the app token), chat:write, users:read, files:read, app_mentions:read,
im:history, channels:history, groups:history, mpim:history (events and catch-up), im:write (a DM opened for a
reply or a delivery to a person's id).
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from nanoagent import keys
from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing, batches, record
from nanoagent.channels.slack.format import from_slack
from nanoagent.channels.state import state_file
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from slack_sdk.socket_mode.aiohttp import SocketModeClient

    from nanoagent.channels.slack.settings import SlackConfig
    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.slack")

NAME = "slack"
CONNECT_TIMEOUT = 30.0  # seconds for the websocket to open
ACK_DEADLINE = 2.5  # seconds an envelope may wait for the engine before it is acknowledged anyway (Slack waits 3)
RESENDS = 1  # a post that timed out (it may have arrived: Slack has no idempotency key) is made once more at most
CATCH_UP = 3600.0  # seconds of history read after a restart or a reconnect
KEEP_CURSORS = 7 * 86_400.0  # a chat or thread quiet for longer is forgotten (no catch-up there)
MAX_PLACES = 50  # chats and threads read at most in one catch-up, the most recent first
MAX_DOWNLOAD = 50_000_000  # bytes; a bigger file is not fetched
KEEP_IDS = 2000  # ids of messages acknowledged, remembered to answer a redelivery at once
SUBTYPES = {None, "file_share", "thread_broadcast"}  # message subtypes a person sends
REFUSED = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "not_allowed_token_type",
           "missing_scope", "no_permission"}
STATUS = "is thinking…"
UMBRELLA = {"/nanoagent", "/nano"}  # slash commands whose first word is nanoagent's command
DEFAULT_TIMING = Timing()


class SlackLink:
    def __init__(self, settings: SlackConfig, paths: Paths, timing: Timing = DEFAULT_TIMING,
                 ack_deadline: float = ACK_DEADLINE, connect_timeout: float = CONNECT_TIMEOUT):
        self.settings = settings
        self.paths = paths
        self.timing = timing
        # the websocket's ping, and the wait before reconnecting: the backoff's last step, at most 10 s
        self.ping_interval = min(10.0, timing.backoff[-1])
        self.ack_deadline = ack_deadline
        self.connect_timeout = connect_timeout
        self.now = timing.now
        self.state = state_file(paths, NAME)
        self.queue: asyncio.Queue[list[Incoming]] = asyncio.Queue()
        self.pending: dict[str, list[str]] = {}  # message id -> envelopes waiting for its acknowledgement
        self.timers: dict[str, asyncio.TimerHandle] = {}  # envelope -> its ACK_DEADLINE
        self.received: dict[str, float] = {}  # envelope -> when it arrived (monotonic)
        self.done: OrderedDict[str, None] = OrderedDict()  # message ids acknowledged
        self.cursor: dict[str, str] = {}  # "<channel>" or "<channel>:<thread_ts>" -> last ts handled
        self.names: dict[str, str] = {}
        self.dms: dict[str, str] = {}  # a person's id -> the DM channel's id
        self.hellos = 0
        self.bot_user = ""
        self.bot_id = ""
        self.status_works = True
        self.statused: set[Place] = set()  # threads showing STATUS since the app last posted there
        self.order = asyncio.Lock()  # events are queued in the order they came, whatever their lookups take
        self.tasks: set[asyncio.Task[None]] = set()
        self.api: WebAPI | None = None
        self.socket: SocketModeClient | None = None

    # --- connecting -----------------------------------------------------------------------------------------

    async def connect(self) -> str:
        from slack_sdk.socket_mode.aiohttp import SocketModeClient

        self.api = api = WebAPI(self.settings, self.timing)
        try:
            me = await api.checked("auth_test", "botToken")
            opened = await api.checked("apps_connections_open", "appToken", app_token=self.settings.app_token)
        except BaseException:
            await api.close()
            self.api = None
            raise
        self.bot_user, self.bot_id = str(me.get("user_id") or ""), str(me.get("bot_id") or "")
        self.cursor = (await asyncio.to_thread(self.state.read)).cursor.copy()
        self.socket = SocketModeClient(self.settings.app_token or "", logger=_quiet(), web_client=api.web,
                                       ping_interval=self.ping_interval, auto_reconnect_enabled=True)
        self.socket.message_listeners.append(self._on_message)
        self.socket.on_close_listeners.append(self._on_close)
        self.socket.wss_uri = str(opened["url"])
        try:  # the SDK retries a websocket that will not open forever: a run that never starts says so instead
            await asyncio.wait_for(self.socket.connect(), self.connect_timeout)
        except TimeoutError:
            raise NanoagentError(f"Slack's Socket Mode websocket did not open in {self.connect_timeout:g} s; check that "
                                 "this machine reaches wss-primary.slack.com.") from None
        return f"@{me.get('user') or self.bot_user}"

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        for timer in self.timers.values():
            timer.cancel()
        if self.socket is not None:
            await self.socket.close()
        if self.api is not None:
            await self.api.close()

    # --- what arrives -------------------------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        async for batch in batches(self.queue, await self._catch_up()):
            yield batch

    async def _on_message(self, client: Any, message: dict[str, Any], raw: str | None) -> None:
        kind = message.get("type")
        if kind == "hello":
            self.hellos += 1
            self.timing.report(None)
            log.info(record("slack_connected", reconnect=self.hellos > 1))
            if self.hellos > 1:  # events sent while the socket was away are lost: read them from the history
                self._spawn(self._queue_catch_up())
            return
        envelope = message.get("envelope_id")
        if not isinstance(envelope, str):
            return
        self.received[envelope] = time.monotonic()
        payload = message.get("payload") or {}
        async with self.order:  # taken before any other await: the SDK starts one task per message, in order
            if kind == "events_api" and isinstance(payload.get("event"), dict):
                incoming = await self._from_event(payload["event"])
            elif kind == "slash_commands":
                incoming = await self._from_command(payload, envelope)
            else:
                incoming = None
            if incoming is None or incoming.id in self.done:
                await self._ack([envelope])
                return
            waiting = self.pending.setdefault(incoming.id, [])
            waiting.append(envelope)
            self.timers[envelope] = asyncio.get_running_loop().call_later(self.ack_deadline, self._late, envelope,
                                                                          incoming)
            if len(waiting) == 1:
                await self.queue.put([incoming])

    async def _on_close(self, message: Any) -> None:
        # no health report here: the SDK calls this only once it has reconnected (or never, when it could not)
        log.info(record("slack_disconnected"))

    def _late(self, envelope: str, item: Incoming) -> None:
        """The engine has not stored it yet: acknowledge so Slack stops resending. The cursor has not passed it, so
        a restart still reads it from the history; a chat with no cursor yet gets one just before it first."""
        self.timers.pop(envelope, None)
        if envelope in self.pending.get(item.id, []):
            self.pending[item.id].remove(envelope)
        log.warning(record("slack_ack_early", after=self.ack_deadline))
        ts = str(item.raw.get("ts") or "")
        before = {place: f"{_float(ts) - 0.000001:.6f}" for place in _places(item) if place not in self.cursor}
        self.cursor.update(before)
        self._spawn(self._ack_early(envelope, before))

    async def _ack_early(self, envelope: str, before: dict[str, str]) -> None:
        if before:
            await asyncio.to_thread(self.state.update, lambda state: _start_cursor(state.cursor, before))
        await self._ack([envelope])

    async def _from_event(self, event: dict[str, Any]) -> Incoming | None:
        kind, channel = event.get("type"), event.get("channel")
        if kind not in ("message", "app_mention") or not isinstance(channel, str):
            return None
        im = event.get("channel_type") == "im" or (kind == "message" and channel.startswith("D"))
        return await self._incoming(event, channel, im, mentioned=kind == "app_mention")

    async def _from_command(self, payload: dict[str, Any], envelope: str) -> Incoming | None:
        """A slash command registered in the app: Slack keeps messages starting with `/` for itself, so nanoagent's
        commands come this way (or as a message starting with a space). `/nanoagent stop` is `/stop` (Slack's own
        `/status` cannot be taken over); `/new`, `/stop`... registered as themselves pass as typed. It applies to the
        chat it was typed in (commands have no thread)."""
        command, channel, user = payload.get("command"), payload.get("channel_id"), payload.get("user_id")
        if not (isinstance(command, str) and isinstance(channel, str) and isinstance(user, str)):
            return None
        if not channel.startswith("D") and self.settings.group_policy == "off":  # channels are off: commands too
            return None
        text = str(payload.get("text") or "").strip()
        if command in UMBRELLA:
            text = f"/{text.removeprefix('/')}" if text else "/help"
        else:
            text = f"{command} {text}".strip()
        raw = {"id": f"{channel}:{payload.get('trigger_id') or envelope}", "channel": channel, "thread": "",
               "user": user.upper(), "name": await self._name(user), "im": channel.startswith("D"), "text": text,
               "files": []}
        return self.rebuild(raw)

    async def _incoming(self, message: dict[str, Any], channel: str, im: bool,
                        mentioned: bool = False) -> Incoming | None:
        """A person's message as an `Incoming`, or None when it is not for the bot."""
        user, ts, text = message.get("user"), message.get("ts"), message.get("text") or ""
        if message.get("subtype") not in SUBTYPES or message.get("bot_id") or not isinstance(user, str) \
                or not isinstance(ts, str) or user == self.bot_user:
            return None
        thread = str(message.get("thread_ts") or "")
        if not im:
            known = thread and f"{channel}:{thread}" in self.cursor
            mentioned = mentioned or f"<@{self.bot_user}>" in text
            policy = self.settings.group_policy
            if policy == "off" or not (policy == "all" or mentioned or known):
                return None
            thread = thread or ts  # the answer goes into the message's thread
        files = [_file(f) for f in message.get("files") or [] if isinstance(f, dict)]
        raw = {"id": f"{channel}:{ts}", "channel": channel, "ts": ts, "thread": thread, "user": user.upper(),
               "name": await self._name(user), "text": from_slack(str(text), self.bot_user), "im": im,
               "files": [f.__dict__ for f in files if f is not None]}
        return self.rebuild(raw)

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        """A DM's place is its person's id (as `home` gives it); the DM's own channel id is kept for replies."""
        try:
            im, user, channel = bool(raw.get("im")), str(raw["user"]), str(raw["channel"])
            place = keys.make(NAME, user if im else channel, raw.get("thread") or None)
            if im:
                self.dms[user] = channel
            files = [FileIn(**f) for f in raw.get("files") or []]
            return Incoming(id=str(raw["id"]), place=place, user=str(raw["user"]), name=str(raw.get("name") or ""),
                            text=str(raw.get("text") or ""), raw=raw, private=im, files=files)
        except (KeyError, TypeError, ValueError):
            return None

    async def _name(self, user: str) -> str:

        if user not in self.names:
            try:
                found = (await self._api().call("users_info", persistent=False, wait=False, user=user)).get("user") or {}
                profile = found.get("profile") or {}
                self.names[user] = str(profile.get("display_name") or found.get("real_name") or found.get("name")
                                       or user)
            except _failures():
                return user
        return self.names[user]

    # --- acknowledging and the cursor ------------------------------------------------------------------------

    async def acknowledge(self, items: list[Incoming]) -> None:
        envelopes: list[str] = []
        moved: dict[str, str] = {}
        for item in items:
            for envelope in self.pending.pop(item.id, []):
                timer = self.timers.pop(envelope, None)
                if timer is not None:
                    timer.cancel()
                envelopes.append(envelope)
            self.done[item.id] = None
            ts = str(item.raw.get("ts") or "")
            for place in _places(item):
                if _later(ts, moved.get(place) or self.cursor.get(place)):
                    moved[place] = ts
        while len(self.done) > KEEP_IDS:
            self.done.popitem(last=False)
        await self._ack(envelopes)
        if moved:
            self.cursor.update(moved)
            await asyncio.to_thread(self.state.update, lambda state: _move_cursor(state.cursor, moved, self.now()))

    async def _ack(self, envelopes: list[str]) -> None:
        if self.socket is None:
            return
        for envelope in envelopes:
            waited = time.monotonic() - self.received.pop(envelope, time.monotonic())
            try:
                await self.socket.send_socket_mode_response({"envelope_id": envelope})
            except Exception as e:  # the socket went away: Slack sends it again, and the engine keeps the first
                log.warning(record("slack_ack_failed", error=type(e).__name__))
            if waited > 3.0:
                log.warning(record("slack_ack_late", seconds=round(waited, 2)))

    # --- catching up ------------------------------------------------------------------------------------------

    async def _queue_catch_up(self) -> None:
        caught = await self._catch_up()
        if caught:
            await self.queue.put(caught)

    async def _catch_up(self) -> list[Incoming]:
        """Messages that came while nothing listened: each known chat's and thread's history after its cursor,
        within the last `CATCH_UP` seconds; oldest first."""
        from slack_sdk.errors import SlackApiError

        since = self.now() - CATCH_UP
        recent = sorted(((place, ts) for place, ts in self.cursor.items() if _float(ts) > self.now() - KEEP_CURSORS),
                        key=lambda item: -_float(item[1]))[:MAX_PLACES]
        found: dict[str, Incoming] = {}
        for place, ts in recent:
            channel, _, thread = place.partition(":")
            oldest = f"{max(_float(ts), since):.6f}"
            try:
                if thread:
                    messages = await self._history("conversations_replies", channel=channel, ts=thread, oldest=oldest)
                else:
                    messages = await self._history("conversations_history", channel=channel, oldest=oldest)
            except _failures() as e:
                log.warning(record("slack_catch_up_failed", error=_error(e) if isinstance(e, SlackApiError)
                                    else type(e).__name__))
                continue
            for message in messages:
                if _float(message.get("ts")) <= float(oldest) or f"{channel}:{message.get('ts')}" in self.done:
                    continue
                incoming = await self._incoming(message, channel, im=channel.startswith("D"))
                if incoming is not None and incoming.id not in self.pending:
                    found[incoming.id] = incoming
        caught = sorted(found.values(), key=lambda item: _float(item.raw.get("ts")))
        if caught:
            log.info(record("slack_caught_up", messages=len(caught)))
        return caught

    async def _history(self, method: str, **kwargs: Any) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        cursor = ""
        for _ in range(5):  # at most 1,000 messages a chat
            page: dict[str, Any] = {"cursor": cursor} if cursor else {}
            response = await self._api().call(method, persistent=False, limit=200, **kwargs, **page)
            messages.extend(m for m in response.get("messages") or [] if isinstance(m, dict))
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not response.get("has_more") or not cursor:
                break
        return messages

    # --- what goes out ---------------------------------------------------------------------------------------------

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        """Slack reads any text as mrkdwn (it refuses none), so `chunk.plain` is not needed here."""
        thread: dict[str, Any] = {"thread_ts": place.thread} if place.thread else {}
        channel = await self._conversation(place, persistent)
        response = channel and await self._api().quietly("chat_postMessage", persistent, resends=RESENDS,
                                                         channel=channel, text=chunk.body, unfurl_links=False,
                                                         unfurl_media=False, **thread)
        if response is not None:
            self.statused.discard(place)  # Slack clears the thread's status when the app posts
        return str(response["ts"]) if response and response.get("ts") else None

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        channel = await self._conversation(place, persistent)
        response = channel and await self._api().quietly("chat_update", persistent, channel=channel, ts=message_id,
                                                         text=chunk.body)
        if place in self.statused:  # an edit does not clear the status as a new message does
            await self._status(place, "")
        return bool(response is not None and channel)

    async def delete(self, place: Place, message_id: str) -> None:
        channel = await self._conversation(place, False)
        if channel:
            await self._api().quietly("chat_delete", False, channel=channel, ts=message_id)

    async def _conversation(self, place: Place, persistent: bool) -> str | None:
        """The conversation a place is in: its chat, or for a person's id their DM channel (from their messages,
        else conversations.open); None when Slack would not open it."""
        from slack_sdk.errors import SlackApiError

        try:
            return await self._api().conversation(place.chat, self.dms, persistent)
        except SlackApiError as e:
            log.warning(record("slack_call_failed", method="conversations_open", error=_error(e)))
        except _network_errors() as e:
            log.warning(record("slack_call_failed", method="conversations_open", error=type(e).__name__))
        return None

    async def typing(self, place: Place) -> None:
        if place.thread and self.status_works:
            await self._status(place, STATUS)

    async def _status(self, place: Place, status: str) -> None:
        from slack_sdk.errors import SlackApiError

        channel = await self._conversation(place, False)
        if not channel:
            return
        try:
            await self._api().call("assistant_threads_setStatus", persistent=False, wait=False,
                                   channel_id=channel, thread_ts=place.thread, status=status)
        except SlackApiError as e:
            self.status_works = False  # an app without the AI feature: no indicator this run
            log.info(record("slack_status_off", error=_error(e)))
        except _network_errors():
            pass
        else:
            if status:
                self.statused.add(place)
            else:
                self.statused.discard(place)

    async def download(self, file: FileIn) -> bytes | None:
        """The file's bytes, fetched with the bot token, and only from Slack (or `apiBase`'s host)."""
        import aiohttp

        if self.api is None or not self._trusted(file.ref):
            log.warning(record("slack_download_refused", reason="not a Slack file URL"))
            return None
        if file.size is not None and file.size > MAX_DOWNLOAD:
            return None
        try:
            async with self.api.session.get(file.ref, headers={"Authorization": f"Bearer {self.settings.bot_token}"},
                                        allow_redirects=False) as response:
                kind = response.headers.get("Content-Type", "")
                if response.status != 200 or kind.startswith("text/html"):  # Slack's login page: no files:read
                    log.warning(record("slack_download_failed", status=response.status))
                    return None
                data = await response.content.read(MAX_DOWNLOAD + 1)
                return data if len(data) <= MAX_DOWNLOAD else None
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            log.warning(record("slack_download_failed", error=type(e).__name__))
            return None

    def _trusted(self, url: str) -> bool:
        """The bot token goes only to Slack's own hosts, or to the host of `apiBase` (a proxy or a stand-in)."""
        asked, base = urllib.parse.urlsplit(url), urllib.parse.urlsplit(self.settings.api_base)
        if (asked.scheme, asked.netloc) == (base.scheme, base.netloc):
            return True
        host = asked.hostname or ""
        return asked.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com"))

    def _api(self) -> WebAPI:
        assert self.api is not None, "connect first"
        return self.api

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class WebAPI:
    """The Web API at `apiBase` with the bot token, on one pooled aiohttp session; SDK retries off (ours wait out
    429s and, for calls that must arrive, network failures)."""

    def __init__(self, settings: SlackConfig, timing: Timing):
        import aiohttp
        from slack_sdk.web.async_client import AsyncWebClient

        self.settings = settings
        self.timing = timing
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        # each call's own deadline is ours (`call`); the client's only bounds the longest of them
        self.web: AsyncWebClient = AsyncWebClient(token=settings.bot_token, base_url=settings.api_base,
                                                  session=self.session, logger=_quiet(), retry_handlers=[],
                                                  timeout=int(max(timing.timeout, timing.send_timeout)) + 1)

    async def close(self) -> None:
        await self.session.close()

    async def conversation(self, chat: str, dms: dict[str, str], persistent: bool) -> str:
        """`chat` itself when it names a conversation (C, G, D...); for a person's id (U, W) their DM channel."""
        if chat[:1] not in ("U", "W"):
            return chat
        if chat not in dms:
            opened = await self.call("conversations_open", persistent, users=chat)
            dms[chat] = str((opened.get("channel") or {}).get("id") or "")
        return dms[chat] or chat

    async def checked(self, method: str, setting: str, **kwargs: Any) -> dict[str, Any]:
        """A call made while connecting: credentials Slack refuses become one line naming the setting."""
        from slack_sdk.errors import SlackApiError

        try:
            response = await self.call(method, persistent=False, **kwargs)
        except SlackApiError as e:
            error = _error(e)
            if error in REFUSED:
                raise NanoagentError(f"Slack refused channels.slack.{setting} ({error}): check the token in the "
                                     "app's settings at api.slack.com/apps, or run `nanoagent channels add slack`.") \
                    from None
            raise NanoagentError(f"Slack answered {_dotted(method)} with {error}; check channels.slack.apiBase "
                                 "and the app's settings.") from None
        except _network_errors() as e:
            raise NanoagentError(f"Cannot reach Slack at {self.settings.api_base} ({type(e).__name__}); check the "
                                 "network and channels.slack.apiBase.") from None
        return dict(response.data) if isinstance(response.data, dict) else {}

    async def quietly(self, method: str, persistent: bool, resends: int | None = None,
                      **kwargs: Any) -> dict[str, Any] | None:
        """A call whose failure is an answer (None), logged without its text."""
        from slack_sdk.errors import SlackApiError

        try:
            response = await self.call(method, persistent, resends=resends, **kwargs)
        except SlackApiError as e:
            log.warning(record("slack_call_failed", method=method, error=_error(e)))
            return None
        except _network_errors() as e:
            log.warning(record("slack_call_failed", method=method, error=type(e).__name__))
            return None
        return dict(response.data) if isinstance(response.data, dict) else {}

    async def call(self, method: str, persistent: bool, wait: bool = True, resends: int | None = None,
                   **kwargs: Any) -> Any:
        """One Web API call, within `Timing.timeout`. A `ratelimited` 429 is waited out (unless `wait` is False) and
        the call made again; with `persistent`, so is a network failure or a 5xx, with backoff. With `resends` (a
        post: Slack has no idempotency key) it waits `Timing.send_timeout`, and a call that timed out (it may
        have arrived) is made again that many times at most."""
        from slack_sdk.errors import SlackApiError

        failures = 0
        deadline = self.timing.timeout if resends is None else self.timing.send_timeout
        while True:
            try:
                async with asyncio.timeout(deadline):
                    response = await getattr(self.web, method)(**kwargs)
                self.timing.report(None)
                return response
            except SlackApiError as e:
                status = e.response.status_code
                if status >= 500:
                    self.timing.report(f"Slack's Web API answered HTTP {status}")
                if wait and (status == 429 or _error(e) == "ratelimited"):
                    delay = _float(e.response.headers.get("Retry-After"), 1.0)
                    log.warning(record("slack_rate_limited", method=method, retry_after=delay))
                    await asyncio.sleep(delay)
                    continue
                if not (persistent and status >= 500):
                    raise
                error: str = f"http {status}"
            except _network_errors() as e:
                self.timing.report(f"Slack's Web API unreachable: {type(e).__name__}")
                if isinstance(e, TimeoutError) and resends is not None:
                    resends -= 1
                    if resends < 0:
                        raise
                if not persistent:
                    raise
                error = type(e).__name__
            delay = self.timing.pause(failures)
            failures += 1
            log.warning(record("slack_call_retry", method=method, error=error, retry_in=delay))
            await asyncio.sleep(delay)


def _file(data: dict[str, Any]) -> FileIn | None:
    url = data.get("url_private_download") or data.get("url_private")
    if not isinstance(url, str):
        return None
    media = str(data.get("mimetype") or "") or None
    top = (media or "").split("/")[0]
    kind = {"image": "photo", "audio": "audio", "video": "video"}.get(top, "document")
    size = data.get("size")
    return FileIn(kind=kind, name=str(data.get("name") or "") or None,
                  size=size if isinstance(size, int) else None, ref=url, media_type=media)


def _places(item: Incoming) -> list[str]:
    """The cursors a message moves: its thread's, and its chat's when it is outside threads (or starts one)."""
    ts = item.raw.get("ts")
    if not isinstance(ts, str) or not ts:
        return []  # a slash command: not in any history
    channel = str(item.raw.get("channel") or "")  # the conversation's id, a DM's too: the history is read there
    places = [f"{channel}:{item.place.thread}"] if item.place.thread else []
    if not item.place.thread or item.place.thread == ts:
        places.append(channel)
    return places


def _start_cursor(cursor: dict[str, str], before: dict[str, str]) -> None:
    for place, ts in before.items():
        cursor.setdefault(place, ts)


def _move_cursor(cursor: dict[str, str], moved: dict[str, str], now: float) -> None:
    for place, ts in moved.items():
        if _later(ts, cursor.get(place)):
            cursor[place] = ts
    for place, ts in list(cursor.items()):
        if _float(ts) < now - KEEP_CURSORS:
            del cursor[place]


def _later(ts: str, than: str | None) -> bool:
    return than is None or _float(ts) > _float(than)


def _float(value: Any, default: float = 0.0) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _error(e: Any) -> str:
    try:
        return str(e.response.get("error") or f"http {e.response.status_code}")
    except Exception:
        return type(e).__name__


def _failures() -> tuple[type[Exception], ...]:
    """A call that failed: Slack's answer, or the network."""
    from slack_sdk.errors import SlackApiError

    return (SlackApiError, *_network_errors())


def _network_errors() -> tuple[type[Exception], ...]:
    import aiohttp

    return (TimeoutError, aiohttp.ClientError, OSError)


def _quiet() -> logging.Logger:
    """The SDK's logger: silenced, since it logs request bodies and message text (ours are JSON records)."""
    quiet = logging.getLogger("nanoagent.channels.slack.sdk")
    quiet.setLevel(logging.CRITICAL)
    quiet.propagate = False
    return quiet


def _dotted(method: str) -> str:
    return method.replace("_", ".")


async def web_call(settings: SlackConfig, method: str, setting: str, **kwargs: Any) -> dict[str, Any]:
    """One checked Web API call with a client of its own (`verify`)."""
    api = WebAPI(settings, Timing())
    try:
        return await api.checked(method, setting, **kwargs)
    finally:
        await api.close()


async def deliver(settings: SlackConfig, place: Place, chunks: list[Chunk], files: Sequence[Path] = ()) -> None:
    """`chunks` posted to `place` (into its thread) through the Web API alone, then `files` uploaded there;
    DeliveryError when one did not arrive."""
    from slack_sdk.errors import SlackApiError, SlackRequestError

    api = WebAPI(settings, Timing())
    try:
        channel = await api.conversation(place.chat, {}, persistent=False)
        for chunk in chunks:
            thread: dict[str, Any] = {"thread_ts": place.thread} if place.thread else {}
            await api.call("chat_postMessage", persistent=False, channel=channel, text=chunk.body,
                           unfurl_links=False, unfurl_media=False, **thread)
        for path in files:
            await _upload(api, channel, place, path)
    except SlackRequestError as e:  # the upload itself (step 2 of files_upload_v2) failed
        raise DeliveryError(f"Slack did not take a file for {place} ({str(e).split(' (', 1)[0]}); it was not "
                            "sent.") from None
    except SlackApiError as e:
        raise DeliveryError(f"Slack refused the message to {place} ({_error(e)}); check that the bot is in that "
                            "channel and channels.slack.botToken.") from None
    except _network_errors() as e:
        raise DeliveryError(f"Cannot reach Slack at {settings.api_base} ({type(e).__name__}); the message to "
                            f"{place} was not sent.") from None
    finally:
        await api.close()


async def _upload(api: WebAPI, channel: str, place: Place, path: Path) -> None:
    """One file into the place's chat or thread by `files_upload_v2` (files.getUploadURLExternal, the upload,
    files.completeUploadExternal); Slack shows an image as one by its own look at the file."""
    from nanoagent.attachments import outgoing

    name, data, _ = outgoing(path)
    thread: dict[str, Any] = {"thread_ts": place.thread} if place.thread else {}
    await api.call("files_upload_v2", persistent=False, channel=channel, file=data, filename=name, title=name,
                   **thread)
