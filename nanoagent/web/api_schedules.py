"""The schedules page's `/api/...` routes: the jobs with their next and last runs, the heartbeat and scheduled Dream;
add (the forms and error messages of `cron add`, through `cron.edit`), enable, disable, remove, run now."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nanoagent.errors import NanoagentError
from nanoagent.web.api_chat import BadRequest, _json_body

if TYPE_CHECKING:
    from nanoagent.cron.edit import Change
    from nanoagent.cron.store import Job, JobStore, RunRecord
    from nanoagent.web.context import WebContext


def _run(run: RunRecord | None) -> dict[str, Any] | None:
    return None if run is None else run.to_json()


def _job(job: Job) -> dict[str, Any]:
    return {"id": job.id, "title": job.title, "message": job.message, "schedule": job.schedule.explain(),
            "target": job.target, "enabled": job.enabled, "next_run": job.next_run.isoformat() if job.enabled and
            job.next_run else None, "running": job.running is not None, "last": _run(job.last),
            "runs": [r.to_json() for r in job.runs[-5:]]}


def add_schedules(app: web.Application, ctx: WebContext) -> None:
    running: set[asyncio.Task[Any]] = set()

    def store() -> JobStore:
        from nanoagent.cron.store import JobStore

        return JobStore(ctx.paths.cron_jobs_file)

    async def listing(request: web.Request) -> web.Response:
        from nanoagent.agent.build import build_outbox
        from nanoagent.agent.cron_runs import system_tasks
        from nanoagent.cron.scheduler import described, scheduler_seen

        def read() -> dict[str, Any]:
            jobs_store = store()
            jobs = jobs_store.read()
            configured = {t.name: t.fingerprint for t in system_tasks(ctx.config, ctx.paths,
                                                                      build_outbox(ctx.config, ctx.paths))}
            system = [{"name": name, "schedule": described(s.schedule if s.schedule else configured.get(name, "")),
                       "next_run": s.next_run.isoformat() if s.next_run else None, "last": _run(s.last),
                       "on": name in configured} for name, s in jobs.system.items()]
            system += [{"name": name, "schedule": described(fingerprint), "next_run": None, "last": None, "on": True}
                       for name, fingerprint in configured.items() if name not in jobs.system]
            return {"jobs": [_job(j) for j in jobs.jobs], "system": system,
                    "scheduler": scheduler_seen(jobs_store), "enabled": ctx.config.cron.enabled}

        return web.json_response(await asyncio.to_thread(read))

    async def change(made: Change, status: int = 200) -> web.Response:
        def write() -> Job:
            jobs_store = store()
            job = jobs_store.update(made)
            jobs_store.changed()  # the gateway's scheduler looks again now
            return job

        try:
            job = await asyncio.to_thread(write)
        except NanoagentError as e:
            raise BadRequest(str(e)) from None
        return web.json_response({"job": _job(job)}, status=status)

    async def add(request: web.Request) -> web.Response:
        from nanoagent.cron.edit import adding
        from nanoagent.cron.scheduler import utc_now

        body = await _json_body(request)
        kind, when = str(body.get("kind", "")), str(body.get("when", "")).strip()
        if kind not in ("cron", "every", "at"):
            raise BadRequest("Choose when it runs: a cron expression, an interval (every) or one time (at).")
        if not when:
            raise BadRequest(f"Give the {kind} schedule: e.g. " + {"cron": '"0 9 * * 1-5"', "every": "30m",
                                                                   "at": '"in 20 minutes"'}[kind] + ".")
        try:
            timeout = float(body["timeout"]) if body.get("timeout") not in (None, "") else None
            made, note = adding(ctx.config, ctx.paths, utc_now(), message=str(body.get("message", "")),
                                **{kind: when}, tz=str(body.get("tz") or "") or None,
                                to=str(body.get("to") or "cli:direct"), name=str(body.get("name", "")),
                                missed=str(body.get("missed") or "once"), timeout=timeout, created_by="web")
        except (NanoagentError, ValueError) as e:
            raise BadRequest(str(e)) from None
        response = await change(made, status=201)
        if note:
            response.headers["X-Schedule-Note"] = note.encode("ascii", "replace").decode()
        return response

    async def toggle(request: web.Request) -> web.Response:
        from nanoagent.cron.edit import toggling
        from nanoagent.cron.scheduler import utc_now

        enabled = request.match_info["verb"] == "enable"
        return await change(toggling(request.match_info["id"], enabled, utc_now()))

    async def remove(request: web.Request) -> web.Response:
        from nanoagent.cron.edit import removing

        return await change(removing(request.match_info["id"]))

    async def run_now(request: web.Request) -> web.Response:
        from nanoagent.agent.build import build_outbox
        from nanoagent.agent.cron_runs import build_scheduler
        from nanoagent.cron.schedule import zone

        job_id = request.match_info["id"]
        try:
            job = await asyncio.to_thread(lambda: store().read().find(job_id))
        except NanoagentError as e:
            raise BadRequest(str(e)) from None

        async def turn(key: str, text: str, *, model: str | None = None, fresh: bool = False) -> Any:
            return await ctx.hub.send(key, text, model=model, fresh=fresh)

        scheduler = build_scheduler(ctx.config, ctx.paths, turn, build_outbox(ctx.config, ctx.paths),
                                    zone(ctx.config.defaults.timezone))
        task = asyncio.create_task(scheduler.run_now(job.id), name=f"web cron run {job.id}")
        running.add(task)
        task.add_done_callback(running.discard)
        return web.json_response({"started": job.id}, status=202)

    async def closing(app: web.Application) -> None:  # a run started here stops with the listener, as a turn does
        for task in running:
            task.cancel()

    app.on_shutdown.append(closing)
    app.router.add_get("/api/schedules", listing)
    app.router.add_post("/api/schedules", add)
    app.router.add_post("/api/schedules/{id}/{verb:enable|disable}", toggle)
    app.router.add_post("/api/schedules/{id}/run", run_now)
    app.router.add_delete("/api/schedules/{id}", remove)


__all__ = ["add_schedules"]
