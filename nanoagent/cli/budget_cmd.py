"""`nanoagent budget`: what the agent may spend (`budget` in config.json) and what it has spent."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from nanoagent.cli.common import setup


def register(app: typer.Typer) -> None:
    app.command("budget")(budget)


def budget(json_output: Annotated[bool, typer.Option("--json", help="Print the figures as JSON (USD).")] = False,
           ) -> None:
    """Spend caps: what each allows, what is spent, and the forecast.

    Each cap (budget.daily, budget.monthly, budget.sessions, budget.heartbeat, budget.dream) with what is spent
    and reserved by calls under way in its period, its limit, when it resets and what the period comes to at
    the current rate; then today's and this month's spend, and the cron jobs with a budget of their own. Read
    from the spend ledger: deleting a session does not lower it.

    Example: nanoagent budget --json
    """
    from nanoagent.cron.store import JobStore, StoreCorrupt
    from nanoagent.pricing import format_limit
    from nanoagent.spend.view import spend_view

    paths, config = setup(None)
    view = spend_view(config, paths)
    try:
        jobs = [job for job in JobStore(paths.cron_jobs_file).read().jobs if job.budget is not None]
    except StoreCorrupt:  # `cron list` says what is wrong with it; the spend figures stand alone
        jobs = []
    if json_output:
        print(json.dumps({**view.to_json(), "jobs": [{"id": j.id, "name": j.title, "budget": j.budget}
                                                     for j in jobs]}, ensure_ascii=False, indent=1))
        return
    from nanoagent.cli.render import say

    say(*view.lines(), *(f"cron {job.id} ({job.title}): at most {format_limit(job.budget or 0)} a run (its --budget)."
                         for job in jobs))
