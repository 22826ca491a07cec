"""`make bench` (real conversations): recall@5 and MRR of memory search on LoCoMo's first five conversations.

The development set lives outside the repository (`../shared/locomo-dev/locomo-dev.json` beside the checkout, or
$LOCOMO_DEV; CC BY-NC 4.0, so nothing of it is copied here) and the bench says so in one line and passes when it is
absent. It measures what the held-out check measures, on the other five conversations:
    - each turn of a conversation is one `memory/history.jsonl` entry "[D1:3] Speaker: text" (plus
      " [shares <caption>]" when the turn shared an image), all with one timestamp, in a fresh workspace
    - each question of categories 1-4 with evidence (the first 60 of a conversation) searches for the top 5
    - a question is recalled when a hit's content or source names one of its evidence ids; MRR is over the
      first such hit (0 when none is in the top 5)
beside a plain SQLite FTS5 BM25 over the same entries (unicode61, the question's words but stopwords OR-ed). Categories: 1 (facts
spread over several turns), 2 (when), 3 (inference), 4 (one fact). The misses of each category are printed.

`MemorySearch` runs in-process (the held-out check runs `nanoagent memory search QUERY --limit 5 --json` as a
process per question; `--cli N` does that for conversation N and says whether both agree).
No budget: the figure is reported, not enforced (a held-out set decides).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nanoagent.memory.search import MemorySearch  # noqa: E402
from nanoagent.memory.search_text import STOPWORDS  # noqa: E402
from nanoagent.paths import Paths  # noqa: E402

DEV = Path(os.environ.get("LOCOMO_DEV") or ROOT.parent / "shared" / "locomo-dev" / "locomo-dev.json")
K = 5
PER_CONVERSATION = 60
STAMP = "2024-01-01 12:00"
CATEGORIES = {1: "multi-hop", 2: "when", 3: "inference", 4: "single-hop"}
_ID = re.compile(r"D\d+:\d+")

Search = Callable[[str], list[str]]  # a question -> the texts (content and source) of the top K hits


def entries(conversation: dict) -> list[str]:
    """Every turn as a history entry's content, in order."""
    talk = conversation["conversation"]
    numbers = sorted(int(k.split("_")[1]) for k in talk if re.fullmatch(r"session_\d+", k))
    out = []
    for number in numbers:
        for turn in talk[f"session_{number}"]:
            text = f"[{turn['dia_id']}] {turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares {turn['blip_caption']}]"
            out.append(text)
    return out


def questions(conversation: dict) -> list[tuple[str, set[str], int]]:
    """(question, evidence ids, category) of the first PER_CONVERSATION questions of categories 1-4 with evidence."""
    out = []
    for qa in conversation["qa"]:
        evidence = {e for item in qa.get("evidence") or () for e in _ID.findall(item)}
        if qa["category"] in CATEGORIES and qa.get("evidence"):
            out.append((qa["question"], evidence, qa["category"]))
    return out[:PER_CONVERSATION]


def write_history(paths: Paths, texts: list[str]) -> None:
    paths.memory_dir.mkdir(parents=True)
    with open(paths.memory_dir / "history.jsonl", "w", encoding="utf-8") as f:
        for cursor, text in enumerate(texts, start=1):
            f.write(json.dumps({"cursor": cursor, "timestamp": STAMP, "session": "cli:direct", "content": text,
                                "raw": False}, ensure_ascii=False) + "\n")


def rank_of(found: list[str], evidence: set[str]) -> int:
    """1-based rank of the first text naming an evidence id; 0 when none does."""
    for rank, text in enumerate(found, start=1):
        if any(f"[{e}]" in text or re.search(rf"\b{re.escape(e)}\b", text) for e in evidence):
            return rank
    return 0


def nanoagent_search(paths: Paths) -> tuple[Search, Callable[[], None]]:
    searcher = MemorySearch(paths)
    return (lambda q: [f"{h.source}\n{h.content}" for h in searcher.search(q, K)]), searcher.close


def cli_search(paths: Paths) -> tuple[Search, Callable[[], None]]:
    env = {**os.environ, "NANOAGENT_HOME": str(paths.home), "PYTHONPATH": str(ROOT)}

    def search(question: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", "from nanoagent.cli.entry import main; main()", "memory", "search", question, "--limit",
                              str(K), "--json", "-w", str(paths.workspace)], env=env, capture_output=True, text=True,
                             check=True).stdout
        return [f"{h['source']}\n{h['content']}" for h in json.loads(out)]

    return search, lambda: None


def bm25_search(texts: list[str]) -> tuple[Search, Callable[[], None]]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    db.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)", enumerate(texts, start=1))

    def search(question: str) -> list[str]:
        words = [w for w in re.findall(r"\w+", question.lower()) if w not in STOPWORDS and len(w) > 1]
        if not words:
            return []
        query = " OR ".join('"' + w + '"' for w in dict.fromkeys(words))
        return [body for (body,) in db.execute("SELECT body FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?",
                                               (query, K))]

    return search, db.close


class Tally:
    def __init__(self) -> None:
        self.found: dict[int, list[float]] = {c: [] for c in CATEGORIES}  # per category: reciprocal ranks
        self.misses: dict[int, list[str]] = {c: [] for c in CATEGORIES}

    def add(self, category: int, rank: int, miss: str) -> None:
        self.found[category].append(1 / rank if rank else 0.0)
        if not rank:
            self.misses[category].append(miss)

    def figures(self, categories: tuple[int, ...] = tuple(CATEGORIES)) -> tuple[float, float, int]:
        ranks = [r for c in categories for r in self.found[c]]
        return (sum(r > 0 for r in ranks) / len(ranks), sum(ranks) / len(ranks), len(ranks)) if ranks else (0, 0, 0)

    def line(self, label: str) -> str:
        recall, mrr, asked = self.figures()
        parts = ", ".join(f"{c} {CATEGORIES[c]} {self.figures((c,))[0]:.2f}/{len(self.found[c])}"
                          for c in CATEGORIES if self.found[c])
        return f"{label:<10} recall@5 {recall:.3f}  MRR {mrr:.3f}  over {asked} questions ({parts})"


def measure(data: list[dict], ways: dict[str, Callable[[Paths, list[str]], tuple[Search, Callable[[], None]]]]
            ) -> dict[str, Tally]:
    tallies = {name: Tally() for name in ways}
    for number, conversation in enumerate(data, start=1):
        texts = entries(conversation)
        with tempfile.TemporaryDirectory() as tmp:
            paths = Paths(home=Path(tmp) / "home", workspace=Path(tmp) / "ws")
            write_history(paths, texts)
            for name, way in ways.items():
                search, close = way(paths, texts)
                try:
                    for question, evidence, category in questions(conversation):
                        found = search(question)
                        rank = rank_of(found, evidence)
                        tallies[name].add(category, rank, f"c{number} {question} -> {' '.join(sorted(evidence))}")
                finally:
                    close()
    return tallies


def check_cli(data: list[dict], number: int) -> None:
    """`--cli N`: the in-process figure against `nanoagent memory search` run as a process, on conversation N."""
    one = [data[number - 1]]
    tallies = measure(one, {"in-process": lambda p, t: nanoagent_search(p), "cli": lambda p, t: cli_search(p)})
    for name, tally in tallies.items():
        print(tally.line(name))
    same = tallies["in-process"].found == tallies["cli"].found
    print(f"conversation {number}: in-process and `memory search` processes {'agree' if same else 'DIFFER'}")


def main() -> int:
    if not DEV.is_file():
        print(f"locomo bench: skipped ({DEV} is absent)")
        return 0
    data = json.loads(DEV.read_text(encoding="utf-8"))
    if "--cli" in sys.argv:
        check_cli(data, int(sys.argv[sys.argv.index("--cli") + 1]))
        return 0
    started = time.perf_counter()
    tallies = measure(data, {"nanoagent": lambda p, t: nanoagent_search(p), "bm25": lambda p, t: bm25_search(t)})
    if "--quiet" not in sys.argv:
        for category in CATEGORIES:
            misses = tallies["nanoagent"].misses[category]
            if misses:
                print(f"misses, category {category} ({CATEGORIES[category]}): {len(misses)}")
                for miss in misses:
                    print(f"  {miss}")
    for name, tally in tallies.items():
        print(tally.line(name))
    print(f"locomo bench: {len(data)} conversations in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
