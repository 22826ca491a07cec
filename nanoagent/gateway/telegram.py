"""The Telegram channel: a gateway component that long-polls the Bot API and serves each chat as a session.

An adapter with two faces. A message from Telegram becomes a message for the session `telegram:<chat_id>` (a forum
topic: `telegram:<chat_id>:<thread_id>`) through `Hub.send`, with nobody to approve commands (`ask=None`: a command
that needs a yes is refused). Every turn of such a session, whoever started it, comes back as Telegram messages:
streamed by editing one message at most once per `Timing.interval` and continued in a new message past Telegram's
length limit, with a typing indicator while the turn runs.

Who may talk: the user ids in `allowFrom` and the people `nanoagent pairing approve` let in. Anyone else gets a
pairing code in a private chat, once, and nothing else (no model call). In groups only allowed users are answered,
by default only when they mention the bot or reply to it (`groupPolicy`).

No message is lost or answered twice when the gateway is killed: an update is confirmed to Telegram only once it is
in the inbox of telegram_state.py, leaves the inbox only once it is in its session file, and a turn whose reply did
not reach the chat is finished after the restart. python-telegram-bot is the API client (types, errors, files,
timeouts); the polling loop is ours, because the library's confirms updates as soon as it fetched them. The library
is imported only when the channel runs.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import secrets
import time
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nanoagent.agent import events as ev
from nanoagent.agent.commands import STOP_COMMANDS
from nanoagent.agent.loop import CANCELLED
from nanoagent.agent.runner import EMPTY_REPLY
from nanoagent.attachments import sniff
from nanoagent.config.schema import TelegramConfig
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import private_dir
from nanoagent.gateway.hub import Hub, HubClosed
from nanoagent.gateway.server import Component
from nanoagent.gateway.telegram_format import Chunk, split_markdown
from nanoagent.gateway.telegram_state import StateFile, TelegramState, show_code
from nanoagent.messages import (
    ImageBlock,
    calls_of,
    image_block,
    is_assistant,
    is_user,
    strip_runtime_context,
    text_of,
)
from nanoagent.paths import Paths

if TYPE_CHECKING:
    from telegram import Bot, Message, Update

log = logging.getLogger("nanoagent.gateway.telegram")
T = TypeVar("T")

MEDIA_LIMIT_MB = 20  # the Bot API's own limit for downloads
MENU = (("new", "start a fresh conversation"), ("stop", "cancel the running turn"),
        ("status", "model, context used, tokens and cost"), ("usage", "tokens and cost by model"),
        ("help", "list the commands"))
START = "Hi! Send me a message and I will answer. /help lists the commands."
RESUME = ("(nanoagent restarted before your answer to my last message was finished and delivered. Carry on from "
          "where you were and answer it.)")
FAILED_BEFORE_RESTART = "Your last message failed before nanoagent restarted; /retry sends it once more."


class TelegramUnauthorized(NanoagentError):
    pass


@dataclass(frozen=True)
class Timing:
    """The channel's clocks and intervals, injected so tests never wait a real second."""

    interval: float = 1.0  # seconds between two edits of a streaming reply
    typing: float = 4.0  # seconds between typing indicators (Telegram shows one for 5 s)
    poll: int = 30  # long-poll timeout of getUpdates, seconds
    backoff: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)  # waits after failed calls, the last one repeated
    clock: Callable[[], float] = time.monotonic
    now: Callable[[], float] = time.time  # wall clock: pairing codes' age, media file names


def telegram_component(settings: TelegramConfig, paths: Paths, hub: Hub, timing: Timing = Timing(),
                       max_image_bytes: int = 5_000_000) -> Component:
    """The channel as a gateway component; a setting it cannot work with stops the gateway before it starts."""
    check_settings(settings)
    return Component("telegram", TelegramChannel(settings, paths, hub, timing, max_image_bytes).run)


def check_settings(settings: TelegramConfig) -> None:
    if not settings.token:
        raise NanoagentError("channels.telegram.enabled is true but there is no bot token: set TELEGRAM_BOT_TOKEN "
                             "or channels.telegram.token (create a bot with @BotFather in Telegram).")
    if importlib.util.find_spec("telegram") is None:
        raise NanoagentError("The Telegram channel needs python-telegram-bot: pip install 'nanoagent[telegram]'.")


def session_key(chat_id: int, thread_id: int | None = None) -> str:
    return f"telegram:{chat_id}" + (f":{thread_id}" if thread_id else "")


def parse_key(key: str) -> tuple[int, int | None] | None:
    """(chat id, topic) of a Telegram session key; None for a key that names no chat."""
    match = re.fullmatch(r"telegram:(-?\d+)(?::(\d+))?", key)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)) if match.group(2) else None


@dataclass
class _Waiting:
    """A message given to the hub and not yet written to its session file."""

    update_id: int
    text: str
    images: list[ImageBlock] = field(default_factory=list)


class TelegramChannel:
    """What outlives one run of the component (the supervisor restarts a run that crashed): the state file, and
    which messages this process gave the hub."""

    def __init__(self, settings: TelegramConfig, paths: Paths, hub: Hub, timing: Timing = Timing(),
                 max_image_bytes: int = 5_000_000):
        self.settings = settings
        self.paths = paths
        self.hub = hub
        self.timing = timing
        self.max_image_bytes = max_image_bytes  # a photo (or image document) over this goes by name only
        self.state = StateFile(paths.channels_dir / "telegram.json")
        self.given: set[int] = set()  # update ids this process gave the hub
        self.waiting: dict[str, list[_Waiting]] = {}  # per session, in the order given

    async def run(self) -> None:
        # httpx logs each URL at INFO and the library its base URL at DEBUG: ours hold the token
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("telegram").setLevel(logging.INFO)
        os.environ.setdefault("PTB_TIMEDELTA", "1")  # the library's int time periods are deprecated: warn each 429
        try:
            await _Link(self, _make_bot(self.settings)).run()
        except NanoagentError as e:  # ours say what to fix, and hold no token or message
            log.error(_record("telegram_failed", error=str(e)))
            raise

    def allowed(self, user_id: int) -> bool:
        return str(user_id) in {a.strip() for a in self.settings.allow_from} or user_id in self.state.read().allowed

    # --- the inbox: each change is written before the call returns ------------------------------------

    def take(self, updates: list[dict[str, Any]]) -> set[int]:
        """Put fetched updates in the inbox; the ids of those not taken before (a restart may fetch some again)."""
        def change(state: TelegramState) -> set[int]:
            fresh = [u for u in updates if u["update_id"] > state.last_update_id]
            state.inbox.extend(fresh)
            state.last_update_id = max([state.last_update_id, *(u["update_id"] for u in fresh)])
            return {u["update_id"] for u in fresh}

        return self.state.update(change) if updates else set()

    def handled(self, *update_ids: int) -> None:
        ids = set(update_ids)

        def change(state: TelegramState) -> None:
            state.inbox = [u for u in state.inbox if u["update_id"] not in ids]

        self.state.update(change)

    def give(self, key: str, update_id: int, text: str, images: list[ImageBlock] | None = None) -> _Waiting:
        waiting = _Waiting(update_id, text, images or [])
        self.waiting.setdefault(key, []).append(waiting)
        self.given.add(update_id)
        return waiting

    def forget(self, key: str, waiting: _Waiting, handled: bool) -> None:
        if waiting in self.waiting.get(key, []):
            self.waiting[key].remove(waiting)
        if handled:
            self.handled(waiting.update_id)

    def persisted(self, key: str, content: str, opens_turn: bool) -> None:
        """The loop wrote a user message to the session file: the messages it holds leave the inbox, and a turn it
        starts is open until its reply reached the chat. Called from the session's event sink, just after the
        write: a kill in between is the one moment that could make a message count twice."""
        text = strip_runtime_context(content)
        waiting = self.waiting.get(key, [])
        done = _run_of(waiting, text)
        for item in done:
            waiting.remove(item)
        if not done and not opens_turn:
            return
        ids = {item.update_id for item in done}

        def change(state: TelegramState) -> None:
            state.inbox = [u for u in state.inbox if u["update_id"] not in ids]
            if opens_turn and key not in state.open_turns:
                state.open_turns.append(key)

        self.state.update(change)

    def dropped(self, key: str) -> None:
        """The session's turn was cancelled, and the hub dropped the messages waiting to join it."""
        ids = [item.update_id for item in self.waiting.pop(key, [])]
        if ids:
            self.handled(*ids)

    def answered(self, key: str) -> None:
        def change(state: TelegramState) -> None:
            state.open_turns = [k for k in state.open_turns if k != key]

        self.state.update(change)


def _run_of(waiting: list[_Waiting], text: str) -> list[_Waiting]:
    """The messages a stored user message holds: one message, or several in a row joined by blank lines (those
    that waited while a turn ran, sent by the hub as the next turn). Exact, so a message is never taken for
    another that merely contains it."""
    for start in range(len(waiting)):
        joined = ""
        for end in range(start, len(waiting)):
            joined = waiting[end].text if end == start else f"{joined}\n\n{waiting[end].text}"
            if joined == text:
                return waiting[start:end + 1]
            if not text.startswith(joined):
                break
    return []


@dataclass
class _Sent:
    message_id: int
    html: str  # what we last asked Telegram to show (as HTML, or its plain fallback)


@dataclass
class _Reply:
    """One turn's reply as it grows: the assistant's finished texts, the text still streaming, and what of it is
    already in the chat."""

    parts: list[str] = field(default_factory=list)
    live: str = ""
    notices: list[str] = field(default_factory=list)
    ended: bool = False
    reason: ev.StopReason | None = None
    error: str | None = None
    keep_open: bool = False  # cancelled by the gateway stopping: finished after the restart
    retry_hint: bool = True  # the loop marked the failed turn, so /retry can send it again
    sent: list[_Sent] = field(default_factory=list)
    shown: str = ""
    flushed_at: float = -math.inf

    def text(self) -> str:
        body = "\n\n".join(p.strip() for p in [*self.parts, self.live] if p.strip())
        if not self.ended:
            return body
        if not body and self.reason in (ev.StopReason.COMPLETED, ev.StopReason.MAX_TOKENS):
            body = EMPTY_REPLY
        extra = list(self.notices)
        if self.reason is ev.StopReason.ERROR:
            hint = " Your message is kept; /retry sends it once more." if self.retry_hint else ""
            extra.append(f"Error: {(self.error or 'the turn failed').rstrip('.')}.{hint}")
        return "\n\n".join(p for p in [body, *extra] if p)

    def end(self, reason: ev.StopReason, error: str | None = None) -> None:
        self.ended, self.reason, self.error = True, reason, error


class _Link:
    """One run of the channel: the bot, the tasks, and each session's face in Telegram."""

    def __init__(self, channel: TelegramChannel, bot: Bot):
        self.channel = channel
        self.bot = bot
        self.hub = channel.hub
        self.timing = channel.timing
        self.settings = channel.settings
        self.chats: dict[str, _Chat] = {}
        self.queues: dict[int, asyncio.Queue[Update]] = {}
        self.group = asyncio.TaskGroup()
        self.username = ""
        self.bot_id = 0
        self.unsupported: set[str] = set()  # methods the server does not know: not called again

    async def run(self) -> None:
        try:
            await self.connect()
            async with self.group:
                self.resume()
                self.replay()
                await self.poll()
        finally:
            for chat in self.chats.values():
                chat.unwatch()
            try:
                await self.bot.shutdown()
            except Exception:  # noqa: BLE001 - closing the HTTP client; nothing left to do if it fails
                pass

    async def connect(self) -> None:
        from telegram import BotCommand

        await self.api("getMe", self.bot.initialize, persistent=True)
        try:
            self.username, self.bot_id = self.bot.username, self.bot.id
        except RuntimeError:  # getMe was refused: the log says how
            raise NanoagentError("Telegram did not answer getMe; see the gateway's log.") from None
        await self.best_effort("deleteWebhook", lambda: self.bot.delete_webhook(drop_pending_updates=False))
        await self.best_effort("setMyCommands", lambda: self.bot.set_my_commands(
            [BotCommand(name, text) for name, text in MENU]))
        log.info(_record("telegram_started", bot_id=self.bot_id))

    # --- receiving ------------------------------------------------------------------------------------

    async def poll(self) -> None:
        last = self.channel.state.read().last_update_id
        offset = last + 1 if last else None
        failures = 0
        while True:
            fetch = functools.partial(self.bot.get_updates, offset=offset, timeout=self.timing.poll,
                                      allowed_updates=["message"])
            updates = await self.api("getUpdates", fetch, persistent=True)
            if updates is None:  # refused (another poller, a webhook): wait and ask again
                await asyncio.sleep(self.timing.backoff[min(failures, len(self.timing.backoff) - 1)])
                failures += 1
                continue
            failures = 0
            if not updates:
                continue
            fresh = self.channel.take([u.to_dict() for u in updates])  # on disk before Telegram is told
            offset = max(u.update_id for u in updates) + 1
            for update in updates:
                if update.update_id in fresh:
                    self.dispatch(update)

    def replay(self) -> None:
        """Updates taken before a restart and not yet handled, in the order they came."""
        from telegram import Update

        for raw in self.channel.state.read().inbox:
            if raw["update_id"] not in self.channel.given:
                update = Update.de_json(raw, self.bot)
                if update is not None:
                    self.dispatch(update)

    def dispatch(self, update: Update) -> None:
        """Each chat's updates are handled in order, by a worker of its own; chats do not wait for each other."""
        message = update.message
        if message is None:
            self.channel.handled(update.update_id)
            return
        queue = self.queues.get(message.chat_id)
        if queue is None:
            queue = self.queues[message.chat_id] = asyncio.Queue()
            self.group.create_task(self.worker(queue), name=f"telegram chat {message.chat_id}")
        queue.put_nowait(update)

    async def worker(self, queue: asyncio.Queue[Update]) -> None:
        while True:
            update = await queue.get()
            try:
                await self.handle(update)
            except Exception as e:  # noqa: BLE001 - one bad update must not stop the chat, nor come back forever
                log.error(_record("telegram_update_failed", update_id=update.update_id, error=type(e).__name__))
                self.channel.handled(update.update_id)

    async def handle(self, update: Update) -> None:
        message, update_id = update.message, update.update_id
        assert message is not None
        user, chat = message.from_user, message.chat
        text = (message.text or message.caption or "").strip()
        private = chat.type == "private"
        if user is None or user.is_bot or not (private or self.addressed(message, text)):
            self.channel.handled(update_id)
            return
        if not self.channel.allowed(user.id):
            if private:
                await self.pair(message)
            self.channel.handled(update_id)
            return
        key = session_key(chat.id, message.message_thread_id if message.is_topic_message else None)
        face = self.chat(key)
        command = self.command(text)
        if command == "":  # for another bot
            self.channel.handled(update_id)
            return
        if command is not None:
            self.spawn(self.run_command(update_id, face, command), f"telegram command {key}")
            return
        saved = await self.attachments(message)
        body = "\n".join(p for p in [self.without_mention(text), *(line for line, _ in saved)] if p).strip()
        if not body:
            self.channel.handled(update_id)
            return
        if not private:
            body = f"{user.full_name}: {body}"
        images = [image for _, image in saved if image is not None]
        if images and not self.hub.loop.takes_images(key):  # the message goes on, naming the saved files
            model = self.hub.loop.model_for(self.hub.loop.session(key))
            await face.say(f"{model} does not take images, so it gets your message with the file's name, not the "
                           "picture. /model switches to one that does.")
            images = []
        waiting = self.channel.give(key, update_id, body, images)
        self.spawn(self.send(face, waiting), f"telegram message {key}")

    async def send(self, face: _Chat, waiting: _Waiting) -> None:
        """Give the hub one message. Its turn (or the turn it joins) is shown by the session's face, which watches
        every turn of the session: this call only reports what went wrong."""
        try:
            await self.hub.send(face.key, waiting.text, ask=None, images=waiting.images)
        except HubClosed:
            self.channel.forget(face.key, waiting, handled=False)  # stays in the inbox: handled after the restart
        except NanoagentError as e:
            self.channel.forget(face.key, waiting, handled=True)
            face.failed(str(e))

    async def run_command(self, update_id: int, face: _Chat, command: str) -> None:
        name = command.split()[0]
        if name == "/start":
            await face.say(START)
            self.channel.handled(update_id)
            return
        try:
            result = await self.hub.send(face.key, command, ask=None)
        except HubClosed:
            return  # stays in the inbox
        except NanoagentError as e:
            reply = str(e)
        else:
            reply = result.reply if result is not None and result.result is None else ""  # a turn shows itself
        if reply:
            await face.say(reply)
        if name in STOP_COMMANDS:
            self.channel.dropped(face.key)
        self.channel.handled(update_id)

    def command(self, text: str) -> str | None:
        """`/name args` for a slash command addressed to us; "" for one addressed to another bot; None for text."""
        if not text.startswith("/"):
            return None
        first, _, rest = text.partition(" ")
        name, _, target = first.partition("@")
        if target and target.lower() != self.username.lower():
            return ""
        return f"{name.lower()} {rest.strip()}".strip()

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

    async def pair(self, message: Message) -> None:
        user = message.from_user
        assert user is not None
        now = self.timing.now()
        code, turned_away = self.channel.state.update(lambda s: (
            code := s.pair(user.id, message.chat.id, user.full_name, now),
            code is None and all(p.user_id != user.id for p in s.pairing)))
        if code is None:  # they have a code already, or as many as are kept are pending: say nothing more
            if turned_away:
                log.info(_record("telegram_pairing_full", user_id=user.id))
            return
        log.info(_record("telegram_pairing_code", user_id=user.id))
        shown = show_code(code)
        await self.send_text(message.chat.id, None, (
            f"I don't know you yet, so I can't pass your messages on. Your pairing code is {shown} (valid for an "
            f"hour). Ask the owner of this bot to run:\n\nnanoagent pairing approve {shown}"))

    # --- media ----------------------------------------------------------------------------------------

    async def attachments(self, message: Message) -> list[tuple[str, ImageBlock | None]]:
        """Photos, documents, voice notes, audio and video, saved under the workspace's media/; a line each for the
        message text, naming the file, and for a photo or an image document (told by its bytes) within the size
        cap, its reference, so the model sees the picture itself."""
        found: list[tuple[str, Any, str | None]] = []
        if message.photo:
            found.append(("photo", message.photo[-1], None))  # the largest size
        if message.document:
            found.append(("document", message.document, message.document.file_name))
        if message.voice:
            found.append(("voice note", message.voice, None))
        if message.audio:
            found.append(("audio", message.audio, message.audio.file_name))
        if message.video:
            found.append(("video", message.video, message.video.file_name))
        return [await self.save(kind, media, name) for kind, media, name in found]

    async def save(self, kind: str, media: Any, name: str | None) -> tuple[str, ImageBlock | None]:
        from telegram.error import TelegramError

        limit = MEDIA_LIMIT_MB * 1024 * 1024
        too_big = f"[{kind} not saved: it is over the {MEDIA_LIMIT_MB} MB limit]"
        if (media.file_size or 0) > limit:
            return too_big, None
        try:
            file = await self.api("getFile", lambda: self.bot.get_file(media.file_id))
            data = await file.download_as_bytearray(read_timeout=120) if file is not None else None
        except TelegramError as e:
            log.warning(_record("telegram_download_failed", error=type(e).__name__))
            data = None
        if data is None:
            return f"[{kind} could not be downloaded from Telegram]", None
        if len(data) > limit:
            return too_big, None
        stem, ext = media_name(kind, name, file.file_path if file else None, self.timing.now())
        path = await asyncio.to_thread(save_media, self.channel.paths.workspace / "media", stem, ext, bytes(data))
        line = f"[{kind} saved as media/{path.name}]"
        media_type = sniff(bytes(data[:16])) if kind in ("photo", "document") else None
        if media_type is None or len(data) > self.channel.max_image_bytes:
            return line, None
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        return line, image_block(f"media/{path.name}", digest, media_type, path.name)

    # --- sessions -------------------------------------------------------------------------------------

    def chat(self, key: str) -> _Chat:
        face = self.chats.get(key)
        if face is None:
            target = parse_key(key)
            assert target is not None
            face = self.chats[key] = _Chat(self, key, *target)
            self.group.create_task(face.show(), name=f"telegram replies {key}")
        return face

    def resume(self) -> None:
        """Turns whose reply did not reach the chat before the gateway stopped: deliver it from the session file
        when the turn finished there, else finish the turn."""
        for key in self.channel.waiting:  # given to the hub by an earlier run of this process: watch for them
            if self.channel.waiting[key]:
                self.chat(key)
        for key in self.channel.state.read().open_turns:
            if parse_key(key) is None:
                self.channel.answered(key)
                continue
            face = self.chat(key)
            if self.hub.busy(key):
                continue  # still running here: this run only restarted the channel
            session = self.hub.loop.session(key)
            last_user = max((i for i, m in enumerate(session.messages) if is_user(m)), default=-1)
            last = session.messages[-1] if session.messages else None
            if last_user in session.failed():
                face.replay(FAILED_BEFORE_RESTART)
            elif last is not None and is_assistant(last) and not calls_of(last) and last["content"].strip() \
                    and last["content"] != CANCELLED:
                face.replay(last["content"])
            else:
                self.spawn(self.send_resume(face), f"telegram resume {key}")

    async def send_resume(self, face: _Chat) -> None:
        try:
            await self.hub.send(face.key, RESUME, ask=None)
        except HubClosed:
            pass
        except NanoagentError as e:
            face.failed(str(e))

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        async def guarded() -> None:
            try:
                await work
            except Exception as e:  # noqa: BLE001 - one message's failure is that message's alone
                log.error(_record("telegram_task_failed", task=name.split()[1], error=type(e).__name__))

        self.group.create_task(guarded(), name=name)

    # --- sending --------------------------------------------------------------------------------------

    async def api(self, method: str, call: Callable[[], Awaitable[T]], persistent: bool = False) -> T | None:
        """One Bot API call. A 429 waits as long as Telegram says and tries again; a network failure tries again
        with backoff when `persistent`, else gives up (None). A 400 is raised to the caller; other refusals (a
        blocked bot, a method the server does not know) are logged and give None."""
        from telegram.error import BadRequest, InvalidToken, NetworkError, RetryAfter, TelegramError

        if method in self.unsupported:
            return None
        failures = 0
        while True:
            try:
                result = await call()
            except RetryAfter as e:
                wait = _retry_after(e)
                log.warning(_record("telegram_rate_limited", method=method, retry_after=wait))
                await asyncio.sleep(wait)
                continue
            except BadRequest:
                raise
            except NetworkError as e:
                if failures == 0:
                    log.warning(_record("telegram_unreachable", method=method, error=type(e).__name__))
                if not persistent:
                    return None
                await asyncio.sleep(self.timing.backoff[min(failures, len(self.timing.backoff) - 1)])
                failures += 1
                continue
            except InvalidToken:
                if method in ("getMe", "getUpdates"):
                    raise TelegramUnauthorized("Telegram rejected the bot token: check channels.telegram.token or "
                                               "TELEGRAM_BOT_TOKEN (from @BotFather).") from None
                self.unsupported.add(method)  # a 404: a server without this method
                log.warning(_record("telegram_method_unsupported", method=method))
                return None
            except TelegramError as e:
                log.warning(_record("telegram_call_failed", method=method, error=type(e).__name__))
                return None
            if failures:
                log.info(_record("telegram_reachable", method=method))
            return result

    async def best_effort(self, method: str, call: Callable[[], Awaitable[Any]]) -> None:
        """A call the channel works without (the typing indicator, the command menu): any refusal is logged."""
        from telegram.error import BadRequest

        try:
            await self.api(method, call)
        except BadRequest:
            self.unsupported.add(method)
            log.warning(_record("telegram_method_unsupported", method=method))

    async def send_text(self, chat_id: int, thread_id: int | None, text: str) -> None:
        for chunk in split_markdown(text):
            await self.send_chunk(chat_id, thread_id, chunk, persistent=True)

    async def send_chunk(self, chat_id: int, thread_id: int | None, chunk: Chunk, persistent: bool) -> _Sent | None:
        """Send as HTML; as plain text when Telegram cannot parse the HTML. None when it could not be sent."""
        from telegram.error import BadRequest

        for text, mode in ((chunk.html, "HTML"), (chunk.plain, None)):
            call = functools.partial(self.bot.send_message, chat_id, text, parse_mode=mode, message_thread_id=thread_id)
            try:
                message = await self.api("sendMessage", call, persistent)
            except BadRequest as e:
                if mode and _unparsable(e):
                    continue
                log.warning(_record("telegram_send_refused", error=type(e).__name__))
                return None
            return _Sent(message.message_id, chunk.html) if message is not None else None
        return None

    async def edit_chunk(self, chat_id: int, thread_id: int | None, sent: _Sent, chunk: Chunk,
                         persistent: bool) -> bool:
        """Show `chunk` in a message sent before; False when it could not be shown."""
        from telegram.error import BadRequest

        for text, mode in ((chunk.html, "HTML"), (chunk.plain, None)):
            call = functools.partial(self.bot.edit_message_text, text, chat_id=chat_id, message_id=sent.message_id,
                                     parse_mode=mode)
            try:
                done = await self.api("editMessageText", call, persistent)
            except BadRequest as e:
                if "not modified" in str(e).lower():
                    done = True
                elif "not found" in str(e).lower():  # deleted in the chat: show this part anew
                    again = await self.send_chunk(chat_id, thread_id, chunk, persistent)
                    if again is not None:
                        sent.message_id, sent.html = again.message_id, again.html
                    return again is not None
                elif mode and _unparsable(e):
                    continue
                else:
                    log.warning(_record("telegram_edit_refused", error=type(e).__name__))
                    return False
            if done is None:
                return False
            sent.html = chunk.html
            return True
        return False


class _Chat:
    """One session's face in Telegram: every turn of the session becomes one reply, sent in order; the typing
    indicator stays on while a turn runs. Events arrive synchronously from the loop; `show` does the sending."""

    def __init__(self, link: _Link, key: str, chat_id: int, thread_id: int | None):
        self.link = link
        self.key = key
        self.chat_id = chat_id
        self.thread_id = thread_id
        self.replies: deque[_Reply] = deque([_Reply()] if link.hub.busy(key) else [])  # attached mid-turn
        self.opening = False
        self.wake = asyncio.Event()
        self.unwatch = link.hub.watch(key, self.event)

    def event(self, event: ev.Event) -> None:
        if isinstance(event, ev.SubagentEnded) and event.background:
            self.replay(event.as_message())  # a background run's answer is a message in the chat
            return
        if event.agent:
            return  # a sub-agent's events are its own
        if isinstance(event, ev.TurnStarted):
            self.replies.append(_Reply())
            self.opening = True
        elif isinstance(event, ev.MessageAdded) and is_user(event.message):
            self.link.channel.persisted(self.key, text_of(event.message), self.opening)
            self.opening = False
        reply = next((r for r in reversed(self.replies) if not r.ended), None)  # a background answer may follow it
        if reply is None:
            return  # not inside a turn (a command's own events)
        if isinstance(event, ev.TextDelta):
            reply.live += event.text
        elif isinstance(event, ev.MessageAdded) and is_assistant(event.message):
            reply.parts.append(event.message["content"])
            reply.live = ""
        elif isinstance(event, ev.Notice):
            reply.notices.append(event.text)
        elif isinstance(event, ev.TurnEnded):
            reply.end(event.reason, event.error)
            if event.reason is ev.StopReason.CANCELLED:
                if self.link.hub.closed:
                    reply.keep_open = True  # the gateway is stopping, not the user: finish it after the restart
                else:
                    self.link.channel.dropped(self.key)
        self.wake.set()

    def replay(self, text: str) -> None:
        reply = _Reply(parts=[text])
        reply.end(ev.StopReason.COMPLETED)
        self.replies.append(reply)
        self.wake.set()

    def failed(self, error: str) -> None:
        """The turn ended with an exception instead of its last event."""
        if not self.replies or self.replies[-1].ended:
            self.replies.append(_Reply())
        self.replies[-1].end(ev.StopReason.ERROR, error)
        self.replies[-1].retry_hint = False
        self.wake.set()

    async def say(self, text: str) -> None:
        """A command's answer: one line as it is, several in a code block (they are aligned columns)."""
        await self.link.send_text(self.chat_id, self.thread_id,
                                  f"```\n{text}\n```" if "\n" in text.strip() else text.replace("`", "'"))

    async def show(self) -> None:
        timing = self.link.timing
        next_typing = -math.inf
        while True:
            self.wake.clear()
            if not self.replies:
                await self.wake.wait()
                continue
            reply = self.replies[0]
            now = timing.clock()
            if not reply.ended and not self.link.hub.busy(self.key):
                reply.end(ev.StopReason.ERROR, "the turn stopped without finishing")  # it raised; see the log
                reply.retry_hint = False
            due = reply.flushed_at + timing.interval
            if reply.ended:
                if reply.text() != reply.shown and now < due:
                    await asyncio.sleep(due - now)
                await self.deliver(reply, final=True)
                self.replies.popleft()
                if not reply.keep_open and not self.replies:  # a later turn, if any, keeps the session open
                    self.link.channel.answered(self.key)
                next_typing = -math.inf
                continue
            if now >= next_typing:
                next_typing = now + timing.typing
                await self.link.best_effort("sendChatAction", lambda: self.link.bot.send_chat_action(
                    self.chat_id, "typing", message_thread_id=self.thread_id))
            wait = next_typing - now
            if self.link.settings.streaming and reply.text().strip() and reply.text() != reply.shown:
                if now >= due:
                    await self.deliver(reply, final=False)
                    continue
                wait = min(wait, due - now)
            try:  # not wait_for: in 3.11 it can swallow a cancel that comes as the event is set
                async with asyncio.timeout(max(wait, 0.0)):
                    await self.wake.wait()
            except TimeoutError:
                pass

    async def deliver(self, reply: _Reply, final: bool) -> None:
        """Bring the chat up to date with the reply: edit the messages whose part changed, send the parts that
        are new. A final delivery keeps trying through network failures; a streaming one waits for the next.
        The interval to the next delivery counts from the end of this one."""
        try:
            await self._deliver(reply, final)
        finally:
            reply.flushed_at = self.link.timing.clock()

    async def _deliver(self, reply: _Reply, final: bool) -> None:
        link = self.link
        text = reply.text()
        if text == reply.shown:
            return
        chunks = split_markdown(text)
        for i, chunk in enumerate(chunks):
            if i < len(reply.sent):
                if reply.sent[i].html != chunk.html and not await link.edit_chunk(
                        self.chat_id, self.thread_id, reply.sent[i], chunk, final):
                    return
                continue
            sent = await link.send_chunk(self.chat_id, self.thread_id, chunk, final)
            if sent is None:
                return
            reply.sent.append(sent)
        if final:
            for extra in reply.sent[len(chunks):]:  # the finished reply needs fewer messages than it streamed in
                await link.best_effort("deleteMessage", functools.partial(link.bot.delete_message, self.chat_id,
                                                                          extra.message_id))
        reply.shown = text


# --- helpers ------------------------------------------------------------------------------------------


def _make_bot(settings: TelegramConfig) -> Bot:
    from telegram import Bot
    from telegram.request import HTTPXRequest

    base = settings.api_base.rstrip("/")
    assert settings.token
    return Bot(settings.token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot",
               request=HTTPXRequest(connection_pool_size=32, read_timeout=20.0),
               get_updates_request=HTTPXRequest(connection_pool_size=1, read_timeout=10.0))


def _retry_after(error: Any) -> float:
    with warnings.catch_warnings():  # the int form of retry_after is deprecated in favour of timedelta
        warnings.simplefilter("ignore")
        value = error.retry_after
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    return max(0.0, seconds)


def _unparsable(error: Exception) -> bool:
    return "parse entities" in str(error).lower()


def media_name(kind: str, original: str | None, file_path: str | None, now: float) -> tuple[str, str]:
    """(stem, extension) for a saved file: the sender's file name without folders, leading dots or odd characters,
    or the kind and the time; the extension from the name or from Telegram's path."""
    name = re.split(r"[\\/]", original or "")[-1]
    name = "".join(c if c.isalnum() or c in "-_. " else "_" for c in name).strip(" .")
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    if not ext and file_path and "." in file_path.rsplit("/", 1)[-1]:
        ext = file_path.rsplit(".", 1)[-1]
    ext = "".join(c for c in ext if c.isalnum())[:10].lower()
    stem = stem.strip(" .")[:80] or f"{kind.replace(' ', '-')}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}"
    return stem, ext


def save_media(folder: Path, stem: str, ext: str, data: bytes) -> Path:
    """Write `data` to folder/<stem>-<random>.<ext> (0600): a new name, never another file replaced; a file
    appears under its name only once it is whole."""
    private_dir(folder)
    tmp = folder / f".{stem}.{secrets.token_hex(4)}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        while True:
            path = folder / (f"{stem}-{secrets.token_hex(3)}" + (f".{ext}" if ext else ""))
            try:
                os.link(tmp, path)
                return path
            except FileExistsError:
                continue
    finally:
        tmp.unlink(missing_ok=True)


def _record(event: str, **fields: Any) -> str:
    """A structured log line: the event and its fields; never message contents or the token."""
    return json.dumps({"event": event, **fields}, ensure_ascii=False)
