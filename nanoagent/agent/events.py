"""Typed events the runner and loop emit to one sink. Rendering and persistence subscribe."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nanoagent.providers.base import Usage


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ToolStarted:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolFinished:
    call_id: str
    name: str
    ok: bool
    result: str
    elapsed: float


@dataclass(frozen=True)
class MessageAdded:
    """A complete message that belongs in the session (the loop checkpoints it at once)."""

    message: dict[str, Any]


@dataclass(frozen=True)
class UsageRecorded:
    model: str
    usage: Usage


@dataclass(frozen=True)
class Retrying:
    model: str
    reason: str
    wait: float
    next_model: str


@dataclass(frozen=True)
class Injected:
    text: str


class StopReason(Enum):
    COMPLETED = "completed"
    MAX_ITERATIONS = "max_iterations"
    ERROR = "error"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class TurnEnded:
    reason: StopReason
    error: str | None = None


@dataclass(frozen=True)
class Notice:
    """Something the user should see that is not part of the conversation (warnings, repairs)."""

    text: str


Event = (TextDelta | ThinkingDelta | ToolStarted | ToolFinished | MessageAdded | UsageRecorded | Retrying
         | Injected | TurnEnded | Notice)
EventSink = Callable[[Event], None]


@dataclass
class ToolCallRecord:
    name: str
    arguments: dict[str, Any]
    ok: bool
    elapsed: float


@dataclass
class RunResult:
    reply: str
    stop: StopReason
    messages: list[dict[str, Any]] = field(default_factory=list)  # messages this run added
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    error: str | None = None
