"""What the links that call their app's HTTP API with httpx share: the errors their clients raise, and one call
tried as the engine expects: a rate limit waited out, the app unreachable tried again with backoff when the call must
go through (else None), and a send whose answer timed out after it went out (it may have arrived) made again at most
`resends` times. A refusal is the caller's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from nanoagent.channels.base import Timing, record

# errors after which a sent request may have arrived: made again only within `resends`
SENT_MAYBE = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.ReadError, httpx.RemoteProtocolError)


class RateLimited(Exception):
    def __init__(self, wait: float | None):
        super().__init__(f"rate limited (retry after {wait} s)")
        self.wait = wait


class Unreachable(Exception):
    """The app did not answer the call (5xx, or a send that reached no one)."""


def reason(error: Exception) -> str:
    return " ".join(str(error).split())[:160] or type(error).__name__


async def retried(call: Callable[[], Awaitable[Any]], timing: Timing, log: logging.Logger, name: str,
                  unreachable: str, persistent: bool = False, resends: int | None = None, **fields: Any) -> Any:
    """`call`'s answer, tried as the module says. `name` starts each log record's event (`<name>_rate_limited`,
    `_timed_out`, `_unreachable`, with `fields`); `unreachable` is what the link's health says while the app is
    (e.g. "the API unreachable at URL")."""
    failures = limited = 0
    while True:
        try:
            result = await call()
        except RateLimited as e:
            wait = e.wait if e.wait is not None else timing.pause(limited)
            log.warning(record(f"{name}_rate_limited", **fields, retry_after=wait))
            limited += 1
            await asyncio.sleep(wait)
            continue
        except (httpx.HTTPError, Unreachable) as e:
            if resends is not None and isinstance(e, SENT_MAYBE):
                log.warning(record(f"{name}_timed_out", **fields, resends_left=resends))
                if resends <= 0 or not persistent:
                    return None
                resends -= 1
                continue
            if failures == 0:
                log.warning(record(f"{name}_unreachable", **fields, error=type(e).__name__))
            timing.report(f"{unreachable}: {reason(e)}")
            if not persistent:
                return None
            await asyncio.sleep(timing.pause(failures))
            failures += 1
            continue
        timing.report(None)
        return result
