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
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta

from nanoagent.messages import RUNTIME_OPEN, Message, is_assistant, is_user, shown_text, strip_runtime_context

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
# words of a question rather than of what it asks about
QUESTION_WORDS = frozenset("any both kind likely many mention mentioned much said say some sort tell told type".split())
STOPWORDS |= QUESTION_WORDS


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


_RUNTIME_TIME = re.compile(r"\ntime: (\d{4}-\d\d-\d\d \d\d:\d\d)")


def message_time(message: Message) -> str:
    """"YYYY-MM-DD HH:MM" from the `time:` line of a user message's runtime block; "" when it has none."""
    if not is_user(message):
        return ""
    content = message["content"]
    text = content if isinstance(content, str) else next((b["text"] for b in content if b["type"] == "text"), "")
    if not text.startswith(RUNTIME_OPEN):
        return ""
    found = _RUNTIME_TIME.search(text, 0, 400)
    return found.group(1) if found else ""


# A transcript line's head: an optional date in brackets, then the speaker ("[8 May 2023] **Caroline**: ...",
# "Caroline (8 May 2023): ..."); a group chat's message is "Name: text" (gateway/channels/engine.py), any case.
_HEAD = re.compile(r"\s*(?:[\[(]([^\])\n]{1,60})[\])]\s*)?(?:\*\*)?"
                   r"(?:([^\W\d][\w'.-]{0,30}(?: (?!said:)[^\W\d][\w'.-]{0,30}){0,2})(?:\*\*)?"
                   r"(?: ?[\[(]([^\])\n]{1,60})[\])])?(?: said)?:\s)?")
_ISO_DATE = re.compile(r"(\d{4})-(\d\d)-(\d\d)(?:[ T](\d\d):(\d\d))?")
_DAY_MONTH = re.compile(r"(?:(\d{1,2})(?:st|nd|rd|th)? ([A-Z][a-z]+)|([A-Z][a-z]+) (\d{1,2})(?:st|nd|rd|th)?),? (\d{4})")
_CLOCK = re.compile(r"(\d{1,2}):(\d\d)\s*([ap]\.?m\.?)?", re.IGNORECASE)


def line_head(text: str) -> tuple[str, str, int]:
    """(speaker, date, where the words start) of a transcript line: "Caroline: I went..." -> ("caroline", "", 10);
    "[1:56 pm on 8 May, 2023] Melanie: ..." -> ("melanie", "2023-05-08 13:56", 26). "" for what it lacks."""
    found = _HEAD.match(text)
    if found is None or not found.group(0):
        return "", "", 0
    speaker = (found.group(2) or "").lower()
    return speaker, _date_of(found.group(1) or found.group(3) or ""), found.end() if speaker or found.group(1) else 0


def _date_of(text: str) -> str:
    """"YYYY-MM-DD HH:MM" of a date written in `text` (ISO, "8 May 2023", "May 8, 2023"); "" when none is."""
    iso = _ISO_DATE.search(text)
    if iso:
        return f"{iso.group(1)}-{iso.group(2)}-{iso.group(3)} {iso.group(4) or '00'}:{iso.group(5) or '00'}"
    found = _DAY_MONTH.search(text)
    if not found:
        return ""
    day, month = (found.group(1), found.group(2)) if found.group(1) else (found.group(4), found.group(3))
    if month.lower() not in MONTHS:
        return ""
    hour, minute = 0, 0
    clock = _CLOCK.search(text)
    if clock:
        hour, minute = int(clock.group(1)) % 24, int(clock.group(2)) % 60
        if clock.group(3) and clock.group(3)[0].lower() == "p" and hour < 12:
            hour += 12
        elif clock.group(3) and clock.group(3)[0].lower() == "a" and hour == 12:
            hour = 0
    return f"{found.group(5)}-{MONTHS.index(month.lower()) + 1:02}-{int(day):02} {hour:02}:{minute:02}"


_TRAILING_NOTE = re.compile(r"\s*\[[^\]\n]*\]\s*$")  # "... [shares a photo of a bridge]"


def is_question(words: str) -> bool:
    """Whether a line's words (after its head) end with a question: what it asks about it does not tell."""
    return _TRAILING_NOTE.sub("", words).rstrip().endswith(("?", "？"))


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


# Irregular forms the porter stemmer cannot join ("went" and "go"): each line is one word's forms. A query word in
# a line matches any of them.
IRREGULAR = """be was were been|become became|begin began begun|bring brought|build built|buy bought|catch caught
choose chose chosen|come came|cut|do did done|draw drew drawn|drink drank drunk|drive drove driven|eat ate eaten
fall fell fallen|feel felt|fight fought|find found|fly flew flown|forget forgot forgotten|get got gotten
give gave given|go went gone|grow grew grown|have had|hear heard|hold held|hurt|keep kept|know knew known
lead led|leave left|lend lent|lose lost|make made|mean meant|meet met|pay paid|put|read|ride rode ridden
ring rang rung|rise rose risen|run ran|say said|see saw seen|sell sold|send sent|set|sing sang sung|sit sat
sleep slept|speak spoke spoken|spend spent|stand stood|steal stole stolen|swim swam swum|take took taken
teach taught|tear tore torn|tell told|think thought|throw threw thrown|understand understood|wake woke woken
wear wore worn|win won|write wrote written|child children|person people|man men|woman women|tooth teeth
foot feet|mouse mice"""
FORMS = {word: tuple(line.split()) for line in IRREGULAR.replace("\n", "|").split("|") for word in line.split()
         if len(line.split()) > 1}


# Words a question uses for a kind of thing, and the things a conversation names instead ("What sports does she
# play?" - "basketball"): general knowledge, one kind a line, "question words: what a text says".
RELATED = """sport sports athletic: basketball football soccer tennis baseball hockey volleyball golf swimming running
cycling skiing surfing boxing kickboxing karate taekwondo judo yoga climbing marathon
martial: kickboxing karate taekwondo judo boxing jiujitsu kungfu
country countries abroad european europe: england france spain italy germany portugal greece ireland scotland
netherlands sweden norway japan china india mexico canada brazil australia
city cities: london paris rome tokyo chicago york boston seattle miami angeles francisco berlin madrid
pet pets animal animals: dog dogs puppy cat cats kitten turtle turtles fish bird hamster rabbit horse
instrument instruments: guitar piano violin cello drums flute saxophone ukulele trumpet
movie movies film films: watched movie film cinema theater trilogy
book books read reading: novel book read reading author series
family: husband wife kids children son daughter mom dad mother father brother sister parents grandma
kids children child: kids son daughter children
partner spouse married relationship: husband wife boyfriend girlfriend fiance partner married dating single
destress relax stress unwind: stress relax relief calm therapy unwind peace
hobby hobbies activities activity: hobby painting pottery hiking camping dancing reading swimming gardening
art artwork: painting drawing pottery sculpture photography art
job career work profession: job career work position hired promoted boss
food eat cook cooking recipe: recipe cook baked dinner dish meal
music musical band bands artist: concert band song singer music album
"""
RELATED_TERMS = {word: tuple(line.partition(":")[2].split()) for line in RELATED.strip().splitlines()
                 for word in line.partition(":")[0].split()}


def related_terms(query: str) -> list[str]:
    """The things a question's words for a kind of thing stand for (RELATED), not already in the question."""
    words = [w.lower() for w in _WORD.findall(query)]
    out = [t for w in words for t in RELATED_TERMS.get(w, ()) if t not in words]
    return list(dict.fromkeys(out))[:MAX_QUERY_TERMS]


def match_expression(query: str, joiner: str = "OR", column: str = "body") -> str | None:
    """An FTS5 MATCH expression for free text, or None when it holds nothing to search for.

    Every term is a quoted string, so no input (quotes, `*`, `AND`, parentheses, a lone `-`) is FTS5 syntax.
    With OR, BM25 ranks documents matching more, and rarer, terms first. Words are looked for in `column`;
    CJK runs in `cjk` when that column is `body`.
    """
    words = [w.lower() for w in _WORD.findall(query)]
    meaningful = [w for w in words if w not in STOPWORDS and len(w) > 1]
    terms = [f"{column}:{_term(w)}" for w in dict.fromkeys(meaningful or words)]
    for run in dict.fromkeys(_CJK_RUN.findall(query) if column == "body" else ()):
        if len(run) == 1:
            terms.append(f"cjk:{_quote(run)}*")
            continue
        bigrams = [run[i:i + 2] for i in range(len(run) - 1)]
        terms += [f"cjk:{_quote(b)}" for b in dict.fromkeys(bigrams)]
        if len(bigrams) > 1:
            terms.append(f"cjk:{_quote(' '.join(bigrams))}")  # the whole run in order ranks higher
    terms = list(dict.fromkeys(terms))[:MAX_QUERY_TERMS]
    return f" {joiner} ".join(terms) if terms else None


MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "few": 3, "couple": 2}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_ASKS_WHEN = re.compile(r"\bwhen\b|\bwhat (?:date|day|time|year|month)\b|\bwhich (?:date|day|year|month)\b|"
                        r"\bhow long ago\b|\bwhat time\b", re.IGNORECASE)
_DATED = re.compile(r"\b(?:yesterday|today|tonight|tomorrow|last|ago|weekend|recently|earlier|since|"
                    r"(?:mon|tues|wednes|thurs|fri|satur|sun)day|" + "|".join(MONTHS) + r"|\d{4}|\d{1,2}(?:st|nd|rd|th))\b",
                    re.IGNORECASE)
_MONTH = "|".join(m.capitalize() for m in MONTHS)
_IN_MONTH = re.compile(rf"\b(?:in|of|during|since|early|late|mid)\s+({_MONTH})(?:,?\s+(\d{{4}}))?\b|"
                       rf"\b({_MONTH})\s+(\d{{4}})\b|\b(?:in|during)\s+(\d{{4}})\b", re.IGNORECASE)
_RELATIVE = re.compile(r"\b(today|tonight|yesterday|this (?:week|month|year)|last (?:week|weekend|month|year)|"
                       r"recently|(a|an|one|two|three|four|five|six|few|couple|\d+)\s+(?:of\s+)?(day|week|month|year)s?"
                       r" ago)\b", re.IGNORECASE)


def asks_when(query: str) -> bool:
    """Whether the question is about when something happened."""
    return _ASKS_WHEN.search(query) is not None


def mentions_time(text: str) -> bool:
    """Whether a text holds a date or a time relative to when it was said ("yesterday", "last week", "in May")."""
    return _DATED.search(text) is not None


def time_filter(query: str, now: datetime) -> Callable[[str], bool] | None:
    """For a query that names a time ("last week", "yesterday", "in May", "May 2023", "in 2023", "3 days ago"),
    a test of a "YYYY-MM-DD HH:MM" timestamp: whether it falls in that time, counted back from `now`.
    A month without a year is that month in any year. None when the query names no time."""
    found = _IN_MONTH.search(query)
    if found:
        month_name, year = (found.group(1), found.group(2)) if found.group(1) else (found.group(3), found.group(4))
        if month_name is None:
            only_year: str = found.group(5)
            return lambda stamp: stamp.startswith(only_year)
        if month_name != "may" or year:  # "in may" in lower case is more likely the verb
            prefix = f"-{MONTHS.index(month_name.lower()) + 1:02}-"
            return lambda stamp: stamp[4:8] == prefix and (not year or stamp.startswith(year))
    found = _RELATIVE.search(query)
    if not found:
        return None
    phrase = found.group(1).lower()
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if phrase in ("today", "tonight"):
        start, end = today, now
    elif phrase == "yesterday":
        start, end = today - timedelta(days=1), today
    elif phrase in ("this week", "last weekend"):
        start, end = today - timedelta(days=7), now
    elif phrase == "last week":
        start, end = today - timedelta(days=14), now
    elif phrase == "this month":
        start, end = today.replace(day=1), now
    elif phrase == "last month":
        start, end = today - timedelta(days=62), now
    elif phrase == "this year":
        start, end = today.replace(month=1, day=1), now
    elif phrase == "last year":
        start, end = today.replace(year=today.year - 1, month=1, day=1), today.replace(month=1, day=1)
    elif phrase == "recently":
        start, end = today - timedelta(days=30), now
    else:
        count = found.group(2).lower()
        days = (_NUMBERS.get(count) or int(count)) * _UNIT_DAYS[found.group(3).lower()]
        margin = max(1, days // 4)
        start, end = today - timedelta(days=days + margin), today - timedelta(days=max(0, days - margin) - 1)
    low, high = start.strftime("%Y-%m-%d %H:%M"), end.strftime("%Y-%m-%d %H:%M")
    return lambda stamp: low <= stamp[:16] <= high


def without_time(query: str) -> str:
    """The query without the time it names ("garden last week" -> "garden "): its words are not what to match."""
    rest = _RELATIVE.sub(" ", _IN_MONTH.sub(" ", query))
    return rest if match_expression(rest) is not None else query


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


def _term(word: str) -> str:
    forms = FORMS.get(word)
    return f"({' OR '.join(map(_quote, forms))})" if forms else _quote(word)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'
