"""The prompt bounds a process learned, kept for the next process: `spend/bounds.jsonl` under the home.

The retry layer (`providers/metered.PromptBounds`) bounds a session's next request by the prompt tokens the provider
reported for the one before plus the appended messages' bytes. A one-shot (`agent -m`) is a new process: without this
file it would count its whole prompt by bytes, the fixed part (system prompt and tools) about 4x its real tokens.

Two small tables, each an LRU of 256: `sessions` (key "session, model, fingerprint of system and tools": the message
count, hashes of the first and last message sent, the last's byte bound, the reported prompt tokens) and `fixed` (key
"model, fingerprint": the fewest prompt tokens reported for any request with that fixed part, an upper bound on the
fixed part's own tokens since messages cost at least nothing). The file is a journal: a line appended (under its own
lock) after each call whose provider reported its tokens, read once per process and then from where it was read only
when a lookup misses; past 1,024 lines it is rewritten whole (atomically) with the tables. A missing file, a line that
does not parse or a torn last line is no error: what it held is not known, so those requests count bytes.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from nanoagent.fsutil import append_lines, atomic_write, file_lock

KEPT = 256  # entries of each table
COMPACT = 4 * KEPT  # lines in the journal before it is rewritten with the tables alone
FILE = "bounds.jsonl"


class BoundsMemo:
    """The persisted memo of one spend folder. An entry of `sessions` is [count, first, last, last_bound, tokens]."""

    def __init__(self, folder: Path):
        self.path = folder / FILE
        self.lock_file = folder / "bounds.lock"
        self.sessions: OrderedDict[str, list[Any]] = OrderedDict()
        self.fixed: OrderedDict[str, int] = OrderedDict()
        self._file: tuple[int, int] | None = None  # (device, inode) of the journal read
        self._offset = 0  # how far it was read (whole lines)
        self._lines = 0
        self._mutex = threading.Lock()

    def session(self, key: str) -> list[Any] | None:
        found = self.sessions.get(key)
        if found is None and self._catch_up():
            found = self.sessions.get(key)
        return found

    def fixed_tokens(self, key: str) -> int | None:
        found = self.fixed.get(key)
        if found is None and self._catch_up():
            found = self.fixed.get(key)
        return found

    def record(self, session_key: str | None, entry: list[Any] | None, fixed_key: str, tokens: int) -> None:
        """Remember a request's reported prompt tokens, here and in the journal."""
        with self._mutex:
            if not self._put(session_key, entry, fixed_key, tokens):
                return
            line = (json.dumps([session_key, entry, fixed_key, tokens], separators=(",", ":")) + "\n").encode()
            try:
                with file_lock(self.lock_file):
                    if self._lines >= COMPACT:
                        self._read()  # what other processes wrote meanwhile, kept in the rewrite
                        self._rewrite()
                        return
                    end = append_lines(self.path, line)
                    if end == self._offset:  # else others wrote since it was read: read from there next time
                        self._offset = end + len(line)
                    self._lines += 1
            except OSError:  # a memo only: without it the next process counts bytes
                pass

    def _rewrite(self) -> None:
        lines = [[None, None, key, tokens] for key, tokens in self.fixed.items()] + \
            [[key, entry, None, 0] for key, entry in self.sessions.items()]
        data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
        atomic_write(self.path, data)
        st = os.stat(self.path)
        self._file, self._offset, self._lines = (st.st_dev, st.st_ino), len(data), len(lines)

    def _put(self, session_key: str | None, entry: list[Any] | None, fixed_key: str | None, tokens: int) -> bool:
        changed = False
        if session_key is not None and entry is not None and self.sessions.get(session_key) != entry:
            self.sessions[session_key] = entry
            self.sessions.move_to_end(session_key)
            while len(self.sessions) > KEPT:
                self.sessions.popitem(last=False)
            changed = True
        known = self.fixed.get(fixed_key) if fixed_key is not None else 0
        if fixed_key is not None and (known is None or tokens < known):
            self.fixed[fixed_key] = tokens
            self.fixed.move_to_end(fixed_key)
            while len(self.fixed) > KEPT:
                self.fixed.popitem(last=False)
            changed = True
        return changed

    def _catch_up(self) -> bool:
        with self._mutex:
            return self._read()

    def _read(self) -> bool:
        """Read the journal's lines written since it was last read (all of it when it was replaced): True when any."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if (st.st_dev, st.st_ino) != self._file or st.st_size < self._offset:
                    self._file, self._offset, self._lines = (st.st_dev, st.st_ino), 0, 0
                if st.st_size == self._offset:
                    return False
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return False
        whole = data.rfind(b"\n") + 1  # a line still being written (or torn) is left for later
        self._offset += whole
        learned = False
        for raw in data[:whole].splitlines():
            self._lines += 1
            try:
                session_key, entry, fixed_key, tokens = json.loads(raw)
            except (ValueError, TypeError):
                continue
            if session_key is not None and not (isinstance(session_key, str) and _entry_ok(entry)):
                continue
            if fixed_key is not None and not (isinstance(fixed_key, str) and _count_ok(tokens)):
                continue
            learned = self._put(session_key, entry, fixed_key, tokens) or learned
        return learned


def _count_ok(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _entry_ok(entry: Any) -> bool:
    return isinstance(entry, list) and len(entry) == 5 and _count_ok(entry[0]) and isinstance(entry[1], str) \
        and isinstance(entry[2], str) and _count_ok(entry[3]) and _count_ok(entry[4])


_memos: dict[Path, BoundsMemo] = {}


def memo_for(folder: Path) -> BoundsMemo:
    """The one memo of `folder` in this process."""
    memo = _memos.get(folder)
    if memo is None:
        if len(_memos) > 64:
            _memos.clear()
        memo = _memos[folder] = BoundsMemo(folder)
    return memo
