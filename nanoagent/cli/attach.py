"""What an interactive terminal talks to: the agent in this process, or a running gateway over its socket.

Both offer the same few operations, so the session renders, cancels, injects and approves the same way either
way. A one-shot `agent -m` uses LocalAgent too; through a gateway it sends with `gateway/oneshot.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from nanoagent.agent import events as ev
from nanoagent.pricing import context_window, effective_window

if TYPE_CHECKING:
    from pathlib import Path

    from nanoagent.agent.loop import AgentLoop
    from nanoagent.gateway.client import GatewayClient
    from nanoagent.messages import ImageBlock
    from nanoagent.tools import Ask


class LocalAgent:
    """The agent in this process."""

    detach_on_exit = False  # quitting cancels the running turn: nothing else would finish it

    def __init__(self, loop: AgentLoop, workdir: str = ""):
        self.loop = loop
        self.workdir = workdir  # the folder this terminal works in (`agent -C DIR`); "" = the workspace

    async def handle(self, text: str, key: str, sink: ev.EventSink, ask: Ask | None = None,
                     injections: Callable[[], list[str]] | None = None,
                     images: list[ImageBlock] | None = None) -> ev.TurnResult:
        return await self.loop.handle(text, key, sink=sink, injections=injections, ask=ask, images=images,
                                      workdir=self.workdir)

    def inject(self, key: str, text: str) -> bool:
        return False  # the session keeps it and hands it over between model calls

    def command_names(self) -> list[str]:
        return self.loop.commands.names()

    def model(self, key: str) -> str:
        return self.loop.model_for(self.loop.session(key))

    def context(self, key: str) -> tuple[int, int] | None:
        session = self.loop.session(key)
        if not session.usage:
            return None
        window = effective_window(self.loop.settings.context_window_tokens, self.model(key))
        return session.usage[-1].usage.prompt_tokens, window.tokens

    def warm_up(self, key: str) -> None:
        """Import the provider SDK in the background so the first reply does not wait for it; start MCP servers."""
        from nanoagent.errors import NanoagentError

        loop = asyncio.get_running_loop()
        try:
            provider = self.loop.providers.get(self.model(key))
        except NanoagentError:  # a session's model that cannot be used: its turns say so, and /model or /new work
            pass
        else:  # after the prompt is on screen, so the import does not hold up the first frame
            loop.call_later(0.3, lambda: loop.run_in_executor(None, provider.prepare))
        loop.call_later(0.3, lambda: loop.run_in_executor(None, self.loop.context.confinement))  # bwrap's check
        if self.loop.mcp is not None:
            loop.call_later(0.3, self.loop.mcp.warm_up)

    async def aclose(self) -> None:
        await self.loop.aclose()


GONE_NOTICE = ("The gateway has stopped. Your next message runs here in this terminal instead (the agent starts "
               "in this process); /exit quits.")


class RemoteAgent:
    """A running gateway. Its events arrive through the client (set up to draw on the terminal), so `sink`
    is not used; a message typed during a turn goes to the gateway at once and joins the turn there.
    When the gateway stops, the terminal is told at once and the next message runs in this process (`local`
    makes that agent, on first need); without `local` each message fails with one line instead."""

    def __init__(self, client: GatewayClient, usage: list[ev.UsageRecorded],
                 local: Callable[[], LocalAgent] | None = None, workdir: str = ""):
        self.client = client
        self.workdir = workdir  # sent with each message: the gateway's turn works there
        self.usage = usage  # the last usage seen, for the status line
        self.make_local = local
        self.local: LocalAgent | None = None
        self._joins: set[asyncio.Task[ev.TurnResult | None]] = set()

    @property
    def detach_on_exit(self) -> bool:
        return self.local is None  # the gateway finishes its turn; the terminal only stops watching

    def _here(self) -> LocalAgent | None:
        """The agent in this process once the gateway is gone (made now if it must be), else None."""
        if self.local is None and self.client.gone and self.make_local is not None:
            self.local = self.make_local()
        return self.local

    async def handle(self, text: str, key: str, sink: ev.EventSink, ask: Ask | None = None,
                     injections: Callable[[], list[str]] | None = None,
                     images: list[ImageBlock] | None = None) -> ev.TurnResult:
        local = self._here()
        if local is not None:
            return await local.handle(text, key, sink, ask, injections, images)
        self.client.ask = ask  # approval questions of this turn go to whoever sent it
        turn = await self.client.send(text, key, images, workdir=self.workdir)
        return turn or ev.TurnResult("", key)

    def inject(self, key: str, text: str) -> bool:
        if self.client.gone:
            return False  # the session keeps it for the next turn here
        task = asyncio.create_task(self.client.send(text, key, workdir=self.workdir))
        self._joins.add(task)
        task.add_done_callback(self._joins.discard)
        return True

    def command_names(self) -> list[str]:
        return list(self.client.welcome.get("commands") or [])

    def model(self, key: str) -> str:
        return self.local.model(key) if self.local is not None else str(self.client.welcome.get("model", ""))

    def context(self, key: str) -> tuple[int, int] | None:
        if self.local is not None:
            return self.local.context(key)
        if not self.usage:
            return None
        window = context_window(self.model(key)) or int(self.client.welcome.get("context_window") or 200_000)
        return self.usage[-1].usage.prompt_tokens, window

    def warm_up(self, key: str) -> None:
        pass  # the gateway has its SDK loaded

    async def aclose(self) -> None:
        await self.client.close()
        if self.local is not None:
            await self.local.aclose()


async def connect(socket: Path, key: str, draw: ev.EventSink,
                  local: Callable[[], LocalAgent] | None = None, workdir: str = "") -> RemoteAgent:
    """Attach to the gateway: its events for the session are drawn with `draw`; should the gateway stop, the
    terminal says so at once and `local` makes the agent that answers here from then on."""
    from nanoagent.gateway.client import GatewayClient

    seen: list[ev.UsageRecorded] = []

    def on_event(event: ev.Event) -> None:
        if isinstance(event, ev.UsageRecorded):
            seen[:] = [event]
        draw(event)

    client = await GatewayClient.connect(socket, key, on_event)
    client.on_gone = lambda: draw(ev.Notice(GONE_NOTICE if local is not None else GONE_ALONE,
                                                  session=key))
    return RemoteAgent(client, seen, local, workdir)


GONE_ALONE = "The gateway has stopped; start it again with `nanoagent gateway`, or quit and use --local."
