"""Markdown as the model writes it, turned into Matrix messages: `formatted_body` in the HTML subset the Matrix
spec recommends (`org.matrix.custom.html`), `body` its Markdown source, split under a message's size.

Paragraphs become `<p>` with `<br>` between lines (HTML ignores line ends), headings `<h4>`, bullet lines `<li>` in
a `<ul>`, quotes `<blockquote>`, code `<pre><code>` with its language; `<`, `>` and `&` are escaped everywhere, so
nothing the model writes becomes a tag or a mention. Links keep only http(s) and mailto targets
(`markdown.LINK`); a link to this machine or its network (`linkhost.reaches_here`) is shown as code.

A reply is split at paragraph boundaries, then at line boundaries, and only a line longer than a whole message is
cut inside; a code block split across messages is closed and reopened. `LIMIT` counts UTF-8 bytes of the larger of
the two forms: an edit carries both forms twice (`m.new_content`), and an event holds at most 65,536 bytes.
"""

from __future__ import annotations

import html

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
)
from nanoagent.channels.markdown import Block as MarkdownBlock

LIMIT = 12_000  # bytes of the larger form in one message (see the module's docstring)


def utf8(text: str) -> int:
    return len(text.encode())


def markdown_to_html(text: str) -> str:
    return "\n".join(block.html() for block in parse_blocks(text, Block))


def split_markdown(text: str, limit: int = LIMIT) -> list[Chunk]:
    """The messages `text` becomes: each under `limit` bytes as HTML (`Chunk.body`) and as its Markdown source
    (`Chunk.plain`, the event's `body`); none empty."""
    return Packer(limit, Block.html, html_shows, utf8).pack(parse_blocks(text, Block))


class Block(MarkdownBlock):
    def html(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            body = html.escape("\n".join(lines), quote=False)
            lang = f' class="language-{html.escape(self.lang)}"' if self.lang else ""
            return f"<pre><code{lang}>{body}</code></pre>"
        return _text_html(lines)


def _text_html(lines: list[str]) -> str:
    """A paragraph's lines: runs of quoted lines, of list items and of other lines each one element."""
    out: list[str] = []
    run: list[str] = []
    kind = ""
    for line in [*lines, None]:  # None ends the last run
        quote = QUOTE.match(line) if line is not None else None
        bullet = BULLET.match(line) if line is not None else None
        now = "" if line is None else "quote" if quote else "list" if bullet else "heading" if HEADING.match(
            line) else "text"
        if run and now != kind or kind == "heading":
            out.append(_element(kind, run))
            run = []
        if line is None:
            break
        kind = now
        run.append(inline_html(quote.group(1)) if quote else f"<li>{inline_html(bullet.group(2))}</li>" if bullet
                   else _line_html(line))
    return "\n".join(out)


def _element(kind: str, run: list[str]) -> str:
    if kind == "quote":
        return "<blockquote>" + "<br>".join(run) + "</blockquote>"
    if kind == "list":
        return "<ul>" + "".join(run) + "</ul>"
    if kind == "heading":
        return run[0]
    return "<p>" + "<br>".join(run) + "</p>"


def _line_html(line: str) -> str:
    heading = HEADING.match(line)
    if heading:
        return f"<h4>{inline_html(heading.group(1))}</h4>"
    if RULE.match(line):
        return "<hr>"
    return inline_html(line)


def inline_html(text: str) -> str:
    """Inline Markdown as Matrix HTML (`markdown.inline_html`): bare http(s) URLs become links too."""
    return markdown.inline_html(text, ("strong", "del", "em"), link_bare=True)
