"""Dream on a schedule (`memory.dreamSchedule`): what the gateway's scheduler and `cron tick` call.

A run takes the same lock as `nanoagent dream`, makes no model call (and needs no API key) when there is
nothing new, appends what it did to `logs/dream.log`, and hands back a line to notify the user only when
something went wrong.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from nanoagent.agent.build import build_dream
from nanoagent.config.schema import Config
from nanoagent.errors import NanoagentError, describe_os_error
from nanoagent.fsutil import append_lines, file_lock
from nanoagent.memory.dream import DreamBusy, DreamFailed, describe, run_header
from nanoagent.paths import Paths
from nanoagent.providers.base import Provider
from nanoagent.spend import CapReached, Scope, blocked
from nanoagent.spend.caps import reached_line

log = logging.getLogger("nanoagent.dream")


async def scheduled_dream(config: Config, paths: Paths, provider: Provider | None = None,
                          now: Callable[[], datetime] | None = None) -> str | None:
    """One scheduled Dream over every new batch. Returns what to tell the user when it failed or moved past findings
    it could not save; None when it finished, had nothing new, or found another Dream running. CapReached when a spend
    cap stopped a call (logged; nothing changed)."""
    started = (now or (lambda: datetime.now().astimezone()))()
    lines: list[str] = []
    notice = None
    capped: CapReached | None = None
    cap = blocked(config, paths, Scope("dream", "dream"))
    if cap is not None:  # at a cap its calls count against: nothing to start, nothing to tell every run
        await asyncio.to_thread(_append_log, paths, [run_header("scheduled dream", started),
                                                     f"skipped: {reached_line(cap, 0, config.defaults.timezone)}"])
        return None
    try:
        dream = build_dream(config, paths, provider=provider, warn=lambda message: lines.append(f"warning: {message}"))
        results = await dream.run(all_entries=True)
        lines.append(describe(results, dream.history.dream_cursor))
        dropped = [r for r in results if r.moved_on]
        if dropped:
            first, last = dropped[0].cursor_range
            notice = (f"Dream moved past history entries {first}-{last} without saving its findings: the editing "
                      f"phase made no edit in {dropped[0].stalls} runs. They are in {_log_path(paths)}.")
    except DreamBusy as e:
        lines.append(str(e))
    except (NanoagentError, OSError) as e:
        reason = str(e) if isinstance(e, NanoagentError) else describe_os_error(e) or f"{type(e).__name__}: {e}"
        if isinstance(e, DreamFailed) and e.capped is not None:  # nothing changed; the entries wait for the next run
            capped = CapReached(e.capped, reason)
            lines.append(f"Stopped at a spend cap: {reason}")
        else:
            lines.append(f"Error: {reason}")
            log.error("scheduled Dream failed: %s", reason)
            notice = f"Scheduled Dream failed: {reason}"
    await asyncio.to_thread(_append_log, paths, [run_header("scheduled dream", started), *lines])
    if capped is not None:  # the scheduler records the run skipped: no failure, nobody told
        raise capped
    return notice


def _log_path(paths: Paths) -> Path:
    return paths.logs_dir / "dream.log"


def _append_log(paths: Paths, lines: list[str]) -> None:
    """Add a run's lines to logs/dream.log, where the cron line of docs/memory.md writes too; a log that cannot be written is
    skipped (the notice, if any, still reaches the user)."""
    path = _log_path(paths)
    try:
        with file_lock(path.with_name(".dream.log.lock")):
            append_lines(path, ("\n".join(lines) + "\n").encode("utf-8"), sync=True)
    except OSError as e:
        log.warning("could not write %s: %s", path, e)
