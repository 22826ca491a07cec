"""Dream: folds new history.jsonl entries into long-term memory, one git commit per edit.

A run takes the entries after `memory/.dream_cursor` (a bounded batch, cut where the person whose chats they come
from changes: `memory/people.py`) and works in two phases on each part. A part from the owner's sessions is folded
into SOUL.md, USER.md, memory/MEMORY.md and skills as below; a part from anyone else's chats into their own file
alone, shown to both phases as USER.md, so nothing one person said reaches the owner's files or another's.

1. Analysis: one model call without tools, given the new entries and SOUL.md, USER.md and
   memory/MEMORY.md (each MEMORY.md line with its age from git), answering with findings.
2. Editing: an AgentRunner run whose only tools read and surgically edit those three files and
   create `skills/<name>/SKILL.md`. Edits land in an overlay, not on disk.

Only when phase 2 finishes are the edits checked against the files as they are now, then written
one by one, each as its own git commit; then the cursor advances. Any failure before that leaves
files and cursor untouched, so the batch is retried next time. So does an editing phase that made no
edit although the analysis listed changes, up to MAX_STALLS runs on the same batch; then the cursor
moves on and the run reports the findings it did not save. One Dream runs at a time per workspace
(a lock file), so cron, the scheduler and a manual `/dream` cannot collide.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from nanoagent.agent import events as ev
from nanoagent.agent.runner import AgentRunner, RunSpec
from nanoagent.channels.owners import NOBODY, OWNER, Owners
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import atomic_write, file_lock, uninterrupted
from nanoagent.memory.dream_tools import (
    Edit,
    EditKind,
    MemoryOverlay,
    dream_tools,
    read_text,
    taken_skill_names,
)
from nanoagent.memory.history import HistoryEntry, HistoryLog
from nanoagent.memory.people import file_of
from nanoagent.messages import truncate, user
from nanoagent.paths import MEMORY_FILES, PROMPT_FILES, is_memory_file
from nanoagent.providers.base import ChatRequest, Provider, ProviderError, complete_text
from nanoagent.spend import CapReached, CapStatus, Scope, current_scope
from nanoagent.templates import render
from nanoagent.tools import ToolContext, ToolError
from nanoagent.usage import Usage

if TYPE_CHECKING:
    from nanoagent.memory.gitlog import MemoryCommit, MemoryGit

log = logging.getLogger("nanoagent.dream")

FILE_CAP_CHARS = 30_000
ENTRY_CAP_CHARS = 6_000
JOURNAL_VERSION = 1
MAX_STALLS = 3  # runs on one batch whose editing phase made no edit, although the analysis listed changes


class DreamBusy(NanoagentError):
    pass


class DreamFailed(NanoagentError):
    def __init__(self, message: str, capped: CapStatus | None = None):
        super().__init__(message)
        self.capped = capped  # the spend cap that stopped a call (budget.dream, budget.daily...): not a failure


@dataclass
class DreamResult:
    entries: list[HistoryEntry]
    analysis: str
    edits: list[Edit] = field(default_factory=list)
    commits: list[MemoryCommit] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    dry_run: bool = False
    reply: str = ""
    failed_edits: int = 0  # edit calls the model made that were refused (it may have retried them)
    stalls: int = 0  # runs on this batch whose editing phase made no edit although the analysis listed changes
    moved_on: bool = False  # the stalls reached the bound: the cursor passed the batch anyway

    @property
    def cursor_range(self) -> tuple[int, int]:
        return self.entries[0].cursor, self.entries[-1].cursor


@dataclass
class Dream:
    workspace: Path
    history: HistoryLog
    git: MemoryGit
    provider: Provider
    model: str
    lock_path: Path
    journal_path: Path  # outside the workspace, where the agent's file tools cannot reach it
    stall_path: Path | None = None  # how many runs in a row the editing phase made no edit; None: not tracked
    batch_size: int = 20
    max_iterations: int = 30
    max_tokens: int = 4096
    sink: ev.EventSink = ev.discard
    owners: Owners = NOBODY  # whose entries are the owner's: they go to SOUL.md, USER.md, MEMORY.md and skills

    async def run(self, all_entries: bool = False, dry_run: bool = False) -> list[DreamResult]:
        """One batch, or with `all_entries` every batch until none is left. Empty list: nothing new."""
        scope = current_scope.set(Scope("dream", "dream"))  # budget.dream counts its calls
        try:
            return await self._run(all_entries, dry_run)
        finally:
            current_scope.reset(scope)

    async def _run(self, all_entries: bool, dry_run: bool) -> list[DreamResult]:
        results: list[DreamResult] = []
        busy = DreamBusy("Another Dream is already running for this workspace; this one did nothing. "
                         "Try again when it has finished.")
        with file_lock(self.lock_path, 0, busy):
            if not dry_run:  # git runs in a worker thread: other sessions' turns go on meanwhile
                await uninterrupted(asyncio.to_thread(self.git.ensure))
                await uninterrupted(asyncio.to_thread(self._resume))  # a Dream killed while writing left a journal: finish it
            # read once: the cost follows the new entries, not the history, and --all stays linear
            backlog = list(self.history.newest_first(after=self.history.dream_cursor))[::-1]
            if not all_entries or dry_run:
                backlog = backlog[:self.batch_size]
            for entries in by_person(backlog, self.batch_size, self.owners):
                results.append(await self._batch(entries, dry_run))
                if results[-1].stalls and not results[-1].moved_on:
                    break  # a kept batch comes first again: the next run tries it
        return results

    async def _batch(self, entries: list[HistoryEntry], dry_run: bool) -> DreamResult:
        if not dry_run:  # hand edits become the user's own commits before Dream touches files
            await uninterrupted(asyncio.to_thread(self.git.snapshot_user_edits))
        result = DreamResult(entries, "", dry_run=dry_run)
        self.sink(ev.Progress(f"dream: analysing {len(entries)} history entr{'y' if len(entries) == 1 else 'ies'}"))
        person = self.owners.person_of(entries[0].session)
        result.analysis = await self._analyze(entries, result, person)
        if result.analysis.strip().upper() != "NOTHING":
            await self._edit(result, person)
            if not result.edits and not dry_run and self.stall_path is not None:
                result.stalls = await uninterrupted(asyncio.to_thread(Stalls.count, self.stall_path, entries[0].cursor))
                if result.stalls < MAX_STALLS:  # the findings were not saved: keep the entries for next time
                    return result
                result.moved_on = True
                log.warning("Dream moved past history entries %d-%d: the editing phase made no edit in %d runs "
                            "although the analysis listed changes", *result.cursor_range, result.stalls)
        if not dry_run:
            self.sink(ev.Progress(f"dream: saving {len(result.edits)} edit{'' if len(result.edits) == 1 else 's'}"))
            result.commits = await uninterrupted(asyncio.to_thread(self._write, result.edits, entries[-1].cursor))
            if self.stall_path is not None:
                self.stall_path.unlink(missing_ok=True)
        return result

    async def _analyze(self, entries: list[HistoryEntry], result: DreamResult, person: str) -> str:
        # reads line ages with git blame
        analysis_input = await asyncio.to_thread(self._analysis_input, entries, person)
        system = render("prompts/dream_analyze.md") if person == OWNER else render(
            "prompts/dream_analyze_person.md", person=person)
        request = ChatRequest(model=self.model, system=system,
                              messages=[user(analysis_input)],
                              max_tokens=self.max_tokens)
        try:
            text, usage, model = await complete_text(self.provider, request)
        except ProviderError as e:
            raise DreamFailed(f"Dream's analysis failed: {e.message}. Nothing changed; "
                              "the same entries are tried next time.",
                              e.cap if isinstance(e, CapReached) else None) from None
        result.usage = result.usage + usage
        self.sink(ev.UsageRecorded(model, usage))
        if not text.strip():
            raise DreamFailed("Dream's analysis came back empty. Nothing changed; the same entries are tried next time.")
        return text.strip()

    def _shown(self, event: ev.Event) -> None:
        """The editing phase's events that concern whoever watches: its tool calls, usage, retries and notices.
        Its own text and end are not a reply of the session Dream runs from."""
        if not isinstance(event, ev.TextDelta | ev.ThinkingDelta | ev.MessageAdded | ev.TurnEnded):
            self.sink(event)

    def _analysis_input(self, entries: list[HistoryEntry], person: str = OWNER) -> str:
        first, last = entries[0].cursor, entries[-1].cursor
        parts = [f"# New history entries (cursors {first} to {last})"]
        for e in entries:
            shown = e.shown(truncate(e.content, ENTRY_CAP_CHARS), "memory/history.jsonl")  # data, unless trusted
            parts.append(f"\n[cursor {e.cursor} · {e.timestamp} · {e.session}]\n{shown}")
        if person != OWNER:  # this person's file alone: nothing of the owner's or anyone else's to copy from
            text = read_text(self.workspace / file_of(person)) or "(empty)"
            parts.append(f"\n# USER.md (what is known about {person})\n\n{truncate(text, FILE_CAP_CHARS)}")
            return "\n".join(parts)
        for rel in ("SOUL.md", "USER.md"):
            parts.append(f"\n# {rel}\n\n{truncate(read_text(self.workspace / rel) or '(missing)', FILE_CAP_CHARS)}")
        parts.append("\n# memory/MEMORY.md (each line prefixed with its age)\n")
        parts.append(truncate(self._aged_memory(), FILE_CAP_CHARS))
        skills = sorted(p.parent.name for p in (self.workspace / "skills").glob("*/SKILL.md"))
        parts.append("\n# Existing workspace skills\n\n" + (", ".join(skills) or "(none)"))
        return "\n".join(parts)

    def _aged_memory(self) -> str:
        try:
            lines = self.git.line_ages("memory/MEMORY.md")
        except NanoagentError:
            lines = [(line, None) for line in (read_text(self.workspace / "memory/MEMORY.md") or "").splitlines()]
        return "\n".join(f"[{'new' if age is None else f'{age}d'}] {line}" for line, age in lines) or "(empty)"

    async def _edit(self, result: DreamResult, person: str = OWNER) -> None:
        own = "" if person == OWNER else file_of(person)
        overlay = MemoryOverlay(self.workspace, taken_skill_names(self.workspace), own)
        shown = {"USER.md": own} if own else {rel: rel for rel in MEMORY_FILES}
        files = "\n".join(f"\n# {name}\n\n{truncate(read_text(self.workspace / rel) or '(missing)', FILE_CAP_CHARS)}"
                          for name, rel in shown.items())
        spec = RunSpec(
            system=render("prompts/dream_edit.md") if not own else render("prompts/dream_edit_person.md",
                                                                          person=person),
            messages=[user(f"# Findings\n\n{result.analysis}\n\n# Current files\n{files}")],
            tools=dream_tools(overlay), tool_context=ToolContext(workspace=self.workspace),
            model=self.model, max_tokens=self.max_tokens, max_iterations=self.max_iterations,
        )
        self.sink(ev.Progress("dream: editing memory"))
        run = await AgentRunner(self.provider, self._shown).run(spec)
        result.usage = result.usage + run.usage
        if run.error is not None:
            raise DreamFailed(f"Dream's editing failed: {run.error}. Nothing changed; "
                              "the same entries are tried next time.", run.capped)
        if run.stop is ev.StopReason.MAX_ITERATIONS:
            raise DreamFailed(f"Dream's editing did not finish within {self.max_iterations} steps "
                              "(memory.dreamMaxIterations). Nothing changed; the same entries are tried next time.")
        failed = sum(1 for call in run.tool_calls if not call.ok and call.name != "read_file")
        if failed and not overlay.edits:  # the findings were lost, not applied: keep the entries for next time
            raise DreamFailed(f"Dream's editing made no change: all {failed} edit(s) failed. Nothing changed; "
                              "the same entries are tried next time.")
        result.edits, result.reply, result.failed_edits = overlay.edits, run.reply, failed

    def _write(self, edits: list[Edit], cursor: int) -> list[MemoryCommit]:
        """Check every edit against the files as they are now, then write and commit them one by one.

        A journal records each edit with the file's content before and after it, so a Dream killed part
        way is finished by the next one (`_resume`) instead of repeating edits or passing them off as the
        user's."""
        self.git.snapshot_user_edits()  # a hand edit saved while Dream worked stays the user's own commit
        texts: dict[str, str | None] = {}
        steps = []
        for edit in edits:
            before = texts[edit.path] if edit.path in texts else read_text(self.workspace / edit.path)
            try:
                texts[edit.path] = edit.apply(before)
            except ToolError as e:
                raise DreamFailed(f"{edit.path} changed while Dream was working ({e}). Nothing changed; "
                                  "run Dream again.") from None
            steps.append(JournalStep(edit, _digest(before), _digest(texts[edit.path])))
        head = self.git.log(1)
        journal = Journal(cursor, steps, head=head[0].sha if head else "")
        journal.save(self.journal_path)
        try:
            return self._play(journal)
        except ToolError as e:  # a file changed between two of its steps (another process editing it)
            self.journal_path.unlink(missing_ok=True)
            raise DreamFailed(f"Dream stopped part way: {e}. The edits made so far are committed; run Dream "
                              "again for the rest.") from None

    def _play(self, journal: Journal, resuming: bool = False) -> list[MemoryCommit]:
        """Write and commit the journal's remaining steps; ToolError when a file matches neither side of a step."""
        commits = []
        for index in range(journal.done, len(journal.steps)):
            step = journal.steps[index]
            path = self.workspace / step.edit.path
            if any(p.is_symlink() for p in (path, *path.parents) if self.workspace in p.parents):
                raise ToolError(f"{step.edit.path} became a link")
            current = _digest(read_text(path))
            if resuming and self._committed_since(journal.head, step.edit):
                pass  # committed before the crash: what the file holds now (a restore, a hand edit) stands
            elif current in (step.before, step.after):
                if current == step.before:
                    atomic_write(path, step.edit.apply(read_text(path)))
                commit = self.git.commit([step.edit.path], f"{step.edit.path}: {step.edit.summary}")
                if commit is not None:
                    commits.append(commit)
            else:  # changed since by someone else: this step no longer fits
                raise ToolError(f"{step.edit.path} changed while Dream was writing")
            journal.done = index + 1
            journal.save(self.journal_path)
        cursor = min(journal.cursor, self.history.cursor)  # never past what history holds
        self.history.set_dream_cursor(max(self.history.dream_cursor, cursor))
        self.journal_path.unlink(missing_ok=True)
        return commits

    def _committed_since(self, head: str, edit: Edit) -> bool:
        """Whether this edit was committed after `head`: then a file back at its old content means the edit was
        undone since (a restore), not that it was never written, and it must not be made again."""
        for commit in self.git.log(200):
            if commit.sha == head:
                return False
            if commit.author == "dream" and commit.summary.startswith(f"{edit.path}: {edit.summary}"):
                return True
        return False

    def _resume(self) -> None:
        """Finish the batch a killed Dream was writing. If a file changed since, or the journal is damaged,
        drop the rest and leave the cursor: the entries are looked at again, against the files as they are."""
        journal = Journal.load(self.journal_path)
        if journal is None:
            return
        try:
            self._play(journal, resuming=True)
        except ToolError:
            self.journal_path.unlink(missing_ok=True)


class Stalls:
    """Runs in a row on the batch starting at one cursor whose editing phase made no edit although the analysis
    listed changes. Kept outside the workspace, beside the journal; a damaged file counts as none."""

    @staticmethod
    def count(path: Path, first: int) -> int:
        """Record one more such run on the batch starting at `first`; returns how many there have been."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            runs = int(data["runs"]) if data.get("first") == first else 0
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            runs = 0
        runs = max(runs, 0) + 1
        atomic_write(path, json.dumps({"version": 1, "first": first, "runs": runs}), mode=0o600)
        return runs


@dataclass
class JournalStep:
    edit: Edit
    before: str  # sha256 of the file before the edit ("" when it did not exist)
    after: str  # and after it


@dataclass
class Journal:
    """Dream's write-ahead record of one batch's edits: `done` of them are written and committed."""

    cursor: int
    steps: list[JournalStep]
    done: int = 0
    head: str = ""  # the memory history's HEAD when the journal was written

    def save(self, path: Path) -> None:
        data = {"version": JOURNAL_VERSION, "cursor": self.cursor, "done": self.done, "head": self.head,
                "steps": [{**asdict(s.edit), "before": s.before, "after": s.after} for s in self.steps]}
        atomic_write(path, json.dumps(data, ensure_ascii=False), mode=0o600)

    @classmethod
    def load(cls, path: Path) -> Journal | None:
        """The journal, or None when there is none; a damaged one, or one naming a file Dream may not
        write, is removed (it lives outside the workspace, but is never trusted blindly)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            steps = [JournalStep(Edit(str(s["path"]), str(s["old_text"]), str(s["new_text"]), str(s["summary"]),
                                      EditKind(s["kind"])), str(s["before"]), str(s["after"])) for s in data["steps"]]
            journal = cls(int(data["cursor"]), steps, int(data["done"]), str(data.get("head", "")))
            if (data.get("version") != JOURNAL_VERSION or not 0 <= journal.done <= len(steps)
                    or not all(_writable(s.edit.path) for s in steps)):
                raise ValueError("unexpected journal")
            return journal
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, AttributeError):
            path.unlink(missing_ok=True)
            return None


def by_person(entries: list[HistoryEntry], size: int, owners: Owners = NOBODY) -> list[list[HistoryEntry]]:
    """`entries` in order, cut into batches of at most `size` whose entries all come from one person's chats: each
    batch is edited into that person's files alone (the owner's: SOUL.md, USER.md, MEMORY.md, skills)."""
    batches: list[list[HistoryEntry]] = []
    for entry in entries:
        if batches and len(batches[-1]) < size and owners.person_of(batches[-1][0].session) == owners.person_of(
                entry.session):
            batches[-1].append(entry)
        else:
            batches.append([entry])
    return batches


def _writable(rel: str) -> bool:
    return not os.path.isabs(rel) and os.path.normpath(rel) == rel and is_memory_file(rel) and rel not in PROMPT_FILES


def _digest(text: str | None) -> str:
    return "" if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_header(what: str, now: datetime | None = None) -> str:
    """The line each unattended run starts its log with."""
    return f"=== {what} {(now or datetime.now().astimezone()).isoformat(timespec='seconds')} ==="


def describe(results: list[DreamResult], cursor: int) -> str:
    """What a Dream run did (or, dry, would do), for the terminal and for /dream."""
    if not results:
        return f"Nothing new to dream about: every history entry up to cursor {cursor} is processed."
    lines: list[str] = []
    for result in results:
        first, last = result.cursor_range
        lines.append(f"Entries {first}-{last} ({len(result.entries)}):")
        if result.dry_run:
            lines += ["", "Analysis:", result.analysis, ""]
            if not result.edits:
                lines.append("No edits would be made.")
            for edit in result.edits:
                lines.append(f"would {edit.kind} {edit.path}: {edit.summary}")
                if edit.old_text:
                    lines += [f"  - {line}" for line in edit.old_text.splitlines()]
                lines += [f"  + {line}" for line in edit.new_text.splitlines()[:40]]
            lines.append("(dry run: nothing was changed and the cursor did not move)")
        elif result.moved_on:
            lines += [f"  The editing phase made no edit in {result.stalls} runs although the analysis listed "
                      "changes; moving on past these entries. The findings it did not save:", "",
                      result.analysis, ""]
        elif result.stalls:
            lines.append(f"  The analysis listed changes but the editing phase made no edit; the cursor stays, so "
                         f"these entries are tried again next run (try {result.stalls} of {MAX_STALLS}, then Dream "
                         "moves on).")
        elif result.commits:
            lines += [f"  {c.short} {c.summary}" for c in result.commits]
        else:
            lines.append("  no changes to long-term memory")
    if not results[-1].dry_run and any(result.commits for result in results):
        lines.append("Undo any edit with `nanoagent dream-restore SHA`; see them all with `nanoagent dream-log`.")
    return "\n".join(lines)
