"""Slash commands, shared by `agent -m` and interactive sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanoagent.agent.loop import AgentLoop, Command
    from nanoagent.session.store import Session

HELP = {
    "/help": "show this help",
    "/status": "model, session and token counts",
    "/sessions": "list saved sessions",
}


async def help_command(loop: AgentLoop, session: Session, args: str) -> str:
    width = max(map(len, loop.commands))
    return "\n".join(f"{name:<{width}}  {HELP.get(name, '')}" for name in sorted(loop.commands))


async def status_command(loop: AgentLoop, session: Session, args: str) -> str:
    totals = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0}
    for record in session.usage:
        for key in totals:
            totals[key] += int(record.get(key, 0))
    return (f"model: {loop.model}\nsession: {session.key} ({len(session.messages)} messages, "
            f"{session.last_consolidated} consolidated)\n"
            f"tokens: {totals['input_tokens']:,} in, {totals['output_tokens']:,} out, "
            f"{totals['cache_read_tokens']:,} cache read, {totals['cache_write_tokens']:,} cache write")


async def sessions_command(loop: AgentLoop, session: Session, args: str) -> str:
    keys = loop.store.keys()
    return "\n".join(f"{'*' if k == session.key else ' '} {k}" for k in keys) or "No saved sessions yet."


COMMANDS: dict[str, Command] = {
    "/help": help_command,
    "/status": status_command,
    "/sessions": sessions_command,
}
