"""The memory flush: before older turns leave the prompt, a silent turn lets the agent write down what must outlast
the cut.

The Consolidator calls it (`Consolidator.before_archive`) once before each archiving pass: the budget's archive
before a turn and after it, overflow recovery, and `/new`. The flush is a run of its own (no message of it enters
the session, nothing is shown as a reply; its usage is recorded in the session as `flush`) with a fixed prompt
(`templates/prompts/flush.md`), the stretch about to be archived as a transcript, and three tools that reach only
memory/: `append_note` (today's dated note `memory/YYYY-MM-DD.md`, appended, created 0600), `read_file` and
`edit_file`. Its writes go through the file tools' write hook (`memory.gitlog.agent_edits`), so each is a commit by
"agent" that `dream-log` lists and `dream-restore` undoes.

Invariants:
- A stretch is flushed at most once: the session's `flushed` cursor is moved past it (a meta line, synced) before
  the flush runs, so neither a crash nor a retry runs it again (a cancelled flush, whose archive does not happen
  either, gives the claim back). A stretch with no user message after that cursor
  (and after `last_consolidated`) holds nothing new and costs no call.
- It never blocks an archive past `memory.flush.timeout`, and never changes it: on a timeout or any failure the
  archive goes on as it would have without a flush, with one warning line.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nanoagent.agent import events as ev
from nanoagent.agent.runner import AgentRunner, RunSpec
from nanoagent.channels.owners import NOBODY, OWNER, Owners
from nanoagent.config.schema import FlushConfig
from nanoagent.memory.consolidator import format_transcript
from nanoagent.messages import Message, is_user, user
from nanoagent.providers.base import Providers
from nanoagent.session.store import Session, SessionStore
from nanoagent.spend import working_as
from nanoagent.templates import render
from nanoagent.tools import (
    SchemaTool,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
    TurnScope,
    current_turn,
    tool,
)
from nanoagent.tools.fs import WriteHook, read_file, writing_tools
from nanoagent.usage import UsageRecord

FLUSH_ITERATIONS = 8  # model calls one flush may make: a note, a look at MEMORY.md, an edit, the last word
FLUSH_MAX_TOKENS = 4096
# The newest messages of a stretch the flush reads: a backlog (an imported session, a switch to a smaller model) is
# archived over several rounds, and its transcript is cut to 60,000 characters anyway; formatting all of it is waste.
FLUSH_MAX_MESSAGES = 400


@dataclass(frozen=True)
class MemoryFlush:
    """What runs the flush: built once by `build_agent`, called by the Consolidator as (session, end, model)."""

    settings: FlushConfig
    providers: Providers
    store: SessionStore
    workspace: Path
    on_write: WriteHook  # the file tools' hook: memory edits become commits by "agent"
    dream_model: str | None = None  # memory.dreamModel: the flush's model when no other is set
    max_tokens: int = FLUSH_MAX_TOKENS
    now: Callable[[], datetime] = lambda: datetime.now().astimezone()  # the dated note's day and heading
    warn: Callable[[str], None] = lambda message: None
    owners: Owners = NOBODY  # the flush runs only in the owner's sessions
    background_model: str | None = None  # agents.defaults.backgroundModel: before memory.dreamModel

    def model_for(self, session_model: str) -> str:
        return self.settings.model or self.background_model or self.dream_model or session_model

    async def __call__(self, session: Session, end: int, model: str) -> None:
        """Before messages[:end] of `session` may be archived (the caller holds its lock): flush what is new there.
        Never raises but for cancellation."""
        if not self.settings.enabled or self.owners.person_of(session.key) != OWNER:
            return  # a guest's chat: its notes would reach everyone; Dream files their facts from history
        start = max(session.last_consolidated, min(session.meta.flushed, len(session.messages)))
        end = min(end, len(session.messages))
        if not any(is_user(m) for m in session.messages[start:end]):
            return  # nothing new since the last flush
        claimed = session.meta.flushed
        self.store.set_flushed(session, end)  # claimed first: at most once per stretch, a crash included
        flush_model = self.model_for(model)
        try:
            async with asyncio.timeout(self.settings.timeout):
                error = await self._run(session, session.messages[start:end], flush_model)
        except asyncio.CancelledError:  # a person stopped what archives (Ctrl-C on /new): nothing is archived yet
            self.store.set_flushed(session, claimed)
            raise
        except TimeoutError:
            error = f"it took longer than memory.flush.timeout ({self.settings.timeout:g} s)"
        except Exception as e:  # noqa: BLE001 - whatever went wrong, the archive must go on as without a flush
            error = str(e) or type(e).__name__
        if error:
            said = " ".join(error.split()).rstrip(".")
            self.warn(f"The memory flush before archiving {session.key} failed ({flush_model}: {said}); "
                      "archived without it.")

    async def _run(self, session: Session, stretch: list[Message], model: str) -> str | None:
        """The flush's own run; the error it ended with, or None."""
        note = f"memory/{self.now().date().isoformat()}.md"
        left_out = max(0, len(stretch) - FLUSH_MAX_MESSAGES)
        transcript = format_transcript(stretch[left_out:])
        if left_out:
            transcript = f"[{left_out} older messages of this stretch are left out]\n{transcript}"
        spec = RunSpec(
            system=render("prompts/flush.md", note=note), messages=[user(transcript)], tools=self._tools, tool_context=ToolContext(self.workspace), model=model,
            session=session.key, max_tokens=self.max_tokens, max_iterations=FLUSH_ITERATIONS,
        )

        def record(event: ev.Event) -> None:  # silent: only what it cost is kept
            if isinstance(event, ev.UsageRecorded):
                self.store.add_usage(session, UsageRecord.now(event.model, event.usage, "flush"))

        scope = current_turn.set(TurnScope(session.key))  # the commits name the session
        try:
            with working_as("flush", session.key):  # the ledger's kind; the caps still count the turn's
                result = await AgentRunner(self.providers.get(model), record).run(spec)
        finally:
            current_turn.reset(scope)
        return result.error

    @cached_property
    def _tools(self) -> ToolRegistry:
        """append_note, and read_file and edit_file held to memory/: built once, their schemas with them."""
        edit_file = writing_tools(self.on_write)[1]
        return ToolRegistry([self._append_note(), *(_in_memory(t, self.workspace) for t in (read_file, edit_file))])

    def _append_note(self) -> Tool:
        workspace, on_write, now = self.workspace, self.on_write, self.now

        @tool(name="append_note")
        def append_note(ctx: ToolContext, text: str) -> str:
            """Add notes to today's dated note (memory/YYYY-MM-DD.md), under a heading with the time; memory
            search finds them later.

            Args:
                text: The notes to add, as Markdown bullet points.
            """
            if not text.strip():
                raise ToolError("text is empty; give the notes to add, or add nothing.")
            moment = now()
            rel = f"memory/{moment.date().isoformat()}.md"
            entry = f"## {moment:%H:%M} · {current_turn.get().session_key or 'no session'}\n\n{text.strip()}\n"
            on_write(rel, "append_note", lambda: append_note_text(workspace, rel, entry))
            return f"Added {len(entry.splitlines())} lines to {rel}."

        return append_note


def local_now(timezone: str | None) -> datetime:
    """Now in the user's time zone (agents.defaults.timezone), else in this machine's: the day a note belongs to."""
    if timezone:
        try:
            return datetime.now(ZoneInfo(timezone))
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return datetime.now().astimezone()


def append_note_text(workspace: Path, rel: str, entry: str) -> None:
    """Append `entry` to the note at `rel` (created 0600), a blank line before it when the note has text, synced.
    A note that is a link, or has a second hard link, is refused: it may be a file outside the workspace."""
    folder = workspace / "memory"
    if folder.is_symlink():
        raise ToolError("memory/ is a link; notes are written only into a real memory/ folder.")
    folder.mkdir(mode=0o700, exist_ok=True)
    try:
        fd = os.open(workspace / rel, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise ToolError(f"Cannot write {rel}: {e.strerror or e}.") from None
    try:
        info = os.fstat(fd)
        if info.st_nlink > 1:
            raise ToolError(f"{rel} has {info.st_nlink} hard links; notes leave it alone.")
        if info.st_size:  # one blank line between the note's text and the new entry
            last = os.pread(fd, 2, info.st_size - min(2, info.st_size))
            entry = ("" if last.endswith(b"\n\n") else "\n" if last.endswith(b"\n") else "\n\n") + entry
        os.write(fd, entry.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _in_memory(inner: Tool, workspace: Path) -> Tool:
    """`inner` (a file tool with a `path`) refusing any path whose real location is outside memory/."""
    async def call(ctx: ToolContext, arguments: dict[str, Any]) -> str | ToolResult:
        path = arguments.get("path")
        if not isinstance(path, str) or not _inside_memory(workspace, path):
            raise ToolError(f"The memory flush reaches only files in memory/ (not {path!r}): "
                            "use memory/MEMORY.md or today's note.")
        return await inner.call(ctx, arguments)

    spec = inner.spec()
    return SchemaTool(inner.name, f"{inner.description} Only files in memory/.", spec.parameters, call,
                      inner.read_only)


def _inside_memory(workspace: Path, path: str) -> bool:
    candidate = Path(os.path.expanduser(path))
    real = Path(os.path.realpath(candidate if candidate.is_absolute() else workspace / candidate))
    return Path(os.path.realpath(workspace / "memory")) in real.parents


__all__ = ["FLUSH_MAX_TOKENS", "MemoryFlush", "append_note_text", "local_now"]
