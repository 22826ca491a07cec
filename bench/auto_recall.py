"""`make bench` (automatic recall): what recall adds to a person's turn at 100,000 indexed history entries.

The workspace is `memory_search.py`'s (filler history with hidden facts, memory files, 30 sessions), its index built
first. Two agents share it, one with `memory.autoRecall` on and one off, and take turns (ScriptedProvider replying
with the prompt's size as usage, as a server does, and no latency) in sessions of their own, each message a question
from the facts with two filler words: the difference of their median turns is what recall adds, measured in one run.
The budgeted figure is the agent process's CPU time (the recall thread's included), as for the other per-turn
budgets: on this shared 2-core machine wall time also counts the waits for a core, which double under load; the wall
difference is printed beside it. The recall step alone (`AutoRecall.recall` as the loop calls it: the index's
catch-up with the turns' new messages, the search, rendering) is timed too. Budget: < 10 ms added.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from memory_search import COMMON, FACTS, build_workspace  # noqa: E402

from nanoagent.agent.build import build_agent  # noqa: E402
from nanoagent.config.schema import Config  # noqa: E402
from nanoagent.memory.recall import Shown, recall_query  # noqa: E402
from nanoagent.providers.base import ChatRequest  # noqa: E402
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply  # noqa: E402
from nanoagent.usage import Usage  # noqa: E402

ENTRIES = 100_000
TURNS = 60
BUDGET_MS = 10.0


def reply(request: ChatRequest) -> ScriptedReply:
    """A reply with the prompt's size, as a server reports it: the budget calibrates on it rather than running the
    tokenizer over the whole prompt each turn, which is what a ScriptedProvider without usage makes it do."""
    chars = len(request.system) + sum(len(str(m["content"])) for m in request.messages)
    return ScriptedReply("Noted, thanks.", usage=Usage(input_tokens=chars // 4, output_tokens=4))


def p95(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.95) - 1]


def main() -> int:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        paths, _ = build_workspace(Path(tmp), ENTRIES, rng)
        on, off = Config(), Config()
        off.memory.auto_recall.enabled = False
        agents = {name: build_agent(config, paths, provider=ScriptedProvider(respond=reply))
                  for name, config in (("on", on), ("off", off))}
        started = time.perf_counter()
        assert agents["on"].recall is not None
        agents["on"].recall.searcher.update()
        print(f"index of {ENTRIES:,} entries built in {time.perf_counter() - started:.1f} s", flush=True)
        messages = [rng.choice(FACTS)[2] + " " + " ".join(rng.sample(COMMON, 2)) for _ in range(TURNS)]
        wall: dict[str, list[float]] = {"on": [], "off": []}
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        recalled = 0

        async def run() -> None:
            nonlocal recalled
            for number, text in enumerate(messages):
                for name in (("on", "off") if number % 2 else ("off", "on")):
                    loop = agents[name]
                    started, started_cpu = time.perf_counter(), time.process_time()
                    await loop.handle(text, f"cli:bench-{name}")
                    wall[name].append((time.perf_counter() - started) * 1000)
                    cpu[name].append((time.process_time() - started_cpu) * 1000)
                recalled += "recalled memory" in str(agents["on"].session("cli:bench-on").messages[-2]["content"])

        asyncio.run(run())
        loop = agents["on"]
        assert loop.recall is not None
        session = loop.session("cli:bench-on")
        shown = Shown(session.key, session.last_consolidated, loop.context.recent_cursors(),
                      file_shown=loop.context.file_shown)
        alone = []
        for text in messages:
            started = time.perf_counter()
            loop.recall.recall(recall_query(text, session.messages), shown)
            alone.append((time.perf_counter() - started) * 1000)
    added = statistics.median(cpu["on"]) - statistics.median(cpu["off"])
    added_wall = statistics.median(wall["on"]) - statistics.median(wall["off"])
    print(f"turn CPU median {statistics.median(cpu['off']):.1f} ms without recall, {statistics.median(cpu['on']):.1f} ms "
          f"with: +{added:.1f} ms; wall median {statistics.median(wall['off']):.1f} / "
          f"{statistics.median(wall['on']):.1f} ms: +{added_wall:.1f} ms; {TURNS} turns each, "
          f"{recalled}/{TURNS} recalled something")
    print(f"recall step alone (wall): median {statistics.median(alone):.1f} ms, p95 {p95(alone):.1f} ms")
    ok = added < BUDGET_MS
    print("automatic recall: " + ("ok" if ok else f"budget missed (+{added:.1f} ms CPU; budget < {BUDGET_MS:.0f} ms)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
