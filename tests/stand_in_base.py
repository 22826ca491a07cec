"""What every channel's stand-in shares: the log of the calls made to it, and the trouble a test scripts.

A test scripts trouble with the StandIn methods of tests/channel_harness.py (`rate_limit`, `refuse`, `slow`,
`down`); the stand-in's server takes from the queues as calls arrive (`take_limit`, `take_refusal`, `take_delay`)
and answers each in its app's own way (a 429 with retry_after, a 403, a 550, a 503, a refused connection).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    """One call the bot made: its method (an API method, or the HTTP verb with `path`), what it sent, when."""

    method: str
    params: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)
    status: int = 200
    error: str = ""
    path: str = ""


class Scripted:
    """The call log and the scripted failures, under one lock (`cond`: waits for a call or for going down)."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.calls: list[Call] = []
        self.limited: list[float] = []  # retry_after of each next send or edit still to be refused as rate limited
        self.refusing = 0  # sends of a new message still to be refused for good
        self.slowed: list[float] = []  # seconds each next send answers late, the message taken already
        self.is_down = False

    # --- scripting ---------------------------------------------------------------------------------------

    def rate_limit(self, calls: int, retry_after: float) -> None:
        """The next `calls` send or edit calls are refused with the app's rate limit, asking to wait `retry_after`."""
        with self.cond:
            self.limited += [retry_after] * calls

    def refuse(self, calls: int) -> None:
        """The next `calls` sends of a new message are refused for good; 0: none from now on."""
        with self.cond:
            self.refusing = calls

    def slow(self, calls: int, seconds: float) -> None:
        """The next `calls` sends of a new message are taken at once and answered `seconds` later."""
        with self.cond:
            self.slowed += [seconds] * calls

    def down(self, down: bool = True) -> None:
        """While down every call fails as the app's outage does; up again on the same address."""
        with self.cond:
            self.is_down = down
            self.cond.notify_all()

    # --- answering -------------------------------------------------------------------------------------------

    def record(self, call: Call) -> Call:
        with self.cond:
            self.calls.append(call)
            self.cond.notify_all()
        return call

    def take_limit(self) -> float | None:
        """The retry_after to refuse this send or edit with, or None to let it through."""
        with self.cond:
            return self.limited.pop(0) if self.limited else None

    def take_refusal(self) -> bool:
        """Whether to refuse this send for good."""
        with self.cond:
            if not self.refusing:
                return False
            self.refusing -= 1
            return True

    def take_delay(self) -> float:
        """Seconds to hold this send's answer back."""
        with self.cond:
            return self.slowed.pop(0) if self.slowed else 0.0
