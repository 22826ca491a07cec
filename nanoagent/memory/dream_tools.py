"""The tools of Dream's editing phase, fenced to the long-term memory files.

Edits land in a `MemoryOverlay`, not on disk: Dream writes them only once the whole phase has
finished (see dream.py). Dream may change SOUL.md, USER.md and memory/MEMORY.md, and create new
skills; it may read existing skills but never change one the user wrote or shadow a built-in one,
and it leaves links alone (git would record the link, not the text). A skill it creates is never `always`.
A run over the chats of someone other than the owner (`person_file`) touches that person's file alone, which
its tools call USER.md, so nothing said there reaches the owner's files or anyone else's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from nanoagent.paths import MEMORY_FILES, PROMPT_FILES, is_dated_note, is_memory_file, is_person_file
from nanoagent.skills import SkillError, SkillsLoader, parse_skill_text
from nanoagent.tools import Tool, ToolContext, ToolError, ToolRegistry, tool

NEW_SKILL = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


class EditKind(StrEnum):
    EDIT = "edit"  # replace one exact piece of text
    APPEND = "append"  # add lines at the end
    CREATE = "create"  # a new skill file


@dataclass(frozen=True)
class Edit:
    path: str
    old_text: str  # the text replaced (EDIT only)
    new_text: str  # the replacement, the lines appended, or a new file's whole content
    summary: str
    kind: EditKind

    def apply(self, text: str | None) -> str:
        if self.kind is EditKind.CREATE:
            if text is not None:
                raise ToolError(f"{self.path} already exists; change it with edit_file.")
            return self.new_text
        if text is None:
            if self.kind is not EditKind.APPEND or not is_person_file(self.path):
                raise ToolError(f"{self.path} does not exist.")
            text = ""  # a person's first facts start their file
        if self.kind is EditKind.APPEND:
            return text + ("" if text.endswith("\n") or not text else "\n") + self.new_text.strip("\n") + "\n"
        count = text.count(self.old_text) if self.old_text else 0
        if count != 1:
            where = "was not found" if count == 0 else f"occurs {count} times"
            raise ToolError(f"old_text {where} in {self.path}; read the file and copy a unique piece exactly.")
        return text.replace(self.old_text, self.new_text, 1)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return None


class MemoryOverlay:
    """The memory files as the editing phase sees them: read from disk, changed only in memory."""

    def __init__(self, workspace: Path, taken_skill_names: frozenset[str] = frozenset(), person_file: str = ""):
        self.workspace = workspace
        self.taken_skill_names = taken_skill_names  # built-in and workspace skills, by frontmatter name
        self.person_file = person_file  # "": the owner's run; else the one file this run may touch, as USER.md
        self.edits: list[Edit] = []
        self._texts: dict[str, str | None] = {}

    def check(self, path: str, writing: bool = False) -> str:
        """The workspace-relative path if Dream may read it (or with `writing`, change it); else ToolError."""
        rel = os.path.normpath(path.strip())
        if self.person_file:
            if rel not in ("USER.md", self.person_file):
                raise ToolError(f"This run keeps what one person said in their own file, USER.md; '{path}' is "
                                "refused.")
            rel = self.person_file
        elif not is_memory_file(rel) or is_person_file(rel) or rel in PROMPT_FILES:  # the owner's instructions
            raise ToolError(f"Dream may only touch {', '.join(MEMORY_FILES)} and skills/<name>/SKILL.md; "
                            f"'{path}' is refused.")
        if self._linked(rel):
            raise ToolError(f"'{rel}' is a link; Dream only edits regular files (git would record the link).")
        if writing and is_dated_note(rel):
            raise ToolError(f"{rel} is a dated note the agent wrote; Dream reads it, and keeps what lasts in "
                            "memory/MEMORY.md.")
        if writing and rel not in (*MEMORY_FILES, self.person_file) and not self.created(rel):
            raise ToolError(f"{rel} is an existing skill; Dream only creates new skills (create_skill).")
        return rel

    def _linked(self, rel: str) -> bool:
        path = self.workspace
        for part in Path(rel).parts:
            path = path / part
            if path.is_symlink():
                return True
        return False

    def created(self, rel: str) -> bool:
        return any(e.path == rel and e.kind is EditKind.CREATE for e in self.edits)

    def read(self, rel: str) -> str | None:
        if rel not in self._texts:
            self._texts[rel] = read_text(self.workspace / rel)
        return self._texts[rel]

    def apply(self, edit: Edit) -> None:
        if edit.kind is EditKind.EDIT and edit.old_text == edit.new_text:
            raise ToolError("old_text and new_text are identical: a no-op edit. Send the change you mean.")
        text = edit.apply(self.read(edit.path))
        if edit.path not in (*MEMORY_FILES, self.person_file):
            self._check_skill(edit.path, text)
        self._texts[edit.path] = text
        self.edits.append(edit)

    def _check_skill(self, rel: str, text: str) -> None:
        """A skill Dream writes must parse, and be named as its folder, a name no other skill has."""
        folder = rel.split("/")[1]
        try:
            skill = parse_skill_text(text, self.workspace / rel, "workspace")
        except SkillError as e:
            raise ToolError(f"That SKILL.md would not load: {e}.") from None
        if skill.name != folder:
            raise ToolError(f"The skill's frontmatter name '{skill.name}' must match its folder '{folder}'.")
        if skill.name in self.taken_skill_names:
            raise ToolError(f"A skill named '{skill.name}' exists already (built in or yours); choose another name.")
        if skill.always:  # only the user decides what loads into every prompt (`nanoagent skills trust`)
            raise ToolError("Skills Dream creates are never loaded into every prompt: remove `always` from the "
                            "frontmatter; the skill is listed by name and description and read when needed.")


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
            path: SOUL.md, USER.md or memory/MEMORY.md (or a skill you created in this run).
            old_text: The exact text to replace, copied from the file.
            new_text: The text to put in its place.
            summary: What this edit changes, under 70 characters, for the memory log.
        """
        rel = overlay.check(path, writing=True)
        overlay.apply(Edit(rel, old_text, new_text, _summary(summary, "edit"), EditKind.EDIT))
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
        overlay.apply(Edit(rel, "", text, _summary(summary, "add"), EditKind.APPEND))
        return f"Appended to {rel}."

    @tool()
    def create_skill(ctx: ToolContext, name: str, content: str, summary: str) -> str:
        """Create a new skill at skills/<name>/SKILL.md.

        Args:
            name: Lowercase letters, digits and dashes, e.g. "weekly-report"; also the frontmatter name.
            content: The whole SKILL.md: YAML frontmatter with name and description, then instructions.
            summary: Why this skill was created, under 70 characters, for the memory log.
        """
        if not NEW_SKILL.match(name):
            raise ToolError(f"'{name}' is not a skill name: use lowercase letters, digits and dashes.")
        rel = overlay.check(f"skills/{name}/SKILL.md")
        overlay.apply(Edit(rel, "", content.rstrip("\n") + "\n", _summary(summary, "new skill"), EditKind.CREATE))
        return f"Created {rel}."

    tools: list[Tool] = [read_file, edit_file, append_to_file]
    return ToolRegistry(tools if overlay.person_file else [*tools, create_skill])  # skills are everyone's


def taken_skill_names(workspace: Path) -> frozenset[str]:
    return frozenset(s.name for s in SkillsLoader(workspace / "skills").skills())


def _summary(text: str, fallback: str) -> str:
    line = " ".join(text.split())
    return (line[:67] + "...") if len(line) > 70 else (line or fallback)
