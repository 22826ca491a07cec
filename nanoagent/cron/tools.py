"""The agent's side of schedules: the `cron` tool (add, list, update, remove jobs) and the `message` tool (write to
one of the user's own chats now).

Both take the conversation they are called from out of the turn's own scope (`current_turn`), never from state
two turns share: a job made in a chat (`telegram:42`) replies there by default, one made in the terminal writes to
that terminal session. Targets follow `cron/targets.py`; the channels the schemas name are the registry's. Times
are read in the user's time zone and said back resolved, with the zone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import nanoagent.channels.registry as registry
from nanoagent import keys
from nanoagent.cron.deliver import MAX_FILE_BYTES, DeliveryError, Outbox
from nanoagent.cron.schedule import ScheduleError, format_time, make_schedule, relative, zone
from nanoagent.cron.scheduler import scheduler_seen, utc_now
from nanoagent.cron.store import Job, JobNotFound, JobsFile, JobStore, StoreCorrupt, new_job_id
from nanoagent.cron.targets import (
    TERMINAL,
    Access,
    Target,
    TargetError,
    parse_target,
    target_of_session,
    target_text,
)
from nanoagent.pricing import format_limit
from nanoagent.tools.base import Tool, ToolContext, ToolError, current_turn, tool
from nanoagent.tools.fs import _check_file, resolve_path

NOT_RUNNING = ("No scheduler has run lately: jobs run only while `nanoagent gateway` runs, or when a crontab line "
               "runs `nanoagent cron tick` every minute (docs/schedules.md). Tell the user.")


def cron_tools(store: JobStore, outbox: Outbox, access: Access, timezone: str | None,
               clock: Callable[[], datetime] = utc_now) -> list[Tool]:
    """`cron` and `message`; `timezone` is agents.defaults.timezone (None: the machine's)."""

    def own_target(jobs: JobsFile) -> Target:
        """Where this conversation's replies go: its own chat; a scheduled run's own job's target."""
        key = current_turn.get().session_key
        if (job_id := keys.cron_job(key)) is not None:
            job = jobs.get(job_id)
            return outbox_target(job) if job else None
        return target_of_session(key)

    def pick_target(to: str | None, jobs: JobsFile) -> Target:
        if to is None:
            return own_target(jobs)
        target = access.resolve(to)
        access.check(target, current_turn.get().session_key)
        return target

    @tool()
    @naming_channels
    def cron(ctx: ToolContext, action: Literal["add", "list", "update", "remove"], message: str | None = None,
             cron: str | None = None, every: str | None = None, at: str | None = None, tz: str | None = None,
             to: str | None = None, name: str | None = None, job_id: str | None = None,
             enabled: bool | None = None, missed: Literal["once", "skip"] | None = None) -> str:
        """Schedule work for later or regularly (reminders, checks, reports). Each run is a turn of yours with the
        job's message; the reply goes to the job's target (default: this chat). add needs message and one of
        cron/every/at; update changes what is given; list shows ids and next runs.

        Args:
            action: add, list, update or remove.
            message: An instruction to your future self, e.g. "Remind the user to call the dentist."
            cron: Five fields (minute hour day month weekday), e.g. "0 9 * * 1-5".
            every: Interval: 30s, 15m, 2h, 1d.
            at: One time: "2026-05-04 09:00", "09:00", "tomorrow 8:30", "in 20 minutes".
            tz: IANA zone for cron and at (default: the user's).
            to: <channel>:<chat id> (<channel>: CHANNELS), a channel's name alone (the user's own chat there),
                cli:direct, or none (only acts).
            name: A short name.
            job_id: For update and remove.
            enabled: update: false pauses, true resumes.
            missed: Runs missed while nanoagent was off: once (default) or skip.
        """
        try:
            if action == "list":
                return describe_jobs(store.read().jobs, clock(), zone(timezone))
            if action == "add":
                return add(message, cron, every, at, tz, to, name, missed)
            if not job_id:
                raise ToolError(f"{action} needs job_id; list shows the ids.")
            if action == "remove":
                removed = store.update(lambda jobs: remove(jobs, job_id))
                return f"Removed job {removed.id} ({removed.title})."
            return update(job_id, message, cron, every, at, tz, to, name, enabled, missed)
        except (ScheduleError, TargetError, JobNotFound, StoreCorrupt) as e:
            raise ToolError(str(e)) from None

    def add(message: str | None, cron_expr: str | None, every: str | None, at: str | None, tz: str | None,
            to: str | None, name: str | None, missed: str | None) -> str:
        if not message or not message.strip():
            raise ToolError("add needs a message: what the run should do.")
        now = clock()
        schedule, note = make_schedule(cron_expr, every, at, tz, timezone, now)

        def change(jobs: JobsFile) -> Job:
            job = Job(id=new_job_id(jobs.jobs), message=message.strip(), schedule=schedule,
                      target=target_text(pick_target(to, jobs)), name=(name or "").strip(), missed=missed or "once",
                      created=now, created_by=current_turn.get().session_key or "agent",
                      workdir=current_turn.get().workdir,
                      next_run=schedule.next_after(now))
            jobs.jobs.append(job)
            return job

        job = store.update(change)
        return f"Added job {job.id}. " + summary(job, now, note)

    def update(job_id: str, message: str | None, cron_expr: str | None, every: str | None, at: str | None,
               tz: str | None, to: str | None, name: str | None, enabled: bool | None, missed: str | None) -> str:
        now = clock()
        new_schedule = make_schedule(cron_expr, every, at, tz, timezone, now) if (cron_expr or every or at) else None

        def change(jobs: JobsFile) -> Job:
            job = jobs.find(job_id)
            if message is not None and message.strip():
                job.message = message.strip()
            if name is not None:
                job.name = name.strip()
            if to is not None:
                job.target = target_text(pick_target(to, jobs))
            if missed is not None:
                job.missed = missed
            if new_schedule is not None:
                job.schedule = new_schedule[0]
                job.next_run = job.schedule.next_after(now)
            if enabled is not None and enabled != job.enabled:
                job.enabled = enabled
                if enabled:
                    job.next_run = job.schedule.next_after(now)
                    if job.next_run is None:
                        raise ScheduleError(f"Job {job.id} was a one-off whose time has passed: give it a new `at`.")
            return job

        job = store.update(change)
        return f"Updated job {job.id}. " + summary(job, now, new_schedule[1] if new_schedule else None)

    def remove(jobs: JobsFile, job_id: str) -> Job:
        job = jobs.find(job_id)
        jobs.jobs.remove(job)
        return job

    def summary(job: Job, now: datetime, note: str | None) -> str:
        tz = zone(timezone)
        when = (f"next run {format_time(job.next_run, tz)} ({relative(job.next_run, now)})" if job.next_run and
                job.enabled else "paused" if not job.enabled else "no next run")
        parts = [f"{job.schedule.explain()}; {when}; replies go to {job.target}."]
        if note:
            parts.append(f"Note: {note}")
        if not scheduler_seen(store):
            parts.append(NOT_RUNNING)
        return " ".join(parts)

    @tool()
    @naming_channels
    async def message(ctx: ToolContext, text: str, to: str | None = None, files: list[str] | None = None) -> str:
        """Send a message now to one of the user's own chats, e.g. "message me when it is done" or from a
        scheduled run, with files if asked (an image is shown as one). Not for answering this conversation in
        words: your reply does that; but to send a file into this chat, use this tool without `to`.

        Args:
            text: The message (Markdown).
            to: <channel>:<chat id> (<channel>: CHANNELS), a channel's name alone (the user's own chat there) or
                cli:direct; in a scheduled run, the job's target by default; with files, this chat by default.
            files: Paths of workspace files to send with the text (images, documents; up to 20 MB each).
        """
        key = current_turn.get().session_key
        try:
            paths = [outgoing_file(ctx, path) for path in files or []]
            if to is None:
                target = (own_target(store.read()) if keys.cron_job(key) is not None else
                          target_of_session(key) if paths else None)
            else:
                target = access.resolve(to)
                access.check(target, key)
            if target is None:
                raise ToolError(f"Say where: to=<channel>:<chat id>, a channel's name alone (the user's own chat "
                                f"there) or cli:direct; the channels are {', '.join(registry.names())}.")
            if target.key == key and (not paths or target.channel == TERMINAL):
                raise ToolError("That is this conversation: just write it in your reply.")
            # into this very chat: the turn's own record says it; its session is busy with the turn meanwhile
            await outbox.send(target, text, f"Message from {key or 'the agent'}", paths, note=target.key != key)
        except (TargetError, StoreCorrupt) as e:
            raise ToolError(str(e)) from None
        except DeliveryError as e:
            raise ToolError(f"Not delivered: {e}.") from None
        return f"Sent to {target.key}."

    return [cron, message]


def outgoing_file(ctx: ToolContext, path: str) -> Path:
    """A workspace file the `message` tool may send: its real path inside the workspace (as the file tools check
    it, and always: a file sent leaves the machine, whatever restrictToWorkspace says), a regular file with one
    name, at most MAX_FILE_BYTES. ToolError, one line, otherwise."""
    inside = dataclasses.replace(ctx, restrict_to_workspace=True)
    try:
        real = resolve_path(inside, path)
        _check_file(inside, path, real, writing=False)
    except ToolError:
        raise ToolError(f"'{path}' is not inside the workspace {ctx.workspace} (or is a link to a file outside "
                        "it): only the workspace's files can be sent; copy the file into it first.") from None
    if not real.is_file():
        raise ToolError(f"'{path}' is not a file in the workspace: give a file's path relative to it.")
    size = real.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ToolError(f"'{path}' is {size / 1_048_576:.1f} MB, over the {MAX_FILE_BYTES // 1_048_576} MB a file "
                        "sent to a chat may be: send a smaller file (compress it, or split it).")
    return real


def naming_channels(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The tool's docstring with CHANNELS replaced by the registered channels' names, so its schema lists them."""
    fn.__doc__ = (fn.__doc__ or "").replace("CHANNELS", ", ".join(registry.names()))
    return fn


def outbox_target(job: Job) -> Target:
    try:
        return parse_target(job.target)
    except TargetError:
        return None


def describe_jobs(jobs: list[Job], now: datetime, tz: object) -> str:
    from datetime import tzinfo

    assert isinstance(tz, tzinfo)
    if not jobs:
        return "No scheduled jobs."
    lines = []
    for job in jobs:
        when = format_time(job.next_run, tz) if job.next_run and job.enabled else "paused" if not job.enabled else "-"
        last = job.last
        result = f"; last run {last.status} {relative(last.started, now)}" if last else ""
        if last is not None and last.status == "skipped" and last.note:
            result += f" ({last.note})"  # which spending cap, and when it resets
        cap = f"; at most {format_limit(job.budget)} a run" if job.budget else ""
        lines.append(f"- {job.id} «{job.title}»: {job.schedule.explain()}; next {when}; to {job.target}{cap}{result}")
    return "\n".join(lines)
