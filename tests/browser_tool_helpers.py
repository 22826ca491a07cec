"""What the browser tool's tests share: Chromium or a clear skip (a failure under CI), a browser on an event loop of
its own that lasts for a test module (a launch costs ~1.5 s of CPU), and the pages it opens (served by the local test
HTTP server, tests/web_server.py).

The pages are served on 127.0.0.1, which the tests allow on purpose (`tools.web.allowPrivate`); 127.0.0.2 stays
refused, and a server there records whether anything reached it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TypeVar

import pytest

from nanoagent.tools import ToolContext
from nanoagent.tools.browser import Browser, BrowserSettings, browser_tool, find_executable, missing
from tests.conftest import PATIENCE

T = TypeVar("T")
ALLOWED = ("127.0.0.1/32",)


def require_chromium() -> str:
    """The Chromium to test with; without one the test skips with one line, or fails where NANOAGENT_CI is set."""
    executable = find_executable(None)
    why = missing(BrowserSettings(executable, Path("/nonexistent"), Path("."), Path(".")))
    if why:
        if os.environ.get("NANOAGENT_CI"):
            pytest.fail(f"CI must run the browser tests: {why}", pytrace=False)
        pytest.skip(f"no browser here ({why}): apt-get install chromium chromium-driver")
    return executable


def settings(home: Path, **changes: Any) -> BrowserSettings:
    workspace = home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {"executable": require_chromium(), "profile": home / "browser" / "profile",
                              "workspace": workspace, "home": home, "allow_private": ALLOWED, "timeout_seconds": 6.0}
    values.update(changes)
    return BrowserSettings(**values)


class LoopThread:
    """An event loop in a thread of its own, so a browser outlives one test's `asyncio.run`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = PATIENCE) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(PATIENCE)
        self.loop.close()


class BrowserUnderTest:
    """A Browser and its tool, called from plain (synchronous) tests."""

    def __init__(self, loop: LoopThread, settings: BrowserSettings):
        self.loop = loop
        self.browser = Browser(settings)
        self.tool = browser_tool(self.browser)
        self.ctx = ToolContext(settings.workspace)

    def __call__(self, **arguments: Any) -> Any:
        return self.loop.run(self.tool.call(self.ctx, arguments))

    def close(self) -> None:
        self.loop.run(self.browser.aclose())


def send(handler: BaseHTTPRequestHandler, body: str, status: int = 200, headers: dict[str, str] | None = None,
         content_type: str = "text/html; charset=utf-8") -> None:
    data = body.encode()
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def page(body: str, title: str = "Test page") -> Any:
    return lambda handler: send(handler, f"<!doctype html><html><head><title>{title}</title></head>"
                                         f"<body>{body}</body></html>")


def chromium_processes(marker: str) -> list[int]:
    """Pids of processes whose command line holds `marker` (a profile folder): what is left of a browser."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found
