"""Errors a person sees. Each message says what went wrong and how to fix it."""

from __future__ import annotations

import errno
from pathlib import Path


class NanoagentError(Exception):
    """An expected failure; the CLI prints its message as one line and exits with `exit_code`."""

    exit_code = 1


class ConfigError(NanoagentError):
    pass


class Stopped(NanoagentError):
    """SIGTERM or SIGHUP ended the command; the running turn was cancelled and recorded as interrupted."""

    exit_code = 143

    @classmethod
    def by(cls, name: str) -> Stopped:
        return cls(f"Stopped by {name}; the running turn was recorded as interrupted.")


_FIXES = {
    errno.ENOSPC: "free some space on that disk and run it again",
    errno.EDQUOT: "free some space (or raise your quota) and run it again",
    errno.EROFS: "set NANOAGENT_HOME (or -w) to a folder on a writable disk",
    errno.EACCES: "make it writable for you, or set NANOAGENT_HOME (or -w) to a folder you can write",
    errno.EPERM: "make it writable for you, or set NANOAGENT_HOME (or -w) to a folder you can write",
    errno.EISDIR: "a folder stands where nanoagent keeps a file: move that folder away",
}


def describe_os_error(error: OSError) -> str | None:
    """One line naming the file, what went wrong and the fix, for a failure of the disk nanoagent writes to
    (full, read-only, not permitted, a file where a folder belongs); None for any other OSError."""
    if error.filename is None:
        return None
    path = Path(error.filename)
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if blocker is None:
            return None
        return (f"Cannot use {path}: {blocker} is a file, not a folder; move it away, or set NANOAGENT_HOME "
                "(or -w) to a folder.")
    fix = _FIXES.get(error.errno or 0)
    return None if fix is None else f"Cannot write {path}: {error.strerror or type(error).__name__}; {fix}."
