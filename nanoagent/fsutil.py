"""Crash-safe file writes: temp file + fsync + rename, appends that cut a torn tail first, and fsync of the directory.

Everything nanoagent creates for itself is private whatever the umask: folders 0700, files 0600. The person's own
files (what the file tools write in an `agent -C DIR` project) are `atomic_write(..., own=True)`: the umask decides a
new file's and folder's mode, and a file written over keeps its mode, as an editor would leave them.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents with mode 0700, whatever the umask. Folders that exist keep their mode."""
    missing = []
    folder = Path(path)
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # another process made it
            continue
        os.chmod(folder, 0o700)
    return Path(path)


async def uninterrupted(work: Awaitable[T]) -> T:
    """Await a write that must not be left half done: when the caller is cancelled meanwhile (Ctrl-C during /new
    or /dream), the write runs to its end before the cancellation goes on, so the caller's locks are not released
    while a thread still writes, and what belongs together stays together (a history entry and the session's
    archive cursor, a Dream's commits and its cursor)."""
    import asyncio  # here, not at the top: a one-shot through the gateway runs no event loop

    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                continue  # a second Ctrl-C: the write still has to end first
        raise


def private_file(path: Path) -> Path:
    """Create `path` with mode 0600 if missing, or make an existing one 0600; returns `path`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        _make_private(fd)
    finally:
        os.close(fd)
    return path


def _make_private(fd: int) -> None:
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_mode & 0o777 != 0o600:  # never a device or a pipe
        try:
            os.fchmod(fd, 0o600)
        except OSError:  # someone else's file we may still write: leave its mode to them
            pass


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """A failed os.write (a full disk) does not say which file it was writing: name `path` in the error."""
    try:
        yield
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e


def atomic_write(path: Path, data: str | bytes, mode: int | None = None, own: bool = False) -> None:
    """Replace `path` with `data` via a temp file, fsync and rename. The file is 0600 unless `mode` says otherwise;
    missing folders are created 0700. `own`: a file of the person's (see the module's note): its mode and its new
    folders' follow the umask, or the mode of the file it replaces."""
    path = Path(path)
    if own:
        os.makedirs(path.parent, exist_ok=True)  # 0777 less the umask
        mode = _mode_of(path) if mode is None else mode
    else:
        private_dir(path.parent)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = _temp_beside(path, own)
    except OSError as e:  # name the file being written, not the temp file that could not be made
        raise OSError(e.errno, e.strerror, str(path)) from e
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with _naming(path), os.fdopen(fd, "wb") as f:
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


def _mode_of(path: Path) -> int | None:
    """The permission bits of the regular file at `path`, or None when there is none."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None


def _temp_beside(path: Path, own: bool) -> tuple[int, str]:
    """A new temp file in `path`'s folder: 0600, or for the person's own file 0666 less the umask (the kernel applies
    it at creation; reading the umask would mean setting it, a race with every other thread)."""
    if not own:
        return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    import secrets

    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def append_lines(path: Path, data: bytes, sync: bool = False) -> int:
    """Append `data` (whole lines) at the end of `path` and return the offset it was written at.

    The file is created 0600 (its folder 0700) and a torn last line left by a killed writer is cut first;
    `sync` fsyncs before returning. Call while holding the file's lock."""
    private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with _naming(path):
            _make_private(fd)
            end = cut_torn_tail(fd)
            os.lseek(fd, end, os.SEEK_SET)
            write_all(fd, data)
            if sync:
                os.fsync(fd)
    finally:
        os.close(fd)
    return end


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
def file_lock(path: Path, timeout: float | None = None, busy: Exception | None = None,
              waiting: Callable[[int | None], None] | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created 0600). `timeout` None waits as long as it takes; 0 tries
    once. When the lock is not had in time, raises `busy` (say who holds it and what to do). Closing the
    file releases the lock, so a killed process never leaves one behind. `waiting`: as in `async_file_lock`."""
    fd = _open_lock_file(path)
    try:
        if timeout is None and waiting is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            started = time.monotonic()
            deadline, told = started + (timeout if timeout is not None else float("inf")), waiting is None
            while not _try_lock(fd):
                now = time.monotonic()
                if now >= deadline:
                    raise busy or TimeoutError(f"{path} is locked by another process")
                if not told and now - started >= WAIT_NOTICE and waiting is not None:
                    told = True
                    waiting(_holder(fd))
                time.sleep(LOCK_POLL)
        if waiting is not None:
            _record_holder(fd)
        yield
    finally:
        os.close(fd)


@asynccontextmanager
async def async_file_lock(path: Path, timeout: float, busy: Exception | None = None,
                          waiting: Callable[[int | None], None] | None = None) -> AsyncIterator[None]:
    """`file_lock` for code on an event loop: the wait yields to other tasks instead of blocking them.

    With `waiting`, the holder's pid is kept in the lock file, and a wait longer than WAIT_NOTICE seconds calls
    `waiting(pid of the holder, or None)` once, so the person waiting hears why nothing happens."""
    import asyncio

    fd = _open_lock_file(path)
    try:
        started = time.monotonic()
        deadline, told = started + timeout, waiting is None
        while not _try_lock(fd):
            now = time.monotonic()
            if now >= deadline:
                raise busy or TimeoutError(f"{path} is locked by another process")
            if not told and now - started >= WAIT_NOTICE and waiting is not None:
                told = True
                waiting(_holder(fd))
            await asyncio.sleep(LOCK_POLL)
        if waiting is not None:
            _record_holder(fd)
        yield
    finally:
        os.close(fd)


LOCK_POLL = 0.05
WAIT_NOTICE = 1.0  # seconds of waiting for a lock before `waiting` is told


def try_lock(path: Path, record_pid: bool = False) -> int | None:
    """The descriptor of `path` (created 0600) holding its exclusive flock, or None when another holds it; the
    lock lasts until the descriptor is closed. `record_pid`: the file says who holds it (`read_holder`)."""
    fd = _open_lock_file(path)
    if not _try_lock(fd):
        os.close(fd)
        return None
    if record_pid:
        _record_holder(fd)
    return fd


def _record_holder(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def _holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        return int(text) if text.isdigit() else None
    except (OSError, ValueError):
        return None


def _open_lock_file(path: Path) -> int:
    private_dir(path.parent)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def read_beneath(root: Path, relpath: str) -> bytes | None:
    """The bytes of the plain file `relpath` under the folder `root`, or None when it is missing or might be someone
    else's. It is opened part by part from `root`'s descriptor with O_NOFOLLOW on every part (openat), so a symbolic
    link anywhere on the way, even one swapped in while it is opened, reads as missing, as does `..`, a part that is
    not a folder, a file that is not regular, or a hard link (more than one name). `root` itself may be a link."""
    parts = relpath.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    nofollow = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, nofollow | os.O_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = inner
        fd = os.open(parts[-1], nofollow | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as file:
        try:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                return None
            return file.read()
        except OSError:
            return None
