"""Devices signed in to the web app, kept across gateway restarts in `web-devices.json` under the home (0600).

- A device is a browser that signed in through a one-time link. Its cookie holds a random token; the file holds only
  the token's SHA-256 (`token_hash`), so reading the file does not sign anyone in. Beside it: a short id (what
  `nanoagent web revoke ID` and the app's devices page name), a name read from the browser's User-Agent ("Firefox on
  Android"), when it signed in, when it was last used and the host it signed in at (a reply's link to that host
  stays text: the cookie would go along).
- A device unused for `gateway.web.deviceIdleDays` days is signed out (`expired`); its cookie's Max-Age is as long.
- Every change is read, edit, write under the file's lock (`web-devices.lock`), written whole and atomically: the
  gateway (sign-ins, last use) and `nanoagent web revoke` may write at once, and neither may undo the other's change.
Imported by `nanoagent web devices` too: no aiohttp here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nanoagent.fsutil import atomic_write, file_lock

log = logging.getLogger("nanoagent.web.devices")

VERSION = 1
DAY = 86_400.0
LOCK_WAIT = 10.0  # seconds to wait for another writer of the file


@dataclass
class Device:
    id: str  # short and public: names the device in lists and `web revoke`
    hash: str  # SHA-256 (hex) of the cookie's token; the token is never stored
    name: str  # "Chrome on Android", from the User-Agent it signed in with
    created: float  # seconds since the epoch
    last_used: float
    host: str = ""  # the host (and port) the browser signed in at

    def expired(self, now: float, idle: float) -> bool:
        return now - self.last_used > idle


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DeviceStore:
    """The file of signed-in devices. `read` is tolerant (a missing or unreadable file is no device, a bad entry is
    skipped); `change` edits under the lock and returns what it wrote."""

    def __init__(self, path: Path):
        self.path = path
        self.written: tuple[int, int, int] | None = None

    @property
    def lock_path(self) -> Path:
        return self.path.with_suffix(".lock")

    def read(self) -> list[Device]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            log.warning(json.dumps({"event": "web_devices_unreadable", "error": type(e).__name__,
                                    "fix": f"every device signs in again; delete {self.path.name} to start afresh"}))
            return []
        entries = data.get("devices") if isinstance(data, dict) else None
        return [device for entry in entries or [] if (device := _device(entry)) is not None]

    def change(self, edit: Callable[[list[Device]], list[Device]]) -> list[Device]:
        """Edit the devices under the lock; `written` is then the file's stamp as this change left it."""
        busy = TimeoutError(f"{self.lock_path} is held by another process; try again")
        with file_lock(self.lock_path, LOCK_WAIT, busy):
            devices = edit(self.read())
            text = json.dumps({"version": VERSION, "devices": [asdict(d) for d in devices]}, indent=2)
            atomic_write(self.path, text + "\n", mode=0o600)
            self.written = self.stamp()
        return devices

    def stamp(self) -> tuple[int, int, int] | None:
        """What changes when another process writes the file (its inode, size and time), or None when missing."""
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_ino, info.st_size, info.st_mtime_ns

    def revoke(self, device_id: str) -> Device | None:
        """Sign the device out (remove it); the device removed, or None when no device has that id."""
        gone: list[Device] = []

        def edit(devices: list[Device]) -> list[Device]:
            gone.extend(d for d in devices if d.id == device_id)
            return [d for d in devices if d.id != device_id]

        if not any(d.id == device_id for d in self.read()):
            return None
        self.change(edit)
        return gone[0] if gone else None


class MemoryStore(DeviceStore):
    """Devices kept only in this process (an HTTP side built without a home, in tests): gone when it stops."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent/web-devices.json"))
        self._devices: list[Device] = []

    def read(self) -> list[Device]:
        return [Device(**asdict(d)) for d in self._devices]

    def change(self, edit: Callable[[list[Device]], list[Device]]) -> list[Device]:
        self._devices = edit(self.read())
        return self.read()

    def stamp(self) -> tuple[int, int, int] | None:
        return None


def new_id(taken: set[str]) -> str:
    while (made := secrets.token_hex(3)) in taken:
        continue
    return made


def _device(entry: Any) -> Device | None:
    if not isinstance(entry, dict):
        return None
    try:
        device = Device(id=str(entry["id"]), hash=str(entry["hash"]), name=str(entry.get("name") or "A browser"),
                        created=float(entry["created"]), last_used=float(entry["last_used"]),
                        host=str(entry.get("host") or ""))
    except (KeyError, TypeError, ValueError):
        return None
    return device if re.fullmatch(r"[0-9a-f]{64}", device.hash) else None


# the first that matches names the browser (Edge and Opera say "Chrome" too, Chrome says "Safari")
BROWSERS = [("Edge", r"Edg(e|A|iOS)?/"), ("Opera", r"OPR/|Opera"), ("Samsung Internet", r"SamsungBrowser/"),
            ("Firefox", r"Firefox/|FxiOS/"), ("Chrome", r"Chrome/|CriOS/|Chromium/"), ("Safari", r"Safari/")]
PLATFORMS = [("iPhone", r"iPhone"), ("iPad", r"iPad"), ("Android", r"Android"), ("ChromeOS", r"CrOS"),
             ("Windows", r"Windows"), ("macOS", r"Macintosh|Mac OS X"), ("Linux", r"Linux|X11")]


def device_name(user_agent: str) -> str:
    """"Firefox on Android", "Safari on iPhone", "Chrome on Linux"; "A browser" when the User-Agent says neither."""
    browser = next((name for name, pattern in BROWSERS if re.search(pattern, user_agent)), "")
    platform = next((name for name, pattern in PLATFORMS if re.search(pattern, user_agent)), "")
    if browser and platform:
        return f"{browser} on {platform}"
    return browser or (f"A browser on {platform}" if platform else "A browser")


__all__ = ["DAY", "Device", "DeviceStore", "MemoryStore", "device_name", "new_id", "token_hash"]
