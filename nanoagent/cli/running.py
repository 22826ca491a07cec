"""Running a command's event loop: SIGTERM and SIGHUP end it the way Ctrl-C does, and a terminal can be asked."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from nanoagent.errors import Stopped

T = TypeVar("T")


def run_main(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, with SIGTERM and SIGHUP cancelling the work (so a running command is killed and the session
    records the interrupted turn) instead of killing the process mid-write."""
    stopped = []

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()

        def stop(sig: signal.Signals) -> None:
            stopped.append(sig)
            task.cancel()

        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, stop, sig)
        return await coro

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if stopped:
            raise Stopped(f"Stopped by {stopped[0].name}; the running turn was recorded as interrupted.") from None
        raise


async def ask_terminal(question: str) -> str:
    """Ask on the terminal a one-shot runs in (stderr for the question, stdin for the answer)."""

    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def read() -> None:  # a daemon thread: a cancelled question must not keep the process waiting for input
        try:
            line = sys.stdin.readline()
        except (OSError, ValueError):
            line = ""
        loop.call_soon_threadsafe(_answer, answer, line or "n")

    from nanoagent.cli.render import terminal_safe  # the question quotes the model's command

    print(terminal_safe(question), end="", file=sys.stderr, flush=True)
    threading.Thread(target=read, daemon=True).start()
    return await answer


def _answer(future: asyncio.Future[str], text: str) -> None:
    if not future.done():
        future.set_result(text)
