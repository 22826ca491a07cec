"""`make bench` (recall part): recall@5 and MRR of memory search over long generated conversations.

The conversations come from `bench/conversations.py` (seeded, LoCoMo-style: two speakers, dated sessions, facts
stated once and asked about later in other words, evidence ids). Each conversation gets a workspace of its own and
is indexed the two ways nanoagent indexes what was said:
    - sessions: each conversation session is a session file; the first speaker's turns are user messages with the
      runtime block nanoagent writes (its `time:` line is the session's date), the second's assistant messages;
      every turn reads "Name: text", as a transcript of several people does
    - history: each turn is a history.jsonl entry stamped with the session's date
    - lines: the whole conversation as one session of user messages "[1:56 pm on 8 May, 2023] Name: text" and no
      runtime block (a transcript imported as it is)
A question counts as recalled when one of its evidence turns is among the top 5 hits; MRR is over the first
evidence hit (0 when it is not in the top 10). Searches run two days after the last session.

Lexical always; hybrid with the endpoint of `memory.embeddingModel` when the config of $NANOAGENT_HOME sets one;
with `--hybrid` also hybrid against the deterministic embedding stand-in of `tests/llm_server.py`
(hashed character trigrams: offline, not a semantic model, so it shows the fusion works rather than what a real
model gains; ~25 s a layout here, so `make bench` leaves it out). `--ablation`: each ranking change in turn. The 20 hand-written questions of `bench/memory_search.py` are reported there. Budget: lexical recall@5
>= RECALL_BUDGET on the sessions layout.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.conversations import Conversation, generate  # noqa: E402
from nanoagent.memory import search, search_text  # noqa: E402
from nanoagent.memory.embeddings import EmbeddingSettings  # noqa: E402
from nanoagent.memory.search import MemorySearch, SearchHit  # noqa: E402
from nanoagent.messages import RUNTIME_CLOSE, RUNTIME_OPEN  # noqa: E402
from nanoagent.paths import Paths  # noqa: E402
from nanoagent.session.store import SessionStore  # noqa: E402

SEED = 20
RECALL_BUDGET = 0.7
K = 5


def runtime_block(when: datetime) -> str:
    return (f"{RUNTIME_OPEN}\ntime: {when.strftime('%Y-%m-%d %H:%M %A')} (UTC)\nchannel: cli\nchat_id: direct\n"
            f"{RUNTIME_CLOSE}\n\n")


def index_sessions(paths: Paths, conversation: Conversation) -> dict[str, tuple[str, int]]:
    """Writes each session as a session file; evidence id -> (session key, message index)."""
    store = SessionStore(paths.sessions_dir)
    where = {}
    first = conversation.speakers[0]
    for number, (date, turns) in enumerate(conversation.sessions, start=1):
        key = f"chat:s{number:02}"
        session = store.load(key)
        messages: list = []
        for turn, (speaker, text) in enumerate(turns, start=1):
            when = date + timedelta(minutes=turn)
            if speaker == first:
                messages.append({"role": "user", "content": runtime_block(when) + f"{speaker}: {text}"})
            else:
                messages.append({"role": "assistant", "content": f"{speaker}: {text}"})
            where[f"D{number}:{turn}"] = (key, turn - 1)
        store.add_messages(session, messages)
    return where


def index_history(paths: Paths, conversation: Conversation) -> dict[str, tuple[str, int]]:
    """Writes every turn as a history entry; evidence id -> (the entry's session, cursor), as a hit names it."""
    where = {}
    cursor = 0
    with open(paths.memory_dir / "history.jsonl", "w", encoding="utf-8") as f:
        for number, (date, turns) in enumerate(conversation.sessions, start=1):
            for turn, (speaker, text) in enumerate(turns, start=1):
                cursor += 1
                stamp = (date + timedelta(minutes=turn)).strftime("%Y-%m-%d %H:%M")
                f.write(json.dumps({"cursor": cursor, "timestamp": stamp, "session": f"chat:s{number:02}",
                                    "content": f"{speaker}: {text}", "raw": False}) + "\n")
                where[f"D{number}:{turn}"] = (f"chat:s{number:02}", cursor)
    return where


def index_lines(paths: Paths, conversation: Conversation) -> dict[str, tuple[str, int]]:
    """Writes the whole conversation as one session of user messages "[1:56 pm on 8 May, 2023] Name: text" with
    no runtime block, as a transcript pasted or imported would be; evidence id -> (session key, message index)."""
    store = SessionStore(paths.sessions_dir)
    session = store.load("chat:all")
    where, messages = {}, []
    for number, (date, turns) in enumerate(conversation.sessions, start=1):
        for turn, (speaker, text) in enumerate(turns, start=1):
            when = date + timedelta(minutes=turn)
            stamp = f"{when.strftime('%I:%M %p').lstrip('0').lower()} on {when.day} {when.strftime('%B, %Y')}"
            where[f"D{number}:{turn}"] = ("chat:all", len(messages))
            messages.append({"role": "user", "content": f"[{stamp}] {speaker}: {text}"})
    store.add_messages(session, messages)
    return where


LAYOUTS = {"sessions": index_sessions, "history": index_history, "lines": index_lines}


def place(hit: SearchHit) -> tuple[str, int]:
    return (hit.ref, hit.start)


def measure(conversations: list[Conversation], layout: str, embedding: EmbeddingSettings | None
            ) -> tuple[float, float, int, dict[str, tuple[int, int]]]:
    """(recall@5, MRR, questions, {kind: (recalled, asked)})."""
    recalled, reciprocal, asked = 0, 0.0, 0
    kinds: dict[str, tuple[int, int]] = {}
    for conversation in conversations:
        with tempfile.TemporaryDirectory() as tmp:
            paths = Paths(home=Path(tmp) / "home", workspace=Path(tmp) / "ws")
            paths.memory_dir.mkdir(parents=True)
            where = LAYOUTS[layout](paths, conversation)
            now = conversation.sessions[-1][0] + timedelta(days=2)
            searcher = MemorySearch(paths, embedding)
            for question in conversation.questions:
                hits = [place(h) for h in searcher.search(question.text, 10, now=now)]
                wanted = {where[e] for e in question.evidence}
                rank = next((i for i, h in enumerate(hits, start=1) if h in wanted), 0)
                hit = 0 < rank <= K
                recalled += hit
                reciprocal += 1 / rank if rank else 0.0
                asked += 1
                done, total = kinds.get(question.kind, (0, 0))
                kinds[question.kind] = (done + hit, total + 1)
            searcher.close()
    return recalled / asked, reciprocal / asked, asked, kinds


def ablation(conversations: list[Conversation]) -> None:
    """`bench/recall.py --ablation`: each ranking change added in turn (lexical, sessions layout)."""
    steps = [("BM25 + porter (before)", {}),
             ("+ irregular forms", {(search_text, "FORMS"): search_text.FORMS}),
             ("+ question words", {(search_text, "STOPWORDS"): search_text.STOPWORDS}),
             ("+ neighbours", {(search, "NEAR_WEIGHT"): search.NEAR_WEIGHT}),
             ("+ every word", {(search, "EVERY_BOOST"): search.EVERY_BOOST}),
             ("+ speaker", {(search, "SPEAKER_BOOST"): search.SPEAKER_BOOST}),
             ("+ when", {(search, "WHEN_BOOST"): search.WHEN_BOOST}),
             ("+ named times", {(search, "WINDOW_BOOST"): search.WINDOW_BOOST}),
             ("+ recency", {(search, "RECENCY_BOOST"): search.RECENCY_BOOST})]
    off = {"FORMS": {}, "STOPWORDS": search_text.STOPWORDS - search_text.QUESTION_WORDS}
    saved = {place: value for _, change in steps for place, value in change.items()}
    for (module, name) in saved:
        setattr(module, name, off.get(name, 0.0))
    try:
        for label, change in steps:
            for (module, name), value in change.items():
                setattr(module, name, value)
            recall, mrr, _, _ = measure(conversations, "sessions", None)
            print(f"| {label:<24} | {recall:.3f} | {mrr:.3f} |", flush=True)
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def stand_in() -> tuple[EmbeddingSettings, object]:
    from tests.llm_server import start_server

    server = start_server()
    return EmbeddingSettings("openai/stand-in", "openai", f"{server.url}/v1", "sk-bench", None), server


def configured() -> EmbeddingSettings | None:
    """The embedding endpoint of `memory.embeddingModel` in the config of $NANOAGENT_HOME, if one is set."""
    from nanoagent.config.loader import load_config
    from nanoagent.memory.search import embedding_settings

    path = Paths.from_env().config_file
    return embedding_settings(load_config(path)[0]) if path.is_file() else None


def main() -> int:
    started = time.perf_counter()
    conversations = generate(SEED)
    if "--ablation" in sys.argv:
        ablation(conversations)
        return 0
    ok = True
    settings, server = stand_in()
    modes: list[tuple[str, EmbeddingSettings | None]] = [("lexical", None)]
    real = configured()
    if real is not None:
        modes.append((f"hybrid ({real.model})", real))
    if "--hybrid" in sys.argv:  # ~25 s a layout here: one HTTP request per question and per 64 turns
        modes.append(("hybrid (stand-in)", settings))
    try:
        for layout in LAYOUTS:
            for mode, embedding in modes:
                recall, mrr, asked, kinds = measure(conversations, layout, embedding)
                detail = ", ".join(f"{kind} {done / total:.2f}" for kind, (done, total) in sorted(kinds.items()))
                print(f"recall {layout:<8} {mode:<18} recall@5 {recall:.3f}  MRR {mrr:.3f}  over {asked} questions "
                      f"({detail})", flush=True)
                if layout == "sessions" and embedding is None and recall < RECALL_BUDGET:
                    print(f"MISS recall@5 {recall:.3f} on generated conversations; budget >= {RECALL_BUDGET}")
                    ok = False
    finally:
        server.close()  # type: ignore[attr-defined]
    print(f"recall bench: {'ok' if ok else 'budget missed'} in {time.perf_counter() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
