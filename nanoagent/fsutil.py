"""Crash-safe file writes: temp file + fsync + rename, and fsync of the directory."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path


def atomic_write(path: Path, data: str | bytes, mode: int | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def cut_torn_tail(fd: int) -> int:
    """Truncate a partial last line left by a killed writer; return the new end of file.

    A last line that is a whole JSON object lacking only its newline (a hand edit) is kept: it gets the
    newline instead."""
    end = os.lseek(fd, 0, os.SEEK_END)
    if end == 0:
        return 0
    if os.pread(fd, 1, end - 1) == b"\n":
        return end
    pos = end
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        pos = start
    else:
        keep = 0
    if end - keep < 1 << 24 and _is_json_object(os.pread(fd, end - keep, keep)):
        os.pwrite(fd, b"\n", end)
        return end + 1
    os.ftruncate(fd, keep)
    return keep


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@contextmanager
def file_lock(path: Path, timeout: float | None = None, busy: Exception | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created 0600). `timeout` None waits as long as it takes; 0 tries
    once. When the lock is not had in time, raises `busy` (say who holds it and what to do). Closing the
    file releases the lock, so a killed process never leaves one behind."""
    fd = _open_lock_file(path)
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise busy or TimeoutError(f"{path} is locked by another process")
                time.sleep(LOCK_POLL)
        yield
    finally:
        os.close(fd)


@asynccontextmanager
async def async_file_lock(path: Path, timeout: float, busy: Exception | None = None) -> AsyncIterator[None]:
    """`file_lock` for code on an event loop: the wait yields to other tasks instead of blocking them."""
    fd = _open_lock_file(path)
    try:
        deadline = time.monotonic() + timeout
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise busy or TimeoutError(f"{path} is locked by another process")
            await asyncio.sleep(LOCK_POLL)
        yield
    finally:
        os.close(fd)


LOCK_POLL = 0.05


def _open_lock_file(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
