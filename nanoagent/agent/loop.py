"""AgentLoop: dispatch a message to its session, one turn at a time, checkpointing as it goes.

A turn: lock the session file, repair what a killed process left behind, fit the
prompt to its budget (`agent/budget.py`), then `Turns.run` (`agent/turn.py`): persist
the user's message, run the runner, append each message as it completes, fsync
at the end. A process killed at any point leaves a session the next turn can use;
a cancelled turn (Ctrl-C) leaves the same consistent state at once. A turn that
fails is marked in the session so its messages are never sent again.

Each call brings its own event sink: the loop serves whoever asked (a terminal, or in the
gateway every channel and scheduled run at once, through `Hub.send`) and knows none of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from nanoagent import keys
from nanoagent import messages as msg
from nanoagent.agent import events as ev
from nanoagent.agent.budget import PromptBudget, TurnBudget
from nanoagent.agent.commands import INCOGNITO_NOTICE, Commands, ModelChoice, Refused, Resend
from nanoagent.agent.context import ContextBuilder
from nanoagent.agent.events import TurnResult
from nanoagent.agent.runner import RunSpec
from nanoagent.agent.subagents import RunScope, Subagents, current_run
from nanoagent.agent.turn import CANCELLED, INTERRUPTED, Turns
from nanoagent.attachments import AttachmentError, verify
from nanoagent.config.schema import AgentDefaults
from nanoagent.errors import NanoagentError
from nanoagent.memory.consolidator import Consolidator
from nanoagent.memory.people import aliases, hidden
from nanoagent.memory.recall import AutoRecall, Shown, recall_query
from nanoagent.providers.base import Providers
from nanoagent.session.store import Session, SessionStore
from nanoagent.spend import Scope, current_scope
from nanoagent.tools import Ask, ToolContext, ToolRegistry, TurnScope, current_turn
from nanoagent.tools.policy import narrowed

if TYPE_CHECKING:
    from nanoagent.agent.runner import Shrink
    from nanoagent.mcp.servers import McpServers

BUSY = "Wait for the current turn to finish, or press Ctrl-C to cancel it."
INCOGNITO_IDLE = 3600.0  # seconds without a turn after which a temporary session ends
SESSION_IDLE = 3600.0  # seconds without a change after which a saved session is no longer held in memory
INCOGNITO_ENDED = ("Your temporary chat (/incognito) ended without you (an hour without a message, or nanoagent "
                   "stopped) and was deleted. This message was not sent and is not kept: send it again to continue "
                   "your saved conversation, or /incognito to start a new temporary chat.")


def _last_activity(session: Session) -> float:
    """When a session last changed: its file's mtime, or when it started if nothing was said yet."""
    try:
        return session.path.stat().st_mtime
    except FileNotFoundError:
        return datetime.fromisoformat(session.meta.created).timestamp() if session.meta.created else time.time()
# Sessions whose turns have no person in them (`keys.UNATTENDED`): a heartbeat's or a cron job's standing prompt
# repeats each run, so recall would add the same hits every time; the model can still call memory_search. Sub-agents'
# turns are not the loop's and get none either.
RECALL_DEADLINE = 2.0  # seconds a turn waits for automatic recall (the first search may build the index)
log = logging.getLogger("nanoagent.recall")


@dataclass
class AgentLoop:
    turns: Turns  # runs a turn in a session: the store, providers and settings every turn shares
    budget: PromptBudget  # what a turn sends, archiving old turns to memory/history.jsonl to make room
    models: ModelChoice
    commands: Commands
    mcp: McpServers | None = None  # the user's MCP servers, whose tools are in context.tools
    subagents: Subagents | None = None  # the runs `spawn` started (None: no spawn tool)
    recall: AutoRecall | None = None  # memory put in each person's turn (None: none)
    closers: tuple[Callable[[], Awaitable[None]], ...] = ()  # more it keeps running between turns (the browser)
    _sessions: dict[str, Session] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    @property
    def store(self) -> SessionStore:
        return self.turns.store

    @property
    def providers(self) -> Providers:
        return self.turns.providers

    @property
    def settings(self) -> AgentDefaults:
        return self.turns.settings

    @property
    def tool_context(self) -> ToolContext:
        return self.turns.tool_context

    @property
    def context(self) -> ContextBuilder:  # holds the tool list too: it is part of every request's fixed cost
        return self.budget.context

    @property
    def consolidator(self) -> Consolidator | None:
        return self.budget.consolidator

    def session(self, key: str) -> Session:
        temporary = self.store.temporary.get(key)  # /incognito: the key's turns go to its temporary session
        if temporary is not None:
            return temporary
        if key not in self._sessions:
            self._sessions[key] = self.store.load(key)
        return self._sessions[key]

    def start_incognito(self, key: str) -> Session:
        """Make `key`'s turns go to a temporary session (`agent --incognito`, the HTTP flag); the one it has if it
        is already temporary. Ended by /new, the process's end, or an idle hour (`end_idle`)."""
        return self.store.temporary.get(key) or self.store.start_incognito(key)

    def end_idle(self, now: float, idle: float = INCOGNITO_IDLE) -> list[str]:
        """End the temporary sessions nothing has happened in for `idle` seconds (time.time()); their keys."""
        ended = []
        for key, session in list(self.store.temporary.items()):
            if not self.busy(key) and now - _last_activity(session) >= idle:
                self.store.end_incognito(session, unasked=True)
                ended.append(key)
        return ended

    def forget_idle(self, now: float, idle: float = SESSION_IDLE) -> list[str]:
        """Let go of the sessions held in memory that nothing happened in for `idle` seconds (time.time()): a gateway
        that runs for days holds only its live ones (every email thread, web chat and HTTP user was kept). The next
        turn loads one from its file, as after a restart, and a turn refreshes its session under the file's lock."""
        idle_keys = [key for key, session in self._sessions.items()
                     if not self.busy(key) and now - _last_activity(session) >= idle]
        for key in idle_keys:
            del self._sessions[key]
            if self.consolidator is not None:
                self.consolidator.forget(key)
        return idle_keys

    def note_chat(self, key: str, group: bool) -> None:
        """What the channel told of the chat of session `key` with its latest message: a group chat or not
        (`Incoming.private`). A group chat's turns are offered `tools.groupProfile`."""
        self.context.note_chat(key, group)

    def is_group(self, key: str) -> bool:
        return self.context.is_group(key)

    def tools_for(self, key: str, profile: str = "") -> ToolRegistry:
        """The tools session `key` is offered (`tools/policy.py`), narrowed to `profile`'s when one is given (an
        editor's mode, `nanoagent acp`): a profile here only takes tools away, never adds one the policy denies."""
        return narrowed(self.context.tools_for(key), profile)

    def model_for(self, session: Session) -> str:
        return self.models.for_session(session)

    def takes_images(self, key: str) -> bool:
        """Whether the model session `key` uses now accepts images."""
        return self.turns.takes_images(self.model_for(self.session(key)))

    def busy(self, key: str) -> bool:
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    async def handle(self, text: str, key: str = "cli:direct", sink: ev.EventSink = ev.discard,
                     injections: Callable[[], list[str]] | None = None, ask: Ask | None = None,
                     images: list[msg.ImageBlock] | None = None, model: str | None = None,
                     fresh: bool = False, workdir: str = "", profile: str = "") -> TurnResult:
        """Run one message (or slash command) in session `key`. Events go to `sink`; `ask` reaches the person
        who sent it, for approvals (None: nobody can answer, so anything needing a yes is refused). `images`
        are references to files under the workspace's media/ (`attachments.prepare`); a model that does not
        take images refuses them with AttachmentError before anything is stored. `model` replaces the session's
        for this turn only; `fresh` empties the session first (a session that starts anew each run: the
        heartbeat's). `workdir` is the folder the person works in (`agent -C DIR`, a real absolute path): this turn's
        file tools and exec work there (`TurnScope.workdir`). `profile` narrows this turn's tools to a profile's
        (`tools_for`)."""
        outer = current_scope.get()  # a cron run or the heartbeat set theirs for this session; else it is a turn's
        scope = current_scope.set(outer if outer is not None and outer.session == key
                                  else Scope(key, "turn", private=key in self.store.temporary))
        try:
            return await self._handle(text, key, sink, injections, ask, images, model, fresh, workdir, profile)
        finally:
            current_scope.reset(scope)

    async def _handle(self, text: str, key: str, sink: ev.EventSink, injections: Callable[[], list[str]] | None,
                      ask: Ask | None, images: list[msg.ImageBlock] | None, model: str | None,
                      fresh: bool, workdir: str, profile: str = "") -> TurnResult:
        session = self.session(key)
        images = list(images or [])
        if not text.strip().startswith("/") and not session.meta.incognito and self.store.take_ended(key):
            return TurnResult(INCOGNITO_ENDED, key, model=self.model_for(session), refused=True)
        if text.strip().startswith("/"):
            if images:
                raise AttachmentError("Images go with a message, not a slash command; send them with some text.")
            name = text.split()[0]
            if self.busy(key) and not self.commands.read_only(name):
                return TurnResult(BUSY, key, model=self.model_for(session), refused=True)
            outcome = await self.commands.run(session, text.strip(), sink, workdir)
            if isinstance(outcome, Refused):
                return TurnResult(outcome.text, key, model=self.model_for(session), refused=True)
            if not isinstance(outcome, Resend):
                return TurnResult(outcome, key, model=self.model_for(session))
            text, images = outcome.text, list(outcome.images)
        if images:
            self.check_images(key, images)
        if model is None:  # before the message is stored: a session's unusable model says so
            self.commands.check_model(session)
        if workdir and not os.path.isdir(workdir):  # a cron job's folder that was moved or deleted since
            raise NanoagentError(f"The working folder {workdir} is not there any more; nothing was run.")
        def waiting(text: str) -> None:  # another process holds the session: say so while the turn waits
            sink(ev.Notice(text, session=key))

        async with self._locks.setdefault(key, asyncio.Lock()), self.store.lock_async(session, waiting=waiting):
            if fresh:
                self.store.reset(session)
            if session.meta.incognito and not session.messages:  # its first reply says what it is
                sink(ev.Notice(INCOGNITO_NOTICE, session=key))
            return await self._turn(session, text, sink, injections, ask, images, model or self.model_for(session),
                                    workdir, profile)

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
                    images: list[msg.ImageBlock], model: str, workdir: str = "", profile: str = "") -> TurnResult:
        self.repair(session, sink)
        channel, chat_id = keys.chat_of(session.key)
        notices = session.pending_notices()  # background results that arrived since the last turn
        recalled = await self._recall(session, text)
        user = self.context.user_message(text, channel or "cli", chat_id or "direct", images=images,
                                         notices=[n.text for n in notices], recalled=recalled, workdir=workdir)
        budget = self.budget.turn(session, model)
        tools = self.tools_for(session.key, profile)

        def notify(text: str) -> None:
            sink(ev.Notice(text, session=session.key))

        async def prepare() -> RunSpec:  # with the user's message on disk: the prompt is measured with it
            if self.mcp is not None:
                await self.mcp.prepare()  # servers whose tools are not cached yet
            prompt = await budget.fit()
            current_turn.set(dataclasses.replace(current_turn.get(), visible_from=prompt.visible))
            return self.turns.spec(session.key, prompt.system, self._request(session, prompt.visible, model), model,
                                   tools, injections=injections,
                                   shrink=self._shrinker(budget) if budget.can_shrink else None)

        person = self.context.owners.person_of(session.key)
        scope = current_turn.set(TurnScope(session.key, len(session.messages), notify, ask, aliases(person),
                                           hidden(person), workdir, person))
        run = current_run.set(RunScope(session, session, 0, model, tools, sink))
        try:
            result = await self.turns.run(session, user, model, prepare, sink,
                                          sent_from=lambda: current_turn.get().visible_from,
                                          notices_delivered=len(session.notices) if notices else None)
        finally:
            current_run.reset(run)
            current_turn.reset(scope)
        if result.error is not None:
            return TurnResult(f"Error: {result.error.rstrip('.')}.", session.key, result, model)
        await budget.settle()
        return TurnResult(result.reply, session.key, result, model)

    async def _recall(self, session: Session, text: str) -> str:
        """Memory for this message that the prompt does not carry yet ("" for none). The search runs in a thread;
        past RECALL_DEADLINE, or on any error, the turn goes on without (one debug line): recall never fails it."""
        if (self.recall is None or not self.recall.settings.enabled or not text.strip()
                or keys.kind(session.key) in keys.UNATTENDED):
            return ""
        start = session.last_consolidated
        try:
            person = self.context.owners.person_of(session.key)
            shown = Shown(session.key, start, self.context.recent_cursors(person),
                          self.recall.seen(session.key, session.messages, start), self.context.file_shown, person)
            query = recall_query(text, session.messages[start:])
            return await asyncio.wait_for(asyncio.to_thread(self.recall.recall, query, shown), RECALL_DEADLINE)
        except Exception as e:  # noqa: BLE001 - recall is an extra: whatever went wrong, the turn goes on
            log.debug("automatic recall skipped in %s: %s", session.key, e or type(e).__name__)
            return ""

    def _shrinker(self, budget: TurnBudget) -> Shrink:
        """What the runner calls when the provider refuses the prompt as too long: the smaller prompt the budget
        makes room for (None: nothing left to archive)."""
        async def shrink() -> tuple[str, list[msg.Message]] | None:
            prompt = await budget.shrink()
            if prompt is None:
                return None
            current_turn.set(dataclasses.replace(current_turn.get(), visible_from=prompt.visible))
            return prompt.system, self._request(budget.session, prompt.visible, budget.model)

        return shrink

    def _request(self, session: Session, visible: int, model: str) -> list[msg.Message]:
        """The session's messages from `visible` as the model gets them: old long tool results trimmed (before the
        session's `pruned` cursor, `agent/budget.py`), images read from media/."""
        history = msg.history_for_model(session.messages, visible, session.failed())
        old = {id(m) for m in session.messages[visible:session.meta.pruned] if msg.prunable(m)}
        if old:
            history = [msg.pruned(m) if id(m) in old else m for m in history]
        return self.turns.resolver(model)(history)

    async def aclose(self) -> None:
        """Stop what the loop keeps running between turns (MCP servers); delete its temporary sessions."""
        self.store.end_all_incognito()
        if self.mcp is not None:
            await self.mcp.aclose()
        for close in self.closers:
            await close()

    def repair(self, session: Session, sink: ev.EventSink = ev.discard, notify: bool = True) -> None:
        """Give tool calls that never got a result (process killed mid-turn) an 'interrupted' result."""
        missing = msg.closing_results(session.messages, INTERRUPTED)
        if missing:
            self.store.add_messages(session, missing, sync=True)
            if notify:
                sink(ev.Notice(f"Repaired session {session.key}: {len(missing)} tool call(s) were interrupted.",
                               session=session.key))


__all__ = ["CANCELLED", "INTERRUPTED", "AgentLoop", "TurnResult"]
