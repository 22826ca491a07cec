"""`make bench` (the browser tool): the first page from cold, a page with the browser running, and what an idle gateway
pays for the tool while the browser is closed.

Cold: a new Python process calls the tool once (`open` of a local page): Playwright's import, its driver, Chromium's
start in bubblewrap behind the guarded proxy, the page and its snapshot; timed from the call to its result (the
process's own start and nanoagent's imports are not the browser's), with the profile already made (a first run ever
also creates it; printed apart). Warm: `open` of the same page with the browser running. Budgets: cold < 2 s,
warm < 300 ms (medians). Idle: a gateway with the tool offered (the default) and never called imports no Playwright
and starts no browser process.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser_tool_helpers import page  # noqa: E402
from tests.web_server import WebServer  # noqa: E402

RESULTS: list[tuple[str, str, str, bool]] = []
COLD_RUNS = 3
WARM_RUNS = 10

CHILD = """
import asyncio, json, os, sys, time
from pathlib import Path

def tree_cpu():
    # CPU seconds of this process and every process under it (the driver, bwrap, Chromium's processes)
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            cpu[int(entry)] = sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    mine, todo = {os.getpid()}, [os.getpid()]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid and child not in mine:
                mine.add(child)
                todo.append(child)
    return sum(cpu.get(pid, 0.0) for pid in mine)

from nanoagent.tools import ToolContext
from nanoagent.tools.browser import Browser, BrowserSettings, browser_tool, find_executable

async def main():
    home = Path(sys.argv[1])
    settings = BrowserSettings(find_executable(None), home / "browser" / "profile", home / "workspace", home,
                               ("127.0.0.1/32",))
    browser = Browser(settings)
    tool, ctx = browser_tool(browser), ToolContext(settings.workspace)
    url = sys.argv[2]
    began, cpu = time.perf_counter(), tree_cpu()
    await tool.call(ctx, {"action": "open", "url": url})
    cold = time.perf_counter() - began
    cold_cpu = tree_cpu() - cpu
    warm = []
    for _ in range(int(sys.argv[3])):
        began = time.perf_counter()
        await tool.call(ctx, {"action": "open", "url": url})
        warm.append(time.perf_counter() - began)
    await browser.aclose()
    print(json.dumps({"cold": cold, "cold_cpu": cold_cpu, "warm": warm}))

asyncio.run(main())
"""


def record(name: str, value: str, budget: str, ok: bool) -> None:
    RESULTS.append((name, value, budget, ok))
    print(f"{'ok  ' if ok else 'MISS'} {name:<52} {value:>18}   budget {budget}", flush=True)


def run_child(home: Path, url: str, warm: int) -> dict:
    (home / "workspace").mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", CHILD, str(home), url, str(warm)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"the browser bench failed: {done.stderr[-1000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_pages(home: Path) -> None:
    site = WebServer({"/": page("<h1>A local page</h1><p>Some text.</p><a href=/next>Next</a><form><input name=q>"
                           "<button>Search</button></form><script>document.body.append('built by script')</script>")})
    try:
        first = run_child(home, site.url + "/", 0)["cold"]
        runs = [run_child(home, site.url + "/", WARM_RUNS if i == 0 else 0) for i in range(COLD_RUNS)]
    finally:
        site.close()
    cold = statistics.median(r["cold"] for r in runs)
    cold_cpu = statistics.median(r["cold_cpu"] for r in runs)
    warm = statistics.median(runs[0]["warm"])
    print(f"     (the very first start, which also makes the profile: {first:.2f} s; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; a cold start's CPU, every process: {cold_cpu:.2f} s)")
    record(f"browser: first page from cold (median of {COLD_RUNS})", f"{cold:.2f} s", "< 2 s", cold < 2.0)
    record(f"browser: a page with it running (median of {WARM_RUNS})", f"{warm * 1000:.0f} ms", "< 300 ms",
           warm < 0.3)


def bench_idle_gateway(home: Path) -> None:
    from nanoagent.gateway.oneshot import gateway_answers

    gw = home / "gw"
    gw.mkdir(parents=True, exist_ok=True)
    log = home / "importtime.log"
    env = {**os.environ, "NANOAGENT_HOME": str(gw), "ANTHROPIC_API_KEY": "k", "NANOAGENT_MODEL": "anthropic/claude-x"}
    with open(log, "w") as stderr:
        gateway = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "nanoagent", "gateway"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 60
        while not gateway_answers(gw / "run" / "gateway.sock"):
            if time.monotonic() > deadline or gateway.poll() is not None:
                raise SystemExit("the gateway did not start")
            time.sleep(0.05)
        time.sleep(3)
        children = [p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == gateway.pid]
        programs = sorted({_name(p) for p in children} - {""})
    finally:
        gateway.terminate()
        gateway.wait(30)
    imported = [line.split("|")[-1].strip() for line in log.read_text().splitlines() if "import time:" in line]
    own = [line for line in log.read_text().splitlines() if line.rstrip().endswith(" nanoagent.tools.browser")]
    cost = int(own[0].split("|")[1]) / 1000 if own else 0.0
    loaded = [m for m in imported if m.split(".")[0] == "playwright"]
    browsers = [p for p in programs if p in ("chromium", "node", "bwrap", "chrome")]
    record("idle gateway, browser closed: Playwright modules", str(len(loaded)), "0", not loaded)
    record("idle gateway, browser closed: browser processes", str(len(browsers)), "0", not browsers)
    print(f"     (nanoagent.tools.browser itself: {cost:.1f} ms to import, cumulative)")


def _parent(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _name(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def main() -> int:
    from nanoagent.tools.browser import BrowserSettings, find_executable, missing

    why = missing(BrowserSettings(find_executable(None), Path("."), Path("."), Path(".")))
    if why:
        print(f"MISS browser bench: {why}")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        bench_pages(Path(tmp) / "pages")
        bench_idle_gateway(Path(tmp))
    return 0 if all(r[3] for r in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
