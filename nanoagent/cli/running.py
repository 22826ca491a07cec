"""Running a command's event loop: SIGTERM and SIGHUP end it the way Ctrl-C does, and a terminal can be asked."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from nanoagent.cli.oneshot import ask_terminal as asking
from nanoagent.cli.oneshot import stop_signals
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

        for sig in stop_signals():
            loop.add_signal_handler(sig, stop, sig)
        return await coro

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if stopped:
            raise Stopped.by(stopped[0].name) from None
        raise


async def ask_terminal(question: str) -> str:
    """`oneshot.ask_terminal` for code on an event loop: it asks in a daemon thread, so a cancelled question
    does not keep the process waiting for input."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def ask() -> None:
        loop.call_soon_threadsafe(_answer, answer, asking(question))

    threading.Thread(target=ask, daemon=True).start()
    return await answer


def _answer(future: asyncio.Future[str], text: str) -> None:
    if not future.done():
        future.set_result(text)
