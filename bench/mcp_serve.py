"""`make bench`: `nanoagent mcp serve` over stdio (issue 39). Prints a table; exits 1 on a miss.

Budget: from the process's start to the answer to `tools/list` (after `initialize`, as every client sends it first)
in under 1 s, median of 7 starts in a fresh home. The client is plain JSON-RPC lines on the process's pipes, so
nothing but the server's own start is timed. For reference, the same median of a bare `import mcp.server.lowlevel`
(what the SDK alone costs to load), run after each start, is printed beside it. `python bench/mcp_serve.py` runs
this alone.
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

from bench.figures import Figures  # noqa: E402

RUNS = 7
BUDGET = 1.0
FIGURES = Figures()
RESULTS = FIGURES.results
record = FIGURES.record


def send(proc: subprocess.Popen, message: dict) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def answer(proc: subprocess.Popen, request_id: int) -> dict:
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        message = json.loads(line)
        if message.get("id") == request_id:
            return message
    raise RuntimeError("nanoagent mcp serve ended before it answered; see logs/nanoagent.log in the bench's home")


def listed_after(env: dict) -> float:
    """Seconds from starting `nanoagent mcp serve` to its tool list, with the tools' count checked."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "nanoagent", "mcp", "serve"], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        answer(proc, 1)
        send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = answer(proc, 2)["result"]["tools"]
        elapsed = time.perf_counter() - started
        assert len(tools) == 8, tools
        return elapsed
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)


def imported_after(env: dict) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mcp.server.lowlevel"], env=env, check=True)
    return time.perf_counter() - started


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NANOAGENT_HOME": str(Path(tmp) / "home"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        listed_after(env)  # the home is made and the bytecode cached, as for any start after the first
        runs, reference = [], []
        for _ in range(RUNS):  # interleaved: a change in the machine's load falls on both alike
            runs.append(listed_after(env))
            reference.append(imported_after(env))
    median = statistics.median(runs)
    record(f"mcp serve: start to tools/list, median of {RUNS}", f"{median:.2f} s", f"< {BUDGET:.1f} s",
           median < BUDGET)
    record("reference: import mcp.server.lowlevel, median", f"{statistics.median(reference):.2f} s", "-", None)
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
