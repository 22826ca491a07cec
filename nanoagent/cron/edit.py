"""The changes `cron add | enable | disable | remove` make to the jobs, checked as each says, for every front end
(the command line, the web app): each returns the change to give `JobStore.update`, or raises NanoagentError saying
what is wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from nanoagent.config.schema import Config
    from nanoagent.cron.store import Job, JobsFile
    from nanoagent.paths import Paths

Change = Callable[["JobsFile"], "Job"]


def adding(config: Config, paths: Paths, now: datetime, *, message: str, cron: str | None = None,
           every: str | None = None, at: str | None = None, tz: str | None = None, to: str = "cli:direct",
           name: str = "", missed: str = "once", timeout: float | None = None,
           created_by: str = "cli") -> tuple[Change, str]:
    """The change that adds a job, and a note on its schedule ("" or what was assumed)."""
    from nanoagent.cron.schedule import make_schedule
    from nanoagent.cron.store import Job, new_job_id
    from nanoagent.cron.targets import Access, target_text

    if not message.strip():
        raise NanoagentError("--message is empty: say what the agent should do at each run.")
    if missed not in ("once", "skip"):
        raise NanoagentError(f"--missed is {missed!r}; use once or skip.")
    if timeout is not None and not 1 <= timeout <= 86_400:
        raise NanoagentError("--timeout must be from 1 to 86400 seconds.")
    schedule, note = make_schedule(cron, every, at, tz, config.defaults.timezone, now)
    access = Access(config, paths)
    target = access.resolve(to)
    access.check(target, "")

    def change(jobs: JobsFile) -> Job:
        job = Job(id=new_job_id(jobs.jobs), message=message.strip(), schedule=schedule, target=target_text(target),
                  name=name.strip(), missed=missed, timeout=timeout, created=now, created_by=created_by,
                  next_run=schedule.next_after(now))
        jobs.jobs.append(job)
        return job

    return change, note or ""


def toggling(job_id: str, enabled: bool, now: datetime) -> Change:
    def change(jobs: JobsFile) -> Job:
        job = jobs.find(job_id)
        if enabled and not job.enabled:
            job.next_run = job.schedule.next_after(now)
            if job.next_run is None:
                raise NanoagentError(f"Job {job.id} was a one-off whose time has passed; `nanoagent cron run {job.id}` "
                                     "runs it now, or add it again with a new --at.")
        job.enabled = enabled
        return job

    return change


def removing(job_id: str) -> Change:
    def change(jobs: JobsFile) -> Job:
        job = jobs.find(job_id)
        jobs.jobs.remove(job)
        return job

    return change


__all__ = ["adding", "removing", "toggling"]
