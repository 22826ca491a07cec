"""What the shared channel cases (test_channel_cases.py) need from a channel's stand-in, and how they run a channel.

Each channel's stand-in module (`tests/<name>_server.py`, found by the channel's name) defines a class `StandIn`
following the Protocol below: a local server speaking the app's API over real sockets, with a person on the other
side who writes to the bot and reads what it shows. `running` runs the channel against it through the shared engine,
with the settings the stand-in gives, read by the config loader as config.json would be.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

from nanoagent.agent.build import build_agent
from nanoagent.channels import registry
from nanoagent.config.loader import load_config
from nanoagent.config.schema import Config
from nanoagent.gateway.channels.engine import ChannelRunner, Timing
from nanoagent.gateway.hub import Hub
from nanoagent.paths import Paths
from nanoagent.providers.base import TextDelta
from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.transcribe import Transcriber
from tests.conftest import PATIENCE, write_config

# fast clocks: edits a tenth of a second apart, retries after 50 ms, so no case waits a real second (or minute)
TIMING = Timing(interval=0.1, typing=0.3, poll=1, backoff=(0.05, 0.1, 0.2), sweep=0.2)


class StandIn(Protocol):
    """A channel's app, played locally: its API over real sockets, and the people who write to the bot."""

    channel: str  # the channel's name in the registry: "discord"
    owner: str  # a user id in allowFrom
    stranger: str  # a user not allowed

    def settings(self) -> dict[str, Any]:
        """`channels.<name>` of config.json (camelCase) pointing at the stand-in: enabled, allowFrom=[owner], the
        credentials it accepts."""
        ...

    def write(self, user: str, text: str, *, private: bool = True, image: bytes | None = None,
              file: tuple[str, str, bytes] | None = None) -> str:
        """A person sends a message (a DM; or in a group or channel, mentioning the bot), with an image attached
        when given, and a file (its name, its media type, its bytes) when given; the message's id."""
        ...

    def shown(self, user: str) -> list[str]:
        """The bot's messages in that person's DM as they look now (after edits, as text), oldest first."""
        ...

    def edits(self) -> int:
        """Edits of the bot's messages so far."""
        ...

    def rate_limit(self, calls: int, retry_after: float) -> None:
        """The next `calls` send or edit calls are refused with the app's rate limit (a 429 and its retry-after)."""
        ...

    def refuse(self, calls: int) -> None:
        """The next `calls` sends of a new message are refused for good (a blocked bot, a 550); 0: none from now on."""
        ...

    def slow(self, calls: int, seconds: float) -> None:
        """The next `calls` sends of a new message take the message at once but answer `seconds` later."""
        ...

    def down(self, down: bool) -> None:
        """While down, every API call fails (503, or the connection refused); up again on the same address."""
        ...

    def close(self) -> None:
        ...

    # optional: `config() -> dict`, config.json's other top-level blocks the app needs (a webhook's app: the gateway's
    # HTTP listener, `{"gateway": {"http": {...}}}`); `running` and the gateway process case write them too


def extra_config(stand_in: StandIn) -> dict[str, Any]:
    """config.json's blocks besides `channels` that the stand-in's app needs (`StandIn.config`), else none."""
    return stand_in.config() if hasattr(stand_in, "config") else {}


class Slow(ScriptedProvider):
    """Streams its replies in words, waiting `pause` seconds between them; held at each call until `hold` is set
    (when given); `started` is set by each call."""

    def __init__(self, *replies: str, pause: float = 0.0, hold: asyncio.Event | None = None):
        super().__init__(replies)
        self.pause = pause
        self.hold = hold
        self.started = asyncio.Event()

    async def stream(self, request):  # type: ignore[no-untyped-def]
        self.started.set()
        if self.hold is not None:
            await self.hold.wait()
        async for event in super().stream(request):
            if isinstance(event, TextDelta) and self.pause:
                await asyncio.sleep(self.pause)
            yield event


def settings_of(stand_in: StandIn, **overrides: Any) -> Any:
    """The channel's settings as the gateway would have them from a config.json holding the stand-in's."""
    return registry.get(stand_in.channel).settings(config_of(stand_in, **overrides))


def config_of(stand_in: StandIn, channels: dict[str, Any] | None = None, **overrides: Any) -> Config:
    """The config a gateway would load from a config.json holding the stand-in's settings (and `channels`' other
    keys, such as replyLimit)."""
    paths = Paths.from_env()
    path = write_config(paths.home, {**extra_config(stand_in),
                                     "channels": {**(channels or {}),
                                                  stand_in.channel: {**stand_in.settings(), **overrides}}})
    config, _ = load_config(path, env={})
    return config


@contextlib.asynccontextmanager
async def running(stand_in: StandIn, provider: ScriptedProvider, timing: Timing = TIMING,
                  transcriber: Transcriber | None = None, channels: dict[str, Any] | None = None,
                  **overrides: Any) -> AsyncIterator[ChannelRunner]:
    """The channel running through the shared engine against the stand-in, the agent on `provider`, voice notes
    transcribed by `transcriber` (None: off), `channels`' other keys in config.json (replyLimit)."""
    paths = Paths.from_env()
    config = config_of(stand_in, channels, **overrides)  # the agent's too: its `message` tool delivers with the channel's
    settings = registry.get(stand_in.channel).settings(config)
    hub = Hub(build_agent(config, paths, provider=provider))
    runner = ChannelRunner(registry.get(stand_in.channel), settings, paths, hub, timing, transcriber=transcriber,
                           reply_limit=config.channels.reply_limit)
    task = asyncio.create_task(runner.run())
    try:
        async with listening(config, hub, paths):
            yield runner
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def listening(config: Config, hub: Hub, paths: Paths) -> AsyncIterator[None]:
    """The gateway's HTTP listener where the config turns it on, as `nanoagent gateway` runs it: the channels'
    webhook routes (`Channel.routes`) on it, the listener's limits and host checks around them."""
    if not config.gateway.http.enabled:
        yield
        return
    from nanoagent.gateway.http import http_component
    from nanoagent.web.auth import WebAuth
    from nanoagent.web.context import WebContext

    bound = asyncio.Event()
    component = http_component(hub, paths, config.gateway.http, listening=lambda host, port: bound.set(),
                               web_context=lambda: WebContext(hub, paths, config, WebAuth()))
    task = asyncio.create_task(component.run())
    listened = asyncio.create_task(bound.wait())
    try:
        async with asyncio.timeout(PATIENCE):
            await asyncio.wait({task, listened}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # it could not listen: its error
        yield
    finally:
        listened.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task



def settled(runner: ChannelRunner) -> bool:
    """Nothing is left in the inbox and no turn waits for its reply to reach the chat."""
    state = runner.state.read()
    return not state.inbox and not state.open_turns
