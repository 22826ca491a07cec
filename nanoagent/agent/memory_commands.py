"""Slash commands for the git log of long-term memory: /dream-log and /dream-restore.

Git runs in a worker thread so an interactive session keeps drawing while it works.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from nanoagent.agent.loop import AgentLoop
    from nanoagent.session.store import Session

NO_MEMORY_GIT = "Memory history is not kept here (this agent was built without a memory git log)."
MIN_SHA = 4  # git never abbreviates below 4 hex digits, so a shorter number is a count


async def dream_log_command(loop: AgentLoop, session: Session, args: str) -> str:
    """list the edits made to memory, or show one: /dream-log [N | SHA]"""
    memory = loop.memory_git
    if memory is None:
        return NO_MEMORY_GIT
    arg = args.strip()
    try:
        if arg and not (arg.isdigit() and len(arg) < MIN_SHA):
            return await asyncio.to_thread(memory.show, arg)
        commits = await asyncio.to_thread(memory.log, int(arg) if arg else 20)
    except NanoagentError as e:
        return f"Cannot read the memory history: {e}"
    if not commits:
        return "No memory edits recorded yet."
    lines = [f"{c.short}  {c.time:%Y-%m-%d %H:%M}  {', '.join(c.files) or '-'}  {c.summary}" for c in commits]
    return "\n".join(lines + ["", "Show one with /dream-log SHA; undo one with /dream-restore SHA."])


async def dream_restore_command(loop: AgentLoop, session: Session, args: str) -> str:
    """undo one memory edit, keeping every later change: /dream-restore SHA"""
    memory = loop.memory_git
    if memory is None:
        return NO_MEMORY_GIT
    if not args.strip():
        return "Which edit? Give its sha: /dream-restore SHA (see /dream-log)."
    try:
        made = await asyncio.to_thread(memory.restore, args.strip())
    except NanoagentError as e:
        return f"Cannot restore: {e}"
    return f"{made.summary}\nChanged {', '.join(made.files)}; recorded as {made.short}."
