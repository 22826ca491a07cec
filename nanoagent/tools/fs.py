"""File tools. Paths resolve from the workspace; with restrictToWorkspace the real path must stay inside."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

from nanoagent.fsutil import atomic_write
from nanoagent.paths import PROTECTED_FILES, is_protected
from nanoagent.resources import skills_dir
from nanoagent.tools.base import FunctionTool, ToolContext, ToolError, current_turn, tool

MAX_LINE_CHARS = 2000
MAX_LIST = 1000
MAX_GLOB = 500
MAX_GREP_FILE_BYTES = 5_000_000
DIFF_LINES = 20  # changed lines an edit's result shows (model and terminal), then how many more there are
NEW_FILE = "(a new file)"  # how write_file's result marks a file it created (the terminal shows its first lines)
SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv"}

# How the writing tools put a file on disk: called with the file's path relative to the workspace, the tool's
# name and the write itself, which the hook must run exactly once (letting its exceptions through).
# build_agent's hook records edits of memory files in the memory git. Files outside the workspace skip it.
WriteHook = Callable[[str, str, Callable[[], None]], None]


class Buffers(Protocol):
    """The person's editor, holding the files of the turn's working folder (`nanoagent acp`, where the editor offers
    fs/read_text_file and fs/write_text_file): the file tools read its unsaved text and write through it. Called from
    the tools' worker thread; asked only of paths the tools' own checks already let through."""

    def read(self, path: Path) -> str | None:
        """The file's text as the editor has it; None: read it from the disk."""
        ...

    def write(self, path: Path, text: str) -> bool:
        """Write the file through the editor; False: write it to the disk."""
        ...


# Set for a turn by whoever runs it for an editor; None (everyone else): the disk.
editor: ContextVar[Buffers | None] = ContextVar("editor", default=None)


def _editor_for(target: Path) -> Buffers | None:
    """The editor that holds `target`: one is set for the turn and the file is in its working folder (the editor's
    project; the workspace's files, memory among them, stay the disk's). Asked only from a worker thread (the file
    tools run in one): on the event loop's thread the wait for the editor would hold up the answer it waits for."""
    buffers = editor.get()
    if buffers is None or not _in_working_folder(Path(os.path.realpath(target))):
        return None
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return buffers
    return None


def _read_text(target: Path, errors: str = "replace") -> str:
    """The file's text: the editor's when it holds the file, else the disk's."""
    buffers = _editor_for(target)
    text = buffers.read(target) if buffers is not None else None
    return text if text is not None else target.read_text(encoding="utf-8", errors=errors)


def resolve_path(ctx: ToolContext, path: str, *, read_only: bool = False) -> Path:
    """Absolute path for `path`; refused when its real location is outside a restricted workspace.

    Relative paths start in the turn's folder (`ctx.folder`: its working folder, else the workspace). A turn with a
    working folder may reach it and the workspace (memory, media/), nothing else. Read-only callers may also reach
    the built-in skills folder: the skills summary lists its SKILL.md paths for the model to read. Nothing there may
    be written or run in.
    """
    candidate = Path(os.path.expanduser(path))
    if not candidate.is_absolute():
        candidate = ctx.folder / candidate
    for alias, target in current_turn.get().aliases:
        if os.path.normpath(candidate) == os.path.normpath(ctx.workspace / alias):
            candidate = ctx.workspace / target
    if _hidden(ctx, candidate):
        raise ToolError(f"'{path}' is not for this chat: it holds what your owner or other people said. Keep what "
                        "you learn here in USER.md.")
    if ctx.restrict_to_workspace:
        real = Path(os.path.realpath(candidate))  # follows symlinks, even when the tail does not exist yet
        if not _inside(real, _allowed_roots(ctx, read_only)):
            hint = ("built-in skills are read-only: copy the skill into the workspace's skills/ folder to change it"
                    if _inside(real, _allowed_roots(ctx, True)) else "use a path inside it")
            workdir = current_turn.get().workdir
            where = (f"the working folder {workdir} (and the workspace {ctx.workspace})" if workdir
                     else f"the workspace {ctx.workspace}")
            raise ToolError(f"Path '{path}' is outside {where}; {hint} (restrictToWorkspace is on).")
        return real
    return Path(os.path.abspath(candidate))


def working_folder(path: str | Path, home: Path, workspace: Path) -> Path:
    """The real path of a working folder (`agent -C DIR`); ValueError, one line, when it cannot be one: not a
    folder, or holding nanoagent's home or inside it (its keys, sessions and other chats would come within the
    tools' reach; a folder inside the workspace is fine, the tools reach it anyway)."""
    real = Path(os.path.realpath(os.path.expanduser(str(path))))
    if not real.is_dir():
        raise ValueError(f"The working folder {path} is not a folder" + ("" if real.exists() else " (it does not "
                         "exist)") + ": give a folder that exists.")
    home_real = Path(os.path.realpath(home))
    if _inside(real, (Path(os.path.realpath(workspace)),)):
        return real
    if _inside(real, (home_real,)) or _inside(home_real, (real,)):
        raise ValueError(f"The working folder {real} holds nanoagent's home {home_real} or lies inside it: its keys "
                         "and sessions would come within the tools' reach; give a project folder outside it.")
    return real


def _in_working_folder(real: Path) -> bool:
    """Whether `real` is in the turn's working folder (`agent -C DIR`): the person's own project, whose files follow
    their umask. Files in the workspace stay private (the caller checks that first); the folder never holds the
    home (`working_folder`)."""
    workdir = current_turn.get().workdir
    return bool(workdir) and _inside(real, (Path(os.path.realpath(workdir)),))


def _hidden(ctx: ToolContext, path: Path) -> bool:
    """Whether `path` is one of the turn's hidden files or inside a hidden folder (and not an alias's target)."""
    turn = current_turn.get()
    if not turn.hidden:
        return False
    root = Path(os.path.realpath(ctx.workspace))
    real = Path(os.path.realpath(path))
    if not _inside(real, (root,)):
        return False
    rel = real.relative_to(root).as_posix().casefold()  # a case-insensitive file system has other names for it
    return rel not in {target.casefold() for _, target in turn.aliases} and any(
        rel == h.casefold() or rel.startswith(f"{h.casefold()}/") for h in turn.hidden)


def _allowed_roots(ctx: ToolContext, read_only: bool) -> tuple[Path, ...]:
    """Real paths a restricted tool may reach: the workspace and the turn's working folder, plus the built-in
    skills when only reading."""
    roots = [Path(os.path.realpath(ctx.workspace))]
    workdir = current_turn.get().workdir
    if workdir:
        roots.append(Path(os.path.realpath(workdir)))
    builtin = _builtin_skills() if read_only else None
    return (*roots, builtin) if builtin else tuple(roots)


@functools.cache
def _builtin_skills() -> Path | None:
    try:
        return Path(os.path.realpath(skills_dir()))
    except FileNotFoundError:
        return None  # installed without skills: nothing extra to allow


def _inside(real: Path, roots: tuple[Path, ...]) -> bool:
    return any(real == root or root in real.parents for root in roots)


def _display(ctx: ToolContext, path: Path) -> str:
    """`path` as the model gave it in relative form: from the turn's folder; absolute outside it."""
    root = Path(os.path.realpath(ctx.folder))
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _check_file(ctx: ToolContext, path: str, target: Path, writing: bool) -> None:
    """Refuse what the file tools must leave alone: for writing, the files nanoagent keeps in memory/; and,
    with restrictToWorkspace, a file with more than one hard link, which may be a file outside the workspace
    under a second name (the built-in skills are exempt: installers may link them)."""
    kept = _protected_name(ctx, target) if writing else None
    if kept:
        raise ToolError(f"'{path}' is {kept}, which nanoagent keeps for itself: history only grows, and the "
                        "Consolidator and Dream keep the cursors. Read it, but do not write it; to remember "
                        "something, edit memory/MEMORY.md.")
    links = _hard_links(ctx, target)
    if links > 1:
        raise ToolError(f"'{path}' has {links} hard links: it may be a file from outside the workspace under "
                        "another name, so the file tools leave it alone. Ask the user to replace it with a copy.")


def _protected_name(ctx: ToolContext, target: Path) -> str | None:
    """The protected file `target` is (by its real path, so links and `..` do not help), or None."""
    real = Path(os.path.realpath(target))
    memory = Path(os.path.realpath(ctx.workspace / "memory"))
    if real.parent == memory and is_protected(f"memory/{real.name}"):
        return f"memory/{real.name}"
    for rel in PROTECTED_FILES:  # the same file under another name (a hard link, a case-insensitive disk)
        kept = ctx.workspace / rel
        try:
            if os.path.samefile(kept, real):
                return rel
        except OSError:
            continue
    return None


def _hard_links(ctx: ToolContext, target: Path) -> int:
    """How many names the regular file `target` has; 1 when that does not matter (unrestricted, built-in skills,
    missing files, folders)."""
    if not ctx.restrict_to_workspace:
        return 1
    real = Path(os.path.realpath(target))
    builtin = _builtin_skills()
    if builtin and _inside(real, (builtin,)):
        return 1
    try:
        info = os.stat(real)
    except OSError:
        return 1
    return info.st_nlink if stat.S_ISREG(info.st_mode) else 1


def _is_binary(path: Path) -> bool:
    with open(path, "rb") as f:
        return b"\0" in f.read(8192)


@tool(read_only=True)
def read_file(ctx: ToolContext, path: str, offset: int = 1, limit: int = 2000) -> str:
    """Read a text file, with line numbers. Long files are paged: use offset and limit to read more.

    Args:
        path: File to read, relative to the workspace.
        offset: First line to show, counting from 1.
        limit: Most lines to show.
    """
    target = resolve_path(ctx, path, read_only=True)
    if target.is_dir():
        raise ToolError(f"'{path}' is a directory; use list_dir to see what it holds.")
    if not target.exists():
        raise ToolError(f"File '{path}' does not exist; check the name with list_dir or glob.")
    _check_file(ctx, path, target, writing=False)
    if _is_binary(target):
        raise ToolError(f"'{path}' is a binary file; read_file shows text only.")
    offset, limit = max(1, offset), max(1, limit)
    lines = _read_text(target).splitlines()
    shown = lines[offset - 1: offset - 1 + limit]
    out = []
    for number, line in enumerate(shown, start=offset):
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [... line cut, {len(line) - MAX_LINE_CHARS} more characters]"
        out.append(f"{number:>6}\t{line}")
    if not lines:
        return "(empty file)"
    if offset > len(lines):
        return f"(the file has only {len(lines)} lines)"
    last = offset + len(shown) - 1
    if last < len(lines):
        out.append(f"[lines {offset}-{last} of {len(lines)}; call read_file with offset={last + 1} to continue]")
    return "\n".join(out)


def writing_tools(on_write: WriteHook | None = None) -> list[FunctionTool]:
    """write_file and edit_file; each write inside the workspace goes through `on_write` when given."""

    def put(ctx: ToolContext, target: Path, data: bytes, tool_name: str) -> None:
        root = Path(os.path.realpath(ctx.workspace))
        real = Path(os.path.realpath(target))
        buffers = _editor_for(real)
        if buffers is not None and buffers.write(real, data.decode("utf-8")):
            return
        if not _inside(real, (root,)):
            atomic_write(target, data, own=_in_working_folder(real))
        elif on_write is None:
            atomic_write(target, data)
        else:
            on_write(real.relative_to(root).as_posix(), tool_name, lambda: atomic_write(target, data))

    @tool()
    def write_file(ctx: ToolContext, path: str, content: str) -> str:
        """Create or replace a file with the given content. Parent folders are created.

        Args:
            path: File to write, relative to the workspace.
            content: The complete new content of the file.
        """
        target = resolve_path(ctx, path)
        if target.is_dir():
            raise ToolError(f"'{path}' is a directory; give a file path.")
        _check_file(ctx, path, target, writing=True)
        before = _old_text(target)
        data = content.encode("utf-8")
        put(ctx, target, data, "write_file")
        done = f"Wrote {len(data)} bytes to {_display(ctx, target)}"
        return f"{done} {NEW_FILE}" if before is None else f"{done}{_diff(before, content)}"

    @tool()
    def edit_file(ctx: ToolContext, path: str, old_text: str, new_text: str) -> str:
        """Replace one exact piece of text in a file. old_text must occur exactly once.

        Args:
            path: File to edit, relative to the workspace.
            old_text: The exact text to replace, including whitespace; add surrounding lines to make it unique.
            new_text: The text to put in its place.
        """
        if old_text == new_text:
            raise ToolError("old_text and new_text are identical: a no-op edit. Send the change you mean to make.")
        target = resolve_path(ctx, path)
        _check_file(ctx, path, target, writing=True)
        if not target.is_file():
            raise ToolError(f"File '{path}' does not exist; create it with write_file.")
        text = _read_text(target, errors="strict")
        count = text.count(old_text) if old_text else 0
        if count == 0:
            raise ToolError(f"old_text was not found in '{path}'. Read the file with read_file and copy the text "
                            "exactly.")
        if count > 1:
            raise ToolError(f"old_text occurs {count} times in '{path}'; include more surrounding lines so it is "
                            "unique.")
        after = text.replace(old_text, new_text, 1)
        put(ctx, target, after.encode("utf-8"), "edit_file")
        return f"Edited {_display(ctx, target)}{_diff(text, after)}"

    return [write_file, edit_file]


def _old_text(target: Path) -> str | None:
    """What a file held before a write (None: there was none; a binary file counts as empty text)."""
    try:
        return _read_text(target, errors="strict") if target.exists() else None
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, OSError):
        return ""


def _diff(before: str, after: str) -> str:
    """An edit's changed lines, after a count of them: unified-diff hunks without context (their `@@` lines give
    the line numbers), at most DIFF_LINES changed lines and then how many more. "" when nothing changed."""
    import difflib

    hunks = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))[2:]
    changed = [line for line in hunks if not line.startswith("@@")]
    if not changed:
        return " (no change)"
    added = sum(1 for line in changed if line.startswith("+"))
    shown, count = [], 0
    for line in hunks:
        if not line.startswith("@@"):
            count += 1
            if count > DIFF_LINES:
                break
            line = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " [... line cut]"
        shown.append(line)
    if shown and shown[-1].startswith("@@"):
        shown.pop()
    more = f"\n[... {len(changed) - DIFF_LINES} more changed lines]" if len(changed) > DIFF_LINES else ""
    return f" (+{added} -{len(changed) - added} lines)\n" + "\n".join(shown) + more


@tool(read_only=True)
def list_dir(ctx: ToolContext, path: str = ".") -> str:
    """List a folder: entries sorted by name, folders marked with a trailing slash.

    Args:
        path: Folder to list, relative to the workspace.
    """
    target = resolve_path(ctx, path, read_only=True)
    if not target.is_dir():
        raise ToolError(f"'{path}' is not a folder." + ("" if target.exists() else " It does not exist."))
    entries = sorted((p for p in target.iterdir() if not _hidden(ctx, p)), key=lambda p: p.name)
    lines = [p.name + ("/" if p.is_dir() else "") for p in entries[:MAX_LIST]]
    if len(entries) > MAX_LIST:
        lines.append(f"[{len(entries) - MAX_LIST} more entries not shown]")
    return "\n".join(lines) or "(empty folder)"


@tool(read_only=True)
def glob(ctx: ToolContext, pattern: str, path: str = ".") -> str:
    """Find files whose path matches a glob pattern such as **/*.py.

    Args:
        pattern: Glob pattern, relative to path.
        path: Folder to search from, relative to the workspace.
    """
    base = resolve_path(ctx, path, read_only=True)
    if not base.is_dir():
        raise ToolError(f"'{path}' is not a folder.")
    roots = _allowed_roots(ctx, read_only=True)
    found = []
    for match in sorted(base.glob(pattern)):
        if SKIP_DIRS & set(match.relative_to(base).parts):
            continue
        if ctx.restrict_to_workspace and not _inside(Path(os.path.realpath(match)), roots) or _hidden(ctx, match):
            continue
        found.append(_display(ctx, match))
        if len(found) > MAX_GLOB:
            break
    if len(found) > MAX_GLOB:
        return "\n".join(found[:MAX_GLOB]) + f"\n[more than {MAX_GLOB} matches; narrow the pattern]"
    return "\n".join(found) or "(no matches)"


@tool(read_only=True)
def grep(ctx: ToolContext, pattern: str, path: str = ".", glob: str | None = None, ignore_case: bool = False,
         max_results: int = 200) -> str:
    """Search file contents with a regular expression; prints path:line: text for each match.

    Args:
        pattern: Python regular expression.
        path: File or folder to search, relative to the workspace.
        glob: Only search files whose name matches this glob, e.g. *.md.
        ignore_case: Match regardless of case.
        max_results: Most matching lines to return.
    """
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as e:
        raise ToolError(f"Invalid regular expression {pattern!r}: {e}.") from None
    base = resolve_path(ctx, path, read_only=True)
    if not base.exists():
        raise ToolError(f"'{path}' does not exist.")
    results: list[str] = []
    roots = _allowed_roots(ctx, read_only=True)
    for file in _walk(base):
        if glob and not fnmatch.fnmatch(file.name, glob) or _hidden(ctx, file):
            continue
        if ctx.restrict_to_workspace and not _inside(Path(os.path.realpath(file)), roots):
            continue  # a symlink inside the workspace pointing out of it
        if _hard_links(ctx, file) > 1:
            continue  # perhaps a file outside the workspace under a second name
        try:
            if file.stat().st_size > MAX_GREP_FILE_BYTES or _is_binary(file):
                continue
            with open(file, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, start=1):
                    if regex.search(line):
                        results.append(f"{_display(ctx, file)}:{number}: {line.rstrip()[:300]}")
                        if len(results) >= max_results:
                            return "\n".join(results) + f"\n[stopped at {max_results} matches]"
        except OSError:
            continue
    return "\n".join(results) or "(no matches)"


def _walk(base: Path):
    if base.is_file():
        yield base
        return
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            yield Path(folder) / name
