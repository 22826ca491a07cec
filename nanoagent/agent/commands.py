"""Slash commands, shared by `agent -m` and interactive sessions. Each returns the text to show."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nanoagent.agent.memory_commands import dream_log_command, dream_restore_command
from nanoagent.errors import NanoagentError
from nanoagent.pricing import context_window
from nanoagent.usage import session_total

if TYPE_CHECKING:
    from nanoagent.agent.loop import AgentLoop, Command
    from nanoagent.session.store import Session


async def help_command(loop: AgentLoop, session: Session, args: str) -> str:
    width = max(map(len, loop.commands))
    lines = [f"{name:<{width}}  {(handler.__doc__ or '').strip()}" for name, handler in sorted(loop.commands.items())]
    return "\n".join(lines + ["", "Type a message to talk to the agent. Alt-Enter (or Esc Enter) adds a new line."])


async def new_command(loop: AgentLoop, session: Session, args: str) -> str:
    """start a fresh conversation (the old one is archived to memory first)"""
    count = await loop.new_conversation(session)
    if count == 0:
        return "Already a fresh conversation."
    kept = " and archived to memory" if loop.consolidator else ""
    return f"Started a fresh conversation. The previous {count} messages stay in {session.path.name}{kept}."


async def status_command(loop: AgentLoop, session: Session, args: str) -> str:
    """model, session, context used, tokens and cost so far"""
    model = loop.model_for(session)
    window = loop.settings.context_window_tokens
    used = loop.prompt_tokens(session)
    total = session_total(session.usage)
    u = total.usage
    return "\n".join([
        f"model:    {model}",
        f"session:  {session.key} ({len(session.messages)} messages, {session.last_consolidated} consolidated)",
        f"context:  {used:,} of {window:,} tokens ({used / window:.0%})",
        f"tokens:   {u.input_tokens:,} in, {u.output_tokens:,} out, {u.cache_read_tokens:,} cache read, "
        f"{u.cache_write_tokens:,} cache write",
        f"cost:     {total.cost_text()} over {total.calls} model calls",
    ])


async def model_command(loop: AgentLoop, session: Session, args: str) -> str:
    """show or switch the model for this session: /model anthropic/claude-sonnet-4-5"""
    if not args:
        window = context_window(loop.model_for(session))
        extra = f" (context window {window:,} tokens)" if window else ""
        return f"Model: {loop.model_for(session)}{extra}. Switch with /model <provider/model>."
    try:
        loop.provider(args)  # fails now, not at the next turn, on an unknown model or missing key
    except NanoagentError as e:
        return f"Cannot switch: {e}"
    with loop.store.lock(session):
        loop.store.set_meta(session, model=args)
    note = " (but --model on the command line takes precedence)" if loop.model_pinned else ""
    return f"This session now uses {args}{note}."


async def usage_command(loop: AgentLoop, session: Session, args: str) -> str:
    """tokens and cost of this session, by model"""
    by_model: dict[str, list[dict]] = {}
    for record in session.usage:
        by_model.setdefault(str(record.get("model", "")), []).append(record)
    if not by_model:
        return "No model calls in this session yet."
    lines = []
    for model, records in sorted(by_model.items()):
        t = session_total(records)
        lines.append(f"{model}: {t.calls} calls, {t.usage.input_tokens:,} in, {t.usage.output_tokens:,} out, "
                     f"{t.usage.cache_read_tokens:,} cache read, {t.usage.cache_write_tokens:,} cache write, "
                     f"{t.cost_text()}")
    return "\n".join(lines)


async def skills_command(loop: AgentLoop, session: Session, args: str) -> str:
    """list the skills the agent knows"""
    skills = loop.context.skills.skills() if loop.context.skills else []
    if not skills:
        return "No skills found."
    return "\n".join(
        f"{s.name} ({s.source}{', always loaded' if s.always else ''}): {s.description}"
        + ("" if s.available else f" [unavailable: {'; '.join(s.missing)}]") for s in skills)


async def sessions_command(loop: AgentLoop, session: Session, args: str) -> str:
    """list saved sessions"""
    keys = loop.store.keys()
    return "\n".join(f"{'*' if k == session.key else ' '} {k}" for k in keys) or "No saved sessions yet."


async def dream_command(loop: AgentLoop, session: Session, args: str) -> str:
    """fold new history into long-term memory now (/dream --dry-run to preview)"""
    from nanoagent.memory.dream import describe

    if loop.dream_factory is None:
        return "Dream is not available here."
    dream = loop.dream_factory()
    try:
        results = await dream.run(dry_run="--dry-run" in args.split(), all_entries="--all" in args.split())
    except NanoagentError as e:
        return f"Dream failed: {e}"
    return describe(results, dream.history.dream_cursor)


help_command.__doc__ = "show this help"

COMMANDS: dict[str, Command] = {
    "/help": help_command,
    "/new": new_command,
    "/status": status_command,
    "/model": model_command,
    "/usage": usage_command,
    "/skills": skills_command,
    "/sessions": sessions_command,
    "/dream-log": dream_log_command,
    "/dream-restore": dream_restore_command,
    "/dream": dream_command,
}
