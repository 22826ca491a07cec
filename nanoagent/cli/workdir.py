"""`agent -C DIR` and `--here`: the folder a person works in, and the sessions that belong to it.

The folder is checked once here (`tools.fs.working_folder`: a real path, not nanoagent's home) and then travels with
each turn (`TurnScope.workdir`, the gateway's `send`). Its sessions are keyed by it: `cli:<name>-<hash>`, the folder's
name (what a session key can hold of it) and 8 hex digits of the SHA-256 of its real path, so two folders of one name
stay apart and `-c`/`--resume` pick among one folder's sessions; `-s NAME` there is the thread `cli:<name>-<hash>:NAME`.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from nanoagent.paths import Paths

NAME_CHARS = 32  # of the folder's name in its key (the key grammar allows 64 characters an id)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def working_folder(paths: Paths, folder: Path | None, here: bool) -> str:
    """The real path of the folder given with -C (or the current one with --here), "" when neither was given;
    NanoagentError, one line, when it cannot be worked in."""
    from nanoagent.tools.fs import working_folder as check

    if folder is not None and here:
        raise NanoagentError("-C DIR and --here both name the folder to work in; give one of them.")
    if folder is None and not here:
        return ""
    try:
        return str(check(folder if folder is not None else Path.cwd(), paths.home, paths.workspace))
    except ValueError as e:
        raise NanoagentError(str(e)) from None


def folder_key(real: str) -> str:
    """The session key of the folder at real path `real`: `cli:<name>-<8 hex of its path's SHA-256>`."""
    name = _UNSAFE.sub("-", os.path.basename(real.rstrip("/"))).strip("-.")[:NAME_CHARS].rstrip("-.") or "folder"
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"cli:{name}-{digest}"


def session_in(real: str, session: str) -> str:
    """The key of `-s SESSION` with -C: the folder's own session (`cli:direct`, the default), a thread of it (a name
    alone), or the key given whole (one with a `:`)."""
    from nanoagent.cli.oneshot import session_key

    key = folder_key(real)
    if session == "cli:direct":
        return key
    return session_key(session if ":" in session else f"{key}:{session}")


def belongs(key: str, real: str) -> bool:
    """Whether session `key` is one of the folder's (its own or a thread of it)."""
    own = folder_key(real)
    return key == own or key.startswith(own + ":")


_FOLDER_KEY = re.compile(r"cli:[A-Za-z0-9._-]+-[0-9a-f]{8}(?::.*)?", re.DOTALL)


def of_a_folder(key: str) -> bool:
    """Whether `key` has the shape of a working folder's session: `-c` without `-C` passes over these, which would
    go on without their folder."""
    return _FOLDER_KEY.fullmatch(key) is not None
