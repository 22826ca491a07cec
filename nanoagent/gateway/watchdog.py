"""The gateway's watchdog: when its event loop stops answering for `gateway.watchdogSeconds`, the process logs where the
loop is stuck and exits STALLED, so whatever supervises it (systemd's `Restart=on-failure`, `gateway start`'s
supervisor) starts a fresh one. A stuck loop answers nobody (no socket, no channel, no signal handler): ending it
is the only way back.

The loop beats (a task stamping the time every `every` seconds); a thread checks the stamp. A thread that was itself
held up as long (the whole process stopped, or starved of CPU) gives the loop a fresh window rather than blaming it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("nanoagent.gateway")
WINDOW = 600  # beats the lag is kept for (ten minutes at one a second)
STALLED = 70  # the exit code (EX_SOFTWARE): not 0, so systemd's Restart=on-failure restarts it


class Watchdog:
    def __init__(self, seconds: float, stalled: Callable[[float, str], None] | None = None):
        self.seconds = seconds
        self.every = min(1.0, seconds / 4)
        self.stalled = stalled or _exit
        self.last = time.monotonic()
        self.lags: deque[float] = deque(maxlen=WINDOW)  # seconds each beat woke late: the loop's lag, sampled
        self._done = threading.Event()
        self._loop_thread = 0

    def start(self) -> None:
        """Start watching the calling thread's event loop, from now: called before the loop runs anything else, so a
        task that blocks at once (before `run` had its first turn) is caught too."""
        self._loop_thread = threading.get_ident()
        self.last = time.monotonic()
        self._done.clear()
        threading.Thread(target=self._watch, name="nanoagent-watchdog", daemon=True).start()

    async def run(self) -> None:
        """Beat until cancelled (the gateway stopping), the watching thread started (`start`) first."""
        try:
            while True:
                self.last = time.monotonic()
                await asyncio.sleep(self.every)
                self.lags.append(time.monotonic() - self.last - self.every)
        finally:
            self._done.set()

    def lag(self) -> dict[str, float]:
        """The loop's lag over the last WINDOW beats, in milliseconds: median, 99th percentile and worst."""
        ranked = sorted(self.lags)
        if not ranked:
            return {}
        at = lambda share: round(ranked[min(len(ranked) - 1, int(share * len(ranked)))] * 1000, 1)  # noqa: E731
        return {"p50": at(0.5), "p99": at(0.99), "max": at(1.0), "beats": len(ranked)}

    def _watch(self) -> None:
        checked = time.monotonic()
        while not self._done.wait(self.every):
            now = time.monotonic()
            if now - checked > self.seconds / 2:
                self.last = now  # this thread was held up too: the process was stopped or starved, not the loop
            checked = now
            late = now - self.last
            if late > self.seconds and not self._done.is_set():
                self.stalled(late, where(self._loop_thread))
                return


def where(thread: int) -> str:
    """Where a thread is now: its innermost frame outside asyncio and the standard library's plumbing, as
    `folder/file.py:line in function`."""
    frame = sys._current_frames().get(thread)
    plumbing = (os.sep + "asyncio" + os.sep, os.sep + "selectors.py", os.sep + "threading.py")
    while frame is not None:
        code = frame.f_code
        if not any(part in code.co_filename for part in plumbing):
            path = Path(code.co_filename)
            return f"{path.parent.name}/{path.name}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return "the event loop's own code"


def _exit(late: float, place: str) -> None:
    log.critical(json.dumps({"event": "event_loop_stalled", "seconds": round(late, 1), "at": place, "exit": STALLED}))
    os._exit(STALLED)  # the loop cannot run a clean stop; the next start clears what this one leaves
