"""Markdown as the model writes it, in blocks, and packed into messages under a length limit: the part of a channel's
wire format that does not depend on the app's markup (Telegram's HTML, Slack's mrkdwn).

A reply is split at paragraph boundaries, then at line boundaries, and only a line longer than a whole message is
cut inside (at a space where one is near); a code block split across messages is closed at the end of one and
reopened at the start of the next. Each piece also carries its Markdown source (`Chunk.plain`), for when the app
refuses the markup; a piece is measured as the larger of its two forms.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from nanoagent.channels.base import Chunk

FENCE = re.compile(r"^\s{0,3}(```+|~~~+)\s*([\w+#.-]*)[^\n`]*$")
# the inline Markdown every format reads alike (a hole is text set aside while the rest is converted)
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", re.S)
STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~", re.S)
HOLE = re.compile(r"\x00(\d+)\x00")
# the only links a reply may make, in every channel's format (as in the web app): http(s) and mailto. A model's
# `[x](tg://user?id=N)` (a Telegram text mention), `javascript:` or `file:` stays text.
LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?|mailto):[^\s()]+(?:\([^\s()]*\))?[^\s()]*)\)", re.I)
ANY_LINK = re.compile(r"\[([^\]\n]+)\]\(([^\s()]+(?:\([^\s()]*\))?[^\s()]*)\)")


def linkable(url: str) -> bool:
    """May `url` be a link's target? Only http(s) and mailto."""
    return re.match(r"(?:https?|mailto):", url, re.I) is not None



class Holes:
    """Text set aside while inline Markdown is converted, so that nothing inside code or a URL is read as emphasis:
    `hold` puts a marker in its place, `fill` puts every value back (a value may hold a marker: a link's label with
    code in it)."""

    def __init__(self) -> None:
        self.values: list[str] = []

    def hold(self, value: str) -> str:
        self.values.append(value)
        return f"\x00{len(self.values) - 1}\x00"

    def fill(self, text: str) -> str:
        for _ in range(len(self.values) + 1):  # a value can only hold markers made before it: this many passes end
            if not HOLE.search(text):
                break
            text = HOLE.sub(lambda m: self.values[int(m.group(1))], text)
        return text

BARE_URL = re.compile(r"<?([a-zA-Z][\w+.-]*://[^\s<>]+)>?")


def code_url(url: str) -> str:
    """A URL as a code span: shown, never linked."""
    return "`" + url.replace("`", "%60") + "`"


def plain_links(text: str) -> str:
    """Markdown links kept only to http(s) and mailto targets that lead away from this machine (an app that links
    only what Markdown marks); any other becomes its label and its target as text, one here in a code span. Code
    spans are left alone."""
    from nanoagent.linkhost import reaches_here

    held = Holes()
    text = CODE_SPAN.sub(lambda m: held.hold(m.group(0)), text.replace("\x00", ""))

    def link(m: re.Match[str]) -> str:
        label, url = m.group(1), m.group(2)
        if not linkable(url):
            return f"{label} ({url})"
        if reaches_here(url):
            return f"{label} " + held.hold(code_url(url))
        return held.hold(m.group(0))

    return held.fill(ANY_LINK.sub(link, text))


def web_links(line: str, finish: Callable[[str], str] = lambda text: text) -> str:
    """One line for an app that links bare URLs too: a link kept only to the web and not to this machine, else its
    label and its target in a code span; a bare URL to this machine in a code span; code spans kept. `finish`
    edits the rest of the text (what stays held is left as it is)."""
    from nanoagent.linkhost import reaches_here

    held = Holes()

    def link(m: re.Match[str]) -> str:
        if linkable(m.group(2)) and not reaches_here(m.group(2)):
            return held.hold(m.group(0))
        return f"{m.group(1)} {held.hold(code_url(m.group(2)))}"

    line = CODE_SPAN.sub(lambda m: held.hold(m.group(0)), line.replace("\x00", ""))
    line = ANY_LINK.sub(link, line)
    line = BARE_URL.sub(lambda m: held.hold(code_url(m.group(1))) if reaches_here(m.group(1)) else m.group(0), line)
    return held.fill(finish(line))


def units(text: str) -> int:
    """Length in UTF-16 code units, as Telegram and Discord count it (an emoji outside the BMP counts two)."""
    return len(text.encode("utf-16-le")) // 2


@dataclass
class Block:
    """A paragraph (lines of text), or a fenced code block (its lines without the fences, and its language)."""

    lines: list[str]
    code: bool = False
    lang: str = ""

    def plain(self, lines: list[str] | None = None) -> str:
        """The block's Markdown source (`lines` of it, when given)."""
        lines = self.lines if lines is None else lines
        if self.code:
            return "\n".join([f"```{self.lang}", *lines, "```"])
        return "\n".join(lines)


B = TypeVar("B", bound=Block)


def parse_blocks(text: str, make: Callable[..., B]) -> list[B]:
    """Paragraphs (separated by blank lines) and fenced code blocks, built by `make` (a `Block` class); an unclosed
    fence runs to the end (a reply still streaming)."""
    blocks: list[B] = []
    paragraph: list[str] = []
    fence: tuple[str, B] | None = None

    def end_paragraph() -> None:
        if paragraph:
            blocks.append(make(list(paragraph)))
            paragraph.clear()

    for line in text.replace("\r\n", "\n").split("\n"):
        if fence is not None:
            marker, block = fence
            stripped = line.strip()
            if stripped.startswith(marker[:3]) and set(stripped) <= set(marker[0]) and len(stripped) >= len(marker):
                blocks.append(block)
                fence = None
            else:
                block.lines.append(line)
            continue
        opening = FENCE.match(line)
        if opening:
            end_paragraph()
            fence = (opening.group(1), make([], code=True, lang=opening.group(2)))
        elif line.strip():
            paragraph.append(line.rstrip())
        else:
            end_paragraph()
    end_paragraph()
    if fence is not None:
        blocks.append(fence[1])
    return blocks


class Packer(Generic[B]):
    """Fills messages block by block; a block that fits in no message is cut at lines (code blocks are closed and
    reopened), and a line that fits in no message is cut inside. `markup(block, lines)` is the app's form of a block
    (of those lines of it), `measure` counts as the app does, and `shows(body, plain)` says whether a message would
    show anything (one holding only a code fence just opened is left out)."""

    def __init__(self, limit: int, markup: Callable[[B, list[str] | None], str], shows: Callable[[str, str], bool],
                 measure: Callable[[str], int] = len):
        self.limit = limit
        self.markup = markup
        self.shows = shows
        self.measure = measure
        self.chunks: list[Chunk] = []
        self.body: list[str] = []
        self.plain: list[str] = []

    def pack(self, blocks: list[B]) -> list[Chunk]:
        for block in blocks:
            self.add(block)
        self.flush()
        return self.chunks

    def size(self, body: str, plain: str) -> int:
        """The current message's size with one more part: the larger of its two forms."""
        sep = 2 * len(self.body)
        return max(sum(map(self.measure, self.body)) + self.measure(body),
                   sum(map(self.measure, self.plain)) + self.measure(plain)) + sep

    def put(self, body: str, plain: str) -> bool:
        if self.size(body, plain) > self.limit:
            return False
        self.body.append(body)
        self.plain.append(plain)
        return True

    def put_lines(self, block: B, lines: list[str] | None = None) -> bool:
        return self.put(self.markup(block, lines), block.plain(lines))

    def flush(self) -> None:
        """End the current message, unless it would show nothing."""
        if self.body:
            body, plain = "\n\n".join(self.body), "\n\n".join(self.plain)
            if self.shows(body, plain):
                self.chunks.append(Chunk(body, plain))
        self.body, self.plain = [], []

    def add(self, block: B) -> None:
        if self.put_lines(block):
            return
        self.flush()
        if self.put_lines(block):
            return
        self.add_lines(block)

    def add_lines(self, block: B) -> None:
        """A block bigger than one message: as many lines as fit in each message, each message's share a block of
        its own (a code block closed and reopened)."""
        lines: list[str] = []
        for line in block.lines:
            if self.fits(block, [*lines, line]):
                lines.append(line)
                continue
            if lines:
                self.put_lines(block, lines)
                self.flush()
                lines = []
            if self.fits(block, [line]):
                lines = [line]
                continue
            for piece in self.cut(block, line):  # one line longer than a message
                self.put_lines(block, [piece])
                self.flush()
        if lines:
            self.put_lines(block, lines)

    def fits(self, block: B, lines: list[str]) -> bool:
        return self.size(self.markup(block, lines), block.plain(lines)) <= self.limit

    def cut(self, block: B, line: str) -> list[str]:
        """`line` in pieces that each fit in a message of their own, cut at a space where one is near."""
        def size(text: str, k: int) -> int:
            return max(self.measure(self.markup(block, [text[:k]])), self.measure(block.plain([text[:k]])))

        pieces = []
        rest = line
        while rest:
            n = longest(rest, functools.partial(size, rest), self.limit)
            space = rest.rfind(" ", n // 2, n)
            if space > 0 and n < len(rest):
                n = space + 1
            pieces.append(rest[:n])
            rest = rest[n:]
        return pieces


def longest(text: str, size: Callable[[int], int], limit: int) -> int:
    """The longest prefix length whose size fits `limit` (at least 1): a binary search, sizes grow with length."""
    low, high = 1, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if size(mid) <= limit:
            low = mid
        else:
            high = mid - 1
    return low


# --- inline Markdown as HTML (the formats of apps that take HTML: Telegram, Matrix) ---------------------------------
HTML_ITALIC = re.compile(r"(?<![\w*])\*(?![\s*])([^<*\n]+?)(?<!\s)\*(?![\w*])|(?<![\w_])_(?![\s_])([^<_\n]+?)(?<!\s)_(?![\w_])")
HTML_TAG = re.compile(r"<[^>]*>")
HTML_BARE_URL = re.compile(r"https?://[^\s<>\"]+")


def html_code(text: str) -> str:
    return f"<code>{html.escape(text, quote=False)}</code>"


def inline_html(text: str, tags: tuple[str, str, str] = ("b", "s", "i"), link_bare: bool = False,
                bare_url: re.Pattern[str] = HTML_BARE_URL) -> str:
    """Code spans, links, bold, strikethrough and italic (`tags`, in that order); everything else escaped. Code and
    URLs are set aside first, so an underscore or asterisk inside them is never taken for emphasis. A link to this
    machine or its network (`linkhost.reaches_here`) is code, never a link; a bare URL becomes a link only with
    `link_bare` (an app that links URLs in text itself gets them as text)."""
    from nanoagent.linkhost import reaches_here

    bold, strike, italic = tags
    hole = (holes := Holes()).hold
    text = CODE_SPAN.sub(lambda m: hole(html_code(m.group(2).strip())), text.replace("\x00", ""))
    text = LINK.sub(lambda m: (m.group(1) + " " + hole(html_code(m.group(2))) if reaches_here(m.group(2)) else
                               hole(f'<a href="{html.escape(m.group(2))}">') + m.group(1) + hole("</a>")), text)

    def bare(url: str) -> str:
        if reaches_here(url):
            return hole(html_code(url))
        return hole(f'<a href="{html.escape(url)}">{html.escape(url)}</a>' if link_bare
                    else html.escape(url, quote=False))

    text = bare_url.sub(lambda m: bare(m.group(0)), text)
    text = html.escape(text, quote=False)
    text = BOLD.sub(lambda m: f"<{bold}>{m.group(2)}</{bold}>", text)
    text = STRIKE.sub(lambda m: f"<{strike}>{m.group(1)}</{strike}>", text)
    text = HTML_ITALIC.sub(lambda m: f"<{italic}>{m.group(1) or m.group(2)}</{italic}>", text)
    return holes.fill(text)


def html_shows(body: str, plain: str) -> bool:
    """Whether an HTML chunk shows anything once its tags are gone (`Packer`'s test of an empty chunk)."""
    return bool(html.unescape(HTML_TAG.sub("", body)).strip())


def text_shows(body: str, plain: str) -> bool:
    """Whether a chunk of an app's own Markdown shows anything once bare code fences are gone (`Packer`'s test)."""
    return bool(body.replace("```", "").strip() and plain.replace("```", "").strip())
