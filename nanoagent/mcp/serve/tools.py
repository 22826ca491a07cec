"""The tools `nanoagent mcp serve` offers an MCP client (another agent): declared once as typed functions
(`tools.base.tool`), so their schemas, argument checks and one-line errors are the agent's own.

They act as the owner: memory with the owner's view, every saved session, the owner's cron jobs. What reaches
out is bounded twice: a target must be one the channels' settings allow the owner's conversations to write to
(`cron.targets.Access`), and one `mcp.serve.targets` lets an MCP client reach ("owner": the owner's own chats and
terminal sessions, `channels/owners.py`; or session-key patterns). A question (`ask`) is a turn of the session,
counted in spend as "mcp" and held to the caps like any turn.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import nanoagent.channels.registry as registry
from nanoagent import keys
from nanoagent.agent.events import TurnResult
from nanoagent.channels.base import DeliveryError
from nanoagent.channels.owners import OWNER, owner_chats
from nanoagent.config.schema import Config
from nanoagent.cron.targets import TERMINAL, Access, Target, TargetError
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place
from nanoagent.messages import (
    Message,
    calls_of,
    is_tool,
    is_user,
    shown_text,
    strip_runtime_context,
    truncate,
)
from nanoagent.paths import Paths, check_session_key
from nanoagent.tools.base import Tool, ToolContext, ToolError, TurnScope, current_turn, tool

SOURCE = "Message from an MCP client"  # how a delivered message's copy in the target's session names its sender
DEFAULT_SESSION = "mcp"  # `ask` without a session: the terminal-like session cli:mcp
MESSAGE_CHARS = 2000  # of each message session_read shows


@dataclass
class Doors:
    """How the tools reach what runs: `ask` (a session key, the question) -> the turn's result, None when the
    question joined a turn already running there; `deliver` sends a message to a place; `jobs_changed` tells the
    scheduler that cron/jobs.json changed."""

    ask: Callable[[str, str], Awaitable[TurnResult | None]]
    deliver: Callable[[Place, str], Awaitable[None]]
    jobs_changed: Callable[[], None] = lambda: None
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


def reachable(config: Config, target: Target) -> None:
    """TargetError unless `mcp.serve.targets` lets an MCP client reach `target` ("owner": the owner's own chats, as
    `channels/owners.py` has them, and terminal sessions; else a session-key pattern that matches it)."""
    if target is None:
        return
    allowed = config.mcp.serve.targets
    if "owner" in allowed and (target.channel == TERMINAL or target.chat.casefold() in _owner_chats(config, target)):
        return
    if any(keys.matches(pattern, target.key) for pattern in allowed if pattern != "owner"):
        return
    said = ", ".join(allowed) or "nothing"
    raise TargetError(f"{target} is not a target an MCP client may reach (mcp.serve.targets allows: {said}; "
                      "\"owner\" is the owner's own chats and terminal sessions); add a pattern such as "
                      f"\"{target.channel}:*\" to mcp.serve.targets in config.json to allow it.")


def _owner_chats(config: Config, target: Place) -> frozenset[str]:
    channel = registry.get(target.channel)
    return owner_chats(channel, channel.settings(config))


def serve_tools(config: Config, paths: Paths, doors: Doors) -> list[Tool]:
    """Every tool an MCP client sees, in the order it lists them."""
    return [*_reaching(config, paths, doors), *_reading(config, paths), *_scheduling(config, paths, doors)]


def _reaching(config: Config, paths: Paths, doors: Doors) -> list[Tool]:
    access = Access(config, paths)

    @tool()
    async def send_message(ctx: ToolContext, to: str, text: str) -> str:
        """Send a message now to the person this nanoagent works for, on one of their chat apps (Telegram, email,
        ...), as their agent's own message tool does. Use it to tell them something (a task is done, a question
        that needs them). The reply, if any, reaches their agent, not you.

        Args:
            to: Where: <channel>:<chat id> (e.g. telegram:42, email:me@example.com), a channel's name alone (the
                owner's own chat there) or cli:<session> (a terminal session's log).
            text: The message (Markdown).
        """
        if not text.strip():
            raise ToolError("text is empty: give the message to send.")
        try:
            target = access.resolve(to)
            if target is None:
                raise ToolError("to is none: name a chat, e.g. telegram:42, or a channel's name alone.")
            access.check(target, "")
            reachable(config, target)
            await doors.deliver(target, text)
        except TargetError as e:
            raise ToolError(str(e)) from None
        except DeliveryError as e:
            raise ToolError(f"Not delivered to {to}: {e}.") from None
        return f"Sent to {target.key}."

    @tool()
    async def ask(ctx: ToolContext, question: str, session: str = DEFAULT_SESSION) -> str:
        """Ask the person's always-on nanoagent agent something, or hand it a task, and get its reply. It has
        their memory, tools, chat apps and schedules. Each call is a turn of one of its conversations (it
        remembers earlier calls to the same session), counted in its spending and held to its caps.

        Args:
            question: What to ask or ask it to do, as a person would say it.
            session: Its conversation: a name (a terminal session, cli:NAME) or a session key such as
                telegram:42. Default: mcp.
        """
        if not question.strip():
            raise ToolError("question is empty: say what to ask.")
        try:
            key = check_session_key(session if ":" in session else f"cli:{session}")
            turn = await doors.ask(key, question)
        except NanoagentError as e:
            raise ToolError(_line(str(e))) from None
        if turn is None:
            return f"The question joined the turn already running in {key}; its reply goes to that conversation."
        if turn.result is not None and turn.result.error is not None:
            raise ToolError(_line(turn.reply))
        return turn.reply

    return [send_message, ask]


def _reading(config: Config, paths: Paths) -> list[Tool]:
    from nanoagent.memory.embeddings import metered_settings
    from nanoagent.memory.history import HistoryLog
    from nanoagent.memory.search import MemorySearch
    from nanoagent.memory.search_tool import memory_tools
    from nanoagent.session.store import SessionStore

    sessions = SessionStore(paths.sessions_dir)
    inner = {t.name: t for t in memory_tools(MemorySearch(paths, metered_settings(config, paths)),
                                             HistoryLog(paths.memory_dir, key_file=paths.history_key_file),
                                             sessions)}

    async def as_owner(name: str, ctx: ToolContext, arguments: dict[str, object]) -> str:
        token = current_turn.set(TurnScope(person=OWNER))
        try:
            result = await inner[name].call(ctx, arguments)
        finally:
            current_turn.reset(token)
        return result if isinstance(result, str) else result.text

    @tool(read_only=True)
    async def memory_search(ctx: ToolContext, query: str, limit: int = 8) -> str:
        """Search the person's nanoagent memory: their notes (MEMORY.md, USER.md), history summaries and every
        past conversation with their agent. Returns the best matches, each with its source for memory_get.

        Args:
            query: Keywords (names, places, topics, dates), not a whole question.
            limit: Most results, 1 to 20.
        """
        return await as_owner("memory_search", ctx, {"query": query, "limit": limit})

    @tool(read_only=True)
    async def memory_get(ctx: ToolContext, source: str, around: int = 2) -> str:
        """Read more around a memory_search match: pass its source as written ("memory/MEMORY.md:12-18",
        "history#42", "session telegram:42 #7").

        Args:
            source: A match's source as memory_search wrote it, or a memory file's path with optional :first-last.
            around: Entries, messages or lines to add either side, 0 to 5.
        """
        return await as_owner("memory_get", ctx, {"source": source, "around": around})

    @tool(read_only=True)
    def sessions_list(ctx: ToolContext, limit: int = 20) -> str:
        """List the agent's saved conversations, the most recently active first: each session's key (for
        session_read and ask), its number of messages and when it was last active (UTC).

        Args:
            limit: Most sessions to list, 1 to 200.
        """
        found = sorted(((os.stat(sessions.path_for(key)).st_mtime, key) for key in sessions.keys()), reverse=True)
        lines = []
        for stamp, key in found[:max(1, min(limit, 200))]:
            when = datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")
            lines.append(f"- {key}: {len(sessions.load(key).messages)} messages, last active {when}")
        return "\n".join(lines) or "No saved sessions yet."

    @tool(read_only=True)
    def session_read(ctx: ToolContext, session: str, limit: int = 20) -> str:
        """Read the recent messages of one saved conversation, oldest first (what the person and the agent said;
        tool calls by name).

        Args:
            session: Its key as sessions_list gives it (e.g. cli:direct, telegram:42); a bare name means cli:NAME.
            limit: Most recent messages to show, 1 to 100.
        """
        key = session if ":" in session else f"cli:{session}"
        try:
            known = check_session_key(key) in sessions.keys()
        except NanoagentError as e:
            raise ToolError(_line(str(e))) from None
        if not known:
            raise ToolError(f"No saved session {key!r}; sessions_list gives the keys.")
        messages = sessions.load(key).messages
        shown = messages[-max(1, min(limit, 100)):]
        lines = [f"{key}: the last {len(shown)} of {len(messages)} messages."]
        for number, message in enumerate(shown, start=len(messages) - len(shown)):
            lines.append(f"#{number} {_said(message)}")
        return "\n".join(lines)

    return [memory_search, memory_get, sessions_list, session_read]


def _scheduling(config: Config, paths: Paths, doors: Doors) -> list[Tool]:
    from nanoagent.cron.schedule import zone
    from nanoagent.cron.store import JobStore, StoreCorrupt
    from nanoagent.cron.tools import describe_jobs

    store = JobStore(paths.cron_jobs_file)

    @tool(read_only=True)
    def cron_list(ctx: ToolContext) -> str:
        """List the agent's scheduled jobs: id, name, schedule, next run, where replies go, the last run."""
        try:
            return describe_jobs(store.read().jobs, doors.clock(), zone(config.defaults.timezone))
        except StoreCorrupt as e:
            raise ToolError(_line(str(e))) from None

    @tool()
    def cron_add(ctx: ToolContext, message: str, cron: str | None = None, every: str | None = None,
                 at: str | None = None, tz: str | None = None, to: str = "cli:direct", name: str = "") -> str:
        """Schedule work for the agent: each run is a turn of the agent with `message`, its reply delivered to
        `to`. Give exactly one of cron, every or at.

        Args:
            message: An instruction to the agent at each run, e.g. "Remind me to call the dentist."
            cron: Five fields (minute hour day month weekday), e.g. "0 9 * * 1-5".
            every: An interval: 30s, 15m, 2h, 1d.
            at: One time: "2026-05-04 09:00", "09:00", "tomorrow 8:30", "in 20 minutes".
            tz: IANA zone for cron and at (default: the person's).
            to: Where the reply goes: <channel>:<chat id>, a channel's name alone, cli:<session>, or none.
            name: A short name.
        """
        from nanoagent.cron.edit import adding

        try:
            reachable(config, Access(config, paths).resolve(to))
            change, note = adding(config, paths, doors.clock(), message=message, cron=cron, every=every, at=at,
                                  tz=tz, to=to, name=name, created_by="mcp")
            job = store.update(change)
        except NanoagentError as e:
            raise ToolError(_line(str(e))) from None
        doors.jobs_changed()
        when = job.next_run.isoformat(timespec="minutes") if job.next_run else "none"
        return (f"Added job {job.id} «{job.title}»: {job.schedule.explain()}; next run {when}; replies go to "
                f"{job.target}." + (f" Note: {note}" if note else ""))

    return [cron_list, cron_add]


def _said(message: Message) -> str:
    """One message of a session as session_read shows it: who said it and its text (a tool call by name)."""
    if is_user(message):
        return "user: " + truncate(strip_runtime_context(message["content"]), MESSAGE_CHARS)
    if is_tool(message):
        return f"tool {message['name']}: " + truncate(shown_text(message), 300)
    calls = ", ".join(call["name"] for call in calls_of(message))
    return "assistant: " + truncate(shown_text(message), MESSAGE_CHARS) + (f" [called {calls}]" if calls else "")


def _line(text: str) -> str:
    return " ".join(text.split())
