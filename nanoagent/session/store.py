"""Sessions as append-only JSONL files under $NANOAGENT_HOME/sessions/.

Format (version 1), one JSON object a line:
    {"type": "header", "version": 1, "key": "cli:direct", "created": "2026-11-22T14:05:00+00:00"}
    {"type": "message", "message": {"role": "user", "content": "..."}}
    {"type": "meta", "last_consolidated": 12}          # partial update; later lines win
    {"type": "usage", "model": "...", "input_tokens": 10, ...}

Messages on disk are never rewritten. Writers hold an exclusive lock on
`<file>.lock` for a whole turn, cut a torn tail back to the last newline before
appending, and fsync at turn boundaries. The reader skips a torn or corrupt line
with a warning and keeps every complete record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanoagent.errors import NanoagentError
from nanoagent.fsutil import append_lines, file_lock, fsync_dir
from nanoagent.paths import session_file

FORMAT_VERSION = 1


class SessionBusy(NanoagentError):
    pass


@dataclass
class Session:
    key: str
    path: Path
    messages: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    usage: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0  # bytes of the file this object reflects; lets a reload read only what is new

    @property
    def last_consolidated(self) -> int:
        return int(self.meta.get("last_consolidated", 0))


class SessionStore:
    def __init__(self, directory: Path, warn: Any = None):
        self.directory = directory
        self.warn = warn or (lambda message: None)

    def path_for(self, key: str) -> Path:
        return session_file(self.directory, key)

    def load(self, key: str) -> Session:
        session = Session(key=key, path=self.path_for(key))
        self.refresh(session)
        return session

    def refresh(self, session: Session) -> None:
        """Bring `session` up to date with its file, reading only bytes added since it was last read."""
        try:
            size = session.path.stat().st_size
        except FileNotFoundError:
            return
        if size < session.size:  # another writer cut a torn tail: read the whole file again
            session.messages, session.meta, session.usage, session.size = [], {}, [], 0
        if size == session.size:
            return
        with open(session.path, "rb") as f:
            f.seek(session.size)
            data = f.read(size - session.size)
        complete = data.rfind(b"\n") + 1
        for line in data[:complete].splitlines():
            self._apply(session, line)
        if complete < len(data):
            self.warn(f"{session.path}: skipped an incomplete last line (a previous run was interrupted)")
        session.size += complete

    def _apply(self, session: Session, line: bytes) -> None:
        if not line.strip():
            return
        try:
            record = json.loads(line)
            kind = record["type"]
        except (ValueError, KeyError, TypeError):
            self.warn(f"{session.path}: skipped a corrupt line ({line[:60]!r}...)")
            return
        self._apply_record(session, record, kind)

    def _apply_record(self, session: Session, record: dict[str, Any], kind: str) -> None:
        if kind == "message" and isinstance(record.get("message"), dict):
            session.messages.append(record["message"])
        elif kind == "meta":
            session.meta.update({k: v for k, v in record.items() if k != "type"})
        elif kind == "header":
            session.meta.setdefault("created", record.get("created"))
            if record.get("version", 1) > FORMAT_VERSION:
                self.warn(f"{session.path} was written by a newer nanoagent (format {record['version']}); "
                          "reading what this version understands")
        elif kind == "usage":
            session.usage.append(record)

    # --- writing -------------------------------------------------------------

    def append(self, session: Session, records: list[dict[str, Any]], sync: bool = False) -> None:
        """Append records as whole lines. Call while holding `lock(session)`."""
        new_file = not session.path.exists()
        if new_file:
            created = datetime.now(UTC).isoformat(timespec="seconds")
            header = {"type": "header", "version": FORMAT_VERSION, "key": session.key, "created": created}
            records = [header, *records]
            session.meta.setdefault("created", created)
        payload = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)
        end = append_lines(session.path, payload, sync)
        if new_file:
            fsync_dir(session.path.parent)
        if end != session.size:  # someone else wrote since we last read; pick it up
            self.refresh(session)
        else:
            session.size = end + len(payload)
            for record in records:
                self._apply_record(session, record, record["type"])

    def add_messages(self, session: Session, messages: list[dict[str, Any]], sync: bool = False) -> None:
        self.append(session, [{"type": "message", "message": m} for m in messages], sync=sync)

    def set_meta(self, session: Session, sync: bool = True, **fields: Any) -> None:
        self.append(session, [{"type": "meta", **fields}], sync=sync)

    def sync(self, session: Session) -> None:
        if session.path.exists():
            fd = os.open(session.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    @contextmanager
    def lock(self, session: Session, timeout: float = 600.0) -> Iterator[None]:
        """Exclusive lock for one turn; refreshes the session from disk once held."""
        busy = SessionBusy(f"Session {session.key} is busy in another nanoagent process; "
                           "wait for it to finish or use another session with -s.")
        with file_lock(Path(f"{session.path}.lock"), timeout, busy):
            self.refresh(session)
            yield

    def keys(self) -> list[str]:
        keys = []
        for path in sorted(self.directory.glob("*.jsonl")):
            try:
                with open(path, "rb") as f:
                    header = json.loads(f.readline())
                keys.append(header["key"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return keys
