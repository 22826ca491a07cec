"""Markdown as the model writes it, turned into Telegram messages: the HTML subset Telegram reads, split under its
length limit.

Telegram's HTML knows b, i, s, code, pre (with a language), a and blockquote; everything else is text, so `<`, `>`
and `&` are escaped. Headings become bold lines and list items bullet lines. A reply is split at paragraph
boundaries, then at line boundaries, and only a line longer than a whole message is cut inside; a code block split
across messages is closed at the end of one and reopened, with its language, at the start of the next. Each piece
also carries its Markdown source, sent as plain text when Telegram rejects the markup.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from nanoagent.channels.base import Chunk

LIMIT = 4096  # Telegram's limit on a message's text, in UTF-16 code units
FENCE = re.compile(r"^\s{0,3}(```+|~~~+)\s*([\w+#.-]*)[^\n`]*$")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?|tg|mailto):[^\s()]+(?:\([^\s()]*\))?[^\s()]*)\)")
BARE_URL = re.compile(r"(?:https?|tg)://[^\s<>\"]+")
BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", re.S)
STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~", re.S)
ITALIC = re.compile(r"(?<![\w*])\*(?![\s*])([^<*\n]+?)(?<!\s)\*(?![\w*])|(?<![\w_])_(?![\s_])([^<_\n]+?)(?<!\s)_(?![\w_])")
HOLE = re.compile(r"\x00(\d+)\x00")
TAG = re.compile(r"<[^>]*>")


def units(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units (an emoji outside the BMP counts two)."""
    return len(text.encode("utf-16-le")) // 2


def markdown_to_html(text: str) -> str:
    return "\n\n".join(block.html() for block in parse_blocks(text))


def split_markdown(text: str, limit: int = LIMIT) -> list[Chunk]:
    """The messages `text` becomes: each under `limit` as HTML (`Chunk.body`) and as plain text (its Markdown
    source, sent instead when Telegram rejects the HTML); none empty."""
    packer = _Packer(limit)
    for block in parse_blocks(text):
        packer.add(block)
    return packer.done()


# --- blocks ----------------------------------------------------------------------------------------


@dataclass
class Block:
    lines: list[str]
    code: bool = False
    lang: str = ""

    def html(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            body = html.escape("\n".join(lines), quote=False)
            if self.lang:
                return f'<pre><code class="language-{html.escape(self.lang)}">{body}</code></pre>'
            return f"<pre>{body}</pre>"
        return _text_html(lines)

    def plain(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            return "\n".join([f"```{self.lang}", *lines, "```"])
        return "\n".join(lines)


def parse_blocks(text: str) -> list[Block]:
    """Paragraphs (separated by blank lines) and fenced code blocks; an unclosed fence runs to the end (a reply
    still streaming)."""
    blocks: list[Block] = []
    paragraph: list[str] = []
    fence: tuple[str, Block] | None = None

    def end_paragraph() -> None:
        if paragraph:
            blocks.append(Block(list(paragraph)))
            paragraph.clear()

    for line in text.replace("\r\n", "\n").split("\n"):
        if fence is not None:
            marker, block = fence
            if line.strip().startswith(marker[:3]) and set(line.strip()) <= set(marker[0]) \
                    and len(line.strip()) >= len(marker):
                blocks.append(block)
                fence = None
            else:
                block.lines.append(line)
            continue
        opening = FENCE.match(line)
        if opening:
            end_paragraph()
            fence = (opening.group(1), Block([], code=True, lang=opening.group(2)))
        elif line.strip():
            paragraph.append(line.rstrip())
        else:
            end_paragraph()
    end_paragraph()
    if fence is not None:
        blocks.append(fence[1])
    return blocks


def _text_html(lines: list[str]) -> str:
    out: list[str] = []
    quoted: list[str] = []
    for line in [*lines, ""]:  # the empty line ends a quote still open
        quote = QUOTE.match(line)
        if quote:
            quoted.append(inline_html(quote.group(1)))
            continue
        if quoted:
            out.append("<blockquote>" + "\n".join(quoted) + "</blockquote>")
            quoted = []
        if line:
            out.append(_line_html(line))
    return "\n".join(out)


def _line_html(line: str) -> str:
    heading = HEADING.match(line)
    if heading:
        return f"<b>{inline_html(heading.group(1))}</b>"
    if RULE.match(line):
        return "──────────"
    bullet = BULLET.match(line)
    if bullet:
        return f"{bullet.group(1)}• {inline_html(bullet.group(2))}"
    return inline_html(line)


def inline_html(text: str) -> str:
    """Code spans, links, bold, italic and strikethrough; everything else escaped. Code and URLs are set aside
    first, so an underscore or asterisk inside them is never taken for emphasis."""
    holes: list[str] = []

    def hole(value: str) -> str:
        holes.append(value)
        return f"\x00{len(holes) - 1}\x00"

    text = CODE_SPAN.sub(lambda m: hole(f"<code>{html.escape(m.group(2).strip(), quote=False)}</code>"),
                         text.replace("\x00", ""))
    text = LINK.sub(lambda m: hole(f'<a href="{html.escape(m.group(2))}">') + m.group(1) + hole("</a>"), text)
    text = BARE_URL.sub(lambda m: hole(html.escape(m.group(0), quote=False)), text)
    text = html.escape(text, quote=False)
    text = BOLD.sub(lambda m: f"<b>{m.group(2)}</b>", text)
    text = STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", text)
    text = ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
    return HOLE.sub(lambda m: holes[int(m.group(1))], text)


# --- splitting -------------------------------------------------------------------------------------


class _Packer:
    """Fills messages block by block; a block that fits in no message is cut at lines (code blocks are closed and
    reopened), and a line that fits in no message is cut inside."""

    def __init__(self, limit: int):
        self.limit = limit
        self.chunks: list[Chunk] = []
        self.html: list[str] = []
        self.plain: list[str] = []

    def size(self, html_part: str, plain_part: str) -> int:
        """The current message's size with one more part: the larger of its HTML and plain forms."""
        if not self.html:
            return max(units(html_part), units(plain_part))
        sep = 2 * len(self.html)
        return max(sum(map(units, self.html)) + units(html_part), sum(map(units, self.plain)) + units(plain_part)) + sep

    def put(self, html_part: str, plain_part: str) -> bool:
        if self.size(html_part, plain_part) > self.limit:
            return False
        self.html.append(html_part)
        self.plain.append(plain_part)
        return True

    def flush(self) -> None:
        """End the current message; one that would show nothing (a code fence just opened) is left out."""
        if self.html:
            html_text, plain_text = "\n\n".join(self.html), "\n\n".join(self.plain)
            if html.unescape(TAG.sub("", html_text)).strip():
                self.chunks.append(Chunk(html_text, plain_text))
        self.html, self.plain = [], []

    def add(self, block: Block) -> None:
        if self.put(block.html(), block.plain()):
            return
        self.flush()
        if self.put(block.html(), block.plain()):
            return
        self.add_lines(block)

    def add_lines(self, block: Block) -> None:
        """A block bigger than one message: as many lines as fit in each message, each message's share a block of
        its own (a code block closed and reopened)."""
        lines: list[str] = []
        for line in block.lines:
            if self.fits(block, [*lines, line]):
                lines.append(line)
                continue
            if lines:
                self.put(block.html(lines), block.plain(lines))
                self.flush()
                lines = []
            if self.fits(block, [line]):
                lines = [line]
                continue
            for piece in self.cut(block, line):  # one line longer than a message
                self.put(block.html([piece]), block.plain([piece]))
                self.flush()
        if lines:
            self.put(block.html(lines), block.plain(lines))

    def fits(self, block: Block, lines: list[str]) -> bool:
        return self.size(block.html(lines), block.plain(lines)) <= self.limit

    def cut(self, block: Block, line: str) -> list[str]:
        """`line` in pieces that each fit in a message of their own, cut at a space where one is near."""
        def size(text: str, k: int) -> int:
            return max(units(block.html([text[:k]])), units(block.plain([text[:k]])))

        pieces = []
        rest = line
        while rest:
            n = _longest(rest, functools.partial(size, rest), self.limit)
            space = rest.rfind(" ", n // 2, n)
            if space > 0 and n < len(rest):
                n = space + 1
            pieces.append(rest[:n])
            rest = rest[n:]
        return pieces

    def done(self) -> list[Chunk]:
        self.flush()
        return self.chunks


def _longest(text: str, size: Callable[[int], int], limit: int) -> int:
    """The longest prefix length whose size fits `limit` (at least 1): a binary search, sizes grow with length."""
    low, high = 1, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if size(mid) <= limit:
            low = mid
        else:
            high = mid - 1
    return low
