"""`make bench`: the web app on the gateway's HTTP listener (issue 22). Prints a table; exits 1 on a miss.

Budgets: the app's page loads in under 200 ms from a warm gateway (median of 15 loads after 5 warm-up loads, in
Debian's chromium through Playwright when it is installed: navigation start to the load event, the page's own
files included; the HTTP fetch of the page alone is reported too); 20 open idle event streams (pages) on one idle
gateway cost under 0.5 s of CPU per minute (the gateway process's CPU over a WINDOW-second window, scaled to 60 s,
beside the same window with no stream open).

A real `nanoagent gateway` process (the HTTP listener on a free loopback port), signed in through a real one-time
code from its socket, as `nanoagent web` does. `python bench/web.py` runs this alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.figures import Figures, free_port  # noqa: E402
from bench.run import process_cpu, running_gateway  # noqa: E402

WINDOW = 20.0  # seconds the CPU is measured over (scaled to a minute)
STREAMS = 20
LOADS = 15
FIGURES = Figures()
RESULTS = FIGURES.results
record = FIGURES.record


def signin_url(home: Path) -> str:
    """A one-time sign-in link from the gateway's socket (what `nanoagent web` asks for)."""
    from nanoagent.gateway.protocol import decode, encode

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(str(home / "run" / "gateway.sock"))
        conn.sendall(encode({"type": "signin", "id": "b1", "enable": False}))
        with conn.makefile("rb") as stream:
            return str(decode(stream.readline())["url"])


def cookie(home: Path) -> str:
    import httpx

    response = httpx.get(signin_url(home), follow_redirects=False, timeout=30)
    if response.status_code != 303:
        raise SystemExit(f"sign-in failed: {response.status_code} {response.text[:200]}")
    name, value = next(iter(response.cookies.items()))
    return f"{name}={value}"


def bench_page_load(home: Path, base: str) -> None:
    import httpx

    with httpx.Client(base_url=base, headers={"Cookie": cookie(home)}, timeout=30) as http:
        for _ in range(5):
            http.get("/")
        fetches = []
        for _ in range(LOADS):
            started = time.perf_counter()
            response = http.get("/")
            fetches.append(time.perf_counter() - started)
            assert response.status_code == 200, response.status_code
    record("web app page: HTTP fetch of / (warm)", f"{statistics.median(fetches) * 1000:.1f} ms", "(figure)", None)
    chromium = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if not chromium:
        record("web app page load in chromium", "skipped", "< 200 ms (apt-get install chromium)", None)
        return
    from tests.browser import CHROMIUM_ARGS

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context().new_page()
            page.goto(signin_url(home))
            loads = []
            for i in range(5 + LOADS):
                page.goto(base + "/", wait_until="load")
                took = page.evaluate("() => { const n = performance.getEntriesByType('navigation')[0];"
                                     " return n.loadEventEnd - n.startTime; }")
                if i >= 5:
                    loads.append(float(took))
        finally:
            browser.close()
    median = statistics.median(loads)
    record("web app page load in chromium (warm, median)", f"{median:.1f} ms", "< 200 ms", median < 200)


def open_streams(base: str, cookie_header: str, count: int) -> list[socket.socket]:
    host, port = base.removeprefix("http://").split(":")
    request = (f"GET /api/events?session=web:bench HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {cookie_header}\r\n"
               "Accept: text/event-stream\r\n\r\n").encode()
    streams = []
    for _ in range(count):
        conn = socket.create_connection((host, int(port)), timeout=30)
        conn.sendall(request)
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(4096)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"an event stream was refused: {head[:200]!r}")
        streams.append(conn)
    return streams


def bench_idle_streams(home: Path, base: str, pid: int) -> None:
    time.sleep(5)  # start-up: the provider SDK loads in the background
    cpu = process_cpu(pid)
    time.sleep(WINDOW)
    idle = (process_cpu(pid) - cpu) * 60 / WINDOW
    streams = open_streams(base, cookie(home), STREAMS)
    try:
        time.sleep(2)  # the streams' first writes
        cpu = process_cpu(pid)
        time.sleep(WINDOW)
        used = (process_cpu(pid) - cpu) * 60 / WINDOW
    finally:
        for conn in streams:
            conn.close()
    record("idle gateway, no event stream: CPU per minute", f"{idle:.3f} s", "(figure)", None)
    record(f"idle gateway, {STREAMS} idle event streams: CPU per minute", f"{used:.3f} s", "< 0.5 s", used < 0.5)


def main() -> int:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "ANTHROPIC_API_KEY": "k", "NANOAGENT_MODEL": "anthropic/claude-bench"}
    config = {"gateway": {"http": {"enabled": True, "port": port}}}
    with tempfile.TemporaryDirectory(prefix="nanoagent-bench-web-") as tmp:
        home = Path(tmp) / "home"
        with running_gateway(home, env, config) as pid:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("the HTTP listener did not start")
                time.sleep(0.05)
            bench_page_load(home, base)
            bench_idle_streams(home, base, pid)
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())

