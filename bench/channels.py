"""`make bench`: the chat channels (issue 35). Prints a table; exits 1 on a miss.

Budgets:
- a reply's first message reaches the app within 100 ms of the model's first token, on every channel that can edit
  (median of RUNS, through the shared engine against each channel's stand-in in this process, with the edit interval
  far away so only the first send counts; the stand-in's own HTTP handling is included);
- an idle `nanoagent gateway` process with all seven channels enabled against their stand-ins: under 0.5 s of CPU a
  minute (its CPU over WINDOW seconds after a warm-up, scaled to a minute) and under 200 MiB resident;
- each channel folder added by issue 35 (matrix, signal, mattermost) under 800 lines (`make size`'s count).

The stand-ins are the tests' (`tests/<name>_server.py`), run in this process; `python bench/channels.py` runs it alone.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.figures import Figures  # noqa: E402

HOME = Path(tempfile.mkdtemp(prefix="nanoagent-bench-channels-"))
os.environ["NANOAGENT_HOME"] = str(HOME / "home")

from bench.run import process_cpu, process_rss, running_gateway  # noqa: E402
from bench.size import lines  # noqa: E402

RUNS = 5
WARM_UP = 10.0  # seconds for every channel to connect before the idle window
WINDOW = 30.0
NEW = ("matrix", "signal", "mattermost")
FIGURES = Figures(value_width=14)
RESULTS = FIGURES.results
record = FIGURES.record


def stand_in(name: str):  # noqa: ANN201 - a tests/<name>_server.StandIn
    return importlib.import_module(f"tests.{name}_server").StandIn()


def first_message_ms(name: str) -> float:
    """Milliseconds from the model's first token to the stand-in holding the reply's first message (one run)."""
    from tests.channel_harness import TIMING, running
    from tests.test_channel_cases import FirstWordThenHold

    os.environ["NANOAGENT_HOME"] = tempfile.mkdtemp(prefix=f"{name}-", dir=HOME)  # a fresh home each run
    app = stand_in(name)
    try:
        async def scenario() -> float:
            provider = FirstWordThenHold("Thinking about it for a while.", asyncio.Event())
            async with running(app, provider, timing=replace(TIMING, interval=600.0)):
                app.write(app.owner, "a hard one")
                while not app.shown(app.owner):
                    await asyncio.sleep(0.001)
                arrived = time.monotonic() - provider.first
                provider.hold.set()
            return arrived * 1000

        return asyncio.run(scenario())
    finally:
        app.close()


def idle_gateway() -> tuple[float, float]:
    """(CPU seconds a minute, resident MiB) of an idle gateway with every channel enabled against its stand-in."""
    import nanoagent.channels.registry as registry

    apps = [stand_in(name) for name in registry.names()]
    try:
        from tests.channel_harness import extra_config

        extra = {key: value for app in apps for key, value in extra_config(app).items()}  # a webhook's listener
        config = {**extra, "agents": {"defaults": {"model": "anthropic/claude-test"}},
                  "channels": {app.channel: {**app.settings(), "enabled": True} for app in apps}}
        env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-bench", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        with running_gateway(HOME / "gateway", env, config) as pid:
            time.sleep(WARM_UP)
            status = subprocess.run([sys.executable, "-m", "nanoagent", "gateway", "status"], capture_output=True,
                                    text=True, env={**env, "NANOAGENT_HOME": str(HOME / "gateway")}).stdout
            connected = status.count("(connected as ")
            record("idle gateway: channels connected before the window", f"{connected}", f"{len(apps)}",
                   connected == len(apps))
            before = process_cpu(pid)
            time.sleep(WINDOW)
            cpu = (process_cpu(pid) - before) * 60 / WINDOW
            return cpu, process_rss(pid)
    finally:
        for app in apps:
            app.close()


def main() -> int:
    import nanoagent.channels.registry as registry

    print(f"channels: {', '.join(registry.names())}")
    for name in registry.names():
        if not registry.get(name).edits:
            record(f"{name}: first message after the first token", "no edits", "(sends whole replies)", None)
            continue
        runs = [first_message_ms(name) for _ in range(RUNS)]
        median = statistics.median(runs)
        record(f"{name}: first message after the first token", f"{median:.1f} ms", "< 100 ms", median < 100)
    cpu, rss = idle_gateway()
    record(f"idle gateway, {len(registry.names())} channels: CPU a minute", f"{cpu:.3f} s", "< 0.5 s", cpu < 0.5)
    record(f"idle gateway, {len(registry.names())} channels: resident", f"{rss:.0f} MiB", "< 200 MiB", rss < 200)
    for name in NEW:
        folder = ROOT / "nanoagent" / "channels" / name
        count = sum(lines(path) for path in folder.rglob("*.py"))
        record(f"channels/{name}/ lines", f"{count}", "< 800", count < 800)
    print(json.dumps({"ok": all(RESULTS)}))
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
