"""The reply engine every channel shares: one session's turns shown in its chat through the channel's `Link`.

Every turn of the session, whoever started it, becomes one reply. Where the app edits messages and streaming is on,
the reply grows in one message edited at most once per `Timing.interval` and continues in a new message past the
app's limit (`Channel.split`); a channel without edits (email) sends only the finished reply. A typing indicator
stays on while a turn runs. No empty bubbles (nothing is sent before there is text), no duplicates (a part is sent
once and edited after), and the final delivery deletes the messages the streaming used that the finished reply no
longer needs. A final delivery keeps trying through network failures; a streaming one waits for the next.

A reply counts as delivered only when the app took every message of it. What the app did not take goes to the
channel's outbox (`Keeper.queue_reply`), sent again later; a delivery that raised is tried again after a pause, and
after `PARK_AFTER` in a row the reply is parked (`Keeper.park_reply`): one reply never stops the session's face.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nanoagent.agent import events as ev
from nanoagent.agent.runner import EMPTY_REPLY
from nanoagent.channels.base import Channel, Chunk, Link, Timing
from nanoagent.channels.state import PARK_AFTER, UNTAKEN
from nanoagent.keys import Place
from nanoagent.messages import is_assistant, is_user, text_of

if TYPE_CHECKING:
    from nanoagent.gateway.channels.inbox import Inbox
    from nanoagent.gateway.hub import Hub

__all__ = ["Face", "Keeper", "Reply", "Timing"]


class Keeper(Protocol):
    """Where a finished reply goes when it did not arrive (the engine's: it writes the state and logs it)."""

    def queue_reply(self, key: str, text: str, skip: int, why: str) -> None:
        """The app did not take the reply (its first `skip` messages arrived): keep it in the outbox."""
        ...

    def park_reply(self, key: str, text: str, error: BaseException, failures: int) -> None:
        """Delivering the reply raised `failures` times in a row: set it aside, so the chat goes on."""
        ...


@dataclass
class Sent:
    id: str
    body: str  # what we last asked the app to show (in its markup)


@dataclass
class Reply:
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
    sent: list[Sent] = field(default_factory=list)
    shown: str = ""
    flushed_at: float = -math.inf
    failures: int = 0  # final deliveries that raised, in a row

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


async def _unless_it_raises(work: Coroutine[Any, Any, None]) -> None:
    """A call the reply can do without now: the typing indicator, a streaming edit (the final delivery follows, and
    parks the reply if it raises again)."""
    try:
        await work
    except Exception:  # noqa: BLE001, S110 - see above
        pass


async def send_text(link: Link, channel: Channel, place: Place, text: str) -> None:
    """A whole message outside any turn (a command's answer, a pairing code), in as many messages as it needs."""
    for chunk in channel.split(text):
        await link.send(place, chunk, True)


class Face:
    """One session's face in its chat: every turn of the session becomes one reply, sent in order; the typing
    indicator stays on while a turn runs. Events arrive synchronously from the loop; `show` does the sending."""

    def __init__(self, place: Place, link: Link, channel: Channel, hub: Hub, inbox: Inbox, timing: Timing,
                 streaming: bool, keeper: Keeper):
        self.place = place
        self.key = place.key
        self.link = link
        self.channel = channel
        self.hub = hub
        self.inbox = inbox
        self.timing = timing
        self.streaming = streaming and channel.edits
        self.keeper = keeper
        self.replies: deque[Reply] = deque([Reply()] if hub.busy(self.key) else [])  # attached mid-turn
        self.opening = False
        self.wake = asyncio.Event()
        self.unwatch = hub.watch(self.key, self.event)

    def event(self, event: ev.Event) -> None:
        if isinstance(event, ev.SubagentEnded) and event.background:
            self.replay(event.as_message())  # a background run's answer is a message in the chat
            return
        if event.agent:
            return  # a sub-agent's events are its own
        if isinstance(event, ev.TurnStarted):
            self.replies.append(Reply())
            self.opening = True
        elif isinstance(event, ev.MessageAdded) and is_user(event.message):
            self.inbox.persisted(self.key, text_of(event.message), self.opening)
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
                if self.hub.closed:
                    reply.keep_open = True  # the gateway is stopping, not the user: finish it after the restart
                else:
                    self.inbox.dropped(self.key)
        self.wake.set()

    def replay(self, text: str) -> None:
        reply = Reply(parts=[text])
        reply.end(ev.StopReason.COMPLETED)
        self.replies.append(reply)
        self.wake.set()

    def failed(self, error: str) -> None:
        """The turn ended with an exception instead of its last event."""
        if not self.replies or self.replies[-1].ended:
            self.replies.append(Reply())
        self.replies[-1].end(ev.StopReason.ERROR, error)
        self.replies[-1].retry_hint = False
        self.wake.set()

    async def say(self, text: str) -> None:
        """A command's answer: one line as it is, several in a code block (they are aligned columns)."""
        await send_text(self.link, self.channel, self.place,
                        f"```\n{text}\n```" if "\n" in text.strip() else text.replace("`", "'"))

    async def show(self) -> None:
        timing = self.timing
        next_typing = -math.inf
        while True:
            self.wake.clear()
            if not self.replies:
                await self.wake.wait()
                continue
            reply = self.replies[0]
            now = timing.clock()
            if not reply.ended and not self.hub.busy(self.key):
                reply.end(ev.StopReason.ERROR, "the turn stopped without finishing")  # it raised; see the log
                reply.retry_hint = False
            due = reply.flushed_at + timing.interval
            if reply.ended:
                if reply.text() != reply.shown and now < due:
                    await asyncio.sleep(due - now)
                if not await self.finish(reply):
                    continue
                self.replies.popleft()
                if not reply.keep_open and not self.replies:  # a later turn, if any, keeps the session open
                    self.inbox.answered(self.key)
                next_typing = -math.inf
                continue
            if now >= next_typing:
                next_typing = now + timing.typing
                await _unless_it_raises(self.link.typing(self.place))
            wait = next_typing - now
            if self.streaming and reply.text().strip() and reply.text() != reply.shown:
                if now >= due:
                    await _unless_it_raises(self.deliver(reply, final=False))
                    continue
                wait = min(wait, due - now)
            try:  # not wait_for: in 3.11 it can swallow a cancel that comes as the event is set
                async with asyncio.timeout(max(wait, 0.0)):
                    await self.wake.wait()
            except TimeoutError:
                pass

    async def finish(self, reply: Reply) -> bool:
        """The final delivery; False when it raised and is to be tried again (after a pause). What the app did not
        take goes to the outbox; a reply whose delivery raised `PARK_AFTER` times in a row is parked."""
        try:
            await self.deliver(reply, final=True)
        except Exception as e:  # noqa: BLE001 - one reply must not stop the chat's face, nor the channel
            reply.failures += 1
            if reply.failures < PARK_AFTER:
                await asyncio.sleep(self.timing.pause(reply.failures - 1))
                return False
            self.keeper.park_reply(self.key, reply.text(), e, reply.failures)
            return True
        text = reply.text()
        if text != reply.shown and not reply.keep_open:  # kept open: the turn is finished after the restart
            chunks = self.channel.split(text)
            skip = next((i for i, (sent, chunk) in enumerate(zip(reply.sent, chunks, strict=False))
                         if sent.body != chunk.body), min(len(reply.sent), len(chunks)))
            why = getattr(self.link, "why_refused", lambda place: None)(self.place)  # a link may say why (base.Link)
            self.keeper.queue_reply(self.key, text, skip, why or UNTAKEN)
        return True

    async def deliver(self, reply: Reply, final: bool) -> None:
        """Bring the chat up to date with the reply: edit the messages whose part changed, send the parts that
        are new. A final delivery keeps trying through network failures; a streaming one waits for the next.
        The interval to the next delivery counts from the end of this one."""
        try:
            await self._deliver(reply, final)
        finally:
            reply.flushed_at = self.timing.clock()

    async def _deliver(self, reply: Reply, final: bool) -> None:
        text = reply.text()
        if text == reply.shown:
            return
        chunks = self.channel.split(text)
        for i, chunk in enumerate(chunks):
            if i < len(reply.sent):
                if reply.sent[i].body != chunk.body and not await self._edit(reply.sent[i], chunk, final):
                    return
                continue
            sent = await self.link.send(self.place, chunk, final)
            if sent is None:
                return
            reply.sent.append(Sent(sent, chunk.body))
        if final:
            for extra in reply.sent[len(chunks):]:  # the finished reply needs fewer messages than it streamed in
                await self.link.delete(self.place, extra.id)
        reply.shown = text

    async def _edit(self, sent: Sent, chunk: Chunk, final: bool) -> bool:
        """Show `chunk` in a message sent before. An edit refused for good in the final delivery (the message was
        deleted in the chat) shows this part in a new message: the finished reply must arrive."""
        if await self.link.edit(self.place, sent.id, chunk, final):
            sent.body = chunk.body
            return True
        if not final:
            return False
        again = await self.link.send(self.place, chunk, True)
        if again is None:
            return False
        sent.id, sent.body = again, chunk.body
        return True
