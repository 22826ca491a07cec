"""The contract a channel follows: what it tells the rest of nanoagent (`Channel`), and the connection to its app the
shared engine drives (`Link`).

The shared parts are written once, in `channels/`: the reply engine (a turn's events become one growing message,
edited at most about once a second, continued in a new message past the app's limit, a typing indicator while the
agent works, no empty bubbles, no duplicates), the exactly-once inbox (a message is acknowledged to the app only
after it is on disk; a gateway killed mid-turn answers it once after a restart), access (`allowFrom` and pairing
codes, per channel, in `channels/<name>.json`), and delivery to targets. A channel brings only what is its app's:
its settings' meaning, its wire format, and its client.

This module is light on purpose: the registry, cron and the CLI import it; no app library is imported here.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nanoagent.errors import NanoagentError
from nanoagent.keys import Place

if TYPE_CHECKING:
    import asyncio
    from pathlib import Path

    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths


class DeliveryError(NanoagentError):
    """A message could not be delivered; the message says why (a chat that no longer exists, no bot token...)."""


def _unheard(problem: str | None) -> None:
    """Where a link's reports go when no engine listens (`verify`, `deliver`)."""


def record(event: str, **fields: Any) -> str:
    """A channel's log line: a JSON record of the event and its fields; never a message's text nor a token."""
    return json.dumps({"event": event, **fields}, ensure_ascii=False)


@dataclass(frozen=True)
class Timing:
    """A channel's clocks and intervals, given to the engine and to the channel's link, so tests never wait a real
    second (nor a real minute of an API that is down); and `report`, where the link says how its calls fare."""

    interval: float = 1.0  # seconds between two edits of a streaming reply
    typing: float = 4.0  # seconds between typing indicators (Telegram shows one for 5 s)
    poll: int = 30  # long-poll timeout, seconds, for a link that polls
    backoff: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)  # waits after failed calls, the last one repeated
    timeout: float = 20.0  # seconds a call to the app may take before it counts as failed (a send: below)
    sweep: float = 30.0  # seconds between two sends of the outbox (and looks for messages `channels retry` put back)
    # seconds a send may take before it counts as failed: long, since a send that timed out may have arrived
    # (each link's rule for resending one is in docs/decisions/channels.md)
    send_timeout: float = 120.0
    clock: Callable[[], float] = time.monotonic
    now: Callable[[], float] = time.time  # wall clock: pairing codes' age, media file names
    # the link calls report("<what fails>") when a call to the app fails (unreachable, 5xx: what the person should
    # know, never a token) and report(None) when one succeeds; the engine shows "failing: <what>" meanwhile
    report: Callable[[str | None], None] = _unheard

    def pause(self, failures: int) -> float:
        """The wait after `failures` failed calls in a row (0: after the first)."""
        return self.backoff[min(failures, len(self.backoff) - 1)]


@dataclass
class FileIn:
    """A file that came with a message, not yet downloaded."""

    kind: str  # "photo" | "document" | "voice note" | "audio" | "video" | "file"
    name: str | None  # the sender's file name, if the app gives one
    size: int | None  # bytes, when the app says
    ref: str  # the channel's handle to fetch it: a file id, a URL, a MIME part's index
    media_type: str | None = None  # as the app states it (the bytes decide whether it is an image)


@dataclass
class Incoming:
    """One message from the app, in the channel's words. Built by the `Link` from what the app sent, and again by
    `Link.rebuild(raw)` from the inbox after a restart."""

    id: str  # unique within the channel and stable across restarts: the inbox's key
    place: Place  # the session it belongs to
    user: str  # the sender's id, normalised as `allowFrom` is
    name: str  # the sender's display name
    text: str  # as sent, with the bot's mention removed
    raw: dict[str, Any]  # JSON kept in the inbox until the message is handled
    private: bool = True  # a direct message: pairing codes are offered only there
    addressed: bool = True  # meant for the bot under groupPolicy (in a private chat: unless a command for another bot)
    files: list[FileIn] = field(default_factory=list)


@dataclass
class Chunk:
    """One message's worth of a reply: in the app's markup, and as plain text for when the app refuses the markup."""

    body: str
    plain: str


@dataclass(frozen=True)
class Question:
    """A setting `nanoagent channels add` asks for on a terminal."""

    path: str  # under channels.<name>, dotted: "token", "imap.host"
    prompt: str
    secret: bool = False
    default: str = ""


@dataclass(frozen=True)
class Route:
    """An HTTP route a channel serves on the gateway's listener (`nanoagent web` turns it on), for an app that posts
    to a webhook: served at `/channels/<name>/<path>` while the channel is enabled. `handler` takes aiohttp's
    request and returns its response; it checks the app's signature itself (the listener's token is not asked)."""

    method: str  # "POST", "GET"
    path: str  # under the channel's prefix, without a leading slash: "events"
    handler: Callable[[Any], Awaitable[Any]]


class Link(Protocol):
    """One connection to the app, driven by the shared engine for one run of the channel's gateway component.

    Calls that reach the app wait out its rate limits themselves (a 429's retry-after) and give None/False when a
    call failed for good. With `persistent` they keep trying through network failures (a finished reply must
    arrive); without it they give up at the first one (a streaming edit waits for the next).

    Health: the link tells the engine how its calls fare through the `Timing` it was built with, in the one place
    its calls go through: `timing.report("<the app> unreachable: <why>")` when a call fails for the network or a
    5xx (each time, or once per run of failures), `timing.report(None)` when one succeeds (cheap: the engine
    ignores a report that changes nothing). The component's health reads "failing: <why>" until then. A rate
    limit or a refusal of one message (a chat gone, a blocked bot) is no failure of the link. Never put a token or
    a message's text in the reason."""

    async def connect(self) -> str:
        """Sign in; who the bot is, for the log ("@name"). NanoagentError when the credentials are refused."""
        ...

    def receive(self) -> AsyncIterator[list[Incoming]]:
        """New messages in the order they came, first catching up on any that came while nanoagent was down (from
        the app's own queue, or its history after the last message handled, bounded). A message may come twice;
        the engine keeps the first."""
        ...

    async def acknowledge(self, items: list[Incoming]) -> None:
        """These are on disk now: the app may forget them (Telegram's offset, IMAP's \\Seen, a catch-up cursor)."""
        ...

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        ...

    async def send(self, place: Place, chunk: Chunk, persistent: bool) -> str | None:
        """The new message's id; None when it could not be sent."""
        ...

    async def edit(self, place: Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        ...

    # optional: `why_refused(place) -> str | None`, why the app did not take the last send to `place` (one line
    # with what happens next, no token): the outbox keeps it and `channels list` shows it (WhatsApp's closed window)

    async def delete(self, place: Place, message_id: str) -> None:
        ...

    async def typing(self, place: Place) -> None:
        ...

    async def download(self, file: FileIn) -> bytes | None:
        ...

    async def close(self) -> None:
        ...


class Channel(Protocol):
    """What a channel tells the rest of nanoagent: `CHANNEL` in `channels/<name>/__init__.py`. Importing that module
    imports no app library; `link`, `verify` and `deliver` import it when called."""

    name: str  # the session keys' prefix and the key under `channels.` in config.json
    title: str  # as people write it: "Telegram"
    hint: str  # how replies render there, one line for the model beside the runtime block's `channel:`
    limit: int  # characters one message holds
    edits: bool  # sent messages can be edited, so replies stream (email: no)
    pairing: bool  # unknown senders in a private chat get a pairing code (email: no, they get nothing)
    # the dataclass of `channels.<name>` in config.json, beside the channel (`channels/<name>/settings.py`): the
    # loader reads the block with it; at least `enabled`, and `allow_from`, `owner` for access
    settings_class: type
    env: Mapping[str, str]  # a setting (dotted snake_case: "imap.password") -> the environment variable overriding it

    def settings(self, config: Config) -> Any:
        """This channel's block of `config.channels` (`ChannelsConfig.of`): its settings, with its variables."""
        ...

    def routes(self, settings: Any) -> list[Route]:
        """The HTTP routes the channel serves on the gateway's listener while enabled (none for a channel that
        connects out, as the four built in do)."""
        ...

    def problem(self, settings: Any) -> str | None:
        """What keeps the enabled channel from starting, in one line with the fix (no token, the extra not
        installed); None when nothing does."""
        ...

    def allowed(self, settings: Any, user: str) -> bool:
        """Is `user` (a sender id as `Incoming.user`) let in by `allowFrom` (pairing approvals are checked apart)?"""
        ...

    def home(self, user: str) -> Place | None:
        """A user's private chat, where the app derives it from their id (Telegram: the same number); None when
        it is known only once they wrote."""
        ...

    def split(self, markdown: str) -> list[Chunk]:
        """The reply in the app's markup, split under `limit`; code blocks kept whole or closed and reopened."""
        ...

    def link(self, settings: Any, paths: Paths, timing: Timing) -> Link:
        """The connection for one run of the gateway component; `timing.backoff` paces its retries."""
        ...

    async def verify(self, settings: Any) -> str:
        """One API call with the credentials: who the bot is ("@name"), or NanoagentError saying what is wrong."""
        ...

    async def deliver(self, settings: Any, place: Place, text: str, files: Sequence[Path] = ()) -> None:
        """Send `text` (Markdown) to `place` from a process with no gateway (`cron tick`, the `message` tool), then
        `files` there: each an image shown as one where its bytes are an image's (`attachments.sniff`), else a
        document under its name. The files are already checked (inside the workspace, under the size cap);
        DeliveryError when the text or a file did not arrive."""
        ...

    def questions(self) -> list[Question]:
        """What `nanoagent channels add <name>` asks."""
        ...


async def batches(queue: asyncio.Queue[list[Incoming]], first: list[Incoming] | None = None
                  ) -> AsyncIterator[list[Incoming]]:
    """A link's `receive` over a queue its event handlers fill: `first` (a catch-up) when it holds anything, then
    everything queued since the last batch, as one batch, for as long as the link runs."""
    if first:
        yield first
    while True:
        batch = [*await queue.get()]
        while not queue.empty():
            batch.extend(queue.get_nowait())
        yield batch
