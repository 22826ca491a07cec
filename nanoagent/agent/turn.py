"""One turn in a session, for every kind of turn: a person's message (AgentLoop) and a sub-agent's task (Subagents).

The opening message is on disk before any model call; each message the runner completes is appended as it comes,
each model call's usage with it; a cancelled turn is closed at once (error results for the tool calls it started, a
note that it stopped), so a cancelled turn leaves the state a finished one does; the file is synced at the end,
whatever happened; a turn that failed is marked, so its messages are never sent again.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from nanoagent import messages as msg
from nanoagent.agent import events as ev
from nanoagent.agent.runner import AgentRunner, Resolve, RunSpec, Shrink
from nanoagent.attachments import resolve
from nanoagent.config.schema import AgentDefaults
from nanoagent.pricing import takes_images
from nanoagent.providers.base import Providers
from nanoagent.session.store import Session, SessionStore
from nanoagent.tools import ToolContext, ToolRegistry
from nanoagent.usage import UsageRecord

INTERRUPTED = ("Error: interrupted before this tool finished (the turn was cancelled or nanoagent stopped); "
               "its effect is unknown.")
CANCELLED = "(The user cancelled this turn before it finished.)"


class TurnCall(Protocol):
    """How a scheduled run asks for a turn of the process's one loop (`Hub.send` in the gateway, `AgentLoop.handle`
    in `cron tick`): the result, or None when the message joined a turn already running in the session. `model` is
    for this turn only; `fresh` empties the session first (the heartbeat starts afresh each time); `workdir` is the
    folder the turn works in (a job made in a turn with one, `agent -C DIR`)."""

    def __call__(self, key: str, text: str, *, model: str | None = None, fresh: bool = False,
                 workdir: str = "") -> Awaitable[ev.TurnResult | None]: ...


@dataclass(frozen=True)
class Closing:
    """What a cancelled turn leaves in its session: the result of each tool call it started, and its last word."""

    interrupted: str = INTERRUPTED
    cancelled: str = CANCELLED


@dataclass(frozen=True)
class Turns:
    """Runs turns in sessions; holds what every turn shares (the store, the providers, the settings)."""

    store: SessionStore
    providers: Providers  # model name -> provider (with retries and fallbacks), built on first use
    tool_context: ToolContext
    settings: AgentDefaults
    max_result_chars: int
    image_models: tuple[str, ...] = ()  # models sent images whatever the bundled table says

    def takes_images(self, model: str) -> bool:
        return takes_images(model, self.image_models)

    def resolver(self, model: str) -> Resolve:
        """Image references to what `model` is sent: their bytes, or notes."""
        return functools.partial(resolve, workspace=self.tool_context.workspace, model=model,
                                 takes_images=self.takes_images(model))

    def spec(self, key: str, system: str, messages: list[msg.Message], model: str, tools: ToolRegistry, *,
             max_iterations: int | None = None, injections: Callable[[], list[str]] | None = None,
             shrink: Shrink | None = None) -> RunSpec:
        """The runner's request for a turn in session `key`, the settings filled in."""
        s = self.settings
        return RunSpec(
            system=system, messages=messages, tools=tools, tool_context=self.tool_context, model=model, session=key,
            max_tokens=s.max_tokens, temperature=s.temperature, thinking_budget=s.thinking_budget,
            max_iterations=s.max_tool_iterations if max_iterations is None else max_iterations,
            max_result_chars=self.max_result_chars, injections=injections, shrink=shrink,
            resolve=self.resolver(model),
        )

    async def run(self, session: Session, user: msg.UserMessage, model: str,
                  spec: RunSpec | Callable[[], Awaitable[RunSpec]], sink: ev.EventSink, *,
                  purpose: str = "turn", sent_from: Callable[[], int] | None = None,
                  notices_delivered: int | None = None, closing: Closing = Closing()) -> ev.RunResult:
        """Run one turn in `session`, which the caller has locked: `user` opens it, `spec` (or what it awaits,
        once `user` is stored: the prompt is measured with it) is the request. Events go to `sink` after the
        session has what they record. Usage lines are marked `purpose`; `sent_from` gives the first message the
        call sent, recorded with the call's usage so its figure can calibrate estimates."""
        start = len(session.messages)
        self.store.add_messages(session, [user], sync=True, notices_delivered=notices_delivered)
        sink(ev.TurnStarted(model, session=session.key))
        sink(ev.MessageAdded(user, session=session.key))
        try:
            request = spec if isinstance(spec, RunSpec) else await spec()
            runner = AgentRunner(self.providers.get(model), self._persisting(session, sink, purpose, sent_from))
            result = await runner.run(request)
        except asyncio.CancelledError:
            self._close(session, sink, closing)
            raise
        finally:
            self.store.sync(session)
        if result.error is not None:
            self.store.mark_failed(session, start, result.error)
        return result

    def _persisting(self, session: Session, sink: ev.EventSink, purpose: str,
                    sent_from: Callable[[], int] | None) -> ev.EventSink:
        def checkpoint(event: ev.Event) -> None:
            if isinstance(event, ev.MessageAdded):
                self.store.add_messages(session, [event.message])
            elif isinstance(event, ev.UsageRecorded):
                window = None if sent_from is None else (sent_from(), len(session.messages))
                self.store.add_usage(session, UsageRecord.now(event.model, event.usage, purpose, window=window))
            sink(event)

        return checkpoint

    def _close(self, session: Session, sink: ev.EventSink, closing: Closing) -> None:
        """Leave a cancelled turn as a finished one: results for started tools, and a note that it stopped."""
        missing = msg.closing_results(session.messages, closing.interrupted)
        self.store.add_messages(session, [*missing, msg.assistant(closing.cancelled)], sync=True)
        sink(ev.TurnEnded(ev.StopReason.CANCELLED, session=session.key))


__all__ = ["CANCELLED", "INTERRUPTED", "Closing", "TurnCall", "Turns"]
