"""`make bench` (memory part): memory search latency, index build time and recall@5. Exits 1 on a miss.

A synthetic workspace per size: N history entries of filler drawn from everyday agent-conversation words, 20
known facts hidden among them (in history, MEMORY.md, USER.md and session files, some in Chinese and Japanese),
and 30 filler sessions. Latency is one `MemorySearch.search` call as the tool makes it, including the check for
new data before it. Budget: p95 < 50 ms at 10,000 entries; recall@5 >= 0.9 on the 20 questions.
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

from nanoagent.memory.history import HistoryLog  # noqa: E402
from nanoagent.memory.search import MemorySearch  # noqa: E402
from nanoagent.paths import Paths  # noqa: E402
from nanoagent.session.store import SessionStore  # noqa: E402

P95_BUDGET_MS = 50.0
RECALL_BUDGET = 0.9
QUERIES = 300

COMMON = ("the user asked about a the project and we discussed plan for next week meeting code review bug fix "
          "deploy server test email call notes file folder config update release branch merge issue ticket "
          "schedule morning afternoon evening team budget report draft slides customer feedback design idea "
          "question answer summary decided agreed later today tomorrow friday monday week month year data "
          "script python shell command error log backup database query index cache latency memory disk "
          # distractors: words the questions below use too
          "password key lock door dinner school editor appointment city code switch called").split()

# (where, the fact as stored, the question a user would ask); where is "history", "MEMORY.md", "USER.md" or
# "session". A hit counts when its source is the fact's document.
FACTS = [
    ("history", "The user's sister Mara adopted a beagle called Pickles.", "what is my sister's dog called"),
    ("history", "Wifi password for the cabin is written inside the green notebook.", "where is the cabin wifi password"),
    ("history", "User's passport expires in March 2031; renew it early.", "when does my passport expire"),
    ("history", "Decided to host the blog on a Hetzner box instead of Netlify.", "where are we hosting the blog"),
    ("history", "The user is allergic to hazelnuts and avoids Nutella.", "which nuts am I allergic to"),
    ("history", "Dentist appointment moved to Thursday 9:30 with Dr. Okafor.", "when is my dentist appointment"),
    ("history", "User runs a half marathon in Rotterdam in April.", "which marathon am I running"),
    ("history", "The spare house key is under the blue flower pot.", "where did I put the spare key"),
    ("history", "Chose PostgreSQL over MongoDB for the invoicing service.", "which database for invoicing"),
    ("history", "用户最喜欢吃寿司，尤其是三文鱼寿司。", "我喜欢吃什么寿司"),
    ("history", "来週の会議は金曜日の午後三時からです。", "会議はいつですか"),
    ("history", "User's daughter Ines starts violin lessons in September.", "when do Ines's violin lessons start"),
    ("MEMORY.md", "- The garage door code is 4417.", "garage door code"),
    ("MEMORY.md", "- Tax accountant: Priya Raman, files the return every May.", "who is my tax accountant"),
    ("USER.md", "- Prefers metric units and 24-hour time.", "do I prefer metric units"),
    ("USER.md", "- Lives in Ghent, Belgium, near the Korenmarkt.", "which city do I live in Belgium"),
    ("session", "My bike lock combination is 2958, please remember it.", "bike lock combination"),
    ("session", "I switched my editor from vim to helix last week.", "which editor did I switch to"),
    ("session", "Our anniversary dinner is booked at Restaurant Vrijmoed.", "where is the anniversary dinner"),
    ("session", "The kids' school closes for carnival on February 12.", "when does school close for carnival"),
]


def filler(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(12, 40))).capitalize() + "."


def build_workspace(base: Path, entries: int, rng: random.Random) -> tuple[Paths, list[tuple[str, str]]]:
    """The workspace and, for each fact, (question, expected document key) where the key is a hit.ref + start."""
    syllables = ["ka", "lo", "mi", "ter", "vin", "sol", "dra", "pe", "nu", "qua", "ri", "zen", "bo", "fa"]
    rare = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(4000)]
    words = COMMON * 20 + rare  # common words dominate, as in real notes
    paths = Paths(home=base / "home", workspace=base / "ws")
    paths.memory_dir.mkdir(parents=True)
    history_facts = [f for f in FACTS if f[0] == "history"]
    slots = dict(zip(rng.sample(range(1, entries + 1), len(history_facts)), history_facts, strict=True))
    expected: list[tuple[str, str]] = []
    with open(paths.memory_dir / "history.jsonl", "w", encoding="utf-8") as f:
        for cursor in range(1, entries + 1):
            fact = slots.get(cursor)
            content = fact[1] if fact else filler(rng, words)
            if fact:
                expected.append((fact[2], f"history#{cursor}"))
            f.write(json.dumps({"cursor": cursor, "timestamp": "2026-11-22 14:05", "session": "cli:direct",
                                "content": content, "raw": False}, ensure_ascii=False) + "\n")
    for name, where in (("memory/MEMORY.md", "MEMORY.md"), ("USER.md", "USER.md")):
        lines = ["# Notes", ""]
        for section in range(6):
            lines += [f"## Section {section}", ""] + [f"- {filler(rng, words)}" for _ in range(4)] + [""]
        for fact in (f for f in FACTS if f[0] == where):
            lines += ["## Facts", "", fact[1], ""]
            expected.append((fact[2], f"{name}:{len(lines) - 1}"))
        (paths.workspace / name).write_text("\n".join(lines), encoding="utf-8")
    store = SessionStore(paths.sessions_dir)
    session_facts = [f for f in FACTS if f[0] == "session"]
    for number in range(30):
        key = f"cli:s{number:02}"
        session = store.load(key)
        messages = []
        for _ in range(20):
            messages += [{"role": "user", "content": filler(rng, words)},
                         {"role": "assistant", "content": filler(rng, words)}]
        if number < len(session_facts):
            messages.insert(7, {"role": "user", "content": session_facts[number][1]})
            expected.append((session_facts[number][2], f"session {key} #7"))
        store.add_messages(session, messages)
    return paths, expected


def found(hit_sources: list[str], key: str) -> bool:
    if key.startswith("history#") or key.startswith("session "):
        return any(s == key or s.startswith(key + " ") for s in hit_sources)
    path, line = key.split(":")
    for source in hit_sources:
        name, _, span = source.rpartition(":")
        if name == path and "-" in span:
            first, last = map(int, span.split("-"))
            if first <= int(line) <= last:
                return True
    return False


def bench(entries: int) -> tuple[float, float, bool]:
    rng = random.Random(entries)
    with tempfile.TemporaryDirectory() as tmp:
        paths, expected = build_workspace(Path(tmp), entries, rng)
        searcher = MemorySearch(paths)
        started = time.perf_counter()
        searcher.update()
        build = time.perf_counter() - started
        docs = searcher.last_update.added
        queries = [q for q, _ in expected] + [" ".join(rng.sample(COMMON, 3)) for _ in range(QUERIES)]
        timings = []
        for query in queries:
            started = time.perf_counter()
            searcher.search(query, 8)
            timings.append((time.perf_counter() - started) * 1000)
        timings.sort()
        median, p95 = statistics.median(timings), timings[int(len(timings) * 0.95) - 1]
        recalled = sum(found([h.source for h in searcher.search(q, 5)], key) for q, key in expected)
        recall = recalled / len(expected)
        HistoryLog(paths.memory_dir).append("cli:direct", "A brand new note about a quokka.")
        started = time.perf_counter()
        searcher.search("quokka")
        incremental = (time.perf_counter() - started) * 1000
        searcher.close()
        fresh = MemorySearch(paths)
        started = time.perf_counter()
        fresh.search("quokka")
        fresh_ms = (time.perf_counter() - started) * 1000
        fresh.close()
        HistoryLog(paths.memory_dir).append("cli:direct", "Another new note, about a wombat.")
        fresh = MemorySearch(paths)  # HistoryLog parses the whole file once per process; only new entries index
        started = time.perf_counter()
        fresh.search("wombat")
        fresh_new_ms = (time.perf_counter() - started) * 1000
        fresh.close()
        misses = [q for q, key in expected if not found([h.source for h in MemorySearch(paths).search(q, 5)], key)]
    print(f"{entries:>7,} entries ({docs:,} documents): build {build:.2f} s; search median {median:.1f} ms, "
          f"p95 {p95:.1f} ms over {len(queries)} queries; recall@5 {recall:.2f} ({recalled}/{len(expected)}); "
          f"after 1 new entry {incremental:.1f} ms; first search in a new process {fresh_ms:.1f} ms, "
          f"{fresh_new_ms:.1f} ms after 1 new entry", flush=True)
    if misses:
        print(f"         missed: {misses}")
    return p95, recall, True


def main() -> int:
    ok = True
    for entries in (10_000, 100_000):
        p95, recall, _ = bench(entries)
        if entries == 10_000:
            if p95 >= P95_BUDGET_MS:
                print(f"MISS search p95 {p95:.1f} ms at 10,000 entries; budget < {P95_BUDGET_MS:.0f} ms")
                ok = False
            if recall < RECALL_BUDGET:
                print(f"MISS recall@5 {recall:.2f} at 10,000 entries; budget >= {RECALL_BUDGET}")
                ok = False
    print("memory search: " + ("ok" if ok else "budget missed"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
