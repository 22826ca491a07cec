"""`nanoagent heartbeat`: one heartbeat now, for trying HEARTBEAT.md out and for the system's crontab."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from nanoagent import keys
from nanoagent.cli.common import WorkspaceOpt, setup, warn
from nanoagent.errors import NanoagentError


def register(app: typer.Typer) -> None:
    app.command("heartbeat")(heartbeat)


def heartbeat(
    force: Annotated[bool, typer.Option("--force", help="Run even outside heartbeat.activeHours.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Run one heartbeat now: the standing tasks in HEARTBEAT.md.

    The agent checks them and what it has to say is printed.

    With no task in HEARTBEAT.md it makes no model call. A reply worth sending is printed and, when its
    target (heartbeat.target, else your most recently active chat) is a terminal session, added there;
    a chat app gets it from the gateway's own heartbeats.

    Example: nanoagent heartbeat --force
    """
    from nanoagent.agent.heartbeat import HeartbeatStatus, run_heartbeat, session_delivery
    from nanoagent.cli.running import run_main
    from nanoagent.session.store import SessionStore

    paths, config = setup(workspace, seeds=True)
    terminal = session_delivery(SessionStore(paths.sessions_dir, warn=warn))

    async def deliver(target: str, text: str) -> None:
        if keys.kind(target) == "cli":  # chat apps are the gateway's to reach; the reply is printed below either way
            await terminal(target, text)

    result = run_main(run_heartbeat(config, paths, deliver, ignore_hours=force, warn=warn))
    if result.status is HeartbeatStatus.NO_TASKS:
        print(f"No tasks in {paths.workspace / 'HEARTBEAT.md'} (only comments, headings or blank lines): "
              "nothing to do, no model call.")
    elif result.status is HeartbeatStatus.OUTSIDE_HOURS:
        print(f"Outside heartbeat.activeHours ({config.heartbeat.active_hours}): skipped. --force runs it anyway.")
    elif result.status is HeartbeatStatus.NOTHING_TO_REPORT:
        print("Nothing to report.")
    elif result.status is HeartbeatStatus.FAILED:
        raise NanoagentError(f"The heartbeat failed: {result.error}")
    elif result.status is HeartbeatStatus.OVER_BUDGET:
        raise NanoagentError(f"The heartbeat did not run: {result.error}")
    else:
        print(result.reply)
        print(f"({_where(result.target, config.heartbeat.target)})", file=sys.stderr)


def _where(target: str | None, configured: str | None) -> str:
    if target is None:
        return "heartbeat.target is none: not sent" if configured == "none" else \
            "not sent: no chat has been active yet; set heartbeat.target"
    if keys.kind(target) == "cli":
        return f"added to session {target}"
    return f"for {target}: from the command line it reaches terminal sessions only; the gateway sends the rest"
