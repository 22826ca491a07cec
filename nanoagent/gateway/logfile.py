"""The gateway's log: `logs/gateway.log`, one JSON record a line (0600), kept to about MAX_BYTES by moving it to
`gateway.log.1` (the one older file kept), and the same records as human lines (`nanoagent gateway logs`, and what a
gateway in the foreground shows on stderr).

A record is `{"time": ISO-8601 UTC, "level": "info", "source": "gateway", "event": ..., fields...}`: the structured
lines the gateway's parts log (`server._record`, `channels.base.record`) keep their fields; a plain-text line is
`{"event": "message", "message": text}`. Like those lines, a record never holds a message's text nor a key.

Each record is appended through a file opened for that write: the gateway and its supervisor (another process) write
to the same file, and either may move it aside, so neither keeps a descriptor to a file that is gone.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from nanoagent.fsutil import private_dir

MAX_BYTES = 5 * 1024 * 1024
FILE = "gateway.log"


def log_path(logs_dir: Path) -> Path:
    return logs_dir / FILE


def record_of(entry: logging.LogRecord) -> dict[str, Any]:
    """The JSON record of a log call: its structured fields when the message is one (a JSON object), else its text."""
    message = entry.getMessage()
    fields: dict[str, Any] = {}
    if message.startswith("{"):
        try:
            parsed = json.loads(message)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "event" in parsed:
            fields = parsed
    if not fields:
        fields = {"event": "message", "message": message}
    if entry.exc_info and entry.exc_info[0] is not None:
        fields.setdefault("error", entry.exc_info[0].__name__)
    source = entry.name.removeprefix("nanoagent.").removeprefix("nanoagent") or "nanoagent"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(entry.created)) + f".{int(entry.msecs):03d}Z"
    return {"time": stamp, "level": entry.levelname.lower(), "source": source, **fields}


def append(path: Path, record: dict[str, Any]) -> None:
    """One record at the end of the log, which moves to `.1` once past MAX_BYTES."""
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        os.replace(path, path.with_name(path.name + ".1"))


class JsonLog(logging.Handler):
    """The gateway's records into `logs/gateway.log`. A write that fails (a full disk) is skipped."""

    def __init__(self, path: Path, level: int = logging.INFO):
        super().__init__(level)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            append(self.path, record_of(record))
        except OSError:
            pass


class Human(logging.Formatter):
    """A log call as `human` shows its record."""

    def format(self, record: logging.LogRecord) -> str:
        return human(record_of(record))


def human(record: dict[str, Any]) -> str:
    """One line a person reads: local time, the level past info, the event in words, then its fields.
    `2026-11-28 21:40:03 error  component crashed: component telegram, error ConnectError, restart in 5`"""
    fields = {k: v for k, v in record.items() if k not in ("time", "level", "source", "event")}
    try:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(_epoch(str(record.get("time", "")))))
    except ValueError:
        when = str(record.get("time", ""))
    level = str(record.get("level", "info"))
    event = str(record.get("event", "message"))
    if event == "message":
        text = str(fields.pop("message", ""))
    else:
        text = event.replace("_", " ")
        if record.get("source") not in (None, "gateway", "nanoagent") and not event.startswith(str(record["source"])):
            text = f"{record['source']}: {text}"
    shown = ", ".join(f"{name.replace('_', ' ')} {_value(value)}" for name, value in fields.items())
    head = f"{when} {level:<7}" if level != "info" else f"{when}        "
    line = f"{head} {text}{': ' + shown if shown else ''}"
    return line.replace("\n", " ").replace("\r", " ")


def _epoch(stamp: str) -> float:
    import calendar

    whole = stamp.rstrip("Z").split(".")[0]
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))


def _value(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "none"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def last_lines(path: Path, count: int) -> list[str]:
    """The last `count` lines of the log (reaching into `.1` when the current file holds fewer)."""
    kept: deque[str] = deque(maxlen=max(count, 0))
    for part in (path.with_name(path.name + ".1"), path):
        try:
            with open(part, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.strip():
                        kept.append(line.rstrip("\n"))
        except FileNotFoundError:
            continue
    return list(kept)


def follow(path: Path, every: float = 0.25) -> Iterator[str]:
    """Lines written to the log from this call on, as they come (forever): the file is opened now, at its end. A log
    moved to `.1` is read to its end, then its successor from its start."""
    handle: IO[str] | None = None
    try:
        handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by _lines
        handle.seek(0, os.SEEK_END)
    except FileNotFoundError:
        pass
    return _lines(path, handle, every)


def _lines(path: Path, handle: IO[str] | None, every: float) -> Iterator[str]:
    identity = _identity(handle)
    pending = ""
    try:
        while True:
            if handle is None:
                try:
                    handle = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - kept across rounds
                except FileNotFoundError:
                    time.sleep(every)
                    continue
                identity, pending = _identity(handle), ""
            chunk = handle.read()
            if chunk:
                *whole, pending = (pending + chunk).split("\n")
                yield from (line for line in whole if line.strip())
                continue
            try:
                now = os.stat(path)
                moved = (now.st_dev, now.st_ino) != identity
            except FileNotFoundError:
                moved = True
            if moved:
                handle.close()
                handle = None
                continue
            time.sleep(every)
    finally:
        if handle is not None:
            handle.close()


def _identity(handle: IO[str] | None) -> tuple[int, int] | None:
    if handle is None:
        return None
    info = os.fstat(handle.fileno())
    return info.st_dev, info.st_ino
