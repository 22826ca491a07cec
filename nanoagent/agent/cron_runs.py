"""A job's run as an agent turn: the message in session `cron:<job id>`, the reply to the job's target. A job made in
a person's chat runs as that person, in `cron:<job id>:<person>` (`people.cron_key`): their memory, not the owner's.

The turn goes through whatever the caller hands in: `AgentLoop.handle` for `nanoagent cron tick` and `cron run`,
`Hub.send` in the gateway (so runs count against gateway.maxConcurrentTurns); the heartbeat's turn goes the same way,
so a process composes one agent. A reply of exactly NO_REPLY is not
delivered (for "tell me only if something changed"). A one-off whose turn fails delivers a short notice with its
message instead, since it will not run again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from nanoagent.agent.runner import EMPTY_REPLY
from nanoagent.agent.turn import TurnCall
from nanoagent.config.schema import Config
from nanoagent.cron.deliver import DeliveryError, Outbox
from nanoagent.cron.schedule import Schedule, ScheduleError, format_duration, format_time
from nanoagent.cron.scheduler import Claim, RunOutcome, Scheduler, Settings, SystemTask
from nanoagent.cron.store import Job, JobStore
from nanoagent.cron.targets import TargetError, parse_target
from nanoagent.memory.people import cron_key
from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.cron")
NO_REPLY = "NO_REPLY"


def job_prompt(job: Job, claim: Claim, tz: tzinfo) -> str:
    where = (f"Your reply is delivered to {job.target}" if job.target != "none"
             else "Your reply is delivered nowhere (use the message tool if someone must hear of it)")
    when = f"due {format_time(claim.scheduled, tz)}" if claim.scheduled else "run by hand"
    late = f", running {format_duration(claim.late)} late (nanoagent was not running)" if claim.late else ""
    return (f"[Scheduled job {job.id} \"{job.title}\", {job.schedule.describe()}; this run {when}{late}. {where}; "
            f"reply with exactly {NO_REPLY} when there is nothing worth telling.]\n\n{job.message}")


@dataclass
class TurnRunner:
    """Runs a claimed job as a turn and delivers its reply (the scheduler's `run_job`)."""

    turn: TurnCall
    outbox: Outbox
    tz: tzinfo

    async def __call__(self, job: Job, claim: Claim) -> RunOutcome:
        key, prompt = cron_key(job.id, job.created_by), job_prompt(job, claim, self.tz)
        # in the folder of the turn that made it (`agent -C DIR`); asked only then, so a plain TurnCall still fits
        result = await (self.turn(key, prompt, workdir=job.workdir) if job.workdir else self.turn(key, prompt))
        if result is None:
            return RunOutcome(note="joined a turn already running in its session")
        run = result.result
        tokens = run.usage.prompt_tokens + run.usage.output_tokens if run is not None else 0
        if run is not None and (run.error or run.stop.value == "cancelled"):
            status = "error" if run.error else "interrupted"
            error = run.error or "cancelled before it finished"
            if job.schedule.kind == "at":
                await self._deliver(job, f"The scheduled job \"{job.title}\" could not run ({error}). Its message "
                                         f"was:\n\n{job.message}")
            return RunOutcome(status, tokens, error=error)
        reply = result.reply.strip()
        if not reply or reply == EMPTY_REPLY or reply == NO_REPLY:
            return RunOutcome(tokens=tokens, note="nothing to deliver")
        return RunOutcome(tokens=tokens, delivery=await self._deliver(job, result.reply))

    async def _deliver(self, job: Job, text: str) -> str | None:
        try:
            await self.outbox.send(parse_target(job.target), text, f"Scheduled job {job.id} «{job.title}»")
        except (DeliveryError, TargetError) as e:
            log.warning("cron: job %s: delivery to %s failed: %s", job.id, job.target, e)
            return str(e)
        return None


def settings(config: Config) -> Settings:
    c = config.cron
    return Settings(catch_up=c.catch_up_hours * 3600, max_concurrent=c.max_concurrent_runs, timeout=c.run_timeout)


def system_tasks(config: Config, paths: Paths, outbox: Outbox, now: datetime | None = None,
                 turn: TurnCall | None = None) -> list[SystemTask]:
    """The built-in periodic tasks the scheduler runs besides jobs, in the gateway and in `cron tick` alike: the
    heartbeat every heartbeat.intervalMinutes, and Dream on memory.dreamSchedule ("" turns it off). Each is
    claimed and recorded like a job, so two schedulers never run one twice. The heartbeat is a `turn` of the
    caller's loop, as jobs are (in the gateway it takes one of gateway.maxConcurrentTurns; None: it composes an
    agent for itself)."""
    from nanoagent.agent.heartbeat import HeartbeatStatus, latest_chat, run_heartbeat
    from nanoagent.agent.scheduled_dream import scheduled_dream

    async def deliver(target: str, text: str, source: str = "Heartbeat") -> None:
        await outbox.send(parse_target(target), text, source)

    async def heartbeat() -> RunOutcome:
        result = await run_heartbeat(config, paths, deliver, turn=turn,
                                     warn=lambda message: log.warning("heartbeat: %s", message))
        tokens = result.usage.prompt_tokens + result.usage.output_tokens
        if result.status is HeartbeatStatus.FAILED:
            return RunOutcome("error", tokens, error=result.error)
        return RunOutcome(tokens=tokens, note=result.status.value)

    async def dream() -> RunOutcome:
        notice = await scheduled_dream(config, paths)
        if notice is None:
            return RunOutcome()
        target = config.heartbeat.target or latest_chat(outbox.sessions)
        delivery = None
        if target and target != "none":  # Dream speaks up only when something went wrong
            try:
                await deliver(target, notice, "Dream")
            except (DeliveryError, TargetError) as e:
                delivery = str(e)
        return RunOutcome("error", error=notice, delivery=delivery)

    now = now or datetime.now(UTC)  # the heartbeat's intervals count from here
    tasks = [SystemTask("heartbeat", Schedule.every(config.heartbeat.interval_minutes * 60, now), heartbeat,
                        missed="skip")]
    if config.memory.dream_schedule.strip():
        try:
            schedule = Schedule.cron(config.memory.dream_schedule, config.defaults.timezone or "")
        except ScheduleError as e:
            log.error("memory.dreamSchedule %r cannot be used (%s); scheduled Dream is off until it is fixed",
                      config.memory.dream_schedule, e)
        else:
            tasks.append(SystemTask("dream", schedule, dream))
    return tasks


def build_scheduler(config: Config, paths: Paths, turn: TurnCall, outbox: Outbox, tz: tzinfo) -> Scheduler:
    return Scheduler(JobStore(paths.cron_jobs_file), TurnRunner(turn, outbox, tz), settings(config),
                     system_tasks(config, paths, outbox, turn=turn))
