"""`make bench` (spend caps): what the check before each model call costs at 100,000 ledger records.

A home whose spend ledger holds 100,000 records (reservations and their settlements, over 60 days, 300 sessions,
every kind) and a config with every kind of cap (daily, monthly, five session patterns, heartbeat, Dream). Timed per
model call, as the metered provider (`providers/metered.py`) makes them: the prompt's bound (`PromptBounds`: a request with tools and 40 messages, one
more each call, bounded by the tokens reported for the one before plus the appended message; `spend/bounds.jsonl` full
at 256 sessions, read once, a line appended after each call), the check and
reservation (`Meter.reserve`: the ledger's lock, its totals caught up, every cap of the scope, one fsynced append)
and the settlement (`Meter.settle`). The budgeted figure is CPU time with the home in /dev/shm (as for the other
per-call budgets: on this shared machine wall time also counts the waits for a core), so it is the check's own cost;
the same on the disk, where the reservation's fsync adds the disk's time, is printed beside it. A process's first
check (totals read from `totals.json`, or rebuilt from the whole ledger when it is missing) is timed too. Budget:
< 1 ms per call.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nanoagent.config.loader import config_from  # noqa: E402
from nanoagent.paths import Paths  # noqa: E402
from nanoagent.providers.base import ChatRequest, ToolSpec  # noqa: E402
from nanoagent.providers.metered import PromptBounds  # noqa: E402
from nanoagent.spend import Meter, Scope, current_scope, report  # noqa: E402
from nanoagent.spend.bounds import KEPT, _memos, memo_for  # noqa: E402
from nanoagent.spend.caps import _ledgers  # noqa: E402
from nanoagent.spend.ledger import Ledger  # noqa: E402
from nanoagent.usage import Usage  # noqa: E402

RECORDS = 100_000
CALLS = 300
BUDGET_MS = 1.0
MODEL = "anthropic/claude-sonnet-4-5"


def fill(paths: Paths, records: int) -> None:
    """`records` ledger lines (half reservations, half their settlements) over the last 60 days."""
    rng = random.Random(21)
    now = time.time()
    sessions = [f"telegram:{n}" for n in range(200)] + [f"slack:C{n}" for n in range(60)] + \
        [f"cron:job{n}" for n in range(39)] + ["heartbeat"]
    lines = []
    ledger = Ledger(paths.spend_dir)
    for _ in range(records // 2):
        session = rng.choice(sessions)
        kind = "heartbeat" if session == "heartbeat" else "cron" if session.startswith("cron") else \
            rng.choice(["turn", "turn", "turn", "dream"])
        line = ledger.reserve(0.05, {"session": session, "kind": kind}, MODEL, now=now - rng.uniform(0, 60 * 86400))
        lines += [line, ledger.settlement(line, rng.uniform(0.001, 0.05))]
    paths.spend_dir.mkdir(parents=True, exist_ok=True)
    (paths.spend_dir / "ledger.jsonl").write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))


def request() -> ChatRequest:
    rng = random.Random(7)
    words = "the agent read the file and answered with a short list of what changed since yesterday".split()
    messages = [{"role": "user" if n % 2 == 0 else "assistant", "content": " ".join(rng.choices(words, k=150))}
                for n in range(40)]
    tools = [ToolSpec(f"tool_{n}", "Does one thing well. " * 10,
                      {"type": "object", "properties": {"path": {"type": "string", "description": "where"}}})
             for n in range(20)]
    return ChatRequest(MODEL, "You are nanoagent. " * 400, messages, tools, max_tokens=8192)  # type: ignore[arg-type]


def measure(folder: str | None) -> tuple[float, float, float, float]:
    """(CPU ms per call, wall ms per call, first check s, rebuild s) with the home in `folder`."""
    _ledgers.clear()
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        paths = Paths(Path(tmp) / "home", Path(tmp) / "home" / "workspace")
        config = config_from({"budget": {"daily": 1e6, "monthly": 1e7, "heartbeat": 1e5, "dream": 1e5,
                                         "sessions": {"telegram:*": 1e5, "slack:*": 1e5, "telegram:42": 1e5,
                                                      "cron:*": 1e5, "cli:*": 1e5}}}, paths.config_file, env={})
        fill(paths, RECORDS)
        started = time.perf_counter()
        report(config, paths)  # no totals.json yet: rebuilt from the whole ledger (and written)
        rebuild = time.perf_counter() - started
        _ledgers.clear()
        started = time.perf_counter()
        report(config, paths)  # a new process: totals.json, then the ledger's tail
        first = time.perf_counter() - started
        meter = Meter(config, paths)
        current_scope.set(Scope("telegram:42"))
        req = request()
        memo = memo_for(paths.spend_dir)  # spend/bounds.jsonl full: every other session's entry, then a new process
        for n in range(KEPT):
            memo.record(f'["telegram:{n}", "{MODEL}", "0"]', [40, "0" * 32, "1" * 32, 900, 20_000], "fixed", 1)
        _memos.clear()
        cpu, wall = [], []
        for _ in range(CALLS):
            c0, w0 = time.process_time(), time.perf_counter()
            req.messages.append({"role": "user", "content": "and what changed since yesterday?"})
            bounds = PromptBounds(req, memo_for(paths.spend_dir))
            hold = meter.reserve(MODEL, bounds.bound(MODEL), req.max_tokens)
            meter.settle(hold, Usage(20_000, 500), known=True)
            bounds.remember(MODEL, 20_000)
            cpu.append((time.process_time() - c0) * 1000)
            wall.append((time.perf_counter() - w0) * 1000)
        current_scope.set(None)
        return statistics.median(cpu), statistics.median(wall), first, rebuild


def main() -> int:
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    cpu, wall, first, rebuild = measure(shm)
    disk_cpu, disk_wall, _, _ = measure(None)
    print(f"spend check at {RECORDS:,} ledger records: {cpu:.3f} ms CPU per call (median of {CALLS}; wall "
          f"{wall:.3f} ms; the ledger in {shm or 'the temp folder'}); on the disk, its fsync included: "
          f"{disk_cpu:.3f} ms CPU, {disk_wall:.3f} ms wall. A process's first check: {first * 1000:.1f} ms "
          f"(totals.json), {rebuild * 1000:.0f} ms rebuilding it from the ledger. Budget < {BUDGET_MS:g} ms per call")
    return 0 if cpu < BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
