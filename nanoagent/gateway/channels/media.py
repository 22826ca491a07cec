"""Files that came with a chat message, saved under the workspace's `media/`: their names and the one safe write."""

from __future__ import annotations

import mimetypes
import os
import re
import secrets
import time
from pathlib import Path

from nanoagent.fsutil import private_dir


def media_name(kind: str, original: str | None, media_type: str | None, now: float) -> tuple[str, str]:
    """(stem, extension) for a saved file: the sender's file name without folders, leading dots or odd characters,
    or the kind and the time; the extension from the name or else from the media type the app stated."""
    name = re.split(r"[\\/]", original or "")[-1]
    name = "".join(c if c.isalnum() or c in "-_. " else "_" for c in name).strip(" .")
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    if not ext and media_type:
        ext = (mimetypes.guess_extension(media_type.split(";")[0].strip().lower()) or "").lstrip(".")
    ext = "".join(c for c in ext if c.isalnum())[:10].lower()
    stem = stem.strip(" .")[:80] or f"{kind.replace(' ', '-')}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}"
    return stem, ext


def save_media(folder: Path, stem: str, ext: str, data: bytes) -> Path:
    """Write `data` to folder/<stem>-<random>.<ext> (0600): a new name, never another file replaced; a file
    appears under its name only once it is whole."""
    private_dir(folder)
    tmp = folder / f".{stem}.{secrets.token_hex(4)}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        while True:
            path = folder / (f"{stem}-{secrets.token_hex(3)}" + (f".{ext}" if ext else ""))
            try:
                os.link(tmp, path)
                return path
            except FileExistsError:
                continue
    finally:
        tmp.unlink(missing_ok=True)
