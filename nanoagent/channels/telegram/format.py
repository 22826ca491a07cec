"""Markdown as the model writes it, turned into Telegram messages: the HTML subset Telegram reads, split under its
length limit.

Telegram's HTML knows b, i, s, code, pre (with a language), a and blockquote; everything else is text, so `<`, `>`
and `&` are escaped. Headings become bold lines and list items bullet lines. A reply is split at paragraph
boundaries, then at line boundaries, and only a line longer than a whole message is cut inside; a code block split
across messages is closed at the end of one and reopened, with its language, at the start of the next. Each piece
also carries its Markdown source, sent as plain text when Telegram rejects the markup.
"""

from __future__ import annotations

import html
import re

from nanoagent.channels.base import Chunk
from nanoagent.channels.markdown import (
    BOLD,
    BULLET,
    CODE_SPAN,
    HEADING,
    LINK,
    QUOTE,
    RULE,
    STRIKE,
    Holes,
    Packer,
    parse_blocks,
    units,
)
from nanoagent.channels.markdown import Block as MarkdownBlock
from nanoagent.linkhost import reaches_here

LIMIT = 4096  # Telegram's limit on a message's text, in UTF-16 code units
BARE_URL = re.compile(r"(?:https?|tg)://[^\s<>\"]+")
ITALIC = re.compile(r"(?<![\w*])\*(?![\s*])([^<*\n]+?)(?<!\s)\*(?![\w*])|(?<![\w_])_(?![\s_])([^<_\n]+?)(?<!\s)_(?![\w_])")
TAG = re.compile(r"<[^>]*>")


def markdown_to_html(text: str) -> str:
    return "\n\n".join(block.html() for block in parse_blocks(text, Block))


def split_markdown(text: str, limit: int = LIMIT) -> list[Chunk]:
    """The messages `text` becomes: each under `limit` as HTML (`Chunk.body`) and as plain text (its Markdown
    source, sent instead when Telegram rejects the HTML); none empty."""
    return Packer(limit, Block.html, _shows, units).pack(parse_blocks(text, Block))


# --- blocks ----------------------------------------------------------------------------------------


class Block(MarkdownBlock):
    def html(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            body = html.escape("\n".join(lines), quote=False)
            if self.lang:
                return f'<pre><code class="language-{html.escape(self.lang)}">{body}</code></pre>'
            return f"<pre>{body}</pre>"
        return _text_html(lines)


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
    hole = (holes := Holes()).hold
    text = CODE_SPAN.sub(lambda m: hole(f"<code>{html.escape(m.group(2).strip(), quote=False)}</code>"),
                         text.replace("\x00", ""))
    text = LINK.sub(lambda m: (m.group(1) + " " + hole(_code(m.group(2))) if reaches_here(m.group(2)) else
                               hole(f'<a href="{html.escape(m.group(2))}">') + m.group(1) + hole("</a>")), text)
    text = BARE_URL.sub(lambda m: hole(_code(m.group(0)) if reaches_here(m.group(0))
                                       else html.escape(m.group(0), quote=False)), text)
    text = html.escape(text, quote=False)
    text = BOLD.sub(lambda m: f"<b>{m.group(2)}</b>", text)
    text = STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", text)
    text = ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
    return holes.fill(text)


def _code(url: str) -> str:
    """A link to this machine or its network (`linkhost.reaches_here`), as code: Telegram links a URL in text itself."""
    return f"<code>{html.escape(url, quote=False)}</code>"


def _shows(body: str, plain: str) -> bool:
    return bool(html.unescape(TAG.sub("", body)).strip())
