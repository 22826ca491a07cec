"""Dream: folds new history.jsonl entries into long-term memory, one git commit per edit.

A run takes the entries after `memory/.dream_cursor` (a bounded batch) and works in two phases:

1. Analysis: one model call without tools, given the new entries and SOUL.md, USER.md and
   memory/MEMORY.md (each MEMORY.md line with its age from git), answering with findings.
2. Editing: an AgentRunner run whose only tools read and surgically edit those three files and
   create `skills/<name>/SKILL.md`. Edits land in an overlay, not on disk.

Only when phase 2 finishes are the edits checked against the files as they are now, then written
one by one, each as its own git commit; then the cursor advances. Any failure before that leaves
files and cursor untouched, so the batch is retried next time. One Dream runs at a time per
workspace (a lock file), so cron and a manual `/dream` cannot collide.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nanoagent.agent import events as ev
from nanoagent.agent.runner import AgentRunner, RunSpec
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import atomic_write
from nanoagent.memory.history import HistoryEntry, HistoryLog
from nanoagent.providers.base import ChatRequest, Provider, ProviderError, Usage, complete_text
from nanoagent.templates import render
from nanoagent.tools import ToolContext, ToolError, ToolRegistry, tool

if TYPE_CHECKING:
    from nanoagent.memory.gitlog import MemoryCommit, MemoryGit

MEMORY_FILES = ("SOUL.md", "USER.md", "memory/MEMORY.md")
SKILL_PATH = re.compile(r"^skills/([a-z0-9][a-z0-9-]{0,63})/SKILL\.md$")
FILE_CAP_CHARS = 30_000
ENTRY_CAP_CHARS = 6_000


class DreamBusy(NanoagentError):
    pass


class DreamFailed(NanoagentError):
    pass


@dataclass(frozen=True)
class Edit:
    path: str
    old_text: str  # "" appends `new_text`; for a new skill file, the whole content
    new_text: str
    summary: str
    kind: str  # "edit" | "append" | "create"

    def apply(self, text: str | None) -> str:
        if self.kind == "create":
            if text is not None:
                raise ToolError(f"{self.path} already exists; change it with edit_file.")
            return self.new_text
        if text is None:
            raise ToolError(f"{self.path} does not exist.")
        if self.kind == "append":
            return text + ("" if text.endswith("\n") or not text else "\n") + self.new_text.strip("\n") + "\n"
        count = text.count(self.old_text) if self.old_text else 0
        if count != 1:
            where = "was not found" if count == 0 else f"occurs {count} times"
            raise ToolError(f"old_text {where} in {self.path}; read the file and copy a unique piece exactly.")
        return text.replace(self.old_text, self.new_text, 1)


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

    @property
    def cursor_range(self) -> tuple[int, int]:
        return self.entries[0].cursor, self.entries[-1].cursor


class MemoryOverlay:
    """The memory files as the editing phase sees them: read from disk, changed only in memory."""

    def __init__(self, workspace: Path, builtin_skills: frozenset[str] = frozenset()):
        self.workspace = workspace
        self.builtin_skills = builtin_skills
        self.edits: list[Edit] = []
        self._texts: dict[str, str | None] = {}

    def check(self, path: str, writing: bool = False) -> str:
        """The workspace-relative path, if Dream may read (or with `writing`, change) it; else ToolError.

        Dream changes SOUL.md, USER.md and memory/MEMORY.md, and skills it creates in this run; it may read
        existing skills but never change the user's own or replace a built-in one."""
        rel = os.path.normpath(path.strip())
        skill = SKILL_PATH.match(rel)
        if rel not in MEMORY_FILES and not skill:
            raise ToolError(f"Dream may only touch {', '.join(MEMORY_FILES)} and skills/<name>/SKILL.md; "
                            f"'{path}' is refused.")
        root = os.path.realpath(self.workspace)
        if not os.path.realpath(self.workspace / rel).startswith(root + os.sep):
            raise ToolError(f"'{path}' is a link to a place outside the workspace; Dream leaves it alone.")
        if writing and skill and not self.created(rel):
            raise ToolError(f"{rel} is an existing skill; Dream only creates new skills (create_skill).")
        return rel

    def created(self, rel: str) -> bool:
        return any(e.path == rel and e.kind == "create" for e in self.edits)

    def check_new_skill(self, name: str) -> str:
        rel = self.check(f"skills/{name}/SKILL.md")
        if name in self.builtin_skills:
            raise ToolError(f"'{name}' is a built-in skill; choose another name for a new skill.")
        if self.read(rel) is not None:
            raise ToolError(f"The skill '{name}' already exists; Dream only creates new skills.")
        return rel

    def read(self, rel: str) -> str | None:
        if rel not in self._texts:
            self._texts[rel] = read_text(self.workspace / rel)
        return self._texts[rel]

    def apply(self, edit: Edit) -> None:
        if edit.kind == "edit" and edit.old_text == edit.new_text:
            raise ToolError("old_text and new_text are identical: a no-op edit. Send the change you mean.")
        self._texts[edit.path] = edit.apply(self.read(edit.path))
        self.edits.append(edit)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return None


def dream_tools(overlay: MemoryOverlay) -> ToolRegistry:
    """The editing phase's only tools. Each path is checked against the allowed memory files."""

    @tool(read_only=True)
    def read_file(ctx: ToolContext, path: str) -> str:
        """Read one of the memory files, with line numbers.

        Args:
            path: SOUL.md, USER.md, memory/MEMORY.md or skills/<name>/SKILL.md.
        """
        rel = overlay.check(path)
        text = overlay.read(rel)
        if text is None:
            raise ToolError(f"{rel} does not exist yet.")
        return "\n".join(f"{n:>5}\t{line}" for n, line in enumerate(text.splitlines(), 1)) or "(empty file)"

    @tool()
    def edit_file(ctx: ToolContext, path: str, old_text: str, new_text: str, summary: str) -> str:
        """Replace one exact piece of text in a memory file (it must occur exactly once). Use it to correct or
        remove a line; new_text may be empty to delete.

        Args:
            path: SOUL.md, USER.md, memory/MEMORY.md or skills/<name>/SKILL.md.
            old_text: The exact text to replace, copied from the file.
            new_text: The text to put in its place.
            summary: What this edit changes, under 70 characters, for the memory log.
        """
        rel = overlay.check(path, writing=True)
        overlay.apply(Edit(rel, old_text, new_text, _summary(summary, "edit"), "edit"))
        return f"Edited {rel}."

    @tool()
    def append_to_file(ctx: ToolContext, path: str, text: str, summary: str) -> str:
        """Add lines at the end of a memory file.

        Args:
            path: SOUL.md, USER.md or memory/MEMORY.md.
            text: The lines to add, e.g. "- Prefers tea over coffee".
            summary: What this edit adds, under 70 characters, for the memory log.
        """
        rel = overlay.check(path, writing=True)
        if not text.strip():
            raise ToolError("text is empty: nothing to add.")
        overlay.apply(Edit(rel, "", text, _summary(summary, "add"), "append"))
        return f"Appended to {rel}."

    @tool()
    def create_skill(ctx: ToolContext, name: str, content: str, summary: str) -> str:
        """Create a new skill at skills/<name>/SKILL.md.

        Args:
            name: Lowercase letters, digits and dashes, e.g. "weekly-report".
            content: The whole SKILL.md: YAML frontmatter with name and description, then instructions.
            summary: Why this skill was created, under 70 characters, for the memory log.
        """
        rel = overlay.check_new_skill(name)
        if not content.lstrip().startswith("---"):
            raise ToolError("A SKILL.md starts with YAML frontmatter (---, name:, description:, ---).")
        overlay.apply(Edit(rel, "", content.rstrip("\n") + "\n", _summary(summary, "new skill"), "create"))
        return f"Created {rel}."

    return ToolRegistry([read_file, edit_file, append_to_file, create_skill])


def _summary(text: str, fallback: str) -> str:
    line = " ".join(text.split())
    return (line[:67] + "...") if len(line) > 70 else (line or fallback)


@dataclass
class Dream:
    workspace: Path
    history: HistoryLog
    git: MemoryGit
    provider: Provider
    model: str
    lock_path: Path
    batch_size: int = 20
    max_iterations: int = 30
    max_tokens: int = 4096
    builtin_skills: frozenset[str] = frozenset()
    sink: ev.EventSink = field(default=lambda event: None)

    async def run(self, all_entries: bool = False, dry_run: bool = False) -> list[DreamResult]:
        """One batch, or with `all_entries` every batch until none is left. Empty list: nothing new."""
        results: list[DreamResult] = []
        with self._exclusive():
            while True:
                result = await self._batch(dry_run)
                if result is None:
                    break
                results.append(result)
                if not all_entries or dry_run:
                    break
        return results

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DreamBusy("Another Dream is already running for this workspace; "
                                "this one did nothing. Try again when it has finished.") from None
            yield
        finally:
            os.close(fd)

    async def _batch(self, dry_run: bool) -> DreamResult | None:
        if not dry_run:
            self.git.ensure()
            self._resume()  # a Dream killed while writing left a journal: finish that batch first
        undreamed = list(self.history.newest_first(after=self.history.dream_cursor))  # cost: the new entries only
        entries = undreamed[::-1][:self.batch_size]
        if not entries:
            return None
        if not dry_run:
            self.git.snapshot_user_edits()  # hand edits become the user's own commits before Dream touches files
        result = DreamResult(entries, "", dry_run=dry_run)
        result.analysis = await self._analyze(entries, result)
        if result.analysis.strip().upper() != "NOTHING":
            await self._edit(result)
        if not dry_run:
            result.commits = self._write(result.edits, entries[-1].cursor)
        return result

    async def _analyze(self, entries: list[HistoryEntry], result: DreamResult) -> str:
        request = ChatRequest(model=self.model, system=render("prompts/dream_analyze.md"),
                              messages=[{"role": "user", "content": self._analysis_input(entries)}],
                              max_tokens=self.max_tokens)
        try:
            text, usage, model = await complete_text(self.provider, request)
        except ProviderError as e:
            raise DreamFailed(f"Dream's analysis failed: {e.message}. Nothing changed; "
                              "the same entries are tried next time.") from None
        result.usage = result.usage + usage
        self.sink(ev.UsageRecorded(model, usage))
        if not text.strip():
            raise DreamFailed("Dream's analysis came back empty. Nothing changed; the same entries are tried next time.")
        return text.strip()

    def _analysis_input(self, entries: list[HistoryEntry]) -> str:
        first, last = entries[0].cursor, entries[-1].cursor
        parts = [f"# New history entries (cursors {first} to {last})"]
        for e in entries:
            raw = " (raw excerpt)" if e.raw else ""
            parts.append(f"\n[cursor {e.cursor} · {e.timestamp} · {e.session}{raw}]\n{_cap(e.content, ENTRY_CAP_CHARS)}")
        for rel in ("SOUL.md", "USER.md"):
            parts.append(f"\n# {rel}\n\n{_cap(read_text(self.workspace / rel) or '(missing)', FILE_CAP_CHARS)}")
        parts.append("\n# memory/MEMORY.md (each line prefixed with its age)\n")
        parts.append(_cap(self._aged_memory(), FILE_CAP_CHARS))
        skills = sorted(p.parent.name for p in (self.workspace / "skills").glob("*/SKILL.md"))
        parts.append("\n# Existing workspace skills\n\n" + (", ".join(skills) or "(none)"))
        return "\n".join(parts)

    def _aged_memory(self) -> str:
        try:
            lines = self.git.line_ages("memory/MEMORY.md")
        except NanoagentError:
            lines = [(line, None) for line in (read_text(self.workspace / "memory/MEMORY.md") or "").splitlines()]
        return "\n".join(f"[{'new' if age is None else f'{age}d'}] {line}" for line, age in lines) or "(empty)"

    async def _edit(self, result: DreamResult) -> None:
        overlay = MemoryOverlay(self.workspace, self.builtin_skills)
        files = "\n".join(f"\n# {rel}\n\n{_cap(read_text(self.workspace / rel) or '(missing)', FILE_CAP_CHARS)}"
                          for rel in MEMORY_FILES)
        spec = RunSpec(
            system=render("prompts/dream_edit.md"),
            messages=[{"role": "user", "content": f"# Findings\n\n{result.analysis}\n\n# Current files\n{files}"}],
            tools=dream_tools(overlay), tool_context=ToolContext(workspace=self.workspace),
            model=self.model, max_tokens=self.max_tokens, max_iterations=self.max_iterations,
        )
        run = await AgentRunner(self.provider, self.sink).run(spec)
        result.usage = result.usage + run.usage
        if run.error is not None:
            raise DreamFailed(f"Dream's editing failed: {run.error}. Nothing changed; "
                              "the same entries are tried next time.")
        if run.stop is ev.StopReason.MAX_ITERATIONS:
            raise DreamFailed(f"Dream's editing did not finish within {self.max_iterations} steps "
                              "(memory.dreamMaxIterations). Nothing changed; the same entries are tried next time.")
        failed = sum(1 for call in run.tool_calls if not call.ok and call.name != "read_file")
        if failed and not overlay.edits:  # the findings were lost, not applied: keep the entries for next time
            raise DreamFailed(f"Dream's editing made no change: all {failed} edit(s) failed. Nothing changed; "
                              "the same entries are tried next time.")
        result.edits, result.reply, result.failed_edits = overlay.edits, run.reply, failed

    @property
    def journal_path(self) -> Path:
        return self.workspace / "memory" / ".dream_pending.json"

    def _write(self, edits: list[Edit], cursor: int) -> list[MemoryCommit]:
        """Check every edit against the files as they are now, then write and commit them one by one.

        A journal lists the edits with the content each leaves behind, so a Dream killed part way is
        finished by the next one (`_resume`) instead of repeating edits or passing them off as the user's."""
        self.git.snapshot_user_edits()  # a hand edit saved while Dream worked stays the user's own commit
        texts: dict[str, str | None] = {}
        steps = []
        for edit in edits:
            current = texts[edit.path] if edit.path in texts else read_text(self.workspace / edit.path)
            try:
                texts[edit.path] = edit.apply(current)
            except ToolError as e:
                raise DreamFailed(f"{edit.path} changed while Dream was working ({e}). Nothing changed; "
                                  "run Dream again.") from None
            steps.append({**dataclasses.asdict(edit), "after": _digest(texts[edit.path])})
        journal = {"version": 1, "cursor": cursor, "edits": steps, "done": 0}
        atomic_write(self.journal_path, json.dumps(journal, ensure_ascii=False))
        return self._play(journal)

    def _play(self, journal: dict[str, Any]) -> list[MemoryCommit]:
        commits = []
        for index in range(journal["done"], len(journal["edits"])):
            step = journal["edits"][index]
            edit = Edit(step["path"], step["old_text"], step["new_text"], step["summary"], step["kind"])
            path = self.workspace / edit.path
            current = read_text(path)
            if _digest(current) != step["after"]:  # not written yet (or killed before the write)
                after = edit.apply(current)
                target = Path(os.path.realpath(path))  # a link inside the workspace stays a link
                atomic_write(target, after)
            commit = self.git.commit([edit.path], f"{edit.path}: {edit.summary}")
            if commit is not None:
                commits.append(commit)
            journal["done"] = index + 1
            atomic_write(self.journal_path, json.dumps(journal, ensure_ascii=False))
        self.history.set_dream_cursor(max(self.history.dream_cursor, journal["cursor"]))
        self.journal_path.unlink(missing_ok=True)
        return commits

    def _resume(self) -> None:
        """Finish the batch a killed Dream was writing; if its edits no longer fit the files, drop the rest
        and leave the cursor, so the entries are looked at again."""
        try:
            journal = json.loads(self.journal_path.read_text(encoding="utf-8"))
            journal["edits"], journal["done"], journal["cursor"]  # noqa: B018 - the shape check
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError):
            self.journal_path.unlink(missing_ok=True)
            return
        try:
            self._play(journal)
        except ToolError:
            self.journal_path.unlink(missing_ok=True)


def _digest(text: str | None) -> str:
    return "" if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit:,} more characters cut ...]"


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
        elif result.commits:
            lines += [f"  {c.short} {c.summary}" for c in result.commits]
        else:
            lines.append("  no changes to long-term memory")
    if not results[-1].dry_run:
        lines.append("Undo any edit with `nanoagent dream-restore SHA`; see them all with `nanoagent dream-log`.")
    return "\n".join(lines)
