"""`make bench`: days of running, compressed (issue 38). A real `nanoagent gateway` process with every channel enabled
against its stand-in (the tests', in this process, as bench/channels.py runs them), its HTTP listener on, cron jobs
every 10-30 s and the heartbeat every minute, and traffic all the while: a message on the next channel every ROUND
seconds, one-shots through the socket, web event streams opened and closed, messages sent from the web app, and
OpenAI-compatible requests; the model is the local LLM server in a process of its own.

Budgets, measured after WARM_UP: resident memory, open descriptors and asyncio tasks grow under 10% from the first
sample to the last (the larger of the first and the median of the first three, so one sample taken mid-turn does not
set the base); the event loop's lag (how late the gateway's watchdog beats wake) has a p99 under 100 ms in every
window. `python bench/soak.py --minutes 60` runs longer (`--hours` too); the default is a short run for `make bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.figures import Figures, free_port  # noqa: E402

HOME = Path(tempfile.mkdtemp(prefix="nanoagent-bench-soak-"))
os.environ["NANOAGENT_HOME"] = str(HOME / "stand-ins")

from bench.run import process_rss, server_process  # noqa: E402

ROUND = 2.0  # seconds between two messages on the channels
WARM_UP = 120.0  # seconds before the first sample: every channel connected, the SDKs loaded, caches filled
SAMPLE = 30.0  # seconds between samples
GROWTH = 0.10
LAG_P99_MS = 100.0
FIGURES = Figures(value_width=22)
RESULTS = FIGURES.results
record = FIGURES.record


async def status(sock: Path) -> dict[str, Any]:
    from nanoagent.gateway import protocol

    reader, writer = await asyncio.open_unix_connection(str(sock))
    try:
        writer.write(protocol.encode({"type": "status"}))
        return protocol.decode(await asyncio.wait_for(reader.readline(), 30))
    finally:
        writer.close()


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Traffic:
    """A day's traffic, compressed: what reaches the gateway from every side, counted."""

    def __init__(self, apps: list[Any], home: Path, port: int):
        self.apps = apps
        self.sock = home / "run" / "gateway.sock"
        self.base = f"http://127.0.0.1:{port}"
        self.token = (home / "run" / "http-token").read_text().strip()
        self.counts: dict[str, int] = {}
        self.failures: dict[str, int] = {}

    def count(self, what: str, ok: bool = True) -> None:
        (self.counts if ok else self.failures)[what] = (self.counts if ok else self.failures).get(what, 0) + 1

    async def run(self, until: float) -> None:
        import aiohttp

        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=120)) as web:
            csrf = await self.sign_in(web)
            for turn in itertools.count():
                if time.monotonic() > until:
                    return
                started = time.monotonic()
                await self.one_round(turn, web, csrf)
                await asyncio.sleep(max(0.0, ROUND - (time.monotonic() - started)))

    async def sign_in(self, web: Any) -> str:
        from nanoagent.gateway import protocol

        reader, writer = await asyncio.open_unix_connection(str(self.sock))
        writer.write(protocol.encode({"type": "signin", "id": "s1", "enable": False}))
        answer = protocol.decode(await reader.readline())
        writer.close()
        async with web.get(answer["url"]) as response:
            assert response.status == 200, response.status
        async with web.get(f"{self.base}/api/session") as response:
            return str((await response.json())["csrf"])

    async def one_round(self, turn: int, web: Any, csrf: str) -> None:
        app = self.apps[turn % len(self.apps)]
        await asyncio.to_thread(app.write, app.owner, f"message {turn}: what is on my list today?")
        self.count(f"channel {app.channel}")
        jobs = []
        if turn % 3 == 0:
            jobs.append(self.one_shot(turn))
        if turn % 4 == 1:
            jobs.append(self.web_stream(web, csrf, turn))
        if turn % 10 == 5:
            jobs.append(self.openai(web))
        for outcome in await asyncio.gather(*jobs, return_exceptions=True):
            if isinstance(outcome, BaseException):
                self.count(type(outcome).__name__, ok=False)

    async def one_shot(self, turn: int) -> None:
        from nanoagent.gateway.client import GatewayClient

        client = await GatewayClient.connect(self.sock, f"cli:soak-{turn % 5}", lambda event: None)
        try:
            result = await client.send(f"one-shot {turn}")
            self.count("one-shot", result is not None)
        finally:
            await client.close()

    async def web_stream(self, web: Any, csrf: str, turn: int) -> None:
        """A page opens a session's stream, sends a message, reads until its turn ends, and goes away."""
        key = f"web:soak-{turn % 3}"
        async with web.get(f"{self.base}/api/sessions/{key}/events") as stream:
            async with web.post(f"{self.base}/api/sessions/{key}/messages", json={"text": f"from the page {turn}"},
                                headers={"X-CSRF-Token": csrf}) as sent:
                self.count("web send", sent.status == 202)
            async with asyncio.timeout(60):
                async for line in stream.content:
                    if b"TurnEnded" in line:
                        self.count("web stream")
                        return

    async def openai(self, web: Any) -> None:
        body = {"model": "nanoagent", "user": "soak", "messages": [{"role": "user", "content": "and the weather?"}]}
        async with web.post(f"{self.base}/v1/chat/completions", json=body,
                            headers={"Authorization": f"Bearer {self.token}"}) as response:
            self.count("openai request", response.status == 200)


def add_jobs(env: dict[str, str]) -> None:
    for every, target in (("10s", "none"), ("20s", "none"), ("30s", "none")):
        ran = subprocess.run([sys.executable, "-m", "nanoagent", "cron", "add", "--every", every, "-m",
                              f"check the build ({every})", "--to", target], env=env, capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr


def soak(minutes: float) -> None:
    import importlib

    import nanoagent.channels.registry as registry

    apps = [importlib.import_module(f"tests.{name}_server").StandIn() for name in registry.names()]
    gateway_home = HOME / "gateway"
    gateway_home.mkdir(parents=True)
    from tests.channel_harness import extra_config

    # a channel whose app calls the gateway (WhatsApp's webhook) names the listener's port it was told to call
    extra = {key: value for app in apps for key, value in extra_config(app).items()}
    port = extra.get("gateway", {}).get("http", {}).get("port") or free_port()
    (gateway_home / "workspace").mkdir()
    (gateway_home / "workspace" / "HEARTBEAT.md").write_text("# Standing tasks\n\n- look at the build\n")
    try:
        with server_process() as url:
            config = {"agents": {"defaults": {"model": "anthropic/claude-test"}},
                      "heartbeat": {"intervalMinutes": 1},
                      "gateway": {"http": {"enabled": True, "port": port}},
                      "channels": {app.channel: {**app.settings(), "enabled": True} for app in apps}}
            (gateway_home / "config.json").write_text(json.dumps(config))
            env = {**os.environ, "NANOAGENT_HOME": str(gateway_home), "ANTHROPIC_API_KEY": "sk-ant-bench",
                   "ANTHROPIC_BASE_URL": url, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
            add_jobs(env)
            started = subprocess.run([sys.executable, "-m", "nanoagent", "gateway", "start"], env=env,
                                     capture_output=True, text=True)
            assert started.returncode == 0, started.stderr
            try:
                measure(apps, gateway_home, port, minutes)
            finally:
                subprocess.run([sys.executable, "-m", "nanoagent", "gateway", "stop"], env=env, capture_output=True)
    finally:
        for app in apps:
            app.close()


def measure(apps: list[Any], home: Path, port: int, minutes: float) -> None:
    pid = int((home / "run" / "gateway.pid").read_text())
    sock = home / "run" / "gateway.sock"
    traffic = Traffic(apps, home, port)
    samples: list[dict[str, float]] = []
    windows: list[dict[str, float]] = []

    async def sampler(until: float) -> None:
        await asyncio.sleep(WARM_UP)
        last_window = time.monotonic()
        while True:
            info = await status(sock)
            samples.append({"rss": process_rss(pid), "fds": fds(pid), "tasks": info["tasks"],
                            "at": time.monotonic()})
            if time.monotonic() - last_window >= 600 or time.monotonic() + SAMPLE > until:
                windows.append(info["lag_ms"])
                last_window = time.monotonic()
            s = samples[-1]
            print(f"     t={s['at'] - begun:6.0f} s  rss {s['rss']:.1f} MiB  fds {s['fds']:.0f}  "
                  f"tasks {s['tasks']:.0f}  lag p99 {info['lag_ms'].get('p99')} ms  {traffic.counts}", flush=True)
            if time.monotonic() + SAMPLE > until:
                return
            await asyncio.sleep(SAMPLE)

    async def both() -> None:
        until = time.monotonic() + WARM_UP + minutes * 60
        await asyncio.gather(traffic.run(until), sampler(until))

    begun = time.monotonic()
    asyncio.run(both())
    alive = int((home / "run" / "gateway.pid").read_text()) == pid
    record("the same gateway process all along", "yes" if alive else "no (restarted)", "no restart", alive)
    sent = sum(traffic.counts.values())
    record(f"traffic over {minutes:g} min after {WARM_UP:.0f} s", f"{sent} exchanges", "-", None)
    print(f"     {json.dumps(traffic.counts)}; failures {json.dumps(traffic.failures)}")
    record("failed exchanges", f"{sum(traffic.failures.values())}", "0", not traffic.failures)
    silent = [app.channel for app in apps if not app.shown(app.owner)]
    record("channels that answered", f"{len(apps) - len(silent)} of {len(apps)}", "all", not silent)
    for name, unit in (("rss", "MiB"), ("fds", ""), ("tasks", "")):
        base = max(samples[0][name], statistics.median(s[name] for s in samples[:3]))
        end = samples[-1][name]
        growth = (end - base) / base
        record(f"{name}: after warm-up -> end", f"{base:.0f} -> {end:.0f} {unit} ({growth:+.1%})", "< +10%",
               growth < GROWTH)
    worst = max(window.get("p99", 0.0) for window in windows)
    worst_max = max(window.get("max", 0.0) for window in windows)
    record("event-loop lag p99 (worst 10-min window)", f"{worst:.1f} ms (max {worst_max:.0f})", "< 100 ms",
           worst < LAG_P99_MS)


def main() -> int:
    global WARM_UP
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=None, help="minutes of traffic after the warm-up (default 3)")
    parser.add_argument("--hours", type=float, default=None, help="hours of traffic after the warm-up")
    parser.add_argument("--warm-up", type=float, default=WARM_UP, help="seconds before the first sample")
    args = parser.parse_args()
    WARM_UP = args.warm_up
    minutes = args.minutes if args.minutes is not None else (args.hours * 60 if args.hours is not None else 3.0)
    with contextlib.suppress(KeyboardInterrupt):
        soak(minutes)
    print(json.dumps({"ok": bool(RESULTS) and all(RESULTS)}))
    return 0 if RESULTS and all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
