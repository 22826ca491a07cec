"""Sessions as append-only JSONL files under $NANOAGENT_HOME/sessions/.

Format (version 1), one JSON object a line:
    {"type": "header", "version": 1, "key": "cli:direct", "created": "2026-11-22T14:05:00+00:00"}
    {"type": "message", "message": {"role": "user", "content": "..."}}
    {"type": "meta", "last_consolidated": 12}          # partial update; later lines win (also model, title, flushed, ...)
    {"type": "usage", "model": "...", "input_tokens": 10, ...}
    {"type": "turn_failed", "start": 14, "end": 16, "error": "..."}   # messages[14:16] are not sent again
    {"type": "notice", "ts": "...", "source": "subagent 3fa9c1", "text": "..."}   # not a message (see SessionNotice)

A temporary (incognito) session lives in `sessions/incognito/`, out of `keys()`, `sessions list` and the search
index (which read `sessions/*.jsonl`), and its header says so and names the process that owns it:
    {"type": "header", ..., "incognito": true, "pid": 4242}
It is deleted when it ends (`end_incognito`); one whose owner died (kill -9) is deleted by the next process that
starts (`sweep_incognito`). Its usage records go first to `sessions/incognito/usage.jsonl`, the spend ledger, so
what it cost is still counted while nothing of what was said is kept.

Messages on disk are never rewritten (except by `reset`, for the heartbeat's session, which starts
afresh each run and keeps only its usage records). Writers hold an exclusive lock on
`<file>.lock` for a whole turn, cut a torn tail back to the last newline before
appending, and fsync at turn boundaries. The reader skips a torn or corrupt line
with a warning and keeps every complete record; a record of the wrong shape (a
message whose content is a number, a meta value of the wrong type) is skipped or
clamped with a warning naming the line, so no stored value can break a later turn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanoagent.errors import NanoagentError
from nanoagent.fsutil import append_lines, async_file_lock, atomic_write, file_lock, fsync_dir, private_dir
from nanoagent.messages import Message, checked_message
from nanoagent.paths import check_session_key, safe_key, session_file
from nanoagent.procguard import alive
from nanoagent.usage import UsageRecord

FORMAT_VERSION = 1


class SessionBusy(NanoagentError):
    pass


@dataclass
class SessionMeta:
    """The meta lines of a session file, folded: each `{"type": "meta", ...}` line updates these fields."""

    created: str = ""
    model: str = ""  # the model /model chose for this session; "" means the default
    title: str = ""  # the chat's name, given by its person or a model call; "" means its first words (session/titles.py)
    last_consolidated: int = 0  # messages before this index are archived to history.jsonl
    notices_delivered: int = 0  # notices before this index went to the model in a turn's opening message
    flushed: int = 0  # the memory flush has run (or was claimed) for the messages before this index
    pruned: int = 0  # long tool results before this index are sent trimmed (`agent/budget.py`)
    pruned_calls: int = 0  # usage records the session held when `pruned` last moved
    incognito: bool = False  # a temporary chat: never archived, Dreamed or indexed; deleted when it ends


@dataclass(frozen=True)
class SessionNotice:
    """A record that is neither a message nor the user's words: something that happened beside the conversation
    (a background sub-agent's result). It is shown when it arrives; the next turn's opening message gives it to
    the model, outside the user's own text."""

    at: int  # messages the session held when it arrived
    source: str  # who it is from, e.g. "subagent 3fa9c1"
    text: str  # what the model is given
    ts: str = ""


@dataclass
class Session:
    key: str
    path: Path
    messages: list[Message] = field(default_factory=list)
    meta: SessionMeta = field(default_factory=SessionMeta)
    usage: list[UsageRecord] = field(default_factory=list)
    failed_turns: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of turns that failed
    notices: list[SessionNotice] = field(default_factory=list)
    size: int = 0  # bytes of the file this object reflects; lets a reload read only what is new
    lines: int = 0  # lines read so far, so a warning can name the line
    ended: bool = False  # a temporary session that was deleted: the key's turns go back to its saved session

    @property
    def last_consolidated(self) -> int:
        return min(self.meta.last_consolidated, len(self.messages))

    def pending_notices(self) -> list[SessionNotice]:
        """Notices the model has not been given yet."""
        return self.notices[self.meta.notices_delivered:]

    def failed(self) -> frozenset[int]:
        """Indexes of messages in turns that failed: kept on disk, never sent to the model again."""
        return frozenset(i for start, end in self.failed_turns for i in range(start, end))


INCOGNITO_DIR = "incognito"
SPEND_LEDGER = "usage.jsonl"  # in INCOGNITO_DIR: the usage records of ended temporary sessions, nothing else
ENDED = ".ended"  # in INCOGNITO_DIR, `<safe key>.ended`: that key's temporary chat ended without its person asking
_OWN: set[Path] = set()  # the temporary session files of this process: a sweep never takes them


class SessionStore:
    def __init__(self, directory: Path, warn: Callable[[str], None] | None = None):
        self.directory = directory
        self.warn = warn or (lambda message: None)
        self.temporary: dict[str, Session] = {}  # key -> the temporary session that key's turns go to now

    def path_for(self, key: str) -> Path:
        return session_file(self.directory, key)

    def load(self, key: str) -> Session:
        session = Session(key=key, path=self.path_for(check_session_key(key)))
        self.refresh(session)
        return session

    def refresh(self, session: Session) -> None:
        """Bring `session` up to date with its file, reading only bytes added since it was last read."""
        try:
            size = session.path.stat().st_size
        except FileNotFoundError:  # removed (`remove`) since it was read: the key starts afresh
            if session.size and not session.meta.incognito:
                session.messages, session.meta, session.usage, session.failed_turns = [], SessionMeta(), [], []
                session.notices, session.size, session.lines = [], 0, 0
            return
        if size < session.size:  # another writer cut a torn tail: read the whole file again
            fresh = Session(session.key, session.path)
            session.messages, session.meta, session.usage, session.failed_turns = [], fresh.meta, [], []
            session.notices = []
            session.size = session.lines = 0
        if size == session.size:
            return
        with open(session.path, "rb") as f:
            f.seek(session.size)
            data = f.read(size - session.size)
        complete = data.rfind(b"\n") + 1
        for line in data[:complete].splitlines():
            session.lines += 1
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
            self.warn(f"{session.path} line {session.lines}: skipped a corrupt line ({line[:60]!r}...)")
            return
        self._apply_record(session, record, kind)

    def _apply_record(self, session: Session, record: dict[str, Any], kind: Any) -> None:
        where = f"{session.path} line {session.lines}"
        if kind == "message":
            message, problem = checked_message(record.get("message"))
            if message is None:
                self.warn(f"{where}: skipped a message ({problem})")
            else:
                session.messages.append(message)
        elif kind == "meta":
            self._apply_meta(session, record, where)
        elif kind == "header":
            if not session.meta.created and isinstance(record.get("created"), str):
                session.meta.created = record["created"]
            if record.get("incognito") is True:
                session.meta.incognito = True
            version = record.get("version", 1)
            if isinstance(version, int) and version > FORMAT_VERSION:
                self.warn(f"{session.path} was written by a newer nanoagent (format {version}); "
                          "reading what this version understands")
        elif kind == "usage":
            session.usage.append(UsageRecord.from_json(record))
        elif kind == "turn_failed":
            start, end = record.get("start"), record.get("end")
            if isinstance(start, int) and isinstance(end, int) and _index(start) and start < end:
                session.failed_turns.append((start, end))
        elif kind == "notice":
            source, text, ts = record.get("source"), record.get("text"), record.get("ts", "")
            if isinstance(source, str) and isinstance(text, str) and isinstance(ts, str):
                session.notices.append(SessionNotice(len(session.messages), source, text, ts))
            else:
                self.warn(f"{where}: skipped a notice (its source and text must be text)")

    def _apply_meta(self, session: Session, record: dict[str, Any], where: str) -> None:
        meta = session.meta
        if "last_consolidated" in record:
            value, count = record["last_consolidated"], len(session.messages)
            if not isinstance(value, int) or isinstance(value, bool):
                self.warn(f"{where}: ignored last_consolidated {value!r} (it must be a whole number)")
            elif not 0 <= value <= count:
                clamped = min(max(value, 0), count)
                self.warn(f"{where}: last_consolidated {value} is outside the session's {count} messages; "
                          f"read as {clamped}")
                meta.last_consolidated = clamped
            else:
                meta.last_consolidated = value
        for name in ("model", "title"):
            if name in record:
                value = record[name]
                if isinstance(value, str):
                    setattr(meta, name, value)
                else:
                    self.warn(f"{where}: ignored {name} {value!r} (it must be text)")
        if "created" in record and isinstance(record["created"], str):
            meta.created = record["created"]
        for name in ("flushed", "pruned", "pruned_calls"):
            if name in record:
                value = record[name]
                if _index(value):
                    setattr(meta, name, value)
                else:
                    self.warn(f"{where}: ignored {name} {value!r} (it must be a whole number)")
        if "notices_delivered" in record:
            value = record["notices_delivered"]
            if _index(value):
                meta.notices_delivered = min(value, len(session.notices))
            else:
                self.warn(f"{where}: ignored notices_delivered {value!r} (it must be a whole number)")

    # --- writing -------------------------------------------------------------

    def append(self, session: Session, records: list[dict[str, Any]], sync: bool = False) -> None:
        """Append records as whole lines. Call while holding `lock(session)`."""
        new_file = not session.path.exists()
        if new_file:
            created = datetime.now(UTC).isoformat(timespec="seconds")
            header: dict[str, Any] = {"type": "header", "version": FORMAT_VERSION, "key": session.key,
                                      "created": created}
            if session.meta.incognito:
                header.update(incognito=True, pid=os.getpid())
            records = [header, *records]
        payload = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)
        end = append_lines(session.path, payload, sync)
        if new_file:
            fsync_dir(session.path.parent)
        if end != session.size:  # someone else wrote since we last read; pick it up
            self.refresh(session)
        else:
            session.size = end + len(payload)
            for record in records:
                session.lines += 1
                self._apply_record(session, record, record["type"])

    def add_messages(self, session: Session, messages: list[Message], sync: bool = False,
                     notices_delivered: int | None = None) -> None:
        """`notices_delivered`: the messages carry the session's notices up to that index to the model (written in
        the same append, so both or neither are on disk)."""
        records: list[dict[str, Any]] = [{"type": "message", "message": m} for m in messages]
        if notices_delivered is not None:
            records.append({"type": "meta", "notices_delivered": notices_delivered})
        self.append(session, records, sync=sync)

    def add_notice(self, session: Session, source: str, text: str) -> None:
        record = {"type": "notice", "ts": datetime.now(UTC).isoformat(timespec="seconds"), "source": source,
                  "text": text}
        self.append(session, [record], sync=True)

    def add_usage(self, session: Session, record: UsageRecord, sync: bool = False) -> None:
        self.append(session, [record.to_json()], sync=sync)

    def set_model(self, session: Session, model: str) -> None:
        self.append(session, [{"type": "meta", "model": model}], sync=True)

    def set_title(self, session: Session, title: str) -> None:
        self.append(session, [{"type": "meta", "title": title}], sync=True)

    def remove(self, session: Session) -> None:
        """Delete a saved session (`sessions rm`, the web app's Delete): SessionBusy while a turn holds it. What it
        cost stays in the spend ledger, and what was archived stays in memory."""
        with self.lock(session, timeout=0):
            session.path.unlink()
        Path(f"{session.path}.lock").unlink(missing_ok=True)

    def set_consolidated(self, session: Session, index: int) -> None:
        self.append(session, [{"type": "meta", "last_consolidated": index}], sync=True)

    def set_flushed(self, session: Session, index: int) -> None:
        self.append(session, [{"type": "meta", "flushed": index}], sync=True)

    def set_pruned(self, session: Session, index: int) -> None:
        record = {"type": "meta", "pruned": index, "pruned_calls": len(session.usage)}
        self.append(session, [record], sync=True)

    def mark_failed(self, session: Session, start: int, error: str) -> None:
        """The turn whose messages start at `start` failed: keep them on disk, never send them again."""
        record = {"type": "turn_failed", "start": start, "end": len(session.messages), "error": error[:500]}
        self.append(session, [record], sync=True)

    def reset(self, session: Session) -> None:
        """Start the session afresh, for one that begins anew each run (the heartbeat): its messages go, its usage
        records stay (without the message windows they measured) for `nanoagent usage`. Call while holding
        `lock(session)`."""
        self.refresh(session)
        if not session.messages and not session.failed_turns:
            return
        usage = [dataclasses.replace(record, window=None) for record in session.usage]
        created = session.meta.created or datetime.now(UTC).isoformat(timespec="seconds")
        records = [{"type": "header", "version": FORMAT_VERSION, "key": session.key, "created": created},
                   *(record.to_json() for record in usage)]
        payload = b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)
        atomic_write(session.path, payload, mode=0o600)
        session.messages, session.meta, session.usage, session.failed_turns = [], SessionMeta(created), usage, []
        session.size, session.lines = len(payload), len(records)

    def sync(self, session: Session) -> None:
        if session.path.exists():
            fd = os.open(session.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    @contextmanager
    def lock(self, session: Session, timeout: float = 600.0,
             waiting: Callable[[str], None] | None = None) -> Iterator[None]:
        """Exclusive lock for one turn; refreshes the session from disk once held. After a second of waiting for
        another process, `waiting` (default: the store's `warn`) is told who holds it."""
        with file_lock(Path(f"{session.path}.lock"), timeout, _busy(session), self._waiting(session, waiting)):
            self.refresh(session)
            yield

    @asynccontextmanager
    async def lock_async(self, session: Session, timeout: float = 600.0,
                         waiting: Callable[[str], None] | None = None) -> AsyncIterator[None]:
        """`lock` for a running event loop: waits without blocking other sessions' turns."""
        async with async_file_lock(Path(f"{session.path}.lock"), timeout, _busy(session),
                                   self._waiting(session, waiting)):
            self.refresh(session)
            yield

    def _waiting(self, session: Session, say: Callable[[str], None] | None) -> Callable[[int | None], None]:
        def waiting(pid: int | None) -> None:
            who = f" (pid {pid})" if pid is not None and pid != os.getpid() else ""
            (say or self.warn)(f"Waiting for session {session.key}: another nanoagent process{who} is using it; "
                               "this goes on when it finishes (Ctrl-C to stop, or use another session with -s).")

        return waiting

    # --- temporary (incognito) sessions ---------------------------------------------------

    @property
    def incognito_dir(self) -> Path:
        return self.directory / INCOGNITO_DIR

    def start_incognito(self, key: str) -> Session:
        """A new temporary session for `key`: from now on that key's turns go to it (see `temporary`). Its file is
        made at its first message, in `incognito_dir`, named for this process so two never share one."""
        private_dir(self.incognito_dir)
        name = f"{safe_key(check_session_key(key))}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
        session = Session(key=key, path=self.incognito_dir / name,
                          meta=SessionMeta(created=datetime.now(UTC).isoformat(timespec="seconds"), incognito=True))
        self.temporary[key] = session
        _OWN.add(session.path)
        self._ended_mark(key).unlink(missing_ok=True)
        return session

    def end_incognito(self, session: Session, unasked: bool = False) -> None:
        """Delete a temporary session: its usage records go to the spend ledger, then its file and lock go.
        `unasked`: it ended without its person asking (an idle hour, the gateway stopping), so the key's next
        message is refused once rather than going to the saved session unannounced (`take_ended`)."""
        self.refresh(session)
        self._discard(session.path, session.usage)
        session.ended = True
        if self.temporary.get(session.key) is session:
            del self.temporary[session.key]
        if unasked:
            self._mark_ended(session.key)

    def end_all_incognito(self, unasked: bool = False) -> int:
        """End every temporary session of this store (the gateway stopping, the terminal closing)."""
        ended = list(self.temporary.values())
        for session in ended:
            self.end_incognito(session, unasked)
        return len(ended)

    def take_ended(self, key: str) -> bool:
        """Whether `key`'s temporary chat ended without its person asking since they last wrote (said once)."""
        mark = self._ended_mark(key)
        if not mark.exists():
            return False
        mark.unlink(missing_ok=True)
        return True

    def _ended_mark(self, key: str) -> Path:
        return self.incognito_dir / f"{safe_key(key)}{ENDED}"

    def _mark_ended(self, key: str) -> None:
        with contextlib.suppress(NanoagentError):
            check_session_key(key)
            private_dir(self.incognito_dir)
            atomic_write(self._ended_mark(key), b"", mode=0o600)

    def sweep_incognito(self) -> int:
        """Delete the temporary sessions whose owning process is gone (killed before it could): at every start."""
        folder = self.incognito_dir
        if not folder.is_dir():
            return 0
        swept = 0
        for path in sorted(folder.glob("*.jsonl")):
            header = _header(path)
            if header is None or header.get("incognito") is not True:
                continue
            pid = header.get("pid")
            if path in _OWN or (isinstance(pid, int) and pid != os.getpid() and alive(pid)):
                continue
            session = self.load_file(path)
            self._discard(path, session.usage)
            if session.messages:
                self._mark_ended(session.key)
            swept += 1
        return swept

    def load_file(self, path: Path) -> Session:
        session = Session(key=_header_key(path) or path.stem, path=path)
        self.refresh(session)
        return session

    def incognito_usage(self) -> list[UsageRecord]:
        """The usage records of ended temporary sessions (what they cost, not what was said)."""
        ledger = self.incognito_dir / SPEND_LEDGER
        if not ledger.exists():
            return []
        return self.load_file(ledger).usage

    def _discard(self, path: Path, usage: list[UsageRecord]) -> None:
        if usage:
            private_dir(path.parent)
            records = [dataclasses.replace(record, window=None).to_json() for record in usage]
            ledger = path.parent / SPEND_LEDGER
            busy = SessionBusy(f"{ledger} is locked by another nanoagent process; try again when it finishes.")
            with file_lock(Path(f"{ledger}.lock"), 60.0, busy):
                append_lines(ledger, b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n"
                                              for r in records), True)
        for gone in (path, Path(f"{path}.lock")):
            gone.unlink(missing_ok=True)
        _OWN.discard(path)
        fsync_dir(path.parent)

    def keys(self) -> list[str]:
        return [key for path in sorted(self.directory.glob("*.jsonl")) if (key := _header_key(path)) is not None]

    def keys_with_prefix(self, prefix: str) -> list[str]:
        """Keys of saved sessions that start with `prefix`, found by file name (the mapping keeps prefixes)."""
        paths = sorted(self.directory.glob(f"{safe_key(prefix)}*.jsonl"))
        return [key for path in paths if (key := _header_key(path)) is not None and key.startswith(prefix)]


def _header_key(path: Path) -> str | None:
    header = _header(path)
    key = header.get("key") if header is not None else None
    return key if isinstance(key, str) else None


def _header(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) and header.get("type") == "header" else None


def _index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _busy(session: Session) -> SessionBusy:
    return SessionBusy(f"Session {session.key} is busy in another nanoagent process; "
                       "wait for it to finish or use another session with -s.")
