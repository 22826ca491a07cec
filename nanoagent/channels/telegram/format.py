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

from nanoagent.channels import markdown
from nanoagent.channels.base import Chunk
from nanoagent.channels.markdown import (
    BULLET,
    HEADING,
    QUOTE,
    RULE,
    Packer,
    html_shows,
    parse_blocks,
    units,
)
from nanoagent.channels.markdown import Block as MarkdownBlock

LIMIT = 4096  # Telegram's limit on a message's text, in UTF-16 code units
BARE_URL = re.compile(r"(?:https?|tg)://[^\s<>\"]+")  # Telegram links both kinds in text itself


def markdown_to_html(text: str) -> str:
    return "\n\n".join(block.html() for block in parse_blocks(text, Block))


def split_markdown(text: str, limit: int = LIMIT) -> list[Chunk]:
    """The messages `text` becomes: each under `limit` as HTML (`Chunk.body`) and as plain text (its Markdown
    source, sent instead when Telegram rejects the HTML); none empty."""
    return Packer(limit, Block.html, html_shows, units).pack(parse_blocks(text, Block))


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
    """Inline Markdown as Telegram HTML (`markdown.inline_html`): bare URLs stay text, which Telegram links itself
    (a local one as code)."""
    return markdown.inline_html(text, ("b", "s", "i"), bare_url=BARE_URL)
