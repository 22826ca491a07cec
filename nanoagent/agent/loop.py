"""AgentLoop: dispatch a message to its session, one turn at a time, checkpointing as it goes.

A turn: lock the session file, repair what a killed process left behind, persist
the user's message, run the runner, append each message as it completes, fsync
at the end. A process killed at any point leaves a session the next turn can use;
a cancelled turn (Ctrl-C) leaves the same consistent state at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nanoagent.agent import events as ev
from nanoagent.agent.context import ContextBuilder, history_for_model
from nanoagent.agent.runner import AgentRunner, RunSpec
from nanoagent.config.schema import AgentDefaults
from nanoagent.memory.consolidator import Consolidator
from nanoagent.memory.dream import Dream
from nanoagent.providers.base import Provider, Providers
from nanoagent.session.store import Session, SessionStore
from nanoagent.tokens import count_message_tokens, count_tokens, token_bound
from nanoagent.tools import ToolContext, ToolRegistry
from nanoagent.usage import usage_record

if TYPE_CHECKING:
    from nanoagent.memory.gitlog import MemoryGit

INTERRUPTED = ("Error: interrupted before this tool finished (the turn was cancelled or nanoagent stopped); "
               "its effect is unknown.")
CANCELLED = "(The user cancelled this turn before it finished.)"

Command = Callable[["AgentLoop", Session, str], Awaitable[str]]


@dataclass
class TurnResult:
    reply: str
    session: str
    result: ev.RunResult | None = None  # None when a slash command answered
    model: str = ""


@dataclass
class AgentLoop:
    providers: Providers  # model name -> provider (with retries and fallbacks), built on first use
    store: SessionStore
    context: ContextBuilder
    tools: ToolRegistry
    tool_context: ToolContext
    settings: AgentDefaults
    max_result_chars: int
    sink: ev.EventSink
    model: str  # the default model; a session may switch with /model
    model_pinned: bool = False  # --model on the command line beats a session's /model
    commands: dict[str, Command] = field(default_factory=dict)
    consolidator: Consolidator | None = None  # archives old turns to memory/history.jsonl
    memory_git: MemoryGit | None = None  # the git log of memory edits, for /dream-log and /dream-restore
    dream_factory: Callable[[], Dream] | None = None  # builds Dream for /dream
    _sessions: dict[str, Session] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _fixed_cache: dict[tuple[str, bool], int] = field(default_factory=dict)

    def session(self, key: str) -> Session:
        if key not in self._sessions:
            self._sessions[key] = self.store.load(key)
        return self._sessions[key]

    def model_for(self, session: Session) -> str:
        return self.model if self.model_pinned else session.meta.get("model") or self.model

    def provider(self, model: str) -> Provider:
        return self.providers.get(model)

    async def handle(self, text: str, key: str = "cli:direct",
                     injections: Callable[[], list[str]] | None = None) -> TurnResult:
        session = self.session(key)
        if text.strip().startswith("/"):
            return TurnResult(await self.run_command(session, text.strip()), key, model=self.model_for(session))
        async with self._locks.setdefault(key, asyncio.Lock()):
            with self.store.lock(session):
                return await self._turn(session, text, injections)

    async def run_command(self, session: Session, text: str) -> str:
        name, _, args = text.partition(" ")
        handler = self.commands.get(name)
        if handler is None:
            return f"Unknown command {name}. Type /help to see the commands."
        return await handler(self, session, args.strip())

    async def _turn(self, session: Session, text: str, injections: Callable[[], list[str]] | None) -> TurnResult:
        self.repair(session)
        channel, _, chat_id = session.key.partition(":")
        user = self.context.user_message(text, channel or "cli", chat_id or "direct")
        model = self.model_for(session)
        self.store.add_messages(session, [user], sync=True)  # on disk before any model call, summaries included
        try:
            system, start = await self._fit_context(session, model)
        except asyncio.CancelledError:
            self._after_cancel(session)
            raise
        spec = RunSpec(
            system=system,
            messages=history_for_model(session.messages, start),
            tools=self.tools, model=model,
            tool_context=dataclasses.replace(self.tool_context, session_key=session.key, visible_from=start),
            max_tokens=self.settings.max_tokens, temperature=self.settings.temperature,
            thinking_budget=self.settings.thinking_budget, max_iterations=self.settings.max_tool_iterations,
            max_result_chars=self.max_result_chars, injections=injections,
        )
        runner = AgentRunner(self.provider(model), self._checkpointing_sink(session))
        try:
            result = await runner.run(spec)
        except asyncio.CancelledError:
            self._after_cancel(session)
            raise
        finally:
            self.store.sync(session)
        if self.consolidator is not None:  # near the budget: archive now, not at the start of the next turn
            await self.consolidator.maybe_consolidate(session, self._fixed(system), model, threshold=0.8)
        reply = result.reply if result.error is None else f"Error: {result.error}"
        return TurnResult(reply, session.key, result, model)

    async def _fit_context(self, session: Session, model: str) -> tuple[str, int]:
        """Archive old turns if the prompt would outgrow the budget; (system prompt, first message to send)."""
        system = self.context.system_prompt()
        if self.consolidator is None:
            return system, session.last_consolidated
        if await self.consolidator.maybe_consolidate(session, self._fixed(system), model):
            system = self.context.system_prompt()  # the archive added to the recent history
        return system, self.consolidator.window_start(session, self._fixed(system))

    def _fixed(self, system: str) -> Callable[[bool], int]:
        """Tokens of the system prompt and tool list (an upper bound when not exact)."""
        return lambda exact: self._fixed_tokens(system, exact)

    def _fixed_tokens(self, system: str, exact: bool = True) -> int:
        """Tokens of the system prompt and tool list, recounted only when the prompt changes."""
        key = (system, exact)
        if key not in self._fixed_cache:
            tools = json.dumps([t.__dict__ for t in self.tools.specs()])
            count = count_tokens if exact else token_bound
            self._fixed_cache = {k: v for k, v in self._fixed_cache.items() if k[0] == system}
            self._fixed_cache[key] = count(system) + count(tools)
        return self._fixed_cache[key]

    def _after_cancel(self, session: Session) -> None:
        """Leave the session as a finished turn: results for started tools, and a note the turn stopped."""
        self.repair(session, notify=False)
        self.store.add_messages(session, [{"role": "assistant", "content": CANCELLED}], sync=True)
        self.sink(ev.TurnEnded(ev.StopReason.CANCELLED))

    def _checkpointing_sink(self, session: Session) -> ev.EventSink:
        def sink(event: ev.Event) -> None:
            if isinstance(event, ev.MessageAdded):
                self.store.add_messages(session, [event.message])
            elif isinstance(event, ev.UsageRecorded):
                self.store.append(session, [usage_record(event.model, event.usage)])
            self.sink(event)

        return sink

    def repair(self, session: Session, notify: bool = True) -> None:
        """Give tool calls that never got a result (process killed mid-turn) an 'interrupted' result."""
        missing = unanswered_tool_calls(session.messages)
        if missing:
            self.store.add_messages(session, [
                {"role": "tool", "tool_call_id": call["id"], "name": call["name"], "content": INTERRUPTED,
                 "is_error": True} for call in missing
            ], sync=True)
            if notify:
                self.sink(ev.Notice(f"Repaired session {session.key}: {len(missing)} tool call(s) were interrupted."))

    async def new_conversation(self, session: Session) -> int:
        """Hand the conversation to memory, then start the model on a clean slate. Returns messages archived."""
        with self.store.lock(session):
            pending = len(session.messages) - session.last_consolidated
            if pending <= 0:
                return 0
            if self.consolidator is not None:  # history is written before anything is hidden from the model
                await self.consolidator.archive_all(session, self.model_for(session))
            if session.last_consolidated < len(session.messages):
                self.store.set_meta(session, last_consolidated=len(session.messages))
            return pending

    def prompt_tokens(self, session: Session) -> int:
        """Estimated tokens the next request would send: system prompt, tools and unconsolidated history."""
        history = history_for_model(session.messages, session.last_consolidated)
        return self._fixed_tokens(self.context.system_prompt()) + sum(count_message_tokens(m) for m in history)


def unanswered_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool calls of the last assistant message that carries calls, lacking a result."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "assistant" and message.get("tool_calls"):
            answered = {m.get("tool_call_id") for m in messages[index + 1:] if m.get("role") == "tool"}
            return [c for c in message["tool_calls"] if c["id"] not in answered]
        if message.get("role") == "user":
            return []
    return []
