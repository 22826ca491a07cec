"""memory/history.jsonl: the mid-term memory, append-only, one summary a line.

    {"cursor": 42, "timestamp": "2026-11-22 14:05", "session": "cli:direct", "content": "...", "raw": false}

`memory/.cursor` holds the last cursor written and `memory/.dream_cursor` the last
cursor Dream has processed, each a plain integer. Allocating a cursor and appending
happen under one exclusive lock, so two processes never write the same cursor.

Each line carries its own cursor, so history.jsonl is the truth: a cursor file that is
not a whole number, or is past the last line's cursor, is read (with a warning naming it)
as the last cursor in history.jsonl, or as 0 for a `.dream_cursor` that is not a number.
A `.dream_cursor` past the end is also rewritten, or every later entry would stay behind it.
Cursors stay within SQLite's integers (the search index stores them); a line with a cursor
outside 0..MAX_CURSOR is corrupt.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nanoagent.fsutil import append_lines, atomic_write, file_lock

MAX_CURSOR = 2**63 - 1  # SQLite's largest integer


@dataclass(frozen=True)
class HistoryEntry:
    cursor: int
    timestamp: str
    session: str
    content: str
    raw: bool = False


class HistoryLog:
    def __init__(self, memory_dir: Path, warn: Callable[[str], None] = lambda message: None):
        self.dir = memory_dir
        self.warn = warn
        self._entries: list[HistoryEntry] = []
        self._offset = 0  # bytes of the file already parsed into _entries
        self._warned: set[str] = set()  # each bad cursor file is reported once per HistoryLog

    @property
    def path(self) -> Path:
        return self.dir / "history.jsonl"

    def append(self, session: str, content: str, raw: bool = False, now: datetime | None = None) -> HistoryEntry:
        with file_lock(self.dir / ".history.lock"):  # cursor allocation and append are one step
            cursor = self.cursor + 1
            stamp = (now or datetime.now().astimezone()).strftime("%Y-%m-%d %H:%M")
            entry = HistoryEntry(cursor, stamp, session, content, raw)
            line = json.dumps({"cursor": cursor, "timestamp": stamp, "session": session, "content": content,
                               "raw": raw}, ensure_ascii=False).encode("utf-8") + b"\n"
            append_lines(self.path, line, sync=True)
            atomic_write(self.dir / ".cursor", f"{cursor}\n")
            return entry

    def entries(self, after: int = 0, limit: int | None = None) -> list[HistoryEntry]:
        self._refresh()
        out = [e for e in self._entries if e.cursor > after]
        return out[:limit] if limit is not None else out

    def newest_first(self, after: int = 0) -> Iterator[HistoryEntry]:
        """Entries with a cursor above `after`, newest first, read backwards from the end of the file, so
        the cost follows how many are taken, not how long the history is (cursors only grow down the file)."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return
        with f:
            pos, head = f.seek(0, os.SEEK_END), b""
            while pos > 0:
                start = max(0, pos - 65536)
                f.seek(start)
                lines = (f.read(pos - start) + head).split(b"\n")
                head, pos = (lines.pop(0) if start > 0 else b""), start  # the first line may be cut: keep it
                for line in reversed(lines):
                    entry = _parse(line)
                    if entry is None:
                        continue
                    if entry.cursor <= after:
                        return
                    yield entry

    def _refresh(self) -> None:
        """Parse only the bytes appended since the last read (the file is append-only)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self._entries, self._offset = [], 0
            return
        if size < self._offset:
            self._entries, self._offset = [], 0
        if size == self._offset:
            return
        entries, self._offset = read_entries(self.path, self._offset, self.warn)
        self._entries.extend(entries)

    def _last_cursor_on_disk(self) -> int:
        """The cursor of the last complete line, however long it is; guards against a stale or missing .cursor."""
        newest = next(self.newest_first(), None)
        return newest.cursor if newest else 0

    def _read_cursor(self, name: str, last: int) -> int | str | None:
        """The cursor in memory/`name` if it is a whole number from 0 to `last`; None when the file is missing;
        otherwise (a bad cursor) the text it holds, shortened."""
        try:
            text = (self.dir / name).read_text(encoding="utf-8", errors="replace").strip()
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"unreadable: {e.strerror}"
        if text.isascii() and text.isdigit() and int(text) <= last:
            return int(text)
        return text[:40]

    def _recovered(self, name: str, bad: str, last: int, used: int, consequence: str) -> int:
        message = (f"{self.dir / name} holds {bad!r}, not a cursor from 0 to {last} (the last in {self.path.name}); "
                   f"using {used}{consequence}")
        if message not in self._warned:
            self._warned.add(message)
            self.warn(message)
        return used

    @property
    def cursor(self) -> int:
        """The last cursor written: that of the last line in history.jsonl (`.cursor` only echoes it)."""
        last = self._last_cursor_on_disk()
        found = self._read_cursor(".cursor", last)
        if isinstance(found, str):
            return self._recovered(".cursor", found, last, last, "; the next entry rewrites it")
        return last

    @property
    def dream_cursor(self) -> int:
        last = self._last_cursor_on_disk()
        found = self._read_cursor(".dream_cursor", last)
        if found is None or isinstance(found, int):
            return found or 0
        if found.isascii() and found.isdigit():  # past the end: left there, every later entry would stay behind it
            self._clamp_dream_cursor()
            return self._recovered(".dream_cursor", found, last, last, " and wrote that there, so Dream takes the "
                                   "entries after it")
        return self._recovered(".dream_cursor", found, last, 0, ", so Dream reads all of history again; write the "
                               "last cursor Dream processed into the file to skip that")

    def _clamp_dream_cursor(self) -> None:
        """Write the last cursor into a `.dream_cursor` that is past it, unless the file changed meanwhile."""
        with file_lock(self.dir / ".history.lock"):  # set_dream_cursor takes it too: a Dream run's value stays
            last = self._last_cursor_on_disk()
            found = self._read_cursor(".dream_cursor", last)
            if isinstance(found, str) and found.isascii() and found.isdigit():
                atomic_write(self.dir / ".dream_cursor", f"{last}\n")

    def set_dream_cursor(self, cursor: int) -> None:
        with file_lock(self.dir / ".history.lock"):
            atomic_write(self.dir / ".dream_cursor", f"{cursor}\n")


def read_entries(path: Path, offset: int = 0,
                 warn: Callable[[str], None] | None = None) -> tuple[list[HistoryEntry], int]:
    """The entries in the complete lines after byte `offset`, and the offset just past the last of them.

    The one tolerant reader of history.jsonl: a torn last line is left for later (a writer may still be
    appending it) and a corrupt line is skipped, each with a warning when `warn` is given.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    complete = data.rfind(b"\n") + 1
    if complete < len(data) and warn:
        warn(f"{path}: skipped an incomplete last line (a previous run was interrupted)")
    entries = []
    for line in data[:complete].split(b"\n"):
        entry = _parse(line)
        if entry is not None:
            entries.append(entry)
        elif line.strip() and warn:
            warn(f"{path}: skipped a corrupt line ({line[:60]!r})")
    return entries, offset + complete


def _parse(line: bytes) -> HistoryEntry | None:
    if not line.strip():
        return None
    try:
        d = json.loads(line)
        cursor = int(d["cursor"])
        if not isinstance(d["content"], str) or not 0 <= cursor <= MAX_CURSOR:
            return None
        return HistoryEntry(cursor, str(d.get("timestamp", "")), str(d.get("session", "")),
                            d["content"], bool(d.get("raw", False)))
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):  # OverflowError: int(Infinity)
        return None
