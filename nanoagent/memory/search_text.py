"""Text processing for memory search, with no SQLite: memory-file chunks, the searchable text of a message,
CJK tokens, FTS5 query expressions and snippets.

Chinese, Japanese and Korean put no spaces between words, so FTS5's unicode61 tokenizer sees a whole sentence as
one token. The body column gets a space wherever CJK meets a letter or digit ("用Python写" -> "用 Python 写"), so
a Latin word inside CJK text is a token of its own; the original text is kept too when that changed it. Each
document's CJK runs also go into a second column as overlapping character bigrams plus the run's
last character ("寿司店" -> "寿司 司店 店"); a query's CJK runs become the same bigrams, or a prefix query for a
single character. Other text goes through unicode61 and the porter stemmer ("meetings" finds "meeting").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from nanoagent.messages import Message, is_assistant, is_user, shown_text, strip_runtime_context

CHUNK_CHARS = 800  # memory-file chunks group paragraphs up to about this size
DOC_CHARS = 8000  # a longer document (a pasted file in a message) is indexed by its first DOC_CHARS only
SNIPPET_CHARS = 240
MAX_QUERY_TERMS = 32  # bounds the cost of one query whatever the user typed

# Hiragana, Katakana, CJK ideographs (with extension A and compatibility), Hangul syllables, halfwidth Katakana.
CJK = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f"
_CJK_RUN = re.compile(f"[{CJK}]+")
_WORD = re.compile(rf"[^\W{CJK}]+")  # letters, digits and underscores that are not CJK
_CJK_EDGE = re.compile(rf"(?<=[{CJK}])(?=[^\W{CJK}])|(?<=[^\W{CJK}])(?=[{CJK}])")  # CJK next to a letter or digit
_HEADING = re.compile(r"^#{1,6}\s")
STOPWORDS = frozenset(
    "a about an and are as at be been but by can could did do does for from had has have he her him his how i if "
    "in into is it its me my of on or our she so than that the their them then there these they this to was we "
    "were what when where which who whom why will with would you your".split()
)


def chunk_markdown(text: str, limit: int = CHUNK_CHARS) -> list[tuple[int, int, str]]:
    """(first line, last line, text) chunks: paragraphs grouped under their heading up to about `limit` characters
    (a longer paragraph stays whole). A heading always starts a chunk; a fenced code block is never split."""
    lines = text.splitlines()
    chunks: list[tuple[int, int, str]] = []
    group: list[tuple[int, int]] = []  # blocks (first, last), 0-based line numbers
    size = 0

    def emit() -> None:
        if group:
            first, last = group[0][0], group[-1][1]
            chunks.append((first + 1, last + 1, "\n".join(lines[first:last + 1])))

    for first, last, heading in _blocks(lines):
        block_size = sum(len(line) + 1 for line in lines[first:last + 1])
        if group and (heading or size + block_size > limit):
            emit()
            group, size = [], 0
        group.append((first, last))
        size += block_size
    emit()
    return [(first, last, chunk[:DOC_CHARS]) for first, last, chunk in chunks if chunk.strip()]


def _blocks(lines: list[str]) -> Iterator[tuple[int, int, bool]]:
    """Paragraphs (first, last, is_heading): runs of non-blank lines; a heading line is a block of its own."""
    start: int | None = None
    fenced = False
    for number, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and _HEADING.match(line):
            if start is not None:
                yield start, number - 1, False
            yield number, number, True
            start = None
        elif not fenced and not line.strip():
            if start is not None:
                yield start, number - 1, False
            start = None
        elif start is None:
            start = number
    if start is not None:
        yield start, len(lines) - 1, False


def message_text(message: Message) -> str:
    """The searchable text of a session message: user and assistant text only (tool results are not indexed)."""
    if is_user(message):
        return strip_runtime_context(shown_text(message)).strip()[:DOC_CHARS]
    if is_assistant(message):
        return message["content"].strip()[:DOC_CHARS]
    return ""


def split_cjk_edges(text: str) -> str:
    """`text` with a space wherever a CJK character meets a letter or digit, so unicode61 ends the token there."""
    return _CJK_EDGE.sub(" ", text) if _CJK_RUN.search(text) else text  # the check alone is ~5x cheaper


def cjk_bigrams(text: str) -> str:
    """Each CJK run as overlapping bigrams plus its last character, so a prefix query finds any single character."""
    tokens: list[str] = []
    for run in _CJK_RUN.findall(text):
        tokens += [run[i:i + 2] for i in range(len(run) - 1)]
        tokens.append(run[-1])
    return " ".join(tokens)


def match_expression(query: str, joiner: str = "OR") -> str | None:
    """An FTS5 MATCH expression for free text, or None when it holds nothing to search for.

    Every term is a quoted string, so no input (quotes, `*`, `AND`, parentheses, a lone `-`) is FTS5 syntax.
    With OR, BM25 ranks documents matching more, and rarer, terms first.
    """
    words = [w.lower() for w in _WORD.findall(query)]
    meaningful = [w for w in words if w not in STOPWORDS and len(w) > 1]
    terms = [f"body:{_quote(w)}" for w in dict.fromkeys(meaningful or words)]
    for run in dict.fromkeys(_CJK_RUN.findall(query)):
        if len(run) == 1:
            terms.append(f"cjk:{_quote(run)}*")
            continue
        bigrams = [run[i:i + 2] for i in range(len(run) - 1)]
        terms += [f"cjk:{_quote(b)}" for b in dict.fromkeys(bigrams)]
        if len(bigrams) > 1:
            terms.append(f"cjk:{_quote(' '.join(bigrams))}")  # the whole run in order ranks higher
    terms = list(dict.fromkeys(terms))[:MAX_QUERY_TERMS]
    return f" {joiner} ".join(terms) if terms else None


def needles(query: str) -> list[str]:
    """Lower-case strings to look for when choosing a snippet: query words (cut to a stem-like prefix) and CJK."""
    out = []
    for word in dict.fromkeys(w.lower() for w in _WORD.findall(query)):
        if word not in STOPWORDS and len(word) > 1:
            out.append(word if len(word) <= 5 else word[:max(5, len(word) - 3)])
    for run in _CJK_RUN.findall(query):
        out += [run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)]
    return out


def make_snippet(text: str, wanted: Sequence[str], width: int = SNIPPET_CHARS) -> str:
    """About `width` characters of `text` around the place where most of `wanted` occur."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    lower = flat.lower()
    positions = sorted(m.start() for n in wanted for m in re.finditer(re.escape(n), lower))[:200]
    best, best_count = 0, 0
    for position in positions:
        start = max(0, position - width // 4)
        count = sum(1 for n in wanted if n in lower[start:start + width])
        if count > best_count:
            best, best_count = start, count
    if best:
        space = flat.find(" ", best, best + 20)
        best = space + 1 if space >= 0 else best
    piece = flat[best:best + width]
    return ("…" if best else "") + piece + ("…" if best + width < len(flat) else "")


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'
