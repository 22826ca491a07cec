"""The heartbeat: a light turn over the standing tasks in the workspace's HEARTBEAT.md.

`run_heartbeat` is what the scheduler calls every `heartbeat.intervalMinutes` (and `nanoagent heartbeat`
once). A HEARTBEAT.md without a task line (only comments, headings, blank lines) costs nothing: no
model call, only a counter in `$NANOAGENT_HOME/heartbeat.json`; so does a time outside
`heartbeat.activeHours`. Otherwise one turn runs in session `heartbeat`, started afresh each time (the
system prompt and the tasks, never a long conversation), with `heartbeat.model` if set: a turn of the caller's
loop (in the gateway through its Hub, in `cron tick` that process's agent), or of an agent composed for it
(`nanoagent heartbeat`). A reply of
NOTHING_TO_REPORT is kept quiet; any other goes to `heartbeat.target`, else the most recently active
chat, through the `deliver` callable the caller brings (the gateway's channels, or the terminal's).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import nanoagent.channels.registry as registry
from nanoagent import messages as msg
from nanoagent.agent.turn import TurnCall
from nanoagent.config.schema import Config, active_window
from nanoagent.fsutil import atomic_write, file_lock
from nanoagent.paths import Paths
from nanoagent.providers.base import Provider
from nanoagent.session.store import SessionStore
from nanoagent.spend import CapStatus, Scope, blocked, current_scope
from nanoagent.spend.caps import reached_line
from nanoagent.templates import render
from nanoagent.usage import Usage

SESSION = "heartbeat"
NOTHING_TO_REPORT = "HEARTBEAT_OK"
STATE_VERSION = 1

Deliver = Callable[[str, str], Awaitable[None]]  # (target such as "<channel>:<chat>" or "cli:direct", text)


class HeartbeatStatus(StrEnum):
    NO_TASKS = "no_tasks"  # HEARTBEAT.md has no task line: no model call
    OUTSIDE_HOURS = "outside_hours"  # not within heartbeat.activeHours: no model call
    NOTHING_TO_REPORT = "nothing_to_report"  # the model answered the token: nothing delivered
    DELIVERED = "delivered"
    UNDELIVERED = "undelivered"  # a reply, but no target (heartbeat.target "none", or no chat yet)
    FAILED = "failed"  # the turn failed (provider error); `error` says why
    OVER_BUDGET = "over_budget"  # a spend cap it counts against (budget.heartbeat, ...) is reached; `error` says which


@dataclass
class HeartbeatResult:
    status: HeartbeatStatus
    reply: str = ""  # what was (or would have been) delivered
    target: str | None = None
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    cap: CapStatus | None = None  # OVER_BUDGET: the cap it met (the scheduler records the run skipped)


async def run_heartbeat(config: Config, paths: Paths, deliver: Deliver | None = None, *, turn: TurnCall | None = None,
                        provider: Provider | None = None, now: Callable[[], datetime] | None = None,
                        ignore_hours: bool = False, warn: Callable[[str], None] = lambda message: None,
                        ) -> HeartbeatResult:
    """One heartbeat. `deliver` gets (target, text) for a reply worth sending (None: nobody is told; the reply is
    in the result). `turn` runs it in the caller's loop (None: an agent is composed for it, with `provider` in
    place of the configured one, for tests); `now` is the clock active hours are judged by; `ignore_hours` runs
    outside them too (`nanoagent heartbeat --force`). Exceptions from `deliver` propagate."""
    tasks = task_text(_read(paths.workspace / "HEARTBEAT.md"))
    if not tasks:
        await asyncio.to_thread(_count, paths, HeartbeatStatus.NO_TASKS)
        return HeartbeatResult(HeartbeatStatus.NO_TASKS)
    hb = config.heartbeat
    moment = (now or (lambda: datetime.now(UTC)))()
    if not ignore_hours and not within_active_hours(hb.active_hours, local_time(moment, config.defaults.timezone, warn)):
        await asyncio.to_thread(_count, paths, HeartbeatStatus.OUTSIDE_HOURS)
        return HeartbeatResult(HeartbeatStatus.OUTSIDE_HOURS)
    cap = blocked(config, paths, Scope(SESSION, "heartbeat"))
    if cap is not None:  # no turn to start: its first call would be refused
        await asyncio.to_thread(_count, paths, HeartbeatStatus.OVER_BUDGET)
        return HeartbeatResult(HeartbeatStatus.OVER_BUDGET, error=reached_line(cap, 0, config.defaults.timezone),
                               cap=cap)
    result = await _turn(config, paths, tasks, turn, provider, warn)
    if result.status is HeartbeatStatus.DELIVERED:
        target = hb.target if hb.target is not None else latest_chat(SessionStore(paths.sessions_dir))
        if target is None or target == "none" or deliver is None:
            result.status = HeartbeatStatus.UNDELIVERED
        else:
            result.target = target
            await deliver(target, result.reply)
    await asyncio.to_thread(_count, paths, result.status)
    return result


async def _turn(config: Config, paths: Paths, tasks: str, turn: TurnCall | None, provider: Provider | None,
                warn: Callable[[str], None]) -> HeartbeatResult:
    """The light turn in session `heartbeat`, emptied first so each run sees only the prompt and the tasks.
    Its status is FAILED, OVER_BUDGET (a spend cap ended it), NOTHING_TO_REPORT or DELIVERED (worth delivering; the caller
    finds the target)."""
    text = render("prompts/heartbeat.md", tasks=tasks, token=NOTHING_TO_REPORT)
    model = config.heartbeat.model or config.defaults.background_model  # None: the loop's
    scope = current_scope.set(Scope(SESSION, "heartbeat"))  # budget.heartbeat counts its calls
    try:
        return await _heartbeat_turn(config, paths, text, model, turn, provider, warn)
    finally:
        current_scope.reset(scope)


async def _heartbeat_turn(config: Config, paths: Paths, text: str, model: str | None, turn: TurnCall | None,
                          provider: Provider | None, warn: Callable[[str], None]) -> HeartbeatResult:
    if turn is not None:
        done = await turn(SESSION, text, model=model, fresh=True)
    else:
        from nanoagent.agent.build import build_agent

        loop = build_agent(config, paths, model=model, provider=provider, warn=warn)
        try:
            done = await loop.handle(text, SESSION, model=model, fresh=True)
        finally:
            await loop.aclose()
    if done is None or done.result is None:  # not a turn (it joined one, or a command answered): nothing ran
        return HeartbeatResult(HeartbeatStatus.FAILED, error=done.reply if done else "a turn was running there")
    usage = done.result.usage
    if done.result.capped is not None:
        return HeartbeatResult(HeartbeatStatus.OVER_BUDGET, usage=usage, error=done.result.error,
                               cap=done.result.capped)
    if done.result.error is not None:
        return HeartbeatResult(HeartbeatStatus.FAILED, usage=usage, error=done.result.error)
    reply = worth_sending(done.reply)
    return HeartbeatResult(HeartbeatStatus.DELIVERED if reply else HeartbeatStatus.NOTHING_TO_REPORT, reply,
                           usage=usage)


_COMMENT = re.compile(r"<!--.*?(-->|\Z)", re.S)
_MARKER = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*(?:\[[ xX]?\])?\s*")  # a list bullet or checkbox with nothing after


def task_text(text: str) -> str:
    """HEARTBEAT.md without comments, headings and blank lines; "" when no task is left."""
    lines = []
    for line in _COMMENT.sub("", text).splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or not _MARKER.sub("", stripped):
            continue
        lines.append(line.rstrip())
    return "\n".join(lines)


def worth_sending(reply: str) -> str:
    """The reply to deliver, or "" when it says there is nothing to report (the token alone, give or take
    formatting). The token inside a longer reply is dropped and the rest delivered: a message is never lost."""
    bare = reply.strip().strip("`*_.!'\" \n\t")
    if not bare or bare.upper() == NOTHING_TO_REPORT:
        return ""
    return re.sub(rf"`?\b{NOTHING_TO_REPORT}\b`?[.!]?", "", reply).strip()


def local_time(moment: datetime, timezone: str | None, warn: Callable[[str], None] = lambda message: None) -> datetime:
    """`moment` in the user's time zone (agents.defaults.timezone), else in this machine's."""
    if timezone:
        try:
            return moment.astimezone(ZoneInfo(timezone))
        except (ZoneInfoNotFoundError, ValueError):
            warn(f"agents.defaults.timezone {timezone!r} is not a known time zone (e.g. \"Europe/Lisbon\"); "
                 "using this machine's local time for heartbeat.activeHours.")
    return moment.astimezone()


def within_active_hours(hours: str, moment: datetime) -> bool:
    """Whether the wall-clock time of `moment` is inside `hours` ("08:00-22:00"; "" is always; a window whose
    end is before its start spans midnight; equal ends are the whole day)."""
    window = active_window(hours)
    if window is None:
        return True
    start, end = window
    minute = moment.hour * 60 + moment.minute
    if start == end:
        return True
    if start < end:
        return start <= minute < end
    return minute >= start or minute < end


def latest_chat(store: SessionStore) -> str | None:
    """The chat a person used last: the most recently written session of a channel or a terminal."""
    latest: tuple[float, str] | None = None
    prefixes = chat_prefixes()
    for key in store.keys():
        if not key.startswith(prefixes):
            continue
        try:
            mtime = store.path_for(key).stat().st_mtime
        except OSError:
            continue
        if latest is None or mtime > latest[0]:
            latest = (mtime, key)
    return latest[1] if latest else None


def chat_prefixes() -> tuple[str, ...]:
    """Sessions a person talks in (every registered channel's, and the terminal's), so a reply can reach them there."""
    return tuple(f"{name}:" for name in (*registry.names(), "cli"))


def session_delivery(store: SessionStore) -> Deliver:
    """Delivery into a terminal session (`cli:<name>`): the text is added to that session as the agent's message,
    so the person sees it when they come back and the agent knows what it said."""
    async def deliver(target: str, text: str) -> None:
        session = store.load(target)
        async with store.lock_async(session):
            store.add_messages(session, [msg.assistant(f"(heartbeat) {text}")], sync=True)

    return deliver


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return ""


def _count(paths: Paths, status: HeartbeatStatus) -> None:
    """Add one to the counter of `status` in heartbeat.json; the only trace an idle heartbeat leaves."""
    path = paths.heartbeat_state
    with file_lock(path.with_name(".heartbeat.json.lock")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            counts = {k: v for k, v in data["counts"].items() if isinstance(v, int) and not isinstance(v, bool)}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            counts = {}
        counts[status.value] = counts.get(status.value, 0) + 1
        state = {"version": STATE_VERSION, "counts": counts, "last": status.value,
                 "at": datetime.now(UTC).isoformat(timespec="seconds")}
        atomic_write(path, json.dumps(state), mode=0o600)
