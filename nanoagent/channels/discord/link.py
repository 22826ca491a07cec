"""Discord through discord.py: the gateway websocket brings what people write, REST carries the bot's replies.

The REST base is `channels.discord.apiBase`, set as discord.py's process-wide `Route.BASE` (one client per gateway);
the websocket's URL is what `GET {apiBase}/gateway/bot` answers, as Discord asks bots to do. Intents: guilds (so
threads and channels are known), guild messages, direct messages and message content (privileged: turned on in the
Developer Portal). discord.py waits out a 429's `retry_after` itself and resumes the websocket after a drop.

Places (`keys.Place`):
- a direct message is `discord:<user id>`, as on Telegram: the person's private chat is known from their id alone
  (`CHANNEL.home`), so a target `discord:<user id>` reaches them before they wrote; the DM channel's id is asked of
  Discord (`POST /users/@me/channels`) when it is not known from their messages;
- a guild channel is `discord:<channel id>`, one session for the channel;
- a thread is `discord:<parent channel id>:<thread id>`. A thread is a channel of its own on Discord (the reply is
  sent to the thread's id); it is keyed under its parent so `discord:<channel>:*` names a channel's threads and a
  thread's session sorts beside its channel's.

Messages that are not for the bot (its own, other bots', guild messages not mentioning or replying to it under
`groupPolicy: "mention"`, every guild message under `"off"`) are dropped here: they never reach the inbox.

Catch-up: Discord does not send a message again once its gateway session is gone (a kill -9, an outage longer than
the resume window). `acknowledge` keeps, per place, the id of the last message taken as a cursor in the channel's
state (`cursor["discord:<chat>[:<thread>]"]`); after each new session (READY, not a RESUME) each known place's history
after its cursor is read again, at most the last hour (`CATCH_UP`). A chat whose very first message came while
nanoagent was down is not known, so not caught up: a bot cannot list its DMs.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing, record
from nanoagent.channels.state import ChannelState, state_file
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place, make, parse

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import discord

    from nanoagent.channels.discord.settings import DiscordConfig
    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.discord")
T = TypeVar("T")

NAME = "discord"
CATCH_UP = 3600.0  # seconds of history read after a restart, at most
CATCH_UP_MESSAGES = 500  # messages read per place, at most
GIVEN = 2000  # ids of messages given lately, remembered to give each once
EPOCH_MS = 1420070400000  # Discord's epoch: a snowflake is its milliseconds since then, shifted left 22 bits
NO_TOKEN = ("channels.discord.enabled is true but there is no bot token: set DISCORD_BOT_TOKEN or "
            "channels.discord.token (Developer Portal > your app > Bot > Reset Token)")
REFUSED = ("Discord refused the bot token: copy it again from the Developer Portal (your app > Bot > Reset Token) "
           "into DISCORD_BOT_TOKEN or channels.discord.token")
_CATCH_UP = object()  # queued when a new gateway session is ready: read what was missed first


class DiscordLink:
    """One connection to Discord for one run of the gateway component (`base.Link`)."""

    def __init__(self, settings: DiscordConfig, paths: Paths, timing: Timing | None = None) -> None:
        self.settings = settings
        self.state = state_file(paths, NAME)
        self.timing = timing or Timing()
        self.client: discord.Client | None = None
        self.queue: asyncio.Queue[Any] = asyncio.Queue()  # discord.Message, _CATCH_UP, or the run's exception
        self.runner: asyncio.Task[None] | None = None
        self.places: dict[int, tuple[Place | None, bool] | None] = {}  # channel id -> (place, private); None: not ours
        self.given: dict[int, None] = {}  # ids given lately (a message live and in the catch-up comes once)
        self.dms: dict[int, int] = {}  # user id -> their DM channel's id
        self.closing = False

    # --- connecting ------------------------------------------------------------------------------------

    async def connect(self) -> str:
        """Sign in over REST and open the websocket; returns once the gateway session is ready, or raises what kept
        it from being so (while discord.py retries an unreachable gateway, it waits)."""
        client = _client(self.settings)
        self.client = client
        ready = asyncio.Event()

        async def on_message(message: discord.Message) -> None:
            self.queue.put_nowait(message)

        async def on_connect() -> None:  # each new session (READY), not a RESUME
            ready.set()
            self.queue.put_nowait(_CATCH_UP)

        client.event(on_message)
        client.event(on_connect)
        await _login(client, self.settings)
        self.runner = asyncio.create_task(self._run(client), name="discord gateway")
        waiting = asyncio.create_task(ready.wait())
        try:
            await asyncio.wait({waiting, self.runner}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        if not ready.is_set():
            failure = next((item for item in _drain(self.queue) if isinstance(item, BaseException)),
                           NanoagentError("the Discord gateway connection closed"))
            await self.close()
            raise failure
        assert client.user is not None
        log.info(record("discord_connected", bot_id=str(client.user.id)))
        return f"@{client.user.name}"

    async def _run(self, client: discord.Client) -> None:
        """The websocket, until closed; discord.py reconnects and resumes by itself. What ends it for good (the token
        refused, an intent not allowed) reaches `receive` and so the engine."""
        import discord

        try:
            await client.connect(reconnect=True)
        except discord.PrivilegedIntentsRequired:
            error: BaseException = NanoagentError(
                "Discord refused the message content intent: turn on Message Content Intent in the Developer "
                "Portal (your app > Bot > Privileged Gateway Intents)")
        except discord.LoginFailure:
            error = NanoagentError(REFUSED)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any end of the websocket is reported to the engine, which restarts
            error = e
        else:
            if self.closing:
                return
            error = NanoagentError("the Discord gateway connection closed")
        log.error(record("discord_gateway_failed", error=type(error).__name__))
        self.queue.put_nowait(error)

    async def close(self) -> None:
        self.closing = True
        if self.client is not None:
            await self.client.close()
        if self.runner is not None:
            self.runner.cancel()
            await asyncio.gather(self.runner, return_exceptions=True)

    # --- receiving ---------------------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        while True:
            items = [await self.queue.get()]
            while not self.queue.empty():
                items.append(self.queue.get_nowait())
            batch: list[Incoming] = []
            for item in items:
                if isinstance(item, BaseException):
                    raise item
                if item is _CATCH_UP:
                    batch.extend(await self.catch_up())
                    continue
                incoming = await self.incoming(item)
                if incoming is not None:
                    batch.append(incoming)
            fresh = []
            for m in batch:
                if int(m.id) not in self.given:
                    self.given[int(m.id)] = None
                    fresh.append(m)
            while len(self.given) > GIVEN:
                del self.given[next(iter(self.given))]
            if fresh:
                yield fresh

    async def catch_up(self) -> list[Incoming]:
        """The messages each known place got after its cursor, within the last hour, oldest first."""
        import discord

        cursors = (await asyncio.to_thread(self.state.read)).cursor
        since = _snowflake(self.timing.now() - CATCH_UP)
        found: list[Incoming] = []
        for key, last in cursors.items():
            place = parse(key)
            if place is None or place.channel != NAME or not last.isdigit():
                continue
            after = discord.Object(max(int(last), since))
            try:
                channel = await self._channel(await self._destination(place))
                if channel is None:
                    continue
                async for message in channel.history(limit=CATCH_UP_MESSAGES, after=after, oldest_first=True):
                    incoming = await self.incoming(message)
                    if incoming is not None:
                        found.append(incoming)
            except (TimeoutError, discord.HTTPException, OSError) as e:
                log.warning(record("discord_catch_up_failed", error=type(e).__name__))
        if found:
            log.info(record("discord_caught_up", messages=len(found)))
        return found

    async def incoming(self, message: discord.Message) -> Incoming | None:
        """The message in the channel's words; None when it is not for the bot."""
        import discord

        assert self.client is not None and self.client.user is not None
        me = self.client.user.id
        if message.author.bot or message.author.id == me:
            return None
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return None
        where = await self._where(message.channel)
        if where is None:
            return None
        found, private = where
        if private:
            self.dms[message.author.id] = message.channel.id
        place = found if found is not None else make(NAME, message.author.id)
        if not private and not _addressed(self.settings.group_policy, message, me):
            return None
        text = re.sub(rf"<@!?{me}>", " ", message.content)
        text = re.sub(r"[ \t]{2,}", " ", text).strip()
        files = [_file(a) for a in message.attachments]
        if not text and not files:
            return None
        raw = {"id": str(message.id), "place": place.key, "user": str(message.author.id),
               "name": message.author.display_name, "text": text, "private": private,
               "files": [{"kind": f.kind, "name": f.name, "size": f.size, "ref": f.ref, "media_type": f.media_type}
                         for f in files]}
        return _rebuilt(raw)

    async def _where(self, channel: Any) -> tuple[Place | None, bool] | None:
        """A message's channel as a place, and whether it is a DM (whose place is its sender's); channels the cache
        does not know are asked of Discord once."""
        import discord

        if isinstance(channel, discord.DMChannel):
            return None, True
        if isinstance(channel, discord.Thread):
            return make(NAME, channel.parent_id, channel.id), False
        if isinstance(channel, discord.abc.GuildChannel):
            return make(NAME, channel.id), False
        if channel.id not in self.places:
            try:
                found = await self._channel(channel.id)
            except (TimeoutError, discord.HTTPException, OSError) as e:
                log.warning(record("discord_channel_unknown", channel=str(channel.id), error=type(e).__name__))
                return None  # not remembered: asked again next time
            known = found is not None and not isinstance(found, discord.PartialMessageable)
            self.places[channel.id] = await self._where(found) if known else None
        return self.places[channel.id]

    async def _channel(self, channel_id: int) -> Any:
        """The channel from the cache, else from Discord; None for one the bot cannot see."""
        import discord

        assert self.client is not None
        try:
            return self.client.get_channel(channel_id) or await self.client.fetch_channel(channel_id)
        except (discord.NotFound, discord.Forbidden):
            return None

    async def acknowledge(self, items: list[Incoming]) -> None:
        """These are in the inbox: each place's cursor moves to the newest of them, so a restart reads on from there."""
        newest: dict[str, int] = {}
        for item in items:
            newest[item.place.key] = max(newest.get(item.place.key, 0), int(item.id))

        def change(state: ChannelState) -> None:
            for key, last in newest.items():
                old = state.cursor.get(key, "")
                if not old.isdigit() or int(old) < last:
                    state.cursor[key] = str(last)

        if newest:
            await asyncio.to_thread(self.state.update, change)

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        try:
            return _rebuilt(raw)
        except (KeyError, TypeError, ValueError):
            return None

    # --- sending -----------------------------------------------------------------------------------------

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        """A send that timed out may have arrived: every try carries the same nonce, with `enforce_nonce` (which
        discord.py sets with a nonce), so Discord answers a resend with the message the first one made."""
        nonce = secrets.token_hex(12)  # Discord takes up to 25 characters

        async def call() -> str:
            async with asyncio.timeout(self.timing.send_timeout):
                message = await (await self._target(place)).send(chunk.body, nonce=nonce)
            return str(message.id)

        return await self._call("send", place, call, persistent)

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        async def call() -> bool:
            await (await self._target(place)).get_partial_message(int(message_id)).edit(content=chunk.body)
            return True

        return bool(await self._call("edit", place, call, persistent))

    async def delete(self, place: Place, message_id: str) -> None:
        import discord

        async def call() -> bool:
            try:
                await (await self._target(place)).get_partial_message(int(message_id)).delete()
            except discord.NotFound:
                pass  # gone already
            return True

        await self._call("delete", place, call, persistent=False)

    async def typing(self, place: Place) -> None:
        async def call() -> bool:
            await (await self._target(place)).typing()
            return True

        await self._call("typing", place, call, persistent=False)

    async def download(self, file: FileIn) -> bytes | None:
        import discord

        assert self.client is not None
        try:
            return await self.client.http.get_from_cdn(file.ref)
        except (TimeoutError, discord.HTTPException, OSError) as e:
            log.warning(record("discord_download_failed", error=type(e).__name__))
            return None

    async def _target(self, place: Place) -> discord.PartialMessageable:
        assert self.client is not None
        return self.client.get_partial_messageable(await self._destination(place))

    async def _destination(self, place: Place) -> int:
        """The id of the channel a place's messages go to: a thread's own, a guild channel's, a user's DM."""
        import discord

        assert self.client is not None
        if place.thread:
            return int(place.thread)
        chat = int(place.chat)
        if chat not in self.dms:
            known = self.client.get_channel(chat)
            if known is not None and not isinstance(known, discord.DMChannel):
                return chat  # a guild channel
            found = await _open_dm(self.client, chat)
            if found is None:
                return chat  # no user: a channel the cache does not hold
            self.dms[chat] = found
        return self.dms[chat]

    async def _call(self, what: str, place: Place, call: Callable[[], Awaitable[T]], persistent: bool) -> T | None:
        """A REST call; discord.py waits out 429s, five times; a 429 that outlasts them is waited out here as long as
        Discord says, while `persistent`. Another refusal (4xx) is final; a failure of Discord or the network is
        retried with the link's backoff while `persistent`, else given up."""
        import aiohttp
        import discord

        failures = 0
        while True:
            try:
                result = await call()
                self.timing.report(None)
                return result
            except discord.DiscordServerError as e:
                error: str = f"HTTP {e.status}"
            except discord.HTTPException as e:
                if e.status == 429 and persistent and not self.closing:
                    wait = _retry_after(e.response)
                    log.warning(record("discord_rate_limited", call=what, retry_after=wait))
                    await asyncio.sleep(wait)
                    continue
                log.warning(record("discord_refused", call=what, status=e.status, code=e.code))
                return None
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                error = type(e).__name__
            log.warning(record("discord_call_failed", call=what, error=error, failures=failures + 1))
            self.timing.report(f"Discord's API failing: {error}")
            if not persistent or self.closing:
                return None
            await asyncio.sleep(self.timing.pause(failures))
            failures += 1


# --- one-off calls: verify and deliver, REST only (no gateway connection) ------------------------------------


async def verify(settings: DiscordConfig) -> str:
    """`GET /users/@me` with the token: "@name", or NanoagentError saying what is wrong."""
    import discord

    client = _client(settings)
    try:
        user = await client.http.static_login(_token(settings))
    except discord.LoginFailure:
        raise NanoagentError(REFUSED) from None
    except (TimeoutError, discord.HTTPException, OSError) as e:
        raise NanoagentError(f"cannot reach Discord at {settings.api_base} ({_why(e)}); check the network and "
                             "channels.discord.apiBase") from None
    finally:
        await client.close()
    return f"@{user['username']}"


async def deliver(settings: DiscordConfig, place: Place, chunks: list[Chunk], files: Sequence[Path] = ()) -> None:
    """Send the chunks to `place` over REST: a user's DM (`discord:<user id>`, opened with `POST /users/@me/channels`),
    a channel or a thread; then each file as a message with it attached. DeliveryError when they did not arrive."""
    import discord

    client = _client(settings)
    try:
        await client.login(_token(settings))
        destination = int(place.thread) if place.thread else (await _open_dm(client, int(place.chat)) or
                                                              int(place.chat))
        target = client.get_partial_messageable(destination)
        for chunk in chunks:
            await target.send(chunk.body)
        for path in files:
            await _send_file(target, path)
    except discord.LoginFailure:
        raise DeliveryError(REFUSED) from None
    except (TimeoutError, discord.HTTPException, OSError) as e:
        raise DeliveryError(f"Discord did not take the message for {place.key} ({_why(e)})") from None
    finally:
        await client.close()


UPLOAD_BYTES = 10 * 1024 * 1024  # what Discord takes in one message's files from a bot in a server without boosts


async def _send_file(target: discord.PartialMessageable, path: Path) -> None:
    """One file as a message with it attached (multipart); an image keeps an image's ending, so Discord shows it."""
    import io

    import discord

    from nanoagent.attachments import outgoing

    name, data, _ = outgoing(path)
    if len(data) > UPLOAD_BYTES:
        raise DeliveryError(f"{name} is {len(data) / 1_048_576:.1f} MB; Discord takes files up to "
                            f"{UPLOAD_BYTES // 1_048_576} MB from a bot: send a smaller one")
    await target.send(file=discord.File(io.BytesIO(data), filename=name))


# --- helpers ---------------------------------------------------------------------------------------------------


def _client(settings: DiscordConfig) -> discord.Client:
    """A discord.py client for `settings.api_base`, with the intents the channel needs and no caches it does not."""
    import discord
    from discord.http import Route

    Route.BASE = settings.api_base.rstrip("/")  # process-wide in discord.py: one Discord client per process
    discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False  # no voice here: no warning about it
    library_log = logging.getLogger("discord")
    if library_log.level == logging.NOTSET:
        library_log.setLevel(logging.INFO)  # its DEBUG lines hold message texts
    intents = discord.Intents.none()
    intents.guilds = intents.guild_messages = intents.dm_messages = intents.message_content = True
    return discord.Client(intents=intents, allowed_mentions=discord.AllowedMentions.none(), max_messages=None,
                          chunk_guilds_at_startup=False, member_cache_flags=discord.MemberCacheFlags.none())


async def _login(client: discord.Client, settings: DiscordConfig) -> None:
    """Sign in over REST, then point the websocket at the URL Discord gives for it."""
    import discord
    import yarl
    from discord.gateway import DiscordWebSocket

    try:
        await client.login(_token(settings))
        _, url, _ = await client.http.get_bot_gateway()
    except BaseException as e:
        await client.close()
        if isinstance(e, discord.LoginFailure):
            raise NanoagentError(REFUSED) from None
        if isinstance(e, discord.HTTPException | discord.GatewayNotFound | OSError | TimeoutError):
            raise NanoagentError(f"cannot reach Discord at {settings.api_base} ({_why(e)}); check the network and "
                                 "channels.discord.apiBase") from None
        raise
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)


async def _open_dm(client: discord.Client, user: int) -> int | None:
    """The id of the DM channel with `user` (Discord gives the same one each time); None when `user` is no user's
    id. A failure of Discord or the network is raised, to be retried."""
    import discord

    try:
        return (await client.create_dm(discord.Object(user))).id
    except discord.DiscordServerError:
        raise
    except discord.HTTPException:
        return None


def _token(settings: DiscordConfig) -> str:
    if not settings.token:
        raise NanoagentError(NO_TOKEN)
    return settings.token


def _retry_after(response: Any) -> float:
    """Seconds a 429 asks to wait: `X-RateLimit-Reset-After` (fractions), else `Retry-After`, else one."""
    headers = getattr(response, "headers", None) or {}
    for name in ("X-RateLimit-Reset-After", "Retry-After"):
        try:
            return max(0.0, float(str(headers.get(name))))
        except ValueError:
            continue
    return 1.0


def _why(error: BaseException) -> str:
    status = getattr(error, "status", None)
    return f"HTTP {status}" if status else type(error).__name__


def _addressed(policy: str, message: discord.Message, me: int) -> bool:
    """Is a guild message for the bot under groupPolicy: mentioned or replied to ("mention"), any ("all")?"""
    if policy != "mention":
        return policy == "all"
    if me in message.raw_mentions:
        return True
    replied = message.reference.resolved if message.reference is not None else None
    return getattr(getattr(replied, "author", None), "id", None) == me


def _file(attachment: discord.Attachment) -> FileIn:
    kind = (attachment.content_type or "").split(";")[0].strip().lower()
    if kind.startswith("image/"):
        what = "photo"
    elif kind.startswith("audio/"):
        what = "voice note" if attachment.is_voice_message() else "audio"
    elif kind.startswith("video/"):
        what = "video"
    else:
        what = "document"
    return FileIn(what, attachment.filename, attachment.size, attachment.url, attachment.content_type)


def _rebuilt(raw: dict[str, Any]) -> Incoming:
    place = parse(str(raw["place"]))
    if place is None or place.channel != NAME:
        raise ValueError(raw["place"])
    files = [FileIn(str(f["kind"]), f.get("name"), f.get("size"), str(f["ref"]), f.get("media_type"))
             for f in raw.get("files") or []]
    return Incoming(id=str(raw["id"]), place=place, user=str(raw["user"]), name=str(raw.get("name") or ""),
                    text=str(raw.get("text") or ""), raw=raw, private=bool(raw.get("private")), files=files)


def _drain(queue: asyncio.Queue[Any]) -> list[Any]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def _snowflake(at: float) -> int:
    """The smallest id Discord could give a message at time `at`."""
    return max(0, int(at * 1000) - EPOCH_MS) << 22


__all__ = ["CATCH_UP", "DiscordLink", "deliver", "verify"]
