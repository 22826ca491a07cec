"""Typed events the runner and loop emit to the sink of whoever asked for the turn.

Every event names the session it belongs to (and, for a sub-agent, which one), so one client
can follow several sessions and a client attaching mid-turn knows where an event goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from enum import Enum

from nanoagent.records import ByValue, Frozen, lean_dataclass
from nanoagent.usage import Usage

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: a one-shot loads this module and not typing
if TYPE_CHECKING:
    from typing import Any

    from nanoagent.messages import Message
    from nanoagent.spend import CapStatus

# Events and results are `lean_dataclass`es: a one-shot through the gateway imports this module after sending, and the
# methods dataclasses compiled for each of its 18 classes (frozen, eq, repr) took 22 ms of it here (now 6.5 ms).


@lean_dataclass(frozen=True, kw_only=True)
class _Scoped(Frozen):
    """What every event carries: the session it belongs to and which agent in it."""

    session: str = ""  # the session key; filled in by the runner or loop that emits the event
    agent: str = ""  # "" for the session's own agent; a sub-agent's run id otherwise


@lean_dataclass(frozen=True)
class TurnStarted(_Scoped):
    """A turn began; the user's message follows as a MessageAdded."""

    model: str


@lean_dataclass(frozen=True)
class TextDelta(_Scoped):
    """A piece of the reply's text as it streams."""

    text: str


@lean_dataclass(frozen=True)
class ThinkingDelta(_Scoped):
    """A piece of the model's thinking as it streams."""

    text: str


@lean_dataclass(frozen=True)
class ToolStarted(_Scoped):
    """The model called a tool; it runs now."""

    call_id: str
    name: str
    arguments: dict[str, Any]


@lean_dataclass(frozen=True)
class ToolFinished(_Scoped):
    """A tool call ended, with what the model sees of it."""

    call_id: str
    name: str
    result: str  # what the model sees (wrapped as untrusted data when the call succeeded)
    elapsed: float
    error: str | None = None  # the failure in words when the call failed, without the "Error: " prefix

    @property
    def ok(self) -> bool:
        return self.error is None


@lean_dataclass(frozen=True)
class MessageAdded(_Scoped):
    """A complete message that belongs in the session (the loop checkpoints it at once)."""

    message: Message


@lean_dataclass(frozen=True)
class UsageRecorded(_Scoped):
    """The tokens one model call used."""

    model: str
    usage: Usage


@lean_dataclass(frozen=True)
class Retrying(_Scoped):
    """A model call failed and is tried again (after `wait` seconds, with `next_model`)."""

    model: str
    reason: str
    wait: float
    next_model: str


@lean_dataclass(frozen=True)
class Injected(_Scoped):
    """A message the person sent while the turn ran, given to the model at its next call."""

    text: str


class StopReason(Enum):
    COMPLETED = "completed"
    MAX_TOKENS = "max_tokens"  # the reply was cut off by the output limit
    MAX_ITERATIONS = "max_iterations"
    ERROR = "error"
    CANCELLED = "cancelled"


@lean_dataclass(frozen=True)
class TurnEnded(_Scoped):
    """A turn ended, and why."""

    reason: StopReason
    error: str | None = None


@lean_dataclass(frozen=True)
class Notice(_Scoped):
    """Something the user should see that is not part of the conversation (warnings, repairs)."""

    text: str


@lean_dataclass(frozen=True)
class Progress(_Scoped):
    """What a long slash command (/new, /dream) is doing now, for a status line; kept nowhere."""

    text: str


class RunStatus(Enum):
    """Where a sub-agent run is."""

    QUEUED = "queued"  # waiting for a free slot (agents.defaults.subagents.maxConcurrent)
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"  # reached its step limit without a final answer
    FAILED = "failed"
    CANCELLED = "cancelled"


@lean_dataclass(frozen=True)
class SubagentStarted(_Scoped):
    """A sub-agent run began working; `agent` is its run id, `session` the user's session it works for."""

    task: str
    background: bool


@lean_dataclass(frozen=True)
class SubagentEnded(_Scoped):
    """A sub-agent run ended. With `background` its result is also a message in the session: shown to the user
    now, given to the model at the next turn."""

    task: str
    status: RunStatus
    result: str  # its final reply, or what went wrong
    elapsed: float
    tool_calls: int
    background: bool

    def as_message(self) -> str:
        """The answer as a chat or terminal shows it: a head naming the run and its task, then the answer."""
        task = " ".join(self.task.split())
        task = task if len(task) <= 60 else task[:59] + "…"
        return f"[sub-agent {self.agent} {self.status.value}: {task}]\n{self.result}"


Event = (TurnStarted | TextDelta | ThinkingDelta | ToolStarted | ToolFinished | MessageAdded | UsageRecorded
         | Retrying | Injected | TurnEnded | Notice | Progress | SubagentStarted | SubagentEnded)
EventSink = Callable[[Event], None]


def discard(event: Event) -> None:
    """A sink for callers that do not watch (schedules, tests of other things)."""


@lean_dataclass()
class ToolCallRecord(ByValue):
    """One tool call of a run, as a run's result lists it."""

    name: str
    arguments: dict[str, Any]
    ok: bool
    elapsed: float


@lean_dataclass()
class RunResult(ByValue):
    """What one LLM-and-tools run gave: its reply, why it stopped, its messages, usage and tool calls."""

    reply: str
    stop: StopReason
    messages: list[Message] = field(default_factory=list)  # messages this run added
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    error: str | None = None
    sent: bool = True  # False: the run failed before any model took its message (no server could be reached)
    capped: CapStatus | None = None  # the spend cap that ended the run before a call (`error` is its line)


@lean_dataclass()
class TurnResult(ByValue):
    """What handling one message gave: the reply to show, and the run behind it (None for a slash command)."""

    reply: str
    session: str
    result: RunResult | None = None
    model: str = ""
    refused: bool = False  # a slash command that could not do what was asked (unknown, bad argument, busy)

    @property
    def failed(self) -> bool:
        return self.refused or (self.result is not None and self.result.error is not None)
