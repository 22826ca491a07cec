"""AgentLoop: dispatch a message to its session, one turn at a time, checkpointing as it goes.

A turn: lock the session file, repair what a killed process left behind, persist
the user's message, run the runner, append each message as it completes, fsync
at the end. A process killed at any point leaves a session the next turn can use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nanoagent.agent import events as ev
from nanoagent.agent.context import ContextBuilder, history_for_model
from nanoagent.agent.runner import AgentRunner, RunSpec
from nanoagent.config.schema import AgentDefaults
from nanoagent.providers.base import Provider
from nanoagent.session.store import Session, SessionStore
from nanoagent.tools import ToolContext, ToolRegistry

INTERRUPTED = "Error: interrupted before this tool finished (nanoagent was stopped); its effect is unknown."

Command = Callable[["AgentLoop", Session, str], Awaitable[str]]


@dataclass
class TurnResult:
    reply: str
    session: str
    result: ev.RunResult | None = None  # None when a slash command answered
    model: str = ""


@dataclass
class AgentLoop:
    provider: Provider
    store: SessionStore
    context: ContextBuilder
    tools: ToolRegistry
    tool_context: ToolContext
    settings: AgentDefaults
    max_result_chars: int
    sink: ev.EventSink
    model: str
    commands: dict[str, Command] = field(default_factory=dict)
    _sessions: dict[str, Session] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def session(self, key: str) -> Session:
        if key not in self._sessions:
            self._sessions[key] = self.store.load(key)
        return self._sessions[key]

    async def handle(self, text: str, key: str = "cli:direct",
                     injections: Callable[[], list[str]] | None = None) -> TurnResult:
        session = self.session(key)
        command = text.strip().split(maxsplit=1)[0] if text.strip().startswith("/") else None
        if command is not None:
            return TurnResult(await self._dispatch_command(session, text.strip()), key)
        async with self._locks.setdefault(key, asyncio.Lock()):
            with self.store.lock(session):
                return await self._turn(session, text, injections)

    async def _dispatch_command(self, session: Session, text: str) -> str:
        name, _, args = text.partition(" ")
        handler = self.commands.get(name)
        if handler is None:
            known = ", ".join(sorted(self.commands))
            return f"Unknown command {name}. Commands: {known}. Type /help for details."
        return await handler(self, session, args.strip())

    async def _turn(self, session: Session, text: str, injections: Callable[[], list[str]] | None) -> TurnResult:
        self.repair(session)
        channel, _, chat_id = session.key.partition(":")
        user = self.context.user_message(text, channel or "cli", chat_id or "direct")
        self.store.add_messages(session, [user], sync=True)
        spec = RunSpec(
            system=self.context.system_prompt(),
            messages=history_for_model(session.messages, session.last_consolidated),
            tools=self.tools, tool_context=self.tool_context, model=self.model,
            max_tokens=self.settings.max_tokens, temperature=self.settings.temperature,
            thinking_budget=self.settings.thinking_budget, max_iterations=self.settings.max_tool_iterations,
            max_result_chars=self.max_result_chars, injections=injections,
        )
        runner = AgentRunner(self.provider, self._checkpointing_sink(session))
        try:
            result = await runner.run(spec)
        finally:
            self.store.sync(session)
        reply = result.reply if result.error is None else f"Error: {result.error}"
        return TurnResult(reply, session.key, result, self.model)

    def _checkpointing_sink(self, session: Session) -> ev.EventSink:
        def sink(event: ev.Event) -> None:
            if isinstance(event, ev.MessageAdded):
                self.store.add_messages(session, [event.message])
            elif isinstance(event, ev.UsageRecorded):
                self.store.append(session, [{"type": "usage", "model": event.model, **event.usage.to_dict()}])
            self.sink(event)

        return sink

    def repair(self, session: Session) -> None:
        """Give tool calls that never got a result (process killed mid-turn) an 'interrupted' result."""
        missing = unanswered_tool_calls(session.messages)
        if missing:
            self.store.add_messages(session, [
                {"role": "tool", "tool_call_id": call["id"], "name": call["name"], "content": INTERRUPTED,
                 "is_error": True} for call in missing
            ], sync=True)
            self.sink(ev.Notice(f"Repaired session {session.key}: {len(missing)} tool call(s) were interrupted."))


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
