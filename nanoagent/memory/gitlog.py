"""The git log of long-term memory: every edit of SOUL.md, USER.md, memory/MEMORY.md, skills/*/SKILL.md and the
dated notes memory/YYYY-MM-DD.md is its own commit, so a person can read and undo each one.

The git dir lives under `$NANOAGENT_HOME/git/`, outside the workspace: the agent's file tools cannot
reach it, and a workspace that sits inside another repository keeps working (no `.git` is ever written
into the workspace). Invariants:
- Only memory files (see `is_memory_file`) are ever staged; the rest of the workspace is the user's.
- Once `ensure` has run, HEAD exists (the first commit may be empty), so every later commit has a parent.
- Every process that writes to the git dir holds `nanoagent.lock` in it (fcntl) for the whole operation.
- `restore` computes the whole revert before writing anything: a conflict leaves files, index and
  history exactly as they were.
- `restore` reverts line by line: it conflicts only when a line the undone commit changed is different now,
  never because a later commit changed the lines next to it (e.g. two Dream appends in a row).

gitpython is imported inside functions only: `nanoagent --help` must not load it.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

from nanoagent.errors import NanoagentError
from nanoagent.fsutil import atomic_write, file_lock, uninterrupted
from nanoagent.memory.people import may_write
from nanoagent.paths import MEMORY_FILES, PROMPT_FILES, is_memory_file, memory_files_on_disk
from nanoagent.tools.base import ToolError, current_turn
from nanoagent.tools.fs import WriteHook
from nanoagent.tools.shell import CommandHook

SKILLS_PATHSPEC = ":(glob)skills/*/SKILL.md"
PEOPLE_PATHSPEC = ":(glob)memory/people/*.md"
NOTES_PATHSPEC = ":(glob)memory/*.md"  # the dated notes among them (`is_memory_file` picks)
IDENTITY = ("nanoagent", "nanoagent@localhost")
LOCK_TIMEOUT = 60.0
NOT_COMMITTED = "0" * 40  # the sha git blame gives lines not yet committed
LOG_FORMAT = "%x1e%H%x1f%h%x1f%at%x1f%an%x1f%s"  # records start with \x1e, fields split by \x1f
CONFLICT = object()  # _undo's answer when a file cannot be reverted
INSTALL_GIT = ("git is not installed or not on PATH: install git (e.g. `apt install git` or `brew install git`) "
               "to keep the history of memory edits.")


@dataclass(frozen=True)
class MemoryCommit:
    sha: str
    short: str
    time: datetime  # aware, local time zone
    files: tuple[str, ...]
    summary: str
    author: str  # "dream" | "agent" | "user" | "restore" | "init"


class RestoreConflict(NanoagentError):
    """A later edit touches the same lines as the commit being undone; nothing was changed."""


class MemoryGit:
    def __init__(self, workspace: Path, git_dir: Path):
        self.workspace = Path(workspace)
        self.git_dir = Path(git_dir)
        # Threads of this process take turns on the RLock (re-entrant: public methods call each other under
        # it); the first entry of the holding thread also takes the file lock shared with other processes.
        self._thread_lock = threading.RLock()
        self._lock_depth = 0  # guarded by _thread_lock

    # ---- public operations ---------------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the repository if missing and record the memory files that already exist as "init"."""
        with self._locked():
            self._ensure()

    def snapshot_user_edits(self) -> MemoryCommit | None:
        """Commit hand edits (and deletions) of memory files as the user's own; None when there are none.

        Call before an automated edit so the user's text is never attributed to, or undone with, it.
        """
        with self._locked():
            self._ensure()
            return self._snapshot()

    def commit(self, files: list[str], message: str, author: str = "dream") -> MemoryCommit | None:
        """Commit exactly these workspace-relative memory files; None when none of them changed."""
        for relpath in files:
            if not is_memory_file(relpath):
                raise NanoagentError(f"{relpath!r} is not a memory file; only {', '.join(MEMORY_FILES + PROMPT_FILES)} and "
                                     "skills/<name>/SKILL.md are recorded in the memory history.")
        with self._locked():
            self._ensure()
            return self._commit(files, message, author)

    def record(self, relpath: str, write: Callable[[], None], message: str, author: str = "agent") -> MemoryCommit | None:
        """Make one automated edit of a memory file its own commit: hand edits are committed as the user's first,
        then `write` runs and its change is committed as `author`'s, all under the lock, so no other writer
        slips in between and undoing the edit never undoes the user's text."""
        if not is_memory_file(relpath):
            raise NanoagentError(f"{relpath!r} is not a memory file; it is not recorded in the memory history.")
        with self._locked():
            self._ensure()
            self._snapshot()
            write()
            return self._commit([relpath], message, author)

    def contents(self) -> dict[str, bytes | None]:
        """Each memory file's bytes as it is now (None: missing, or a link, which is not followed); a command's
        edits are found by comparing two of these."""
        return {rel: _read_nofollow(self.workspace / rel) for rel in memory_files_on_disk(self.workspace)}

    def record_change(self, before: dict[str, bytes | None], message: str, author: str = "agent"
                      ) -> MemoryCommit | None:
        """Commit what changed since `before` (from `contents`) as `author`'s; the files' hand edits made before
        that (uncommitted when `before` was read) become the user's own commit first, so they are never
        attributed to, or undone with, the automated edit. None when nothing changed."""
        with self._locked():
            self._ensure()
            now = self.contents()
            changed = sorted(rel for rel in before.keys() | now.keys() if before.get(rel) != now.get(rel)
                             and is_memory_file(rel))
            if not changed:
                return None
            earlier = {rel: before.get(rel) for rel in changed if before.get(rel) != self._blob("HEAD", rel)}
            if earlier:
                self._commit_contents(earlier, "user")
            return self._commit(changed, message, author)

    def log(self, n: int = 20) -> list[MemoryCommit]:
        """The newest `n` commits, newest first; empty before the first `ensure`."""
        if not self._initialized():
            return []
        out = self._git("log", f"-n{max(n, 0)}", "-z", "--name-only", f"--format={LOG_FORMAT}")
        return [_parse_log_record(record) for record in out.split("\x1e") if record.strip("\n\0")]

    def show(self, sha: str) -> str:
        """The header and unified diff of one commit."""
        full = self._resolve(sha)
        return self._git("show", "--no-color", "--no-ext-diff",
                         "--format=commit %H%nAuthor: %an%nDate:   %ad%n%n    %s", "--date=iso", full)

    def restore(self, sha: str) -> MemoryCommit:
        """Undo exactly that commit, keeping every later change, as a new "restore" commit.

        Raises RestoreConflict, having changed nothing, when a later edit overlaps the undone lines.
        """
        with self._locked():
            target = self._read_commit(sha)  # first: an unknown sha must not create a history as a side effect
            self._ensure()
            parents = self._git("rev-list", "--parents", "-n1", target.sha).split()[1:]
            if not parents:
                raise NanoagentError(f"{target.short} is the start of the memory history ({target.summary}); there "
                                     "is nothing before it to go back to. Pick a later commit from "
                                     "`nanoagent dream-log`.")
            if len(parents) > 1:
                raise NanoagentError(f"{target.short} is a merge; undo one of the commits it joins instead "
                                     "(see `nanoagent dream-log`).")
            plan = self._revert_plan(target, parents[0])
            if not plan:
                raise NanoagentError(f"The change of {target.short} ({target.summary}) is no longer in the files; "
                                     "there is nothing to undo.")
            self._snapshot()  # hand edits become the user's own commit, so the restore commit holds only the undo
            self._apply(plan)
            made = self._commit(list(plan), f"Restore: undo {target.short} {target.summary}", "restore")
            if made is None:  # the plan only holds files whose content changes
                raise NanoagentError(f"Undoing {target.short} changed nothing; the memory history is unchanged.")
            return made

    def line_ages(self, relpath: str, now: datetime | None = None) -> list[tuple[str, int | None]]:
        """Each line of a workspace file with its age in whole days from git blame; None for uncommitted lines."""
        path = self.workspace / relpath
        if not path.is_file():
            return []
        if not self._initialized() or not self._in_head(relpath):
            return [(line, None) for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
        now = now or datetime.now(UTC)
        out = self._git("blame", "--porcelain", "--", relpath)
        times: dict[str, int] = {}
        current, ages = "", []
        for line in out.split("\n"):
            if line.startswith("\t"):
                age = None if current == NOT_COMMITTED else max(0, int((now.timestamp() - times[current]) // 86400))
                ages.append((line[1:], age))
            elif re.match(r"[0-9a-f]{40} \d+ \d+", line):
                current = line[:40]
            elif line.startswith("author-time "):
                times[current] = int(line.split()[1])
        return ages

    # ---- steps that run under the lock ---------------------------------------------------------------

    def _ensure(self) -> None:
        if not self.workspace.is_dir():
            raise NanoagentError(f"Workspace {self.workspace} does not exist: run `nanoagent onboard` to create it, "
                                 "or pass the right folder with -w.")
        if self._initialized():
            return
        self._git("init", "-q", "-b", "main")
        for key, value in (("user.name", IDENTITY[0]), ("user.email", IDENTITY[1]), ("commit.gpgsign", "false"),
                           ("core.quotepath", "false"), ("gc.autoDetach", "false")):
            self._git("config", key, value)
        files = self._memory_files(with_head=False)
        if files:
            self._git("add", "-A", "-f", "--", *files)
        names = ", ".join(files) or "no memory files yet"
        self._git("commit", "-q", "--allow-empty", "--no-verify", f"--author=init <{IDENTITY[1]}>",
                  "-m", f"Start memory history: {names}")

    def _snapshot(self) -> MemoryCommit | None:
        files = self._memory_files()
        changes = self._stage(files)
        if not changes:
            return None
        return self._commit([name for _, name in changes], _your_edit(changes), "user")

    def _commit_contents(self, contents: dict[str, bytes | None], author: str) -> None:
        """Commit these contents (None: deleted) of the files as `author`'s hand edit, leaving the files on disk
        as they are."""
        self._git("read-tree", "HEAD")  # the index as HEAD: only these entries differ
        for relpath, data in contents.items():
            if data is None:
                self._git("update-index", "--force-remove", "--", relpath)
                continue
            staged = self.git_dir / "staged.tmp"
            atomic_write(staged, data)
            sha = self._git("hash-object", "-w", "--no-filters", str(staged)).strip()
            staged.unlink()
            self._git("update-index", "--add", "--cacheinfo", f"100644,{sha},{relpath}")
        out = self._git("diff", "--cached", "--no-renames", "--name-status", "-z", "HEAD", "--", *contents)
        fields = [f for f in out.split("\0") if f]
        changes = [(fields[i][0], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]
        if changes:
            self._git("commit", "-q", "--no-verify", f"--author={author} <{IDENTITY[1]}>", "-m",
                      _your_edit(changes))

    def _commit(self, files: list[str], message: str, author: str) -> MemoryCommit | None:
        changes = self._stage(files)
        if not changes:
            return None
        names = [name for _, name in changes]
        summary, _, body = message.strip().partition("\n")
        if not any(name in summary or name.rsplit("/", 1)[-1] in summary for name in names):
            summary = f"{summary} ({', '.join(names)})"  # every summary names the files it changed
        self._git("commit", "-q", "--no-verify", f"--author={author} <{IDENTITY[1]}>",
                  "-m", (summary + "\n\n" + body.strip()).strip(), "--", *names)
        return self._read_commit("HEAD")

    def _stage(self, files: list[str]) -> list[tuple[str, str]]:
        """Stage these files (new, changed or deleted); return (A|M|D, path) for those differing from HEAD."""
        files = list(dict.fromkeys(files))
        if not files:
            return []
        indexed = set(self._git("ls-files", "-z", "--", *files).split("\0"))
        to_add = [f for f in files if (self.workspace / f).exists() or f in indexed]
        if to_add:  # a file in neither place is new-and-gone or its deletion is already staged
            self._git("add", "-A", "-f", "--", *to_add)
        out = self._git("diff", "--cached", "--no-renames", "--name-status", "-z", "HEAD", "--", *files)
        fields = [f for f in out.split("\0") if f]
        return [(fields[i][0], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]

    def _revert_plan(self, target: MemoryCommit, parent: str) -> dict[str, bytes | None]:
        """New content (None: delete) for each file whose content the revert changes; raise on conflict."""
        changed = self._git("diff-tree", "--no-commit-id", "--no-renames", "-r", "-z", "--name-only",
                            parent, target.sha).split("\0")
        plan: dict[str, bytes | None] = {}
        conflicts = []
        for relpath in filter(None, changed):
            path = self.workspace / relpath
            ours = path.read_bytes() if path.is_file() else None
            merged = _undo(ours, self._blob(target.sha, relpath), self._blob(parent, relpath))
            if merged is CONFLICT:
                conflicts.append(relpath)
            elif merged != ours:
                plan[relpath] = merged
        if conflicts:
            raise RestoreConflict(
                f"Cannot undo {target.short} ({target.summary}): {', '.join(conflicts)} changed again since then "
                "in the same lines. Nothing was changed; edit the file by hand, or undo the later commit first.")
        return plan

    def _apply(self, plan: dict[str, bytes | None]) -> None:
        """Write the planned contents; on failure put back what was there, so the files match HEAD again."""
        before = {rel: (self.workspace / rel).read_bytes() if (self.workspace / rel).is_file() else None
                  for rel in plan}
        try:
            for relpath, data in plan.items():
                _put(self.workspace / relpath, data)
        except BaseException:
            for relpath, data in before.items():
                _put(self.workspace / relpath, data)
            raise

    # ---- git plumbing --------------------------------------------------------------------------------

    def _read_commit(self, rev: str) -> MemoryCommit:
        out = self._git("log", "-n1", "-z", "--name-only", f"--format={LOG_FORMAT}", self._resolve(rev))
        return _parse_log_record(out.split("\x1e", 1)[1])

    def _initialized(self) -> bool:
        if not (self.git_dir / "HEAD").is_file():
            return False
        return self._git_status("rev-parse", "--verify", "-q", "HEAD^{commit}")[0] == 0

    def _resolve(self, sha: str) -> str:
        sha = sha.strip()
        if self._initialized() and sha and not sha.startswith("-"):
            status, out = self._git_status("rev-parse", "--verify", "-q", f"{sha}^{{commit}}")
            if status == 0:
                return out.decode().strip()
        raise NanoagentError(f"No memory commit {sha!r}: run `nanoagent dream-log` to list them "
                             "and use one of the short shas shown.")

    def _in_head(self, relpath: str) -> bool:
        return self._git_status("cat-file", "-e", f"HEAD:{relpath}")[0] == 0

    def _blob(self, commit: str, relpath: str) -> bytes | None:
        status, out = self._git_status("cat-file", "blob", f"{commit}:{relpath}")
        return out if status == 0 else None

    def _memory_files(self, with_head: bool = True) -> list[str]:
        """Memory files on disk plus those in the index or HEAD (so deletions are seen), sorted."""
        on_disk = [rel for rel in memory_files_on_disk(self.workspace) if (self.workspace / rel).is_file()]
        known = self._git("ls-files", "-z", "--with-tree=HEAD", "--", *MEMORY_FILES, *PROMPT_FILES, SKILLS_PATHSPEC,
                          PEOPLE_PATHSPEC, NOTES_PATHSPEC).split("\0") \
            if with_head else []
        return sorted({rel for rel in on_disk + known if rel and is_memory_file(rel)})

    def _git(self, *args: str) -> str:
        status, out, err = self._run(args)
        if status != 0:
            raise NanoagentError(f"git {args[0]} failed in the memory history {self.git_dir}: "
                                 f"{err.strip().rstrip('.') or f'exit {status}'}. Check that the folder is writable; "
                                 "`nanoagent doctor` checks git.")
        return out.decode("utf-8", errors="replace")

    def _git_status(self, *args: str) -> tuple[int, bytes]:
        status, out, _ = self._run(args)
        return status, out

    def _run(self, args: tuple[str, ...]) -> tuple[int, bytes, str]:
        try:
            import git
        except ImportError:  # gitpython checks for the git binary when first imported
            raise NanoagentError(INSTALL_GIT) from None
        command = [git.Git.GIT_PYTHON_GIT_EXECUTABLE, f"--git-dir={self.git_dir}",
                   f"--work-tree={self.workspace}", *args]
        try:
            status, out, err = git.Git(self.git_dir).execute(
                command, with_extended_output=True, with_exceptions=False, stdout_as_string=False,
                strip_newline_in_stdout=False, env=self._env(), umask=0o077)  # the git dir stays private
        except git.exc.GitCommandNotFound:
            raise NanoagentError(INSTALL_GIT) from None
        return status, out or b"", err.decode(errors="replace") if isinstance(err, bytes) else (err or "")

    def _env(self) -> dict[str, str]:
        """Isolate from the user's git setup: no system or global config (signing, hooks, aliases), and an
        index and object store that an outer repository's variables cannot redirect."""
        return {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
                "GIT_INDEX_FILE": str(self.git_dir / "index"), "GIT_OBJECT_DIRECTORY": str(self.git_dir / "objects"),
                "GIT_COMMITTER_NAME": IDENTITY[0], "GIT_COMMITTER_EMAIL": IDENTITY[1]}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            if self._lock_depth:
                self._lock_depth += 1
                try:
                    yield
                finally:
                    self._lock_depth -= 1
                return
            lock = self.git_dir / "nanoagent.lock"
            busy = NanoagentError(f"The memory history is busy in another nanoagent process ({lock}); "
                                  "wait for it to finish and try again.")
            with file_lock(lock, LOCK_TIMEOUT, busy):
                self._drop_stale_index_lock()
                self._lock_depth = 1
                try:
                    yield
                finally:
                    self._lock_depth = 0

    def _drop_stale_index_lock(self) -> None:
        """Every nanoagent writer holds our lock, so an index.lock seen now was left by a killed process;
        the age check spares a person running git by hand at this moment."""
        stale = self.git_dir / "index.lock"
        try:
            if time.time() - stale.stat().st_mtime > 10:
                stale.unlink()
        except FileNotFoundError:
            pass


def agent_edits(git: MemoryGit, warn: Callable[[str], None]) -> WriteHook:
    """The file tools' write hook: the agent's edit of a memory file (SOUL.md, USER.md, memory/MEMORY.md, a
    skill's SKILL.md, a dated note) becomes its own commit by "agent", naming the tool and the session, so dream-log lists it
    and dream-restore undoes it. Other files are just written. The tools run in worker threads, so git does too.
    When git fails the edit is still made, with a warning: a memory edit must not depend on its log."""

    def through(relpath: str, tool_name: str, write: Callable[[], None]) -> None:
        if not is_memory_file(relpath):
            write()
            return
        if not may_write(current_turn.get().who, relpath):
            raise ToolError(f"{relpath} is not written from this chat: it is the owner's memory or another person's. "
                            "What you learn about the person in this chat goes in USER.md (their own file).")
        written = False

        def write_once() -> None:
            nonlocal written
            write()
            written = True

        session = current_turn.get().session_key or "none"
        try:
            git.record(relpath, write_once, f"{relpath}: {tool_name} by the agent (session {session})")
        except NanoagentError as e:
            if not written:
                write_once()
            warn(f"The agent's edit of {relpath} is not in the memory history: {e}")

    return through


def agent_commands(git: MemoryGit, warn: Callable[[str], None]) -> CommandHook:
    """exec's hook: what a command changed in the memory files becomes one commit by "agent", naming the command
    and the session, as the file tools' edits do. The files are read before and after (no git unless something
    changed); a hand edit saved while the command ran counts as the command's."""

    async def around(command: str, run: Callable[[], Awaitable[str]]) -> str:
        import asyncio

        if not git.git_dir.exists():  # the first commit records the files as they were before any command
            with contextlib.suppress(NanoagentError):
                await asyncio.to_thread(git.ensure)
        before = await asyncio.to_thread(git.contents)
        try:
            return await run()
        finally:
            session = current_turn.get().session_key or "none"
            shown = " ".join(command.split())
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            try:
                await uninterrupted(asyncio.to_thread(
                    git.record_change, before, f"exec by the agent (session {session}): {shown}"))
            except NanoagentError as e:
                warn(f"The agent's command changed memory files, but that is not in the memory history: {e}")

    return around


def _your_edit(changes: list[tuple[str, str]]) -> str:
    words = [name if status == "M" else f"{'added' if status == 'A' else 'deleted'} {name}" for status, name in changes]
    return "Your edit: " + ", ".join(words)


def _read_nofollow(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # missing, a link, unreadable
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _put(path: Path, data: bytes | None) -> None:
    if data is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, data)


def _undo(ours: bytes | None, base: bytes | None, theirs: bytes | None) -> Any:
    """Take the change base -> theirs onto ours. Returns bytes, None (absent) or CONFLICT."""
    if ours == base:
        return theirs
    if ours == theirs:
        return ours
    if ours is None or base is None or theirs is None:
        return CONFLICT  # created or deleted on one side, edited on the other
    return _undo_lines(ours, base, theirs)


def _undo_lines(ours: bytes, base: bytes, theirs: bytes) -> Any:
    """Apply each hunk of base -> theirs where its base lines sit in ours now; CONFLICT if one hunk cannot be placed.

    Invariants: a hunk applies only when all of its base lines are in ours, byte for byte and in one unbroken
    run; a pure insertion is placed next to a base neighbour that is still in ours (the one before it, else the
    one after). Lines around a hunk may have changed freely. Lines are bytes, each ending after its newline byte,
    so CRLF and text that is not UTF-8 compare exactly; data with a NUL byte is binary to git and never reverted.
    """
    if b"\0" in ours or b"\0" in base or b"\0" in theirs:
        return CONFLICT
    mine, old, new = _lines(ours), _lines(base), _lines(theirs)
    where: dict[int, int] = {}  # index in old -> index in mine, for each old line still in ours (monotone)
    for block in SequenceMatcher(None, old, mine, autojunk=False).get_matching_blocks():
        where.update((block.a + k, block.b + k) for k in range(block.size))
    spans: list[tuple[int, int, list[bytes]]] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i1 < i2:  # replace or delete: every base line must still be there, in a row
            start = where.get(i1)
            if start is None or any(where.get(i) != start + i - i1 for i in range(i1, i2)):
                return CONFLICT
            spans.append((start, start + i2 - i1, new[j1:j2]))
        elif i1 - 1 in where:  # insert: after the line before it ...
            spans.append((where[i1 - 1] + 1, where[i1 - 1] + 1, new[j1:j2]))
        elif i1 in where:  # ... or before the line after it
            spans.append((where[i1], where[i1], new[j1:j2]))
        else:
            return CONFLICT
    out = list(mine)
    for start, end, lines in reversed(spans):  # bottom up: the spans are ordered and do not overlap
        out[start:end] = lines
    for i in range(len(out) - 1):  # a last line without b"\n" that now has lines after it gets one
        if not out[i].endswith(b"\n"):
            out[i] += b"\r\n" if out[i + 1].endswith(b"\r\n") else b"\n"
    return b"".join(out)


def _lines(data: bytes) -> list[bytes]:
    """The lines of data with their endings; only the last may lack a newline. Joined, they give data back."""
    parts = data.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _parse_log_record(record: str) -> MemoryCommit:
    header, _, names = record.partition("\0")
    sha, short, stamp, author, summary = header.split("\x1f", 4)
    files = tuple(name for name in names.strip("\n").split("\0") if name.strip("\n"))
    when = datetime.fromtimestamp(int(stamp), UTC).astimezone()
    return MemoryCommit(sha=sha, short=short, time=when, files=files, summary=summary, author=author)
