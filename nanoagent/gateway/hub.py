"""The Hub: every channel's way into the one AgentLoop a gateway hosts.

A message for a session whose turn is running joins that turn (injection, as in the terminal);
otherwise it starts a turn, one at a time per session and at most `max_turns` sessions at once.
Turns are tasks the hub owns: a client that goes away does not stop its turn. Events of a turn go
to every watcher of its session (each attached client, a channel) and to the sender's own sink.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nanoagent.agent import events as ev
from nanoagent.agent.commands import STOP_COMMANDS
from nanoagent.agent.events import TurnResult
from nanoagent.agent.loop import AgentLoop
from nanoagent.messages import ImageBlock
from nanoagent.session.store import Session, SessionStore
from nanoagent.tools import Ask

if TYPE_CHECKING:
    from nanoagent.mcp.servers import McpServers


class HubClosed(Exception):
    """The gateway is shutting down and takes no new messages."""


@dataclass
class _Session:
    watchers: list[ev.EventSink] = field(default_factory=list)
    turn: asyncio.Task[TurnResult] | None = None
    pending: list[str] = field(default_factory=list)  # messages that joined the running turn
    ask: Ask | None = None  # who can approve commands in the running turn
    workdir: str = ""  # the folder the running turn works in (`agent -C DIR`): the turn that follows it works there
    profile: str = ""  # the tool profile the running turn is narrowed to (an editor's mode): so is the one that follows
    commands: set[asyncio.Task[TurnResult]] = field(default_factory=set)  # slash commands running (/new, /dream)


class Hub:
    def __init__(self, loop: AgentLoop, max_turns: int = 4):
        self.loop = loop
        self.slots = asyncio.Semaphore(max_turns)
        self.closed = False
        self._sessions: dict[str, _Session] = {}

    def _state(self, key: str) -> _Session:
        return self._sessions.setdefault(key, _Session())

    def watch(self, key: str, sink: ev.EventSink) -> Callable[[], None]:
        """Send the session's events to `sink` until the returned function is called."""
        state = self._state(key)
        state.watchers.append(sink)

        def unwatch() -> None:
            if sink in state.watchers:
                state.watchers.remove(sink)

        return unwatch

    def publish(self, key: str, event: ev.Event) -> None:
        """Show an event to the session's watchers outside any turn (a scheduled message delivered to it)."""
        self._fanout(self._state(key), None)(event)

    # --- what the gateway's sides (channels, the web app, the HTTP endpoint, attached terminals) read of the loop:
    # the hub is their one door to it, so none of them reaches into the loop -------------------------------------

    @property
    def sessions(self) -> SessionStore:
        """The saved sessions, and the temporary ones (/incognito) while they last."""
        return self.loop.store

    def session(self, key: str) -> Session:
        """Session `key` as its next turn sees it (a temporary one while /incognito lasts); NanoagentError for a key
        no session file can carry."""
        return self.loop.session(key)

    def start_incognito(self, key: str) -> Session:
        return self.loop.start_incognito(key)

    @property
    def default_model(self) -> str:
        return self.loop.models.default

    def model_for(self, session: Session) -> str:
        """The model the session's next turn uses (its /model choice, else the default)."""
        return self.loop.model_for(session)

    def context_use(self, session: Session) -> tuple[str, int, int]:
        """(model, tokens the next turn would send, the model's window as the budget counts it), as /status says."""
        model = self.loop.model_for(session)
        return model, self.loop.budget.used(session, model), self.loop.budget.window(model).tokens

    async def model_title(self, key: str) -> str:
        """A title for session `key` from one short call to agents.defaults.backgroundModel (else the session's model),
        counted as `title` in the spend ledger; "" before the session has a message. NanoagentError when it failed."""
        from nanoagent.agent.titles import model_title
        from nanoagent.session.titles import first_text

        session = self.loop.session(key)
        first = first_text(session)
        if not first.strip():
            return ""
        model = self.loop.settings.background_model or self.loop.model_for(session)
        return await model_title(self.loop.providers, model, key, first)

    def note_chat(self, key: str, group: bool) -> None:
        """What a channel says of a chat: a group chat or not (its turns get `tools.groupProfile`)."""
        self.loop.note_chat(key, group)

    def takes_images(self, key: str) -> bool:
        return self.loop.takes_images(key)

    def check_images(self, key: str, images: list[ImageBlock]) -> None:
        """AttachmentError now when the session's model takes no images (a message is refused before its wait)."""
        self.loop.check_images(key, images)

    @property
    def workspace(self) -> Path:
        return self.loop.tool_context.workspace

    @property
    def mcp(self) -> McpServers | None:
        """The MCP servers' live state (None: none configured)."""
        return self.loop.mcp

    def command_names(self) -> list[str]:
        return self.loop.commands.names()

    def busy(self, key: str) -> bool:
        turn = self._state(key).turn
        return turn is not None and not turn.done()

    def running(self) -> list[str]:
        return [key for key in self._sessions if self.busy(key)]

    async def send(self, key: str, text: str, sink: ev.EventSink | None = None, ask: Ask | None = None,
                   images: list[ImageBlock] | None = None, *, model: str | None = None,
                   fresh: bool = False, workdir: str = "", profile: str = "") -> TurnResult | None:
        """Handle a message: a slash command, a new turn (its result when it ends), or None when the message
        joined the session's running turn. `sink` gets this call's events besides the session's watchers.
        A message with `images` never joins a running turn (a joined message is text): it waits for the turn
        to end and starts the next one; so does a `fresh` one (the session emptied first: the heartbeat's),
        whose turn may use a `model` of its own (`AgentLoop.handle`). `workdir`: the folder the turn works in (a
        terminal's `agent -C DIR`, a cron job made in such a turn); `profile`: the tool profile the turn is narrowed to
        (an editor's mode, `nanoagent acp`)."""
        if self.closed:
            raise HubClosed("The gateway is shutting down; send the message again when it is back.")
        state = self._state(key)
        stripped = text.strip()
        if stripped.split(maxsplit=1)[:1] in ([c] for c in STOP_COMMANDS):
            return TurnResult("Stopped the running turn." if self.cancel(key) else "Nothing is running.", key)
        if stripped.startswith("/") and stripped.split()[0] != "/retry":
            return await self._command(key, state, stripped, sink, ask, images, workdir)
        if images or fresh:
            if images:
                self.loop.check_images(key, images)  # refused now, not after waiting for the running turn
            while state.turn is not None and not state.turn.done():
                await asyncio.wait({state.turn})
            if self.closed:
                raise HubClosed("The gateway is shutting down; send the message again when it is back.")
        elif self.busy(key):
            state.pending.append(text)
            return None
        return await self._start(key, state, text, sink, ask, images, model, fresh, workdir, profile)

    async def _start(self, key: str, state: _Session, text: str, sink: ev.EventSink | None,
                     ask: Ask | None, images: list[ImageBlock] | None = None, model: str | None = None,
                     fresh: bool = False, workdir: str = "", profile: str = "") -> TurnResult:
        state.ask, state.workdir, state.profile = ask, workdir, profile
        state.turn = asyncio.create_task(self._turn(key, state, text, sink, ask, images, model, fresh, workdir, profile),
                                         name=f"turn {key}")
        # the turn belongs to the hub: a sender that is cancelled (a client gone) leaves it running
        try:
            return await asyncio.shield(state.turn)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the sender itself was cancelled
            # the turn was (/stop, shutdown): its sender still gets an answer
            return TurnResult("Cancelled.", key, ev.RunResult(reply="", stop=ev.StopReason.CANCELLED))

    async def _command(self, key: str, state: _Session, text: str, sink: ev.EventSink | None, ask: Ask | None,
                       images: list[ImageBlock] | None, workdir: str = "") -> TurnResult:
        """A slash command, cancelled like a turn (/stop, a client's Ctrl-C). Unlike a turn it belongs to its
        sender: a sender that goes away cancels it."""
        command = asyncio.create_task(self.loop.handle(text, key, sink=self._fanout(state, sink), ask=ask,
                                                       images=images, workdir=workdir), name=f"command {key}")
        state.commands.add(command)
        try:
            return await command
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the sender itself was cancelled (and the command with it)
            return TurnResult(f"Cancelled {text.split()[0]}.", key, refused=True)
        finally:
            state.commands.discard(command)

    async def _turn(self, key: str, state: _Session, text: str, sink: ev.EventSink | None,
                    ask: Ask | None, images: list[ImageBlock] | None = None, model: str | None = None,
                    fresh: bool = False, workdir: str = "", profile: str = "") -> TurnResult:
        async with self.slots:
            result = await self.loop.handle(text, key, sink=self._fanout(state, sink),
                                            injections=lambda: self._take(state), ask=ask, images=images,
                                            model=model, fresh=fresh, workdir=workdir, profile=profile)
        if state.pending and not self.closed:  # said after the turn's last model call: it starts the next
            follow = "\n\n".join(self._take(state))
            state.turn = asyncio.create_task(self._turn(key, state, follow, None, state.ask, workdir=state.workdir,
                                                        profile=state.profile),
                                             name=f"turn {key}")
        return result

    @staticmethod
    def _take(state: _Session) -> list[str]:
        taken, state.pending = state.pending, []
        return taken

    @staticmethod
    def _fanout(state: _Session, sink: ev.EventSink | None) -> ev.EventSink:
        def send(event: ev.Event) -> None:
            for target in dict.fromkeys([*([sink] if sink else []), *state.watchers]):  # each once, in order
                try:
                    target(event)
                except Exception:  # noqa: BLE001 - one broken watcher must not break the turn for the others
                    pass

        return send

    def cancel(self, key: str) -> bool:
        """Cancel the session's running turn (the loop records it as interrupted) and slash commands. False when
        nothing runs."""
        state = self._state(key)
        state.pending.clear()
        commands = [c for c in state.commands if not c.done()]
        for command in commands:
            command.cancel()
        if state.turn is None or state.turn.done():
            return bool(commands)
        state.turn.cancel()
        return True

    async def drain(self, grace: float) -> None:
        """Stop taking messages; let running turns finish for `grace` seconds, then cancel the rest and wait
        for them to record their interrupted state."""
        self.closed = True
        turns = [s.turn for s in self._sessions.values() if s.turn is not None and not s.turn.done()]
        if turns:
            _, late = await asyncio.wait(turns, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self.loop.subagents is not None:  # background runs record themselves as cancelled
            await self.loop.subagents.close()
        self.loop.store.end_all_incognito(unasked=True)  # temporary chats end with the gateway

    async def sweep_idle(self, every: float = 60.0) -> None:
        """Run for the gateway's life: end the temporary sessions (/incognito) idle for an hour, and let go of what
        is held for sessions idle as long (`forget_idle`)."""
        while True:
            await asyncio.sleep(every)
            self.loop.end_idle(time.time())
            self.forget_idle(time.time())

    def forget_idle(self, now: float) -> list[str]:
        """The loop's idle sessions, and this hub's state of any session nobody watches and nothing runs in (none
        carries a working folder over to the next turn): the keys the loop let go of."""
        forgotten = self.loop.forget_idle(now)
        for key, state in list(self._sessions.items()):
            if not state.watchers and (state.turn is None or state.turn.done()) and not state.commands \
                    and not state.workdir and not state.pending:
                del self._sessions[key]
        return forgotten
