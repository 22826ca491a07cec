"""The gateway side every channel shares: a channel's `Link` run as a gateway component, each chat as a session.

An adapter with two faces. A message from the app becomes a message for its session (`Incoming.place`) through
`Hub.send`, with nobody to approve commands (`ask=None`: a command that needs a yes is refused). Every turn of such
a session, whoever started it, comes back as the app's messages through the reply engine (`reply.py`).

Who may talk: the ids `channel.allowed` lets in (config's `allowFrom`) and the people `nanoagent pairing approve`
let in for this channel (its state file). Anyone else gets a pairing code in a private chat, once, where the channel
pairs, and nothing else (no model call). In groups only allowed users are answered, and only messages the link
marks as addressed to the bot (`groupPolicy`).

No message is lost or answered twice when the gateway is killed: a message is acknowledged to the app only once it
is in the inbox of the state file, leaves the inbox only once it is in its session file, and a turn whose reply did
not reach the chat is finished after the restart (`inbox.py`). Each chat's messages are handled in order by a worker
of its own; chats do not wait for each other.

One message never ends the channel: a message whose handling raises is tried again after a pause, and after
`PARK_AFTER` failures in a row it is parked in the state file (as is a reply whose delivery raised as often, see
`reply.py`), reported once in the log and to the owner's private chat where one is known, and the chat goes on. A
finished reply the app did not take waits in the state's outbox and is sent again every `Timing.sweep` seconds;
`nanoagent channels retry` puts what is parked back, and the sweep picks it up. `channels.replyLimit` bounds the
replies per thread and per sender in a window, so two bots answering each other stop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from typing import Any

from nanoagent import keys
from nanoagent.agent.commands import STOP_COMMANDS
from nanoagent.agent.loop import CANCELLED
from nanoagent.attachments import Attached, as_text, compose, sniff
from nanoagent.channels.base import Channel, FileIn, Incoming, Link, Timing, record
from nanoagent.channels.owners import owner_chats, owner_places
from nanoagent.channels.state import PARK_AFTER, ChannelState, Undelivered, show_code, state_file
from nanoagent.config.schema import ReplyLimitConfig
from nanoagent.errors import NanoagentError
from nanoagent.gateway.channels.inbox import Inbox, Waiting
from nanoagent.gateway.channels.media import media_name, save_media
from nanoagent.gateway.channels.reply import Face, send_text
from nanoagent.gateway.hub import Hub, HubClosed
from nanoagent.gateway.server import Component
from nanoagent.keys import Place
from nanoagent.messages import ImageBlock, calls_of, image_block, is_assistant, is_user
from nanoagent.paths import Paths
from nanoagent.transcribe import Transcriber, hear, sniff_audio

__all__ = ["ChannelRunner", "Timing", "channel_component"]

MEDIA_LIMIT_MB = 20  # files over this are named, not downloaded (Telegram's Bot API cannot fetch more)
START = "Hi! Send me a message and I will answer. /help lists the commands."
RESUME = ("(nanoagent restarted before your answer to my last message was finished and delivered. Carry on from "
          "where you were and answer it.)")
FAILED_BEFORE_RESTART = "Your last message failed before nanoagent restarted; /retry sends it once more."
DEFAULT_TIMING = Timing()
OUTBOX_WAIT = 600.0  # seconds at most between two tries of a reply the app keeps refusing


def channel_component(channel: Channel, settings: Any, paths: Paths, hub: Hub, timing: Timing = DEFAULT_TIMING,
                      max_image_bytes: int = 5_000_000, max_text_bytes: int = 200_000,
                      transcriber: Transcriber | None = None,
                      reply_limit: ReplyLimitConfig | None = None) -> Component:
    """The channel as a gateway component; its `health` says whether it is connected, and as whom."""
    runner = ChannelRunner(channel, settings, paths, hub, timing, max_image_bytes, max_text_bytes, transcriber,
                           reply_limit)
    component = Component(channel.name, runner.run)
    runner.component = component
    return component


class ChannelRunner:
    """What outlives one run of the component (the supervisor restarts a run that crashed): the inbox and its
    state file, and which messages this process gave the hub."""

    def __init__(self, channel: Channel, settings: Any, paths: Paths, hub: Hub, timing: Timing = DEFAULT_TIMING,
                 max_image_bytes: int = 5_000_000, max_text_bytes: int = 200_000,
                 transcriber: Transcriber | None = None, reply_limit: ReplyLimitConfig | None = None):
        self.channel = channel
        self.settings = settings
        self.paths = paths
        self.hub = hub
        self.timing = timing
        self.max_image_bytes = max_image_bytes  # an image over this goes by name only
        self.max_text_bytes = max_text_bytes  # a text file over this is saved and named, not put in the message
        self.transcriber = transcriber  # voice notes and audio files transcribed before the turn; None: off
        self.reply_limit = reply_limit or ReplyLimitConfig()  # `channels.replyLimit`
        self.state = state_file(paths, channel.name)
        self.inbox = Inbox(self.state)
        # the owner's private chats here (`channels/owners.py`): always let in
        self.owners = owner_chats(channel, settings)
        self.log = logging.getLogger(f"nanoagent.channels.{channel.name}")
        self.component: Component | None = None
        self.bot = ""  # who the link signed in as, this run
        self.problem: str | None = None  # what the link last reported failing, until a call succeeds

    def record(self, event: str, **fields: Any) -> str:
        """A structured log line: the event and its fields; never message contents or a token."""
        return record(f"{self.channel.name}_{event}", **fields)

    def health(self, text: str) -> None:
        if self.component is not None:
            self.component.health = text

    def report(self, problem: str | None) -> None:
        """The link's word on its calls (`Timing.report`): "failing: <problem>" while they fail, "connected as
        @bot" again once one succeeds."""
        if problem == self.problem:
            return
        self.problem = problem
        health = f"failing: {problem}" if problem else f"connected as {self.bot}" if self.bot else ""
        self.log.log(logging.WARNING if problem else logging.INFO, self.record("health", health=health))
        self.health(health)

    async def run(self) -> None:
        # httpx logs each URL at INFO: an app's URLs may hold its token
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self.bot, self.problem = "", None
        try:
            link = self.channel.link(self.settings, self.paths, replace(self.timing, report=self.report))
            await _Run(self, link).run()
        except NanoagentError as e:  # ours say what to fix, and hold no token or message
            self.log.error(self.record("failed", error=str(e)))
            self.health(f"failing: {e}")
            raise
        except Exception as e:
            self.health(f"failing: {type(e).__name__}")
            raise

    def allowed(self, user: str) -> bool:
        """The owner (`channels.<name>.owner`) is always let in; everyone else by `allowFrom` or pairing."""
        home = self.channel.home(user)
        return (self.channel.allowed(self.settings, user) or user in self.state.read().allowed
                or (home is not None and home.chat.casefold() in self.owners))


class _Run:
    """One run of the channel: the link, the tasks, and each session's face in the chat."""

    def __init__(self, runner: ChannelRunner, link: Link):
        self.runner = runner
        self.link = link
        self.channel = runner.channel
        self.hub = runner.hub
        self.inbox = runner.inbox
        self.log = runner.log
        self.faces: dict[str, Face] = {}
        self.queues: dict[Place, asyncio.Queue[Incoming]] = {}
        self.hinted: set[str] = set()  # chats told, this run, how to turn transcription on
        self.groups: set[str] = set()  # the group chats' session keys (`ChannelState.groups`)
        self.dispatched: set[str] = set()  # ids of the messages given a worker this run
        self.failures: dict[str, int] = {}  # message id -> times its handling raised in a row
        self.held: set[str] = set()  # `channels.replyLimit` counters holding replies back (logged once each)
        self.group = asyncio.TaskGroup()

    async def run(self) -> None:
        try:
            bot = self.runner.bot = await self.link.connect()
            self.runner.problem = None
            self.runner.health(f"connected as {bot}")
            self.log.info(self.runner.record("started", bot=bot))
            async with self.group:
                self.groups = set(self.inbox.state.read().groups)
                for key in self.groups:
                    self.hub.note_chat(key, True)
                self.resume()
                self.replay()
                self.group.create_task(self.sweep(), name=f"{self.channel.name} sweep")
                await self.receive()
        finally:
            for face in self.faces.values():
                face.unwatch()
            try:
                await self.link.close()
            except Exception:  # noqa: BLE001 - closing the connection; nothing left to do if it fails
                pass

    # --- receiving ------------------------------------------------------------------------------------

    async def receive(self) -> None:
        async for batch in self.link.receive():
            fresh = self.inbox.take([item.raw | {"id": item.id} for item in batch])  # on disk before the app is told
            self.dispatched |= fresh  # dispatched below, not by a sweep meanwhile
            await self.link.acknowledge(batch)
            for item in batch:
                if item.id in fresh:
                    fresh.discard(item.id)  # the same message twice in one batch: the first only
                    self.dispatch(item)

    def replay(self) -> None:
        """Messages in the inbox no worker has (taken before a restart, or put back by `channels retry`), in the
        order they came."""
        for raw in self.inbox.state.read().inbox:
            if raw["id"] in self.inbox.given or raw["id"] in self.dispatched:
                continue
            try:
                item = self.link.rebuild(raw)
            except Exception as e:  # noqa: BLE001 - a message the link cannot read again: parked, the rest go on
                self.park_message(raw["id"], "", e, 1)
                continue
            if item is None:
                self.inbox.handled(raw["id"])
            else:
                self.dispatch(item)

    async def sweep(self) -> None:
        """Every `Timing.sweep` seconds: what `channels retry` put back in the inbox is handled, and the replies the
        outbox holds are sent again."""
        while True:
            await asyncio.sleep(self.runner.timing.sweep)
            try:
                self.replay()
                for entry in self.inbox.state.read().outbox:
                    if entry.next <= self.runner.timing.now():
                        await self.resend(entry)
            except Exception as e:  # noqa: BLE001 - the next sweep tries again; the chats go on meanwhile
                self.log.error(self.runner.record("sweep_failed", error=type(e).__name__))

    async def resend(self, entry: Undelivered) -> None:
        place = keys.parse(entry.key)
        if place is None or place.channel != self.channel.name:
            self.inbox.state.update(lambda state: state.unqueue(entry.id))
            return
        chunks = self.channel.split(entry.text)[entry.skip:]
        sent = 0
        try:
            for chunk in chunks:
                if await self.link.send(place, chunk, True) is None:
                    break
                sent += 1
        except Exception as e:  # noqa: BLE001 - one reply must not stop the sweep
            if entry.failures + 1 >= PARK_AFTER:
                self.park_reply(entry.key, entry.text, e, entry.failures + 1, entry.id)
            else:
                self.inbox.state.update(lambda state: _count_try(state, entry.id, failures=1))
            return
        if sent == len(chunks):
            self.inbox.state.update(lambda state: state.unqueue(entry.id))
            self.log.info(self.runner.record("outbox_sent", key=entry.key, tries=entry.tries + 1))
        else:  # refused again: the next try waits twice as long as the last, up to OUTBOX_WAIT
            later = self.runner.timing.now() + min(self.runner.timing.sweep * 2 ** entry.tries, OUTBOX_WAIT)
            self.inbox.state.update(lambda state: _count_try(state, entry.id, skip=sent, tries=1, next=later))

    # --- what did not go through: the outbox, parked items, the owner told ----------------------------

    def queue_reply(self, key: str, text: str, skip: int, why: str) -> None:
        """A finished reply the app did not take: kept in the outbox, sent again by the sweep (`Keeper`)."""
        now = self.runner.timing.now()
        self.inbox.state.update(lambda state: state.queue(f"reply-{secrets.token_hex(6)}", key, text, skip, why, now))
        self.log.warning(self.runner.record("reply_queued", key=key, why=why))

    def park_reply(self, key: str, text: str, error: BaseException, failures: int, id: str = "") -> None:
        """A reply whose delivery raised `failures` times in a row: parked, so the chat goes on (`Keeper`)."""
        now = self.runner.timing.now()
        self.inbox.state.update(lambda state: state.park_reply(id or f"reply-{secrets.token_hex(6)}", key, text,
                                                               _why(error), failures, now))
        self.parked("reply", key, error, failures)

    def park_message(self, id: str, key: str, error: BaseException, failures: int) -> None:
        now = self.runner.timing.now()
        if self.inbox.state.update(lambda state: state.park_message(id, key, _why(error), failures, now)):
            self.parked("message", key, error, failures)
        self.dispatched.discard(id)
        self.failures.pop(id, None)

    def parked(self, kind: str, key: str, error: BaseException, failures: int) -> None:
        """Reported once: in the log, and in the owner's private chat where one is known."""
        self.log.error(self.runner.record(f"{kind}_parked", key=key, error=type(error).__name__, failures=failures))
        name = self.channel.name
        text = (f"A {kind} in {key or name} failed {failures} times ({type(error).__name__}) and is set aside so "
                f"{self.channel.title} goes on; `nanoagent channels retry {name}` tries it again.")
        for place in owner_places(self.channel, self.runner.settings):
            self.spawn(send_text(self.link, self.channel, place, text), f"{name} owner {place.key}")

    def note_chat(self, key: str, group: bool) -> None:
        """Tell the loop whether a chat is a group chat (its turns get `tools.groupProfile`), and keep it in the
        state, so a turn resumed after a restart, or a cron job the chat made, is held to it before its next message."""
        self.hub.note_chat(key, group)
        if group != (key in self.groups):
            self.groups ^= {key}
            self.inbox.state.update(lambda state: state.set_group(key, group))

    def dispatch(self, item: Incoming) -> None:
        """Each chat's messages are handled in order, by a worker of its own; chats do not wait for each other."""
        chat = Place(item.place.channel, item.place.chat)
        self.dispatched.add(item.id)
        queue = self.queues.get(chat)
        if queue is None:
            queue = self.queues[chat] = asyncio.Queue()
            self.group.create_task(self.worker(queue), name=f"{self.channel.name} chat {chat.chat}")
        queue.put_nowait(item)

    async def worker(self, queue: asyncio.Queue[Incoming]) -> None:
        while True:
            item = await queue.get()
            while not await self.attempt(item):
                await asyncio.sleep(self.runner.timing.pause(self.failures.get(item.id, 1) - 1))

    async def attempt(self, item: Incoming) -> bool:
        """Handle one message; False when it raised and is to be tried again. After `PARK_AFTER` failures in a row
        it is parked: one bad message must not stop the chat, nor come back forever."""
        try:
            await self.handle(item)
        except Exception as e:  # noqa: BLE001 - see above
            failures = self.failures[item.id] = self.failures.get(item.id, 0) + 1
            self.log.error(self.runner.record("message_failed", id=item.id, error=type(e).__name__,
                                              failures=failures))
            if failures < PARK_AFTER:
                return False
            self.park_message(item.id, item.place.key, e, failures)
        self.failures.pop(item.id, None)
        return True

    async def handle(self, item: Incoming) -> None:
        if not item.addressed:
            self.inbox.handled(item.id)
            return
        if not self.runner.allowed(item.user):
            if item.private and self.channel.pairing:
                await self.pair(item)
            self.inbox.handled(item.id)
            return
        face = self.face(item.place)
        self.note_chat(face.key, group=not item.private)
        text = item.text.strip()
        if text.startswith("/"):
            self.spawn(self.command(item, face, _command(text)), f"{self.channel.name} command {face.key}")
            return
        saved = [await self.attach(file, face.key) for file in item.files]
        for note in dict.fromkeys(a.note for a in saved if a.note):  # a note cut short, or how to turn it on
            if self.runner.transcriber is None:  # the hint: once per chat and run, not with every voice note
                if face.key in self.hinted:
                    continue
                self.hinted.add(face.key)
            await face.say(note)
        own = "\n".join(p for p in [text, *(a.line for a in saved)] if p).strip()
        texts = [a.text for a in saved if a.text is not None]
        if (not own and not texts) or self.limited(face.key, item.user):
            self.inbox.handled(item.id)
            return
        if not item.private:
            own = f"{item.name}: {own}".rstrip()
        body, _ = compose(own, texts)  # each text file before the message, marked as the user's file (as `-a`)
        images = [a.image for a in saved if a.image is not None]
        if images and not self.hub.takes_images(face.key):  # the message goes on, naming the saved files
            model = self.hub.model_for(self.hub.session(face.key))
            await face.say(f"{model} does not take images, so it gets your message with the file's name, not the "
                           "picture. /model switches to one that does.")
            images = []
        waiting = self.inbox.give(face.key, item.id, body, images)
        self.spawn(self.send(face, waiting), f"{self.channel.name} message {face.key}")

    def limited(self, key: str, user: str) -> bool:
        """`channels.replyLimit`: True when the thread or the sender had as many replies in its window as it allows
        (one log line when a bound starts to hold); else this reply is counted against both."""
        limit, now = self.runner.reply_limit, self.runner.timing.now()
        counters = {f"thread:{key}": limit.per_thread, f"sender:{user}": limit.per_sender}

        def change(state: ChannelState) -> list[str]:
            full = [c for c, most in counters.items()
                    if most and len(state.recent(c, now, limit.window_seconds)) >= most]
            if not full:
                state.count_reply(list(counters), now, limit.window_seconds)
            return full

        full = self.inbox.state.update(change)
        for counter in full:
            if counter not in self.held:
                self.log.warning(self.runner.record("reply_limited", counter=counter, limit=counters[counter],
                                                    window=limit.window_seconds))
        self.held = (self.held - set(counters)) | set(full)
        return bool(full)

    async def send(self, face: Face, waiting: Waiting) -> None:
        """Give the hub one message. Its turn (or the turn it joins) is shown by the session's face, which watches
        every turn of the session: this call only reports what went wrong."""
        try:
            await self.hub.send(face.key, waiting.text, ask=None, images=waiting.images)
        except HubClosed:
            self.inbox.forget(face.key, waiting, handled=False)  # stays in the inbox: handled after the restart
        except NanoagentError as e:
            self.inbox.forget(face.key, waiting, handled=True)
            face.failed(str(e))

    async def command(self, item: Incoming, face: Face, command: str) -> None:
        name = command.split()[0]
        if name == "/start":
            await face.say(START)
            self.inbox.handled(item.id)
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
            self.inbox.dropped(face.key)
        self.inbox.handled(item.id)

    async def pair(self, item: Incoming) -> None:
        now = self.runner.timing.now()
        code, turned_away = self.inbox.state.update(lambda s: (
            code := s.pair(item.user, item.place.chat, item.name, now),
            code is None and all(p.user != item.user for p in s.pairing)))
        if code is None:  # they have a code already, or as many as are kept are pending: say nothing more
            if turned_away:
                self.log.info(self.runner.record("pairing_full", user=item.user))
            return
        self.log.info(self.runner.record("pairing_code", user=item.user))
        shown = show_code(code)
        await send_text(self.link, self.channel, Place(item.place.channel, item.place.chat), (
            f"I don't know you yet, so I can't pass your messages on. Your pairing code is {shown} (valid for an "
            f"hour). Ask the owner of this bot to run:\n\nnanoagent pairing approve {shown}"))

    # --- media ----------------------------------------------------------------------------------------

    async def attach(self, file: FileIn, key: str | None = None) -> _Attachment:
        """A file that came with a message. A text file (a document told by its bytes: UTF-8, within
        tools.attachments.maxTextBytes) becomes marked text in the message, as `nanoagent agent -a` makes it.
        Anything else is saved under the workspace's media/ and named by a line in the message; a photo or an image
        document (told by its bytes) within the image cap also by its reference, so the model sees the picture."""
        kind = file.kind
        limit = MEDIA_LIMIT_MB * 1024 * 1024
        too_big = _Attachment(f"[{kind} not saved: it is over the {MEDIA_LIMIT_MB} MB limit]")
        if (file.size or 0) > limit:
            return too_big
        data = await self.link.download(file)
        if data is None:
            return _Attachment(f"[{kind} could not be downloaded from {self.channel.title}]")
        if len(data) > limit:
            return too_big
        stem, ext = media_name(kind, file.name, file.media_type, self.runner.timing.now())
        document = kind in ("document", "file")
        media_type = sniff(data[:16]) if kind == "photo" or document else None
        if kind in ("voice note", "audio") or (document and media_type is None and sniff_audio(data[:16])):
            return await self.hear(data, kind if kind in ("voice note", "audio") else "audio file", stem, ext, key)
        if document and media_type is None and len(data) <= self.runner.max_text_bytes \
                and (text := as_text(data)) is not None:
            return _Attachment("", text=Attached(".".join(p for p in (stem, ext) if p), len(data), text=text))
        path = await asyncio.to_thread(save_media, self.runner.paths.workspace / "media", stem, ext, data)
        line = f"[{kind} saved as media/{path.name}]"
        if media_type is None or len(data) > self.runner.max_image_bytes:
            return _Attachment(line)
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        return _Attachment(line, image=image_block(f"media/{path.name}", digest, media_type, path.name))

    async def hear(self, data: bytes, kind: str, stem: str, ext: str, key: str | None = None) -> _Attachment:
        """A voice note or audio file: saved under media/, then transcribed (in a thread: the call blocks; counted
        against the session `key`'s spend caps); the transcript, marked as one, or why there is none, goes in the
        message."""
        path = await asyncio.to_thread(save_media, self.runner.paths.workspace / "media", stem, ext, data)
        heard = await asyncio.to_thread(hear, self.runner.transcriber, data, kind, "", f"media/{path.name}", key)
        if self.runner.transcriber is not None and not heard.transcribed:
            self.log.warning(self.runner.record("transcription_failed", file=path.name, reason=heard.note))
        return _Attachment(heard.text, note=heard.note if heard.transcribed or self.runner.transcriber is None else None)

    # --- sessions -------------------------------------------------------------------------------------

    def face(self, place: Place) -> Face:
        face = self.faces.get(place.key)
        if face is None:
            streaming = bool(getattr(self.runner.settings, "streaming", True))
            face = self.faces[place.key] = Face(place, self.link, self.channel, self.hub, self.inbox,
                                                self.runner.timing, streaming, self)
            self.group.create_task(face.show(), name=f"{self.channel.name} replies {place.key}")
        return face

    def resume(self) -> None:
        """Turns whose reply did not reach the chat before the gateway stopped: deliver it from the session file
        when the turn finished there, else finish the turn."""
        for key in self.inbox.waiting:  # given to the hub by an earlier run of this process: watch for them
            place = keys.parse(key)
            if self.inbox.waiting[key] and place is not None:
                self.face(place)
        for key in self.inbox.state.read().open_turns:
            place = keys.parse(key)
            if place is None or place.channel != self.channel.name:
                self.inbox.answered(key)
                continue
            try:
                self.resume_turn(place)
            except Exception as e:  # noqa: BLE001 - one session that cannot be read must not stop the channel
                self.log.error(self.runner.record("resume_failed", key=key, error=type(e).__name__))
                self.inbox.answered(key)

    def resume_turn(self, place: Place) -> None:
        key = place.key
        face = self.face(place)
        if self.hub.busy(key):
            return  # still running here: this run only restarted the channel
        session = self.hub.session(key)
        last_user = max((i for i, m in enumerate(session.messages) if is_user(m)), default=-1)
        last = session.messages[-1] if session.messages else None
        if last_user in session.failed():
            face.replay(FAILED_BEFORE_RESTART)
        elif last is not None and is_assistant(last) and not calls_of(last) and last["content"].strip() \
                and last["content"] != CANCELLED:
            face.replay(last["content"])
        else:
            self.spawn(self.send_resume(face), f"{self.channel.name} resume {key}")

    async def send_resume(self, face: Face) -> None:
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
                self.log.error(self.runner.record("task_failed", task=name.split()[1], error=type(e).__name__))

        self.group.create_task(guarded(), name=name)


@dataclass
class _Attachment:
    """A file of a message as the model gets it: a line naming the saved file, an image's reference, or the text."""

    line: str
    image: ImageBlock | None = None
    text: Attached | None = None
    note: str | None = None  # for the person who sent it: a voice note cut short, or how to have it transcribed




def _why(error: BaseException) -> str:
    """An error as the state file keeps it: its type and its words (the file is private; the log gets the type)."""
    return f"{type(error).__name__}: {error}".strip().rstrip(":")


def _count_try(state: ChannelState, id: str, skip: int = 0, tries: int = 0, failures: int = 0,
               next: float = 0.0) -> None:
    """Count a send of an outbox entry: `skip` more of its messages arrived, a try refused (the next not before
    `next`), a failure (a raise; a refusal ends a run of them)."""
    entry = state.undelivered(id)
    if entry is not None:
        entry.skip += skip
        entry.tries += tries
        entry.failures = entry.failures + failures if failures else 0
        entry.next = next


def _command(text: str) -> str:
    """`/name args` with the name in lower case."""
    name, _, rest = text.partition(" ")
    return f"{name.lower()} {rest.strip()}".strip()
