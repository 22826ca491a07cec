"""memory/history.jsonl: the mid-term memory, append-only, one summary a line.

    {"cursor": 42, "timestamp": "2026-11-22 14:05", "session": "cli:direct", "content": "...", "raw": false}

A line whose stretch of conversation held text from outside (a tool's result, a transcript: anything in an
untrusted-data envelope) also carries `"outside": true`; lines without it read as `outside: False`.

`memory/.cursor` holds the last cursor written and `memory/.dream_cursor` the last
cursor Dream has processed, each a plain integer. Allocating a cursor and appending
happen under one exclusive lock, so two processes never write the same cursor.

Each line carries its own cursor, so history.jsonl is the truth: a cursor file that is
not a whole number, or is past the last line's cursor, is read (with a warning naming it)
as the last cursor in history.jsonl, or as 0 for a `.dream_cursor` that is not a number.
A `.dream_cursor` past the end is also rewritten, or every later entry would stay behind it.
Cursors stay within SQLite's integers (the search index stores them); a line with a cursor
outside 0..MAX_CURSOR is corrupt.

Each line nanoagent writes carries `mac`, an HMAC-SHA256 of its fields under a key kept in
$NANOAGENT_HOME (`history.key`, 0600, outside the workspace and hidden from sandboxed commands).
An entry without a valid one (written before entries were signed, under another home, or by
something other than nanoagent) is `verified: False`: it reaches a prompt only as untrusted data.
A line with `outside` is signed with it (format 2 of the signed fields); one without, as before (format 1): so
entries written before the field verify unchanged, and dropping or changing the field breaks the signature. An
older nanoagent reads a flagged line as unverified, so it too shows it only as untrusted data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from nanoagent.fsutil import append_lines, atomic_write, file_lock, private_dir
from nanoagent.messages import wrap_untrusted

MAX_CURSOR = 2**63 - 1  # SQLite's largest integer


@dataclass(frozen=True)
class HistoryEntry:
    cursor: int
    timestamp: str
    session: str
    content: str
    raw: bool = False
    verified: bool = False  # its mac proves nanoagent wrote it under this home's key
    outside: bool = False  # the stretch it archives held text from outside: the summary may quote it

    @property
    def trusted(self) -> bool:
        """A summary nanoagent wrote of a stretch with no text from outside: the model's own words. Anything else (a
        raw excerpt of the conversation, a summary that may quote outside text, an entry nanoagent cannot prove it
        wrote) reaches a prompt only inside the untrusted envelope (`shown`)."""
        return self.verified and not self.raw and not self.outside

    @property
    def note(self) -> str:
        """Why the entry is not trusted, said beside it ("" for a trusted one)."""
        if self.raw:
            return "raw excerpt"
        if not self.verified:
            return "unverified: not signed by nanoagent"
        return "a summary of a stretch that held outside text" if self.outside else ""

    def shown(self, text: str, source: str) -> str:
        """`text` (the entry's content, or a part of it) as it reaches a model: a trusted summary as written, any
        other entry inside `wrap_untrusted`, its source naming why."""
        return text if self.trusted else wrap_untrusted(f"{source} ({self.note})", text)


class HistoryLog:
    def __init__(self, memory_dir: Path, warn: Callable[[str], None] = lambda message: None,
                 key_file: Path | None = None):
        self.dir = memory_dir
        self.warn = warn
        self.key_file = key_file  # None: entries are not signed, and none reads as verified
        self._key: bytes | None = None
        self._entries: list[HistoryEntry] = []
        self._offset = 0  # bytes of the file already parsed into _entries
        self._warned: set[str] = set()  # each bad cursor file is reported once per HistoryLog

    @property
    def path(self) -> Path:
        return self.dir / "history.jsonl"

    def append(self, session: str, content: str, raw: bool = False, now: datetime | None = None,
               outside: bool = False) -> HistoryEntry:
        """Append an entry; `outside`: the stretch it archives held text from outside (see the module's docstring)."""
        with file_lock(self.dir / ".history.lock"):  # cursor allocation and append are one step
            cursor = self.cursor + 1
            stamp = (now or datetime.now().astimezone()).strftime("%Y-%m-%d %H:%M")
            key = self.key()
            entry = HistoryEntry(cursor, stamp, session, content, raw, verified=key is not None, outside=outside)
            record: dict[str, object] = {"cursor": cursor, "timestamp": stamp, "session": session, "content": content,
                                         "raw": raw}
            if outside:  # only then: a plain entry stays format 1, readable as verified by older versions
                record["outside"] = True
            if key is not None:
                record["mac"] = _mac(key, cursor, stamp, session, content, raw, True if outside else None)
            line = json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
            append_lines(self.path, line, sync=True)
            atomic_write(self.dir / ".cursor", f"{cursor}\n")
            return entry

    def key(self) -> bytes | None:
        """The signing key, made on first use (None without a key file)."""
        if self._key is None and self.key_file is not None:
            self._key = history_key(self.key_file)
        return self._key

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
                    entry = _parse(line, self.key())
                    if entry is None:
                        continue
                    if entry.cursor <= after:
                        return
                    yield entry

    def around(self, cursor: int, before: int = 0, after: int = 0) -> list[HistoryEntry]:
        """The entries with cursors from `cursor - before` to `cursor + after`, found by bisecting the file (lines
        are in cursor order), so the cost follows how many are read, not how long the history is."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return []
        first, last = cursor - before, cursor + after
        out: list[HistoryEntry] = []
        with f:
            lo, hi = 0, f.seek(0, os.SEEK_END)  # lo: a line start at or before the first wanted line
            while hi - lo > 4096:
                mid = (lo + hi) // 2
                f.seek(mid)
                f.readline()  # the rest of the line mid falls in
                start = f.tell()
                found = _cursor_of(f.readline())
                if found is not None and found < first and start < hi:
                    lo = f.tell()
                else:
                    hi = mid
            f.seek(lo)
            for line in f:
                found = _cursor_of(line)
                if found is None or found < first:
                    continue
                entry = _parse(line.rstrip(b"\n"), self.key())
                if entry is None:
                    continue
                if entry.cursor > last:
                    break
                out.append(entry)
        return out

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
        entries, self._offset = read_entries(self.path, self._offset, self.warn, self.key())
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
        if not text:  # made empty before nanoagent first wrote it (see tools.sandbox.prepare_protected)
            return None
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


def history_key(path: Path) -> bytes:
    """The home's key for signing history entries: read, or made (32 random bytes, 0600) by whoever comes first."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(32))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes()


def _mac(key: bytes, cursor: int, stamp: str, session: str, content: str, raw: object, outside: object = None) -> str:
    """The signature of a line's fields as written: format 1 without `outside` (None), format 2 with it."""
    signed = [cursor, stamp, session, content, raw] + ([] if outside is None else [outside])
    fields = json.dumps([f"nanoagent-history-{1 if outside is None else 2}", *signed], ensure_ascii=False)
    return hmac.new(key, fields.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def read_entries(path: Path, offset: int = 0, warn: Callable[[str], None] | None = None,
                 key: bytes | None = None) -> tuple[list[HistoryEntry], int]:
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
        entry = _parse(line, key)
        if entry is not None:
            entries.append(entry)
        elif line.strip() and warn:
            warn(f"{path}: skipped a corrupt line ({line[:60]!r})")
    return entries, offset + complete


def _cursor_of(line: bytes) -> int | None:
    try:
        cursor = json.loads(line)["cursor"]
    except (ValueError, KeyError, TypeError):
        return None
    return cursor if isinstance(cursor, int) and not isinstance(cursor, bool) else None


def _parse(line: bytes, key: bytes | None = None) -> HistoryEntry | None:
    if not line.strip():
        return None
    try:
        d = json.loads(line)
        cursor = int(d["cursor"])
        if not isinstance(d["content"], str) or not 0 <= cursor <= MAX_CURSOR:
            return None
        outside = d.get("outside")
        entry = HistoryEntry(cursor, str(d.get("timestamp", "")), str(d.get("session", "")),
                             d["content"], bool(d.get("raw", False)), outside=bool(outside))
        mac = d.get("mac")
        if key is not None and isinstance(mac, str) and mac.isascii() and type(d["cursor"]) is int and hmac.compare_digest(
                mac, _mac(key, cursor, entry.timestamp, entry.session, entry.content, d.get("raw", False), outside)):
            return dataclasses.replace(entry, verified=True)
        return entry
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):  # OverflowError: int(Infinity)
        return None
