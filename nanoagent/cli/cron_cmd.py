"""`nanoagent cron list | add | remove | enable | disable | run ID | tick`: scheduled jobs.

The gateway runs due jobs while it is up; without one, a crontab line running `nanoagent cron tick` every minute
does (it is silent unless something fails, so cron mails only failures).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from nanoagent.cli.common import App, WorkspaceOpt, setup, warn

if TYPE_CHECKING:
    from collections.abc import Callable

    from nanoagent.agent.loop import AgentLoop
    from nanoagent.config.schema import Config
    from nanoagent.cron.store import Job, JobsFile, JobStore, RunRecord
    from nanoagent.paths import Paths

cron_app = App(help="Scheduled jobs: reminders and work the agent does by itself.\n\nExample: nanoagent cron list",
                       no_args_is_help=True)


def _store() -> tuple[Paths, Config, JobStore]:
    from nanoagent.cron.store import JobStore

    paths, config = setup(None)
    return paths, config, JobStore(paths.cron_jobs_file)


def _update(paths: Paths, store: JobStore, change: Callable[[JobsFile], Job]) -> Job:
    """Change the jobs, and tell a running gateway, whose scheduler then looks at them at once (not at its next
    minute)."""
    from nanoagent.gateway.oneshot import tell

    job = store.update(change)
    tell(paths.gateway_socket, {"type": "jobs_changed"})
    return job


def _tz(config: Config):  # noqa: ANN202 - a tzinfo
    from nanoagent.cron.schedule import zone

    return zone(config.defaults.timezone)


@cron_app.command("list")
def list_jobs(json_output: Annotated[bool, typer.Option("--json", help="Print the jobs as JSON.")] = False,
              wide: Annotated[bool, typer.Option("--wide", help="Whole rows: the last run's error and delivery "
                                                 "too, as wide as they are.")] = False) -> None:
    """Every job: its schedule, target, next run and last result.

    `--wide` adds the last run's error and delivery.

    Example: nanoagent cron list --wide
    """
    from rich.table import Table

    from nanoagent.cli.render import print_table, table_console
    from nanoagent.cron.schedule import format_time, relative
    from nanoagent.cron.scheduler import described, scheduler_seen, utc_now
    from nanoagent.pricing import format_limit

    _, config, store = _store()
    jobs = store.read()
    if json_output:
        print(json.dumps({"jobs": [j.to_json() for j in jobs.jobs],
                          "system": {n: s.to_json() for n, s in jobs.system.items()}}, ensure_ascii=False, indent=1))
        return
    if not jobs.jobs and not jobs.system:
        print("No scheduled jobs. Add one with `nanoagent cron add`, or ask the agent (\"remind me at 9 to ...\").")
        return
    now, tz = utc_now(), _tz(config)
    table = Table("id", "name", "schedule", "to", "next run", "last run")
    rows = [(j.id, j.title, j.schedule.explain() + (f"; at most {format_limit(j.budget)} a run" if j.budget else ""),
             j.target, j.next_run if j.enabled else None, j.enabled, j.last) for j in jobs.jobs]
    rows += [(name, f"({name})", described(s.schedule), "-", s.next_run, True, s.last)
             for name, s in jobs.system.items()]
    for ident, title, schedule, target, next_run, enabled, last in rows:
        when = f"{format_time(next_run, tz)} ({relative(next_run, now)})" if next_run else (
            "paused" if not enabled else "-")
        table.add_row(ident, title, schedule, target, when, _last(last, now) if wide else _last_status(last, now))
    console = table_console()
    if not wide:
        console.width = min(console.width, LIST_WIDTH)  # cells wrap at words inside it
    print_table(table, console)
    if not scheduler_seen(store):
        warn("no scheduler has run lately: start `nanoagent gateway`, or run `nanoagent cron tick` from crontab "
             "(docs/schedules.md).")


LIST_WIDTH = 100  # `cron list` without --wide: what fits beside another window


def _last_status(run: RunRecord | None, now: datetime) -> str:
    """The last run's status and when, and whether its reply went undelivered; the reasons are for --wide."""
    from nanoagent.cron.schedule import relative

    if run is None:
        return "-"
    return f"{run.status} {relative(run.started, now)}" + (" (not delivered)" if run.delivery else "")


def _last(run: RunRecord | None, now: datetime) -> str:
    from nanoagent.cron.schedule import relative

    if run is None:
        return "-"
    text = f"{run.status} {relative(run.started, now)}"
    if run.error:
        text += f": {run.error[:80]}"
    elif run.status == "skipped" and run.note:  # which cap, and when it resets
        text += f": {run.note[:80]}"
    if run.delivery:
        text += f" (not delivered: {run.delivery[:60]})"
    return text


@cron_app.command("add")
def add(
    message: Annotated[str, typer.Option("--message", "-m", help="What the agent should do at each run.")],
    cron: Annotated[str | None, typer.Option("--cron", help="Cron expression, e.g. \"0 9 * * 1-5\".")] = None,
    every: Annotated[str | None, typer.Option("--every", help="Interval: 30s, 15m, 2h, 1d.")] = None,
    at: Annotated[str | None, typer.Option("--at", help="One time: \"2026-05-04 09:00\", 09:00, \"in 20 minutes\".")] = None,
    tz: Annotated[str | None, typer.Option("--tz", help="Time zone (default: agents.defaults.timezone, else this "
                                                        "machine's).")] = None,
    to: Annotated[str, typer.Option("--to", help="<channel>:<chat id>[:<thread>] (e.g. telegram:123), a channel's name "
                                                 "alone (your own chat there), cli:<session>, or none.")] = "cli:direct",
    name: Annotated[str, typer.Option("--name", help="A short name.")] = "",
    missed: Annotated[str, typer.Option("--missed", help="Runs missed while nothing ran: once or skip.")] = "once",
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds a run may take (default "
                                                                    "cron.runTimeout).")] = None,
    budget: Annotated[str | None, typer.Option("--budget", metavar="USD",
                                               help="The most one run may spend, e.g. 0.20; a run at its cap is "
                                                    "skipped, not failed. Daily and monthly caps (budget.daily, "
                                                    "budget.monthly) apply too.")] = None,
) -> None:
    """Add a job; prints its id (details on stderr).

    Example: nanoagent cron add --at "in 20 minutes" --message "stretch"
    """
    from nanoagent.cron.edit import adding
    from nanoagent.cron.schedule import format_time, relative
    from nanoagent.cron.scheduler import scheduler_seen, utc_now
    from nanoagent.pricing import format_limit

    paths, config, store = _store()
    now = utc_now()
    change, note = adding(config, paths, now, message=message, cron=cron, every=every, at=at, tz=tz, to=to,
                          name=name, missed=missed, timeout=timeout, budget=budget)
    job = _update(paths, store, change)
    print(job.id)
    assert job.next_run is not None
    tz_info = _tz(config) if not tz else schedule_zone(job.schedule)
    print(f"{job.schedule.explain()}; next run {format_time(job.next_run, tz_info)} ({relative(job.next_run, now)}); "
          f"replies go to {job.target}" + (f"; at most {format_limit(job.budget)} a run" if job.budget else "")
          + ".", file=sys.stderr)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if not scheduler_seen(store):
        warn("no scheduler has run lately: the job runs while `nanoagent gateway` runs, or add the crontab line "
             "from docs/schedules.md that runs `nanoagent cron tick`.")


def schedule_zone(schedule):  # noqa: ANN001, ANN201
    from nanoagent.cron.schedule import zone

    return zone(schedule.tz)


@cron_app.command("remove")
def remove(job_id: Annotated[str, typer.Argument(help="The job's id (or its start), from `cron list`.")]) -> None:
    """Delete a job.

    Example: nanoagent cron remove 3f9a1c2e
    """
    from nanoagent.cron.edit import removing

    paths, _, store = _store()
    change = removing(job_id)
    job = _update(paths, store, change)
    print(f"Removed job {job.id} ({job.title}).")


def _toggle(job_id: str, enabled: bool) -> None:
    from nanoagent.cron.edit import toggling
    from nanoagent.cron.schedule import format_time
    from nanoagent.cron.scheduler import utc_now

    paths, config, store = _store()
    change = toggling(job_id, enabled, utc_now())
    job = _update(paths, store, change)
    if enabled and job.next_run:
        print(f"Enabled job {job.id}; next run {format_time(job.next_run, _tz(config))}.")
    else:
        print(f"{'Enabled' if enabled else 'Paused'} job {job.id}.")


@cron_app.command("enable")
def enable(job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """Resume a paused job from now on.

    Runs it missed while paused are not made up.

    Example: nanoagent cron enable 3f9a1c2e
    """
    _toggle(job_id, True)


@cron_app.command("disable")
def disable(job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """Pause a job; `enable` resumes it.

    Example: nanoagent cron disable 3f9a1c2e
    """
    _toggle(job_id, False)


def _scheduler(paths: Paths, config: Config, replies: list[str] | None = None):  # noqa: ANN202 - a Scheduler
    """A scheduler for this process; its one agent (for jobs and the heartbeat) is built only when a run needs it
    (an idle tick needs no key). Each job's reply is added to `replies` when given."""
    from nanoagent.agent.build import build_agent, build_outbox
    from nanoagent.agent.cron_runs import build_scheduler

    outbox = build_outbox(config, paths, warn)
    agent: list[AgentLoop] = []

    async def turn(key: str, text: str, *, model: str | None = None, fresh: bool = False,  # noqa: ANN202
                   workdir: str = ""):
        if not agent:
            agent.append(build_agent(config, paths, warn=warn, outbox=outbox))
        result = await agent[0].handle(text, key, model=model, fresh=fresh, workdir=workdir)
        if replies is not None and result is not None and not fresh:
            replies.append(result.reply)
        return result

    return build_scheduler(config, paths, turn, outbox, _tz(config))


@cron_app.command("run")
def run(job_id: Annotated[str, typer.Argument(help="The job's id.")], workspace: WorkspaceOpt = None) -> None:
    """Run a job now, in this process, and print its reply.

    Its schedule is unchanged; a one-off job is removed once it ran. A run a spending cap stops is `skipped`
    (exit 0: the cap did its work).

    Example: nanoagent cron run 3f9a1c2e
    """
    from nanoagent.agent.cron_runs import NO_REPLY
    from nanoagent.cli.render import terminal_safe
    from nanoagent.cli.running import run_main
    from nanoagent.cron.store import JobStore

    paths, config = setup(workspace)
    job = JobStore(paths.cron_jobs_file).read().find(job_id)  # the id may be its start; a one-off goes once run
    replies: list[str] = []
    record = run_main(_scheduler(paths, config, replies).run_now(job.id))
    print(_outcome_line(f"{job.id} ({job.title})", record))
    for reply in replies:  # what the run said (also delivered to the job's target)
        if reply.strip() and reply.strip() != NO_REPLY:
            print(terminal_safe(reply.strip()))
    if record.status not in ("ok", "skipped") or record.delivery:
        raise typer.Exit(1)


@cron_app.command("tick")
def tick(
    workspace: WorkspaceOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Say what ran (and when nothing did).")] = False,
) -> None:
    """Run every job that is due, then exit: for a crontab line.

    The line: `* * * * * nanoagent cron tick`. Silent unless a run fails (a run skipped at a spending cap is
    no failure); does nothing while the gateway runs the jobs.

    Example: nanoagent cron tick
    """
    from nanoagent.cli.running import run_main
    from nanoagent.cron.scheduler import SchedulerBusy

    paths, config = setup(workspace)
    try:
        finished = run_main(_scheduler(paths, config).tick())
    except SchedulerBusy as e:
        if verbose:
            print(str(e))
        return
    failed = [(title, r) for title, r in finished if r.status not in ("ok", "missed", "skipped") or r.delivery]
    stamp = "" if sys.stderr.isatty() else datetime.now().astimezone().isoformat(timespec="seconds") + " "
    for title, record in finished:
        if verbose or (title, record) in failed:
            print(stamp + _outcome_line(title, record), file=sys.stderr if (title, record) in failed else sys.stdout)
    if verbose and not finished:
        print("Nothing was due.")
    if failed:
        raise typer.Exit(1)


def _outcome_line(title: str, record: RunRecord) -> str:
    line = f"{title}: {record.status}"
    if record.duration is not None:
        line += f" in {record.duration:.1f} s"
    if record.tokens:
        line += f", {record.tokens:,} tokens"
    if record.error:
        line += f"; {record.error}"
    if record.delivery:
        line += f"; not delivered: {record.delivery}"
    if record.note:
        line += f" ({record.note})"
    return line


__all__ = ["cron_app"]
