"""Typed events the runner and loop emit to the sink of whoever asked for the turn.

Every event names the session it belongs to (and, for a sub-agent, which one), so one client
can follow several sessions and a client attaching mid-turn knows where an event goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass, field, fields
from enum import Enum

from nanoagent.usage import Usage

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: a one-shot loads this module and not typing
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeVar

    from typing_extensions import dataclass_transform

    from nanoagent.messages import Message

    _T = TypeVar("_T")

    @dataclass_transform(frozen_default=True)
    def _event(*, kw_only: bool = False) -> Callable[[type[_T]], type[_T]]: ...
else:
    def _event(*, kw_only=False):
        """An event class: a dataclass, frozen, equal by value, printed as dataclasses print, hashable (see
        _Scoped). The type checker reads it as @dataclass(frozen=True)."""
        return dataclass(kw_only=kw_only, eq=False, repr=False)

# Events are frozen and hash through the one __setattr__/__delattr__/__hash__ of _Scoped, and compare and print
# through the __eq__/__repr__ of _ByValue (the results too), with the results dataclasses' own would give: a
# one-shot through the gateway imports this module after sending, and dataclasses compiling those methods from
# source for each of the 18 classes cost more than all else the one-shot imports after sending.


class _ByValue:
    """__eq__ and __repr__ for the dataclasses here, as dataclasses would generate them for each. Defining
    __eq__ leaves the class unhashable, as a dataclass with eq is; _Scoped, frozen, hashes."""

    if TYPE_CHECKING:
        __dataclass_fields__: ClassVar[dict[str, Any]]

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{self.__class__.__qualname__}({shown})"


@_event(kw_only=True)
class _Scoped(_ByValue):
    """What every event carries: the session it belongs to and which agent in it."""

    session: str = ""  # the session key; filled in by the runner or loop that emits the event
    agent: str = ""  # "" for the session's own agent; a sub-agent's run id otherwise

    def __setattr__(self, name: str, value: object) -> None:
        """Each field is set once, by __init__; as with frozen=True, nothing can be set after it."""
        if name in self.__dict__ or name not in self.__dataclass_fields__:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(self._values())


@_event()
class TurnStarted(_Scoped):
    """A turn began; the user's message follows as a MessageAdded."""

    model: str


@_event()
class TextDelta(_Scoped):
    """A piece of the reply's text as it streams."""

    text: str


@_event()
class ThinkingDelta(_Scoped):
    """A piece of the model's thinking as it streams."""

    text: str


@_event()
class ToolStarted(_Scoped):
    """The model called a tool; it runs now."""

    call_id: str
    name: str
    arguments: dict[str, Any]


@_event()
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


@_event()
class MessageAdded(_Scoped):
    """A complete message that belongs in the session (the loop checkpoints it at once)."""

    message: Message


@_event()
class UsageRecorded(_Scoped):
    """The tokens one model call used."""

    model: str
    usage: Usage


@_event()
class Retrying(_Scoped):
    """A model call failed and is tried again (after `wait` seconds, with `next_model`)."""

    model: str
    reason: str
    wait: float
    next_model: str


@_event()
class Injected(_Scoped):
    """A message the person sent while the turn ran, given to the model at its next call."""

    text: str


class StopReason(Enum):
    COMPLETED = "completed"
    MAX_TOKENS = "max_tokens"  # the reply was cut off by the output limit
    MAX_ITERATIONS = "max_iterations"
    ERROR = "error"
    CANCELLED = "cancelled"


@_event()
class TurnEnded(_Scoped):
    """A turn ended, and why."""

    reason: StopReason
    error: str | None = None


@_event()
class Notice(_Scoped):
    """Something the user should see that is not part of the conversation (warnings, repairs)."""

    text: str


@_event()
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


@_event()
class SubagentStarted(_Scoped):
    """A sub-agent run began working; `agent` is its run id, `session` the user's session it works for."""

    task: str
    background: bool


@_event()
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


@dataclass(eq=False, repr=False)
class ToolCallRecord(_ByValue):
    """One tool call of a run, as a run's result lists it."""

    name: str
    arguments: dict[str, Any]
    ok: bool
    elapsed: float


@dataclass(eq=False, repr=False)
class RunResult(_ByValue):
    """What one LLM-and-tools run gave: its reply, why it stopped, its messages, usage and tool calls."""

    reply: str
    stop: StopReason
    messages: list[Message] = field(default_factory=list)  # messages this run added
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    error: str | None = None
    sent: bool = True  # False: the run failed before any model took its message (no server could be reached)


@dataclass(eq=False, repr=False)
class TurnResult(_ByValue):
    """What handling one message gave: the reply to show, and the run behind it (None for a slash command)."""

    reply: str
    session: str
    result: RunResult | None = None
    model: str = ""
    refused: bool = False  # a slash command that could not do what was asked (unknown, bad argument, busy)

    @property
    def failed(self) -> bool:
        return self.refused or (self.result is not None and self.result.error is not None)
