"""AgentLoop: dispatch a message to its session, one turn at a time, checkpointing as it goes.

A turn: lock the session file, repair what a killed process left behind, persist
the user's message, run the runner, append each message as it completes, fsync
at the end. A process killed at any point leaves a session the next turn can use;
a cancelled turn (Ctrl-C) leaves the same consistent state at once. A turn that
fails is marked in the session so its messages are never sent again.

Each call brings its own event sink: the loop serves whoever asked, a terminal or
(later) many clients at once, and knows none of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nanoagent import messages as msg
from nanoagent.agent import events as ev
from nanoagent.agent.commands import Commands, Refused, Resend
from nanoagent.agent.context import ContextBuilder
from nanoagent.agent.events import TurnResult
from nanoagent.agent.runner import AgentRunner, RunSpec
from nanoagent.agent.subagents import RunScope, Subagents, current_run
from nanoagent.attachments import AttachmentError, resolve, verify
from nanoagent.config.schema import AgentDefaults
from nanoagent.memory.consolidator import Consolidator, FixedCost
from nanoagent.pricing import takes_images
from nanoagent.providers.base import Providers
from nanoagent.session.store import Session, SessionStore
from nanoagent.tools import Ask, ToolContext, TurnScope, current_turn
from nanoagent.usage import UsageRecord

if TYPE_CHECKING:
    from nanoagent.agent.runner import Resolve, Shrink
    from nanoagent.mcp.servers import McpServers

INTERRUPTED = ("Error: interrupted before this tool finished (the turn was cancelled or nanoagent stopped); "
               "its effect is unknown.")
CANCELLED = "(The user cancelled this turn before it finished.)"
BUSY = "Wait for the current turn to finish, or press Ctrl-C to cancel it."


@dataclass(frozen=True)
class ModelChoice:
    """Which model a session's turns use: its own (/model) unless --model on the command line pins one."""

    default: str
    pinned: bool = False

    def for_session(self, session: Session) -> str:
        return self.default if self.pinned else session.meta.model or self.default


@dataclass
class AgentLoop:
    providers: Providers  # model name -> provider (with retries and fallbacks), built on first use
    store: SessionStore
    context: ContextBuilder  # holds the tool list too: it is part of every request's fixed cost
    tool_context: ToolContext
    settings: AgentDefaults
    max_result_chars: int
    models: ModelChoice
    commands: Commands
    consolidator: Consolidator | None = None  # archives old turns to memory/history.jsonl
    image_models: tuple[str, ...] = ()  # models sent images whatever the bundled table says
    mcp: McpServers | None = None  # the user's MCP servers, whose tools are in context.tools
    subagents: Subagents | None = None  # the runs `spawn` started (None: no spawn tool)
    _sessions: dict[str, Session] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def session(self, key: str) -> Session:
        if key not in self._sessions:
            self._sessions[key] = self.store.load(key)
        return self._sessions[key]

    def model_for(self, session: Session) -> str:
        return self.models.for_session(session)

    def takes_images(self, key: str) -> bool:
        """Whether the model session `key` uses now accepts images."""
        return takes_images(self.model_for(self.session(key)), self.image_models)

    def busy(self, key: str) -> bool:
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    async def handle(self, text: str, key: str = "cli:direct", sink: ev.EventSink = ev.discard,
                     injections: Callable[[], list[str]] | None = None, ask: Ask | None = None,
                     images: list[msg.ImageBlock] | None = None) -> TurnResult:
        """Run one message (or slash command) in session `key`. Events go to `sink`; `ask` reaches the person
        who sent it, for approvals (None: nobody can answer, so anything needing a yes is refused). `images`
        are references to files under the workspace's media/ (`attachments.prepare`); a model that does not
        take images refuses them with AttachmentError before anything is stored."""
        session = self.session(key)
        images = list(images or [])
        if text.strip().startswith("/"):
            if images:
                raise AttachmentError("Images go with a message, not a slash command; send them with some text.")
            name = text.split()[0]
            if self.busy(key) and not self.commands.read_only(name):
                return TurnResult(BUSY, key, model=self.model_for(session), refused=True)
            outcome = await self.commands.run(session, text.strip(), sink)
            if isinstance(outcome, Refused):
                return TurnResult(outcome.text, key, model=self.model_for(session), refused=True)
            if not isinstance(outcome, Resend):
                return TurnResult(outcome, key, model=self.model_for(session))
            text, images = outcome.text, list(outcome.images)
        if images:
            self.check_images(key, images)
        self.commands.check_model(session)  # before the message is stored: a session's unusable model says so
        def waiting(text: str) -> None:  # another process holds the session: say so while the turn waits
            sink(ev.Notice(text, session=key))

        async with self._locks.setdefault(key, asyncio.Lock()), self.store.lock_async(session, waiting=waiting):
            return await self._turn(session, text, sink, injections, ask, images)

    def check_images(self, key: str, images: list[msg.ImageBlock]) -> None:
        """AttachmentError unless the session's model takes images and each reference matches its file."""
        model = self.model_for(self.session(key))
        if not self.takes_images(key):
            raise AttachmentError(f"{model} does not take images, so the image was not sent; switch to a model "
                                  "that does (/model or --model), or list this one in "
                                  "tools.attachments.imageModels if it takes them after all.")
        verify(self.tool_context.workspace, images)

    async def _turn(self, session: Session, text: str, sink: ev.EventSink,
                    injections: Callable[[], list[str]] | None, ask: Ask | None,
                    images: list[msg.ImageBlock]) -> TurnResult:
        self.repair(session, sink)
        channel, _, chat_id = session.key.partition(":")
        notices = session.pending_notices()  # background results that arrived since the last turn
        user = self.context.user_message(text, channel or "cli", chat_id or "direct", images=images,
                                         notices=[n.text for n in notices])
        model = self.model_for(session)
        start = len(session.messages)
        # on disk before any model call, summaries included
        self.store.add_messages(session, [user], sync=True, notices_delivered=len(session.notices) if notices else None)
        sink(ev.TurnStarted(model, session=session.key))
        sink(ev.MessageAdded(user, session=session.key))
        def notify(text: str) -> None:
            sink(ev.Notice(text, session=session.key))

        scope = current_turn.set(TurnScope(session.key, start, notify, ask))
        run = current_run.set(RunScope(session, session, 0, model, self.context.tools, sink))
        try:
            if self.mcp is not None:
                await self.mcp.prepare()  # servers whose tools are not cached yet
            system, visible = await self._fit_context(session, model)
            current_turn.set(TurnScope(session.key, visible, notify, ask))
            runner = AgentRunner(self.providers.get(model), self._checkpointing_sink(session, sink))
            result = await runner.run(self._spec(session, system, visible, model, injections))
        except asyncio.CancelledError:
            self._after_cancel(session, sink)
            raise
        finally:
            current_run.reset(run)
            current_turn.reset(scope)
            self.store.sync(session)
        if result.error is not None:
            self.store.mark_failed(session, start, result.error)
            return TurnResult(f"Error: {result.error.rstrip('.')}.", session.key, result, model)
        if self.consolidator is not None:  # near the budget: archive now, not at the start of the next turn
            await self.consolidator.maybe_consolidate(session, self._fixed(system), model, threshold=0.8)
        return TurnResult(result.reply, session.key, result, model)

    def _spec(self, session: Session, system: str, visible: int, model: str,
              injections: Callable[[], list[str]] | None) -> RunSpec:
        s = self.settings
        return RunSpec(
            system=system, messages=self._request(session, visible, model),
            tools=self.context.tools, tool_context=self.tool_context, model=model, session=session.key,
            max_tokens=s.max_tokens, temperature=s.temperature, thinking_budget=s.thinking_budget,
            max_iterations=s.max_tool_iterations, max_result_chars=self.max_result_chars, injections=injections,
            shrink=self._shrinker(session, model, self.consolidator) if self.consolidator is not None else None,
            resolve=self._resolver(model),
        )

    def _shrinker(self, session: Session, model: str, consolidator: Consolidator) -> Shrink:
        """What the runner calls when the provider refuses the prompt as too long: archive older turns as if the
        prompt filled the model's window, and give the runner the smaller prompt (None: nothing left to archive)."""
        async def shrink() -> tuple[str, list[msg.Message]] | None:
            if not await consolidator.consolidate_overflow(session, self._fixed(self.context.system_prompt()), model):
                return None
            system = self.context.system_prompt()  # the archive added to the recent history
            visible = consolidator.window_start(session, self._fixed(system), model)
            current_turn.set(dataclasses.replace(current_turn.get(), visible_from=visible))
            return system, self._request(session, visible, model)

        return shrink

    def _request(self, session: Session, visible: int, model: str) -> list[msg.Message]:
        """The session's messages from `visible` as the model gets them, images read from media/."""
        history = msg.history_for_model(session.messages, visible, session.failed())
        return self._resolver(model)(history)

    def _resolver(self, model: str) -> Resolve:
        """Image references to what `model` is sent: their bytes, or notes."""
        return functools.partial(resolve, workspace=self.tool_context.workspace, model=model,
                                 takes_images=takes_images(model, self.image_models))

    async def _fit_context(self, session: Session, model: str) -> tuple[str, int]:
        """Archive old turns if the prompt would outgrow the budget; (system prompt, first message to send)."""
        system = self.context.system_prompt()
        if self.consolidator is None:
            return system, session.last_consolidated
        if await self.consolidator.maybe_consolidate(session, self._fixed(system), model):
            system = self.context.system_prompt()  # the archive added to the recent history
        return system, self.consolidator.window_start(session, self._fixed(system), model)

    def _fixed(self, system: str) -> FixedCost:
        """Tokens of the system prompt and tool list, by whichever counter the Consolidator asks for."""
        return lambda count: self.context.fixed_tokens(system, count)

    async def aclose(self) -> None:
        """Stop what the loop keeps running between turns (MCP servers)."""
        if self.mcp is not None:
            await self.mcp.aclose()

    def _after_cancel(self, session: Session, sink: ev.EventSink) -> None:
        """Leave the session as a finished turn: results for started tools, and a note the turn stopped."""
        self.repair(session, sink, notify=False)
        self.store.add_messages(session, [msg.assistant(CANCELLED)], sync=True)
        sink(ev.TurnEnded(ev.StopReason.CANCELLED, session=session.key))

    def _checkpointing_sink(self, session: Session, sink: ev.EventSink) -> ev.EventSink:
        def checkpoint(event: ev.Event) -> None:
            if isinstance(event, ev.MessageAdded):
                self.store.add_messages(session, [event.message])
            elif isinstance(event, ev.UsageRecorded):  # with the stretch of messages the call sent, which it measures
                window = (current_turn.get().visible_from, len(session.messages))
                self.store.add_usage(session, UsageRecord.now(event.model, event.usage, window=window))
            sink(event)

        return checkpoint

    def repair(self, session: Session, sink: ev.EventSink = ev.discard, notify: bool = True) -> None:
        """Give tool calls that never got a result (process killed mid-turn) an 'interrupted' result."""
        missing = msg.closing_results(session.messages, INTERRUPTED)
        if missing:
            self.store.add_messages(session, missing, sync=True)
            if notify:
                sink(ev.Notice(f"Repaired session {session.key}: {len(missing)} tool call(s) were interrupted.",
                               session=session.key))


__all__ = ["AgentLoop", "ModelChoice", "TurnResult"]
