"""Memory search: one SQLite FTS5 index over everything the agent remembers, ranked by BM25.

Documents:
    - `memory/MEMORY.md`, `USER.md`, `SOUL.md` and the dated notes `memory/YYYY-MM-DD.md`: whole paragraphs grouped
      under their heading, with line ranges
    - every `memory/history.jsonl` entry
    - every user and assistant message in `$NANOAGENT_HOME/sessions/*.jsonl` (user text without the runtime block)

Tool results are not indexed: they are file contents and command output the agent can read again, their long,
repetitive text would swamp the ranking, and they are third-party data that should not come back later looking
like something the user said.

The index lives at `<home>/index/<workspace-slug>.sqlite`. It is derived data: a corrupt file or one with another
schema version is deleted and rebuilt without asking. Before each search it catches up with what changed, with
work in proportion to what is new:
    - memory files by (inode, size, mtime): a changed file has its chunks replaced
    - history.jsonl by (inode, size, mtime), then only the bytes after the last indexed line, and of those only
      entries after the last indexed cursor
    - sessions by byte offset: only bytes after the last indexed complete line are read
  Both logs are append-only, so a change counts as an append only when the file kept its inode, grew, and still
  ends its indexed part with the bytes it ended with before. Anything else (replaced, shrunk, same size with a new
  mtime, an edit that shifted the indexed bytes) is indexed again from the start. One edit escapes this: a
  same-length edit before the indexed tail made together with an append, between two searches.

How text is split for the `body` and `cjk` columns and turned into a MATCH expression (CJK bigrams, stopwords,
irregular forms), and how a query's time and a transcript line's speaker and date are read, is in `search_text.py`.

Ranking: the best POOL keyword matches (BM25) are re-scored (`_keyword_ranking`, `_rerank`): a session message
or history entry gets NEAR_WEIGHT of its best neighbour's score (the one before or after it in its session or
history thread, linked by `docs.prev`; ANSWER_WEIGHT of the question just before it), so the answer after a question
turn is found by the question's words; documents naming things of the kind the query asks about (`related_terms`:
"sports" finds "basketball") are added with a part of the best score; a question turn loses QUESTION_PENALTY (it
names what it asks about, and must not come before the answer) and a turn gains up to LENGTH_BOOST for its words
(BM25's length normalisation ranks "Wow! Did you see that band?" above the turn that tells about it); then boosts
for holding every query word, for the turns of a person the query names, for a text that says when
(for a question asking when), for a document from the time the query names, and a weak one for recency. Session
messages take their time from the runtime block (an assistant message, its user message's), or from a date in
the line's head ("[8 May 2023] Caroline: ...").

With `memory.embeddingModel` set, documents are also embedded (`embeddings.py`); vectors are stored with the
model name (another model re-embeds everything; a cache beside the index keeps every vector by model and text,
so a rebuilt index embeds only new text) and the keyword and cosine rankings are merged by reciprocal rank
fusion. Any embedding failure falls back to BM25 with a warning.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import operator
import os
import re
import shlex
import sqlite3
import threading
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from nanoagent.errors import NanoagentError
from nanoagent.fsutil import private_dir, private_file
from nanoagent.memory.embeddings import (
    EMBED_BATCH,
    EMBED_CHARS,
    EmbeddingError,
    EmbeddingSettings,
    embed_texts,
    embedding_settings,
    unit_vector,
)
from nanoagent.memory.history import read_entries
from nanoagent.memory.search_text import (
    DOC_CHARS,
    MAX_QUERY_TERMS,
    STOPWORDS,
    asks_when,
    chunk_markdown,
    cjk_bigrams,
    is_question,
    line_head,
    make_snippet,
    match_expression,
    mentions_time,
    message_text,
    message_time,
    needles,
    related_terms,
    split_cjk_edges,
    time_filter,
    without_time,
)
from nanoagent.paths import MEMORY_FILES, Paths, is_dated_note, is_person_file, memory_files_on_disk
from nanoagent.session.store import Session, SessionStore

__all__ = ["IndexUpdate", "MemorySearch", "SearchHit", "SearchIndexError", "SourceKind", "embedding_settings"]

SCHEMA_VERSION = 5  # bump on any change to the tables or to what goes into them; old indexes are rebuilt
CANDIDATES = 50  # each ranking contributes this many documents to the fused one
POOL = 50  # keyword matches re-ranked by speaker, time and recency
NEAR_WORDS = 3  # a document found only through its neighbour has at least this many words
ENOUGH = 15  # documents holding every word: with this many the slower OR query (a few words missing) is skipped
NEAR_WEIGHT = 0.5  # a word in a neighbouring turn counts this much of one in the document itself (BM25 weight)
ANSWER_WEIGHT = 0.7  # and in the question just before it, this much
QUESTION_PENALTY = 0.2  # taken from a normalised score: a question names a topic, its answer tells
REPEAT_SHARE = 0.6  # a question turn holding this share of the query's words asks the same thing: it ranks last
LENGTH_BOOST = 0.2  # added to a normalised score in proportion to the words, up to LENGTH_WORDS
LENGTH_WORDS = 20  # BM25's length normalisation favours a short reply over the telling one
RELATED_WEIGHT = 0.35  # a document naming a thing of the kind the query asks about ("sports": "basketball")
EVERY_BOOST = 0.2  # the document holds every word of the query
SPEAKER_BOOST = 0.25  # added to a normalised BM25 score (the best match is 1.0): the question names this speaker
WHEN_BOOST = 0.15  # a "when" question and a document that holds a date or a relative time
WINDOW_BOOST = 0.3  # the question names a time ("last week", "in May") and the document is from then
RECENCY_BOOST = 0.03  # the newest of the matches against the oldest: a weak prior
RRF_K = 60  # reciprocal rank fusion constant (Cormack et al.); damps the weight of the very top ranks
# SQLite errors that mean the index's place is unusable (a directory, read-only, full): removing it is the fix.
_UNUSABLE = ("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_IOERR", "SQLITE_FULL")
FILTERED_FIRST = 256  # a filtered search first asks the ranking for this many matches, then eight times more
MAX_FILTERED = 2000  # and looks at most at this many of the best
MAX_COUNTS = 20_000  # word counts kept for `_distinctive` before they are forgotten and counted again
TAIL_BYTES = 64  # a log's last indexed bytes, kept to tell an append from an edit that moved them


class SourceKind(StrEnum):
    FILE = "file"
    HISTORY = "history"
    SESSION = "session"


@dataclass(frozen=True)
class SearchHit:
    kind: SourceKind
    ref: str  # the file relative to the workspace, or the session key (of a history entry: the session it came from)
    start: int  # first line of a file chunk, the history cursor, or the message's index in the session
    end: int  # last line of a file chunk; equal to start otherwise
    timestamp: str  # history entries; session messages: the time of the turn ("" before a runtime block had one)
    role: str  # session messages only: "user" or "assistant"
    content: str
    snippet: str
    score: float  # higher is better: -bm25 (with embeddings, the fused reciprocal-rank score) with the boosts of
    # `_rerank` added as fractions of the best match's score

    @property
    def source(self) -> str:
        if self.kind is SourceKind.FILE:
            return f"{self.ref}:{self.start}-{self.end}"
        if self.kind is SourceKind.HISTORY:
            return f"history#{self.start} {self.timestamp}".rstrip()
        return f"session {self.ref} #{self.start}"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "score": self.score, "kind": self.kind.value, "ref": self.ref,
                "start": self.start, "end": self.end, "timestamp": self.timestamp, "role": self.role,
                "snippet": self.snippet, "content": self.content}


@dataclass
class IndexUpdate:
    """What one catch-up did; all zero when nothing changed since the last search."""

    added: int = 0  # documents indexed
    removed: int = 0  # documents dropped (a changed memory file, a replaced session)
    sources: int = 0  # files or logs that had changed
    embedded: int = 0  # texts sent to be embedded (a vector the cache kept from before a rebuild is not counted)

class _StaleIndex(Exception):
    pass


class SearchIndexError(NanoagentError):
    """The index file cannot be opened or written; the message names it and says how to fix it."""


@dataclass(frozen=True)
class _Doc:
    kind: SourceKind
    ref: str
    start: int
    end: int
    text: str
    timestamp: str = ""
    role: str = ""
    thread: str = ""  # neighbours are the documents before and after in the same source and thread


@dataclass
class _Source:
    """Bookkeeping for one indexed file: what it looked like, how far it was read, where numbering continues."""

    ino: int = 0
    size: int = 0
    mtime_ns: int = 0
    offset: int = 0  # logs: bytes read, always the end of a complete line
    position: int = 0  # history: last cursor indexed; sessions: messages seen
    label: str = ""  # sessions: the session key
    tail: bytes = b""  # logs: the last TAIL_BYTES bytes before `offset`

    def unchanged(self, st: os.stat_result) -> bool:
        return (self.ino, self.size, self.mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)

    def appended_to(self, path: Path, st: os.stat_result) -> bool:
        """Whether the log at `path`, which changed since this record, is the indexed file plus new bytes only.
        An append always adds bytes, so a log that did not grow was edited or cut."""
        if st.st_ino != self.ino or st.st_size <= self.size or st.st_size < self.offset:
            return False
        return _read_tail(path, self.offset) == self.tail


_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sources(name TEXT PRIMARY KEY, ino INTEGER, size INTEGER, mtime_ns INTEGER, "offset" INTEGER,
                     position INTEGER, label TEXT, tail BLOB);
CREATE TABLE docs(id INTEGER PRIMARY KEY, source TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT NOT NULL,
                  start INTEGER NOT NULL, "end" INTEGER NOT NULL, timestamp TEXT NOT NULL, role TEXT NOT NULL,
                  speaker TEXT NOT NULL,  -- "caroline" for a transcript line "Caroline: ...", else ""
                  thread TEXT NOT NULL,  -- history: the entry's session, and neighbours share a thread
                  prev INTEGER,  -- the document before this one in its source and thread: its neighbour
                  words INTEGER NOT NULL,  -- how many words it has: a reply of a word or two is not a neighbour hit
                  asks INTEGER NOT NULL,  -- 1 when it is a question: it names a topic rather than telling about it
                  text TEXT  -- the document as written when fts.body differs from it (see split_cjk_edges), else NULL
                  );
CREATE INDEX docs_source ON docs(source);
CREATE INDEX docs_prev ON docs(prev);
CREATE VIRTUAL TABLE fts USING fts5(body, cjk, tokenize = 'porter unicode61 remove_diacritics 2');
CREATE TABLE vectors(doc_id INTEGER PRIMARY KEY, vec BLOB NOT NULL);
"""


class MemorySearch:
    """Search over the workspace's memory files, history and every session. Safe to share between threads.

    Constructing it touches no file; the index is opened and brought up to date by the first search.
    """

    def __init__(self, paths: Paths, embedding: EmbeddingSettings | None = None,
                 warn: Callable[[str], None] = lambda message: None):
        self.paths = paths
        self.embedding = embedding
        self.warn = warn
        self.last_update = IndexUpdate()
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._cache: sqlite3.Connection | None = None  # the vector cache, opened when something needs embedding
        # `_distinctive`'s word counts: (documents, the LIMIT it counted with, `_added` then). Adding n documents
        # adds at most n to a count, so they are forgotten only when documents go or another process writes
        self._counts: dict[str, tuple[int, int, int]] = {}
        self._counts_version: int | None = None  # the index's data_version when `_counts` was last valid
        self._added = 0  # documents this searcher added to the index

    @property
    def index_path(self) -> Path:
        return self.paths.index_dir / f"{self.paths.workspace_slug()}.sqlite"

    @cached_property
    def _sessions(self) -> SessionStore:
        return SessionStore(self.paths.sessions_dir)

    def search(self, query: str, limit: int = 8, allow: Callable[[SearchHit], bool] | None = None,
               max_term_docs: int | None = None, now: datetime | None = None) -> list[SearchHit]:
        """The best `limit` matches for `query`, best first. Any text is a valid query; none raises. With `allow`,
        only hits it accepts (the ranking is asked for more until `limit` of them or no more matches).
        `max_term_docs` leaves out of the keyword ranking each word of `query` found in more documents than that:
        such words say little, and scoring every document they match is what makes a long query slow (automatic
        recall searches whole messages). Times the query names ("last week", "yesterday") count back from `now`
        (default: the current time). Raises SearchIndexError, saying what to do, when the index file cannot be
        created, opened or written."""
        if allow is not None:  # ranking costs about the same for 8 or 256 (every match is scored): ask for more
            wanted = max(limit, FILTERED_FIRST)
            while True:
                hits = self.search(query, wanted, max_term_docs=max_term_docs, now=now)
                kept = [h for h in hits if allow(h)]
                if len(kept) >= limit or len(hits) < wanted or wanted >= MAX_FILTERED:
                    return kept[:limit]
                wanted = min(wanted * 8, MAX_FILTERED)
        with self._lock, self._explained():
            try:
                return self._search(query, limit, max_term_docs, now)
            except sqlite3.DatabaseError as e:
                if not _is_corrupt(e):
                    raise
                self._rebuild()
                return self._search(query, limit, max_term_docs, now)

    def update(self) -> IndexUpdate:
        """Bring the index up to date without searching (search does this itself)."""
        with self._lock, self._explained():
            try:
                self.last_update = self._update(self._connection())
            except sqlite3.DatabaseError as e:
                if not _is_corrupt(e):
                    raise
                self._rebuild()
                self.last_update = self._update(self._connection())
            return self.last_update

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
                self._counts.clear()
            if self._cache is not None:
                self._cache.close()
                self._cache = None

    # --- the index file ---------------------------------------------------------------------------

    @contextmanager
    def _explained(self) -> Iterator[None]:
        """Turns SQLite failing to open or write the index into a SearchIndexError that says how to fix it."""
        try:
            yield
        except sqlite3.OperationalError as e:
            if not getattr(e, "sqlite_errorname", "").startswith(_UNUSABLE):
                raise  # e.g. busy: another process holds it; nothing to remove
            raise self._unusable(e) from e
        except OSError as e:
            if not str(e.filename or "").startswith(str(self.paths.index_dir)):
                raise
            raise self._unusable(e) from e

    def _unusable(self, error: BaseException) -> SearchIndexError:
        path, folder = self.index_path, self.paths.index_dir
        if path.is_dir():
            problem, fix = "it is a directory", f"remove it: rm -r {shlex.quote(str(path))}"
        elif folder.exists() and not folder.is_dir():
            problem, fix = f"{folder} is not a directory", f"remove that file: rm {shlex.quote(str(folder))}"
        else:
            problem = str(error) or type(error).__name__
            fix = f"make {folder} writable, or remove it: rm -r {shlex.quote(str(folder))}"
        return SearchIndexError(f"Cannot use the memory search index {path} ({problem}); {fix} "
                                "(the index is derived data, rebuilt on the next search).")

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            path = self.index_path
            private_dir(path.parent)
            try:
                self._db = _open(str(path))
            except _StaleIndex:
                _remove_index(str(path))
                self._db = _open(str(path))
            except sqlite3.DatabaseError as e:
                if not _is_corrupt(e):
                    raise  # e.g. locked by another process for longer than the timeout: never delete then
                _remove_index(str(path))
                self._db = _open(str(path))
        return self._db

    def _rebuild(self) -> None:
        self._counts.clear()
        if self._db is not None:
            self._db.close()
            self._db = None
        _remove_index(str(self.index_path))

    # --- catching up ---------------------------------------------------------------------------------

    def _update(self, db: sqlite3.Connection) -> IndexUpdate:
        """Indexes what changed since the index last saw it. A read of the sources table and a stat per file say
        which files those are (every search asks, so nothing changed costs no write transaction); inside the
        transaction each of them is compared with its row again, so another process catching up meanwhile is
        seen."""
        stats = IndexUpdate()
        changed = self._changed(db)
        if not changed:
            return stats
        with _writing(db):
            self._update_files(db, stats, [name[5:] for name in changed if name.startswith("file:")])
            if "history" in changed:
                self._update_history(db, stats)
            self._update_sessions(db, stats, {name for name in changed if name.startswith("session:")})
        self._added += stats.added
        if stats.removed:
            self._counts.clear()  # a common word may be rare now
        return stats

    def _changed(self, db: sqlite3.Connection) -> list[str]:
        """The sources (as named in the sources table) whose file differs from its row: new, changed or gone."""
        indexed = {name: (ino, size, mtime_ns) for name, ino, size, mtime_ns in
                   db.execute("SELECT name, ino, size, mtime_ns FROM sources")}
        indexed = {name: row for name, row in indexed.items() if not name.startswith("file:") or _indexed_file(name[5:])}
        workspace = str(self.paths.workspace)  # paths as strings: pathlib would cost more than the stats
        on_disk = {f"file:{rel}": os.path.join(workspace, rel) for rel in memory_files_on_disk(self.paths.workspace)
                   if _indexed_file(rel)}
        on_disk["history"] = str(self.paths.memory_dir / "history.jsonl")
        try:
            with os.scandir(self.paths.sessions_dir) as entries:
                on_disk.update((f"session:{e.name}", e.path) for e in entries if e.name.endswith(".jsonl"))
        except (FileNotFoundError, NotADirectoryError):
            pass
        changed = []  # in the order the files were indexed before: memory files as listed, then the gone ones
        for name, path in on_disk.items():
            st = _stat(path)
            if (None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)) != indexed.get(name):
                changed.append(name)
        return changed + [name for name in indexed if name not in on_disk]

    def _update_files(self, db: sqlite3.Connection, stats: IndexUpdate, rels: list[str]) -> None:
        for rel in rels:
            if not _indexed_file(rel):
                continue
            name = f"file:{rel}"
            st = _stat(self.paths.workspace / rel)
            row = _load_source(db, name)
            if row is not None and st is not None and row.unchanged(st):
                continue
            if row is not None:
                stats.removed += _drop(db, name)
                db.execute("DELETE FROM sources WHERE name = ?", (name,))
            if st is None:
                continue
            stats.sources += 1
            try:
                text = (self.paths.workspace / rel).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue  # vanished or unreadable since the stat; the next search tries again
            docs = [_Doc(SourceKind.FILE, rel, first, last, chunk) for first, last, chunk in chunk_markdown(text)]
            stats.added += _insert(db, name, docs)
            _save_source(db, name, _Source(st.st_ino, st.st_size, st.st_mtime_ns))

    def _update_history(self, db: sqlite3.Connection, stats: IndexUpdate) -> None:
        name = "history"
        path = self.paths.memory_dir / "history.jsonl"
        st = _stat(path)
        row = _load_source(db, name)
        if row is not None and st is not None and row.unchanged(st):
            return
        if row is not None and (st is None or not row.appended_to(path, st)):
            stats.removed += _drop(db, name)  # edited, rewritten or gone: start again from the first cursor
            db.execute("DELETE FROM sources WHERE name = ?", (name,))
            row = None
        if st is None:
            return
        stats.sources += 1
        row = row or _Source()
        # HistoryLog, the file's owner, warns about bad lines; read_entries drops any whose cursor SQLite cannot hold
        entries, offset = read_entries(path, row.offset)
        entries = [e for e in entries if e.cursor > row.position]
        docs = [_Doc(SourceKind.HISTORY, e.session, e.cursor, e.cursor, e.content, timestamp=e.timestamp,
                     thread=e.session) for e in entries if isinstance(e.content, str) and e.content.strip()]
        stats.added += _insert(db, name, docs)
        last = max((e.cursor for e in entries), default=row.position)
        _save_source(db, name, _Source(st.st_ino, st.st_size, st.st_mtime_ns, offset, position=last,
                                       tail=_read_tail(path, offset)))

    def _update_sessions(self, db: sqlite3.Connection, stats: IndexUpdate, names: set[str]) -> None:
        """Indexes the session files `names` (as in the sources table) that changed; drops those that are gone."""
        known = {name for (name,) in db.execute("SELECT name FROM sources WHERE name LIKE 'session:%'")} & names
        for path in sorted(self.paths.sessions_dir / name[8:] for name in names):
            if not path.is_file():
                continue
            name = f"session:{path.name}"
            known.discard(name)
            st = _stat(path)
            row = _load_source(db, name)
            if st is None or (row is not None and row.unchanged(st)):
                continue
            stats.sources += 1
            if row is None or not row.appended_to(path, st):
                if row is not None:  # edited, cut or replaced: index it again from the start
                    stats.removed += _drop(db, name)
                row = _Source(label=_session_key(path))
            session = Session(key=row.label, path=path, size=row.offset)
            self._sessions.refresh(session)  # reads only the bytes after row.offset
            docs = []
            stamp = "" if row.position == 0 else _last_timestamp(db, name)  # an assistant turn: its user turn's time
            for index, message in enumerate(session.messages, start=row.position):
                stamp = message_time(message) or stamp
                text = message_text(message)
                if text:
                    docs.append(_Doc(SourceKind.SESSION, row.label, index, index, text, timestamp=stamp,
                                     role=message["role"]))
            stats.added += _insert(db, name, docs)
            _save_source(db, name, _Source(st.st_ino, st.st_size, st.st_mtime_ns, session.size,
                                           row.position + len(session.messages), row.label,
                                           _read_tail(path, session.size)))
        for name in known:  # session files that were deleted
            stats.sources += 1
            stats.removed += _drop(db, name)
            db.execute("DELETE FROM sources WHERE name = ?", (name,))

    # --- searching ---------------------------------------------------------------------------------

    def _search(self, query: str, limit: int, max_term_docs: int | None, now: datetime | None) -> list[SearchHit]:
        db = self._connection()
        self.last_update = self._update(db)
        if match_expression(query) is None or limit < 1:
            return []
        keywords = without_time(query)
        if max_term_docs is not None:
            version = db.execute("PRAGMA data_version").fetchone()[0]  # changes when another connection writes
            if version != self._counts_version or len(self._counts) > MAX_COUNTS:
                self._counts.clear()
                self._counts_version = version
            keywords = _distinctive(db, keywords, max_term_docs, self._counts, self._added)
        ranked: list[tuple[int, float]] = []
        every: set[int] = set()
        matched: set[int] = set()
        if match_expression(keywords) is not None:
            ranked, every, matched = _keyword_ranking(db, keywords, max(limit, POOL))
            ranked = _with_related(db, keywords, ranked)
        fused = None
        if self.embedding is not None:  # the boosts apply to the fused ranking: the time or person a query names
            fused = self._fuse(db, self.embedding, query, [doc_id for doc_id, _ in ranked])
            if fused is not None:
                order, scores = fused
                ranked = [(doc_id, scores[doc_id]) for doc_id in order]
        ranked = _rerank(db, query, ranked, every, now or datetime.now(), bm25=fused is None, matched=matched)
        return _hits(db, [doc_id for doc_id, _ in ranked[:limit]], dict(ranked), needles(query))

    def _fuse(self, db: sqlite3.Connection, settings: EmbeddingSettings, query: str,
              keyword_order: list[int]) -> tuple[list[int], dict[int, float]] | None:
        """Reciprocal rank fusion of the keyword and the cosine rankings; None (and a warning) when embedding fails."""
        try:
            self._embed_missing(db, settings)
            wanted = unit_vector(embed_texts(settings, [query])[0])
        except EmbeddingError as e:
            message = f"semantic memory search failed ({e}); using keyword ranking only"
            if message not in self._warned:
                self._warned.add(message)
                self.warn(message)
            return None
        similarities = []
        for doc_id, blob in db.execute("SELECT doc_id, vec FROM vectors"):
            vector = array("f")
            vector.frombytes(blob)
            if len(vector) == len(wanted):
                similarities.append((sum(map(operator.mul, wanted, vector)), doc_id))
        semantic = [doc_id for _, doc_id in heapq.nlargest(CANDIDATES, similarities)]
        fused: dict[int, float] = {}
        for ranking in (keyword_order, semantic):
            for rank, doc_id in enumerate(ranking, start=1):
                fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (RRF_K + rank)
        return sorted(fused, key=lambda doc_id: -fused[doc_id]), fused

    def _embed_missing(self, db: sqlite3.Connection, settings: EmbeddingSettings) -> None:
        stored = db.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
        if stored is None or stored[0] != settings.model:
            with _writing(db):  # vectors of another model are not comparable: embed everything again
                db.execute("DELETE FROM vectors")
                db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('embedding_model', ?)", (settings.model,))
        missing = db.execute("SELECT d.id, coalesce(d.text, fts.body) FROM docs d JOIN fts ON fts.rowid = d.id "
                             "WHERE d.id NOT IN (SELECT doc_id FROM vectors)").fetchall()
        if not missing:
            return
        keys = [_text_key(body[:EMBED_CHARS]) for _, body in missing]
        known = self._cached(lambda cache: _cached_vectors(cache, settings.model, keys)) or {}
        for start in range(0, len(missing), EMBED_BATCH):
            batch = [(doc_id, body, key) for (doc_id, body), key in
                     zip(missing[start:start + EMBED_BATCH], keys[start:start + EMBED_BATCH], strict=True)]
            new = [(key, body) for _, body, key in batch if key not in known]
            if new:
                vectors = embed_texts(settings, [body[:EMBED_CHARS] for _, body in new])
                fresh = {key: unit_vector(v).tobytes() for (key, _), v in zip(new, vectors, strict=True)}
                known.update(fresh)
                self._cached(partial(_store_vectors, model=settings.model, vectors=fresh))
                self.last_update.embedded += len(new)
            with _writing(db):
                db.executemany("INSERT OR REPLACE INTO vectors(doc_id, vec) SELECT ?, ? "
                               "WHERE EXISTS (SELECT 1 FROM docs WHERE id = ?)",
                               [(doc_id, known[key], doc_id) for doc_id, _, key in batch])

    def _cached(self, use: Callable[[sqlite3.Connection], Any]) -> Any:
        """`use(cache)`; None, with the cache file removed, when it is damaged: vectors are then embedded again."""
        try:
            return use(self._vector_cache())
        except sqlite3.DatabaseError as e:
            if not _is_corrupt(e):
                raise
            if self._cache is not None:
                self._cache.close()
                self._cache = None
            _remove_index(str(self.index_path.with_suffix(".vectors.sqlite")))
            return None

    def _vector_cache(self) -> sqlite3.Connection:
        """`<index>.vectors.sqlite`: every vector by model and text, kept when the index is rebuilt (a new schema,
        a corrupt file), so a rebuild embeds only what it never saw. A damaged cache is started again."""
        if self._cache is None:
            path = self.index_path.with_suffix(".vectors.sqlite")
            private_file(path)
            db = sqlite3.connect(str(path), timeout=10.0, isolation_level=None, check_same_thread=False)
            try:
                db.execute("CREATE TABLE IF NOT EXISTS vectors(model TEXT NOT NULL, key BLOB NOT NULL, "
                           "vec BLOB NOT NULL, PRIMARY KEY(model, key)) WITHOUT ROWID")
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
            except BaseException:
                db.close()
                raise
            self._cache = db
        return self._cache


# --- SQLite helpers -------------------------------------------------------------------------------


def _open(path: str) -> sqlite3.Connection:
    private_file(Path(path))  # SQLite gives the -wal, -shm and -journal files the mode of this one
    db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            with _writing(db):
                version = db.execute("PRAGMA user_version").fetchone()[0]  # another process may have built it
                if version not in (0, SCHEMA_VERSION) or (
                        version == 0 and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]):
                    raise _StaleIndex(path)
                if version == 0:
                    for statement in filter(str.strip, _SCHEMA.split(";")):
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # derived data: losing the last commit on power loss is fine
    except BaseException:
        db.close()
        raise
    return db


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _cached_vectors(cache: sqlite3.Connection, model: str, keys: list[bytes]) -> dict[bytes, bytes]:
    found: dict[bytes, bytes] = {}
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), 500):
        part = unique[start:start + 500]
        found.update(cache.execute(f"SELECT key, vec FROM vectors WHERE model = ? AND key IN "
                                   f"({','.join('?' * len(part))})", [model, *part]).fetchall())
    return found


def _store_vectors(cache: sqlite3.Connection, model: str, vectors: dict[bytes, bytes]) -> None:
    with _writing(cache):
        cache.executemany("INSERT OR REPLACE INTO vectors(model, key, vec) VALUES (?, ?, ?)",
                          [(model, key, vec) for key, vec in vectors.items()])


def _remove_index(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass


def _is_corrupt(error: sqlite3.DatabaseError) -> bool:
    name = getattr(error, "sqlite_errorname", "")
    return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "no such table" in str(error) or (
        type(error) is sqlite3.DatabaseError and "malformed" in str(error))


@contextmanager
def _writing(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction; IMMEDIATE so two processes catching up take turns instead of failing."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _indexed_file(rel: str) -> bool:
    return rel in MEMORY_FILES or is_person_file(rel) or is_dated_note(rel)  # skills are not indexed


def _stat(path: Path | str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _load_source(db: sqlite3.Connection, name: str) -> _Source | None:
    row = db.execute('SELECT ino, size, mtime_ns, "offset", position, label, tail FROM sources WHERE name = ?',
                     (name,)).fetchone()
    if row is None:
        return None
    ino, size, mtime_ns, offset, position, label, tail = row
    return _Source(ino, size, mtime_ns, offset, position, label, tail or b"")


def _read_tail(path: Path, offset: int) -> bytes:
    """The TAIL_BYTES bytes of `path` before `offset` (fewer near the start); b"" when the file cannot be read."""
    start = max(0, offset - TAIL_BYTES)
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(offset - start)
    except OSError:
        return b""


def _save_source(db: sqlite3.Connection, name: str, source: _Source) -> None:
    db.execute('INSERT OR REPLACE INTO sources(name, ino, size, mtime_ns, "offset", position, label, tail) '
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (name, source.ino, source.size, source.mtime_ns, source.offset,
                                                    source.position, source.label, source.tail))


def _insert(db: sqlite3.Connection, source: str, docs: list[_Doc]) -> int:
    """Adds `docs` after the source's earlier ones, each linked to the one before it in its thread."""
    if not docs:
        return 0
    first = db.execute("SELECT coalesce(max(id), 0) + 1 FROM docs").fetchone()[0]
    ids = range(first, first + len(docs))
    texts = [d.text[:DOC_CHARS] for d in docs]
    bodies = [split_cjk_edges(text) for text in texts]
    previous: tuple[int, str] | None = None  # (id, thread)
    if docs[0].kind is not SourceKind.FILE:  # a memory file's chunks are whole sections already
        previous = db.execute("SELECT id, thread FROM docs WHERE source = ? ORDER BY id DESC LIMIT 1",
                              (source,)).fetchone()
    links = []
    for doc_id, doc in zip(ids, docs, strict=True):
        links.append(previous[0] if previous is not None and previous[1] == doc.thread else None)
        previous = (doc_id, doc.thread) if doc.kind is not SourceKind.FILE else None
    heads = [line_head(t) for t in texts]
    db.executemany('INSERT INTO docs(id, source, kind, ref, start, "end", timestamp, role, speaker, thread, prev, '
                   "words, asks, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   [(i, source, d.kind.value, d.ref, d.start, d.end, date or d.timestamp, d.role, speaker, d.thread,
                     link, len(t[head:].split()), is_question(t[head:]), None if b == t else t)
                    for i, d, t, b, link, (speaker, date, head) in zip(ids, docs, texts, bodies, links, heads, strict=True)])
    db.executemany("INSERT INTO fts(rowid, body, cjk) VALUES (?, ?, ?)",
                   [(i, b, cjk_bigrams(t)) for i, t, b in zip(ids, texts, bodies, strict=True)])
    return len(docs)


def _last_timestamp(db: sqlite3.Connection, source: str) -> str:
    row = db.execute("SELECT timestamp FROM docs WHERE source = ? ORDER BY id DESC LIMIT 1", (source,)).fetchone()
    return row[0] if row else ""


def _drop(db: sqlite3.Connection, source: str) -> int:
    ids = "SELECT id FROM docs WHERE source = ?"
    db.execute(f"DELETE FROM fts WHERE rowid IN ({ids})", (source,))
    db.execute(f"DELETE FROM vectors WHERE doc_id IN ({ids})", (source,))
    return db.execute("DELETE FROM docs WHERE source = ?", (source,)).rowcount


def _keyword_ranking(db: sqlite3.Connection, query: str, wanted: int
                     ) -> tuple[list[tuple[int, float]], set[int], set[int]]:
    """The best `wanted` (doc id, -bm25), which of them hold every term in their own text, and which hold some. Only
    those when there are ENOUGH of them: the AND query is ~10x faster than OR for common words (BM25 must score
    every document that matches). Otherwise OR, so a partial match still counts."""
    ranked, every = _matches(db, "fts", query, "body", wanted)
    matched = {doc_id for doc_id, _ in ranked}
    if NEAR_WEIGHT and ranked:  # a neighbour's match adds to a turn's score, or brings it in
        own = dict(ranked)
        marks = ",".join("?" * len(own))
        pairs = (f"SELECT d.id, d.prev, p.words >= {NEAR_WORDS}, d.words >= {NEAR_WORDS}, p.asks FROM docs d "
                 "JOIN docs p ON p.id = d.prev")
        links = db.execute(f"{pairs} WHERE d.id IN ({marks}) UNION ALL {pairs} WHERE d.prev IN ({marks})",
                           [*own, *own]).fetchall()
        near: dict[int, float] = {}  # the best weighted score of a document's neighbours
        for doc_id, prev, prev_says, says, prev_asks in links:  # neighbours: each gets a part of the other's score
            if says or doc_id in own:  # a reply of a word or two ("ok") is not worth finding for its neighbour
                weight = ANSWER_WEIGHT if prev_asks else NEAR_WEIGHT  # the answer to a question is about its words
                near[doc_id] = max(near.get(doc_id, 0.0), weight * own.get(prev, 0.0))
            if prev_says or prev in own:
                near[prev] = max(near.get(prev, 0.0), NEAR_WEIGHT * own.get(doc_id, 0.0))
        scores = {doc_id: own.get(doc_id, 0.0) + near.get(doc_id, 0.0) for doc_id in own.keys() | near}
        ranked = heapq.nlargest(wanted, scores.items(), key=operator.itemgetter(1))
    return ranked, every, matched


def _with_related(db: sqlite3.Connection, query: str, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """`ranked` with the documents that name the kind of thing the query asks about ("sports": "basketball") added to,
    or brought in: the best of them gets RELATED_WEIGHT of the best match's score."""
    expression = match_expression(" ".join(related_terms(query)), "OR")
    if expression is None or not ranked:
        return ranked
    related = db.execute("SELECT rowid, -rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?",
                         (expression, len(ranked))).fetchall()
    top, best = ranked[0][1], max((score for _, score in related), default=0.0)
    if top <= 0 or best <= 0:
        return ranked
    scores = dict(ranked)
    for doc_id, score in related:
        scores[doc_id] = scores.get(doc_id, 0.0) + RELATED_WEIGHT * top * score / best
    return heapq.nlargest(len(ranked), scores.items(), key=operator.itemgetter(1))


def _matches(db: sqlite3.Connection, table: str, query: str, column: str, wanted: int
             ) -> tuple[list[tuple[int, float]], set[int]]:
    """The best `wanted` (doc id, -bm25), and those that hold every term."""
    sql = f"SELECT rowid, -rank FROM {table} WHERE {table} MATCH ? ORDER BY rank LIMIT ?"
    every = match_expression(query, "AND", column)
    complete: list[tuple[int, float]] = []
    if every is not None and " AND " in every:
        complete = db.execute(sql, (every, wanted)).fetchall()
        if len(complete) >= min(wanted, ENOUGH):
            return complete, {doc_id for doc_id, _ in complete}
    some = match_expression(query, "OR", column)
    if some is None:  # CJK alone, looked for in neighbours
        return [], set()
    return db.execute(sql, (some, wanted)).fetchall(), {doc_id for doc_id, _ in complete}


def _rerank(db: sqlite3.Connection, query: str, ranked: list[tuple[int, float]], every: set[int], now: datetime,
            bm25: bool = True, matched: set[int] | None = None) -> list[tuple[int, float]]:
    """The keyword matches re-scored: BM25 scaled so the best is 1.0, plus a boost for holding every term, for a
    turn of the person the question names, for a dated text when it asks when, for a document from the time it
    names, and for recency."""
    if not ranked:
        return ranked
    top = max(score for _, score in ranked) or 1.0
    marks = ",".join("?" * len(ranked))
    ids = [doc_id for doc_id, _ in ranked]
    rows = {row[0]: row[1:] for row in db.execute(f"SELECT id, speaker, timestamp, words, asks FROM docs WHERE id IN ({marks})",
                                                  ids)}
    words = {w.lower() for w in _WORDS.findall(query)}
    named = {speaker for speaker, *_ in rows.values() if speaker and set(speaker.split()) <= words}
    dated = set()
    if asks_when(query):  # reading the texts costs more than the rest of re-ranking: only for this
        dated = {doc_id for doc_id, text in db.execute(
            f"SELECT d.id, coalesce(d.text, fts.body) FROM docs d JOIN fts ON fts.rowid = d.id WHERE d.id IN ({marks})",
            ids) if mentions_time(text[line_head(text)[2]:])}  # a date in the line's head is not the answer
    repeats = _repeats(db, query, [doc_id for doc_id, (*_, asks) in rows.items() if asks])
    window = time_filter(query, now)
    stamps = sorted(stamp for _, stamp, *_ in rows.values() if stamp)
    oldest, newest = (_days(stamps[0]), _days(stamps[-1])) if stamps else (0.0, 0.0)
    span = (newest - oldest) or 1.0
    out = []
    for doc_id, score in ranked:
        speaker, stamp, words_in, asks = rows.get(doc_id, ("", "", 0, 0))
        score = max(score, 0.0) / top
        if bm25:  # a cosine ranking neither favours short texts nor mistakes a question for its answer
            score += LENGTH_BOOST * min(1.0, words_in / LENGTH_WORDS) - QUESTION_PENALTY * asks
        if doc_id in every:
            score += EVERY_BOOST
        if named and speaker in named:
            score += SPEAKER_BOOST
        if doc_id in dated:
            score += WHEN_BOOST
        if window is not None and stamp and window(stamp):
            score += WINDOW_BOOST
        if stamp:
            score += RECENCY_BOOST * (_days(stamp) - oldest) / span
        out.append((doc_id, score * top))  # back in the scale of the ranking: a minimum score keeps its meaning
    facts = [score for doc_id, score in out if doc_id not in repeats and (matched is None or doc_id in matched)]
    if repeats and facts:  # below the best of the rest that holds the query's words itself: what it asked about
        floor = max(facts)
        out = [(doc_id, min(score, floor - abs(floor) * 0.01 - 1e-6) if doc_id in repeats else score)
               for doc_id, score in out]
    out.sort(key=lambda pair: -pair[1])
    return out


def _repeats(db: sqlite3.Connection, query: str, questions: list[int]) -> set[int]:
    """The question turns among `questions` that ask what `query` asks: they hold REPEAT_SHARE of its words."""
    wanted = needles(query)
    if len(wanted) < 2 or not questions:
        return set()
    marks = ",".join("?" * len(questions))
    texts = db.execute(f"SELECT d.id, coalesce(d.text, fts.body) FROM docs d JOIN fts ON fts.rowid = d.id "
                       f"WHERE d.id IN ({marks})", questions)
    return {doc_id for doc_id, text in texts
            if sum(needle in text.lower() for needle in wanted) >= REPEAT_SHARE * len(wanted)}


_WORDS = re.compile(r"\w+")
_EPOCH = datetime(2000, 1, 1)


def _days(stamp: str) -> float:
    """Days since 2000 of a "YYYY-MM-DD HH:MM" timestamp (0 when it is not one)."""
    try:
        return (datetime.fromisoformat(stamp[:16]) - _EPOCH).total_seconds() / 86400
    except ValueError:
        return 0.0


def _distinctive(db: sqlite3.Connection, query: str, max_docs: int, counts: dict[str, tuple[int, int, int]],
                 added: int) -> str:
    """The words of `query` (its first MAX_QUERY_TERMS) found in at most `max_docs` documents. Counting stops at
    `max_docs + 1`, so a common word costs no more than a rare one. A word is counted again only when `counts`
    (word: documents, the limit counted with, `added` then; kept up to date here) cannot tell: `added` is how many
    documents were added since the counts began, and each adds one at most to a word's count."""
    kept = []
    words = [w for w in dict.fromkeys(query.split())  # alone, a stopword is searched (see match_expression)
             if any(not part.isascii() or (len(part) > 1 and part not in STOPWORDS)
                    for part in re.findall(r"\w+", w.lower()))]
    for word in words[:MAX_QUERY_TERMS]:
        expression = match_expression(word, "AND")
        if expression is None:
            continue
        count, limit, then = counts.get(word, (0, 0, added))
        if count > max_docs:
            continue  # common, and adding documents keeps it so
        if count < limit and count + added - then <= max_docs:  # an exact count, that cannot have grown past
            kept.append(word)
            continue
        count = db.execute("SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)",
                           (expression, max_docs + 1)).fetchone()[0]
        counts[word] = (count, max_docs + 1, added)
        if count <= max_docs:
            kept.append(word)
    return " ".join(kept)


def _hits(db: sqlite3.Connection, order: list[int], scores: dict[int, float], wanted: list[str]) -> list[SearchHit]:
    if not order:
        return []
    marks = ",".join("?" * len(order))
    rows = db.execute('SELECT d.id, d.kind, d.ref, d.start, d."end", d.timestamp, d.role, '
                      "coalesce(d.text, fts.body) FROM docs d "
                      f"JOIN fts ON fts.rowid = d.id WHERE d.id IN ({marks})", order).fetchall()
    by_id = {row[0]: row for row in rows}
    hits = []
    for doc_id in order:
        if doc_id not in by_id:
            continue
        _, kind, ref, start, end, timestamp, role, body = by_id[doc_id]
        hits.append(SearchHit(SourceKind(kind), ref, start, end, timestamp, role, body, make_snippet(body, wanted),
                              float(f"{scores.get(doc_id, 0.0):.4g}")))
    return hits


def _session_key(path: Path) -> str:
    """The key from the session's header line; the file name when the header is unreadable."""
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline(65536))
        return str(header["key"])
    except (OSError, ValueError, KeyError, TypeError):
        return path.stem
