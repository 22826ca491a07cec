"""The Telegram channel's `Link`: the Bot API through python-telegram-bot, and our own getUpdates polling loop.

python-telegram-bot is the API client (types, errors, files, timeouts); the polling loop is ours, because the
library's confirms updates as soon as it fetched them. Telegram forgets the updates below the offset the next
getUpdates gives, so the offset is the acknowledgement: it moves past a batch only once the engine wrote the batch
to the inbox, and it is kept in the state file's cursor (`last_update_id`) for the next start.

Every call goes through `api`: a 429 waits as long as Telegram says and tries again; a network failure tries again
with backoff when the call is persistent, else gives up; a method the server does not know is logged once and not
called again. A sendMessage may have arrived when its answer did not (Telegram has no idempotency key, and a bot
cannot read its chat back), so it waits `Timing.send_timeout` for the answer, and one that timed out after it was
sent is sent once more at most. The library is imported only when the channel runs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from nanoagent.channels.base import Chunk, FileIn, Incoming, Timing, record
from nanoagent.channels.state import state_file
from nanoagent.channels.telegram.settings import TelegramConfig
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place, make

if TYPE_CHECKING:
    from telegram import Bot, Message, Update

    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.telegram")
T = TypeVar("T")

MENU = (("new", "start a fresh conversation"), ("stop", "cancel the running turn"),
        ("status", "model, context used, tokens and cost"), ("usage", "tokens and cost by model"),
        ("help", "list the commands"))
CURSOR = "last_update_id"


class TelegramUnauthorized(NanoagentError):
    pass


def make_bot(settings: TelegramConfig, read_timeout: float = 20.0) -> Bot:
    from telegram import Bot
    from telegram.request import HTTPXRequest

    # the library's int time periods are deprecated: it would warn at each 429
    os.environ.setdefault("PTB_TIMEDELTA", "1")
    logging.getLogger("telegram").setLevel(logging.INFO)  # at DEBUG it logs its base URL, which holds the token
    base = settings.api_base.rstrip("/")
    assert settings.token
    return Bot(settings.token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot",
               request=HTTPXRequest(connection_pool_size=32, read_timeout=read_timeout),
               get_updates_request=HTTPXRequest(connection_pool_size=1, read_timeout=10.0))


class TelegramLink:
    def __init__(self, settings: TelegramConfig, paths: Paths, timing: Timing):
        self.settings = settings
        self.state = state_file(paths, "telegram")
        self.timing = timing
        self.bot = make_bot(settings, timing.timeout)
        self.username = ""
        self.bot_id = 0
        self.unsupported: set[str] = set()  # methods the server does not know: not called again
        self.offset: int | None = None
        self.fetched: int | None = None  # the offset that acknowledges the batch given last

    async def connect(self) -> str:
        from telegram import BotCommand

        await self.api("getMe", self.bot.initialize, persistent=True)
        try:
            self.username, self.bot_id = self.bot.username, self.bot.id
        except RuntimeError:  # getMe was refused: the log says how
            raise NanoagentError("Telegram did not answer getMe; see the gateway's log.") from None
        await self.best_effort("deleteWebhook", lambda: self.bot.delete_webhook(drop_pending_updates=False))
        await self.best_effort("setMyCommands", lambda: self.bot.set_my_commands(
            [BotCommand(name, text) for name, text in MENU]))
        return f"@{self.username}"

    async def close(self) -> None:
        await self.bot.shutdown()

    # --- receiving ------------------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        last = self.state.read().cursor.get(CURSOR, "")
        self.offset = int(last) + 1 if last.isdigit() else None
        failures = 0
        while True:
            fetch = functools.partial(self.bot.get_updates, offset=self.offset, timeout=self.timing.poll,
                                      allowed_updates=["message"])
            updates = await self.api("getUpdates", fetch, persistent=True)
            if updates is None:  # refused (another poller, a webhook): wait and ask again
                await asyncio.sleep(self.timing.pause(failures))
                failures += 1
                continue
            failures = 0
            if not updates:
                continue
            self.fetched = max(u.update_id for u in updates) + 1
            yield [item for item in map(self.incoming, updates) if item is not None]

    async def acknowledge(self, items: list[Incoming]) -> None:
        """The batch is on disk: the next getUpdates tells Telegram to forget it, and the next start asks after it."""
        if self.fetched is None or self.fetched == self.offset:
            return
        self.offset = done = self.fetched
        await asyncio.to_thread(self.state.update, lambda s: s.cursor.__setitem__(CURSOR, str(done - 1)))

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        from telegram import Update

        update = Update.de_json({k: v for k, v in raw.items() if k != "id"}, self.bot)
        return self.incoming(update) if update is not None else None

    def incoming(self, update: Update) -> Incoming | None:
        """The message of an update in the channel's words; None for an update that holds no person's message."""
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            return None
        user, chat = message.from_user, message.chat
        text = (message.text or message.caption or "").strip()
        private = chat.type == "private"
        addressed = private or self.addressed(message, text)
        if text.startswith("/"):
            first, _, rest = text.partition(" ")
            name, _, target = first.partition("@")
            addressed = addressed and (not target or target.lower() == self.username.lower())  # not another bot's
            text = f"{name} {rest}".strip()
        else:
            text = self.without_mention(text)
        return Incoming(
            id=str(update.update_id), name=user.full_name, text=text, raw=update.to_dict(), private=private,
            place=make("telegram", chat.id, message.message_thread_id if message.is_topic_message else None),
            user=str(user.id), addressed=addressed, files=files_of(message))

    def addressed(self, message: Message, text: str) -> bool:
        """In a group: is this message for us under groupPolicy?"""
        policy = self.settings.group_policy
        if policy != "mention":
            return policy == "all"
        replied = message.reply_to_message
        if replied is not None and replied.from_user is not None and replied.from_user.id == self.bot_id:
            return True
        if text.startswith("/"):
            target = text.split()[0].partition("@")[2]
            return not target or target.lower() == self.username.lower()
        if self.mention().search(text):
            return True
        return any(e.type == "text_mention" and e.user is not None and e.user.id == self.bot_id
                   for e in (*message.entities, *message.caption_entities))

    def mention(self) -> re.Pattern[str]:
        return re.compile(rf"(?<![\w@])@{re.escape(self.username)}\b", re.IGNORECASE)

    def without_mention(self, text: str) -> str:
        return re.sub(r"[ \t]{2,}", " ", self.mention().sub("", text)).strip() if self.username else text

    async def download(self, file: FileIn) -> bytes | None:
        from telegram.error import TelegramError

        try:
            found = await self.api("getFile", lambda: self.bot.get_file(file.ref))
            data = await found.download_as_bytearray(read_timeout=120) if found is not None else None
        except TelegramError as e:
            log.warning(record("telegram_download_failed", error=type(e).__name__))
            return None
        return bytes(data) if data is not None else None

    # --- sending --------------------------------------------------------------------------------------

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        """Send as HTML; as plain text when Telegram cannot parse the HTML. None when it could not be sent."""
        from telegram.error import BadRequest

        for text, mode in ((chunk.body, "HTML"), (chunk.plain, None)):
            call = functools.partial(self.bot.send_message, int(place.chat), text, parse_mode=mode,
                                     message_thread_id=_thread(place), read_timeout=self.timing.send_timeout)
            try:
                message = await self.api("sendMessage", call, persistent, resends=1)
            except BadRequest as e:
                if mode and unparsable(e):
                    continue
                log.warning(record("telegram_send_refused", error=type(e).__name__))
                return None
            return str(message.message_id) if message is not None else None
        return None

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        """Show `chunk` in a message sent before; False when it could not be shown (or the message is gone)."""
        from telegram.error import BadRequest

        for text, mode in ((chunk.body, "HTML"), (chunk.plain, None)):
            call = functools.partial(self.bot.edit_message_text, text, chat_id=int(place.chat),
                                     message_id=int(message_id), parse_mode=mode)
            try:
                done = await self.api("editMessageText", call, persistent)
            except BadRequest as e:
                if "not modified" in str(e).lower():
                    return True
                if mode and unparsable(e):
                    continue
                log.warning(record("telegram_edit_refused", error=type(e).__name__))
                return False
            return done is not None
        return False

    async def delete(self, place: Place, message_id: str) -> None:
        await self.best_effort("deleteMessage", functools.partial(self.bot.delete_message, int(place.chat),
                                                                  int(message_id)))

    async def typing(self, place: Place) -> None:
        await self.best_effort("sendChatAction", lambda: self.bot.send_chat_action(
            int(place.chat), "typing", message_thread_id=_thread(place)))

    async def api(self, method: str, call: Callable[[], Awaitable[T]], persistent: bool = False,
                  resends: int | None = None) -> T | None:
        """One Bot API call. A 429 waits as long as Telegram says and tries again; a network failure tries again
        with backoff when `persistent`, else gives up (None); with `resends`, a call that timed out once it was
        sent (it may have arrived) is made again that many times at most. A 400 is raised to the caller; other
        refusals (a blocked bot, a method the server does not know) are logged and give None."""
        from telegram.error import BadRequest, InvalidToken, NetworkError, RetryAfter, TelegramError, TimedOut

        if method in self.unsupported:
            return None
        failures = 0
        while True:
            try:
                result = await call()
            except TimedOut as e:
                if resends is None or not perhaps_sent(e):
                    if not await self.failed(method, e, persistent, failures):
                        return None
                    failures += 1
                    continue
                log.warning(record("telegram_timed_out", method=method, resends_left=resends))
                if resends <= 0 or not persistent:
                    return None
                resends -= 1
                continue
            except RetryAfter as e:
                wait = retry_after(e)
                log.warning(record("telegram_rate_limited", method=method, retry_after=wait))
                await asyncio.sleep(wait)
                continue
            except BadRequest:
                raise
            except NetworkError as e:
                if not await self.failed(method, e, persistent, failures):
                    return None
                failures += 1
                continue
            except InvalidToken:
                if method in ("getMe", "getUpdates"):
                    raise TelegramUnauthorized("Telegram rejected the bot token: check channels.telegram.token or "
                                               "TELEGRAM_BOT_TOKEN (from @BotFather).") from None
                self.unsupported.add(method)  # a 404: a server without this method
                log.warning(record("telegram_method_unsupported", method=method))
                return None
            except TelegramError as e:
                log.warning(record("telegram_call_failed", method=method, error=type(e).__name__))
                if method == "getUpdates":  # no message reaches us (another poller, a webhook): the link is failing
                    self.timing.report(f"Telegram refused getUpdates: {self.reason(e)}")
                return None
            if failures:
                log.info(record("telegram_reachable", method=method))
            self.timing.report(None)
            return result

    async def failed(self, method: str, error: Exception, persistent: bool, failures: int) -> bool:
        """A network failure: reported; True after the backoff's pause when the call is to be made again."""
        if failures == 0:
            log.warning(record("telegram_unreachable", method=method, error=type(error).__name__))
        self.timing.report(f"Telegram's Bot API unreachable: {self.reason(error)}")
        if not persistent:
            return False
        await asyncio.sleep(self.timing.pause(failures))
        return True

    def reason(self, error: Exception) -> str:
        """An error's own words for the component's health, one short line without the token."""
        text = " ".join(str(error).split())
        for secret in (self.settings.token or "", (self.settings.token or "").rpartition(":")[2]):
            if len(secret) >= 8:
                text = text.replace(secret, "<token>")
        return text[:160] or type(error).__name__

    async def best_effort(self, method: str, call: Callable[[], Awaitable[Any]]) -> None:
        """A call the channel works without (the typing indicator, the command menu): any refusal is logged."""
        from telegram.error import BadRequest

        try:
            await self.api(method, call)
        except BadRequest:
            self.unsupported.add(method)
            log.warning(record("telegram_method_unsupported", method=method))


def files_of(message: Message) -> list[FileIn]:
    """Photos (the largest size; Telegram sends them as JPEG), documents, voice notes (OGG), audio and video."""
    found: list[FileIn] = []
    if message.photo:
        photo = message.photo[-1]
        found.append(FileIn("photo", None, photo.file_size, photo.file_id, "image/jpeg"))
    for kind, media, default in (("document", message.document, None), ("voice note", message.voice, "audio/ogg"),
                                 ("audio", message.audio, None), ("video", message.video, None)):
        if media is not None:
            found.append(FileIn(kind, getattr(media, "file_name", None), media.file_size, media.file_id,
                                media.mime_type or default))
    return found


def retry_after(error: Any) -> float:
    with warnings.catch_warnings():  # the int form of retry_after is deprecated in favour of timedelta
        warnings.simplefilter("ignore")
        value = error.retry_after
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    return max(0.0, seconds)


def perhaps_sent(error: Exception) -> bool:
    """Did the call time out after the request went out (waiting for the answer), not while connecting?"""
    import httpx

    return isinstance(error.__cause__, httpx.ReadTimeout | httpx.WriteTimeout)


def unparsable(error: Exception) -> bool:
    return "parse entities" in str(error).lower()


def _thread(place: Place) -> int | None:
    return int(place.thread) if place.thread else None
