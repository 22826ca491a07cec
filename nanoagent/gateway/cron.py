"""Scheduled jobs as a gateway component: the scheduler runs for the gateway's whole life, each run a turn given
to the Hub (so it counts against gateway.maxConcurrentTurns and its events reach whoever watches `cron:<id>`).
The heartbeat is a turn given to the Hub too, in the gateway's own loop: no second agent is built for it.
A reply delivered to a terminal session is shown at once to the terminals attached to it."""

from __future__ import annotations

import asyncio

from nanoagent.agent import events as ev
from nanoagent.agent.cron_runs import build_scheduler
from nanoagent.agent.events import TurnResult
from nanoagent.config.schema import Config
from nanoagent.cron.deliver import Outbox
from nanoagent.cron.schedule import zone
from nanoagent.gateway.hub import Hub
from nanoagent.gateway.server import Component
from nanoagent.paths import Paths


def cron_component(config: Config, paths: Paths, hub: Hub, outbox: Outbox) -> Component:
    async def turn(key: str, text: str, *, model: str | None = None, fresh: bool = False,
                   workdir: str = "") -> TurnResult | None:
        try:
            return await hub.send(key, text, model=model, fresh=fresh, workdir=workdir)
        except asyncio.CancelledError:  # the run's timeout, or the gateway stopping: the turn stops too
            hub.cancel(key)
            raise

    outbox.listeners.append(lambda key, note: hub.publish(key, ev.Notice(note, session=key)))
    scheduler = build_scheduler(config, paths, turn, outbox, zone(config.defaults.timezone))
    scheduler.accepting = lambda: not hub.closed
    return Component("cron", scheduler.serve)
