"""Markdown as the model writes it, turned into a letter: plain text a person reads as it is (no `**`, links as
`text <url>`, code indented) and a simple HTML part beside it; and the other way, an HTML-only mail as text.

Nothing of the mail being answered is quoted: the thread's headers tie the reply to it, and the person's client
shows the conversation. A reply past `LIMIT` is split at paragraph boundaries (a code block is closed and reopened),
each part a mail of its own.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from nanoagent.channels.base import Chunk
from nanoagent.channels.markdown import (
    BOLD,
    BULLET,
    CODE_SPAN,
    FENCE,
    HEADING,
    QUOTE,
    RULE,
    STRIKE,
    Holes,
    linkable,
)
from nanoagent.linkhost import reaches_here

LIMIT = 100_000  # characters of one mail's text: far past any reply, so a reply is one mail
NUMBERED = re.compile(r"^(\s*)(\d+[.)])\s+(.*)$")
IMAGE = re.compile(r"!\[([^\]\n]*)\]\(([^\s()]+)\)")
LINK = re.compile(r"\[([^\]\n]+)\]\(([^\s()]+(?:\([^\s()]*\))?[^\s()]*)\)")
AUTOLINK = re.compile(r"<((?:https?|mailto):[^\s<>]+)>")
ITALIC = re.compile(r"(?<![\w*])\*(?![\s*])([^*\n]+?)(?<!\s)\*(?![\w*])|(?<![\w_])_(?![\s_])([^_\n]+?)(?<!\s)_(?![\w_])")
REPLY_PREFIX = re.compile(r"^\s*((re|aw|sv|antw)(\[\d+\])?\s*:\s*)+", re.I)


def reply_subject(subject: str) -> str:
    """`Re: <subject>`, never `Re: Re:` (nor the `AW:`/`SV:` other languages' clients write)."""
    rest = REPLY_PREFIX.sub("", subject or "").strip()
    return f"Re: {rest}" if rest else "Re: your message"


def new_subject(markdown: str) -> str:
    """A subject for a mail that starts a thread (a scheduled message): its first line, shortened."""
    first = next((line for line in plain(markdown).splitlines() if line.strip()), "").strip()
    return first if len(first) <= 70 else first[:69].rstrip() + "…"


def split(markdown: str, limit: int = LIMIT) -> list[Chunk]:
    """The reply as mails: each a `Chunk` with its HTML part as `body` and its text part as `plain`."""
    return [Chunk(body=to_html(part), plain=plain(part)) for part in _parts(markdown.strip(), limit) if part.strip()]


def _parts(markdown: str, limit: int) -> list[str]:
    """Paragraph-boundary pieces under `limit` characters; a code block split across them is closed and reopened."""
    parts: list[str] = []
    current: list[str] = []
    size = 0
    fence = ""
    for line in markdown.split("\n"):
        while len(line) > limit:  # a line longer than a whole mail: cut inside it
            parts.append("\n".join([*current, line[:limit]]))
            current, size, line = [], 0, line[limit:]
        if size + len(line) + 1 > limit and current:
            parts.append("\n".join([*current, fence] if fence else current))
            current, size = ([fence] if fence else []), len(fence)
        current.append(line)
        size += len(line) + 1
        match = FENCE.match(line)
        if match:
            fence = "" if fence else match.group(1)
    parts.append("\n".join(current))
    return parts


# --- plain text ----------------------------------------------------------------------------------------------------


def plain(markdown: str) -> str:
    """Markdown made readable as it is: emphasis marks dropped, links as `text <url>`, code indented."""
    out: list[str] = []
    in_code = False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            in_code = not in_code
            continue
        if in_code:
            out.append("    " + line if line.strip() else "")
            continue
        heading = HEADING.match(line)
        if heading:
            out.append(_inline_plain(heading.group(1)))
        elif RULE.match(line):
            out.append("")
        elif bullet := BULLET.match(line):
            out.append(f"{bullet.group(1)}- {_inline_plain(bullet.group(2))}")
        else:
            out.append(_inline_plain(line))
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"


def _inline_plain(text: str) -> str:
    hold = (kept := Holes()).hold

    text = CODE_SPAN.sub(lambda m: hold(m.group(2).strip()), text)
    text = IMAGE.sub(lambda m: hold(f"{m.group(1)} <{m.group(2)}>" if m.group(1) else f"<{m.group(2)}>"), text)
    text = LINK.sub(lambda m: hold(_link_plain(m.group(1), m.group(2))), text)
    text = AUTOLINK.sub(lambda m: hold(f"<{m.group(1)}>"), text)
    text = BOLD.sub(lambda m: m.group(2), text)
    text = STRIKE.sub(lambda m: m.group(1), text)
    text = ITALIC.sub(lambda m: m.group(1) or m.group(2), text)
    return kept.fill(text)


def _link_plain(label: str, url: str) -> str:
    label = BOLD.sub(lambda m: m.group(2), label)
    return f"<{url}>" if label.strip() in (url, url.removeprefix("mailto:")) else f"{label} <{url}>"


# --- HTML ------------------------------------------------------------------------------------------------------------


def to_html(markdown: str) -> str:
    """A simple HTML part: paragraphs, bold and italics, links, code, lists as lines, headings in bold."""
    blocks: list[str] = []
    paragraph: list[str] = []
    code: list[str] | None = None

    def flush() -> None:
        if paragraph:
            blocks.append("<p>" + "<br>\n".join(paragraph) + "</p>")
            paragraph.clear()

    for line in markdown.split("\n"):
        if FENCE.match(line):
            if code is None:
                flush()
                code = []
            else:
                blocks.append("<pre>" + html.escape("\n".join(code)) + "</pre>")
                code = None
            continue
        if code is not None:
            code.append(line)
        elif not line.strip() or RULE.match(line):
            flush()
        elif heading := HEADING.match(line):
            flush()
            blocks.append(f"<p><b>{_inline_html(heading.group(1))}</b></p>")
        elif bullet := BULLET.match(line):
            paragraph.append("&nbsp;" * len(bullet.group(1)) + "• " + _inline_html(bullet.group(2)))
        elif quote := QUOTE.match(line):
            paragraph.append("<i>&gt; " + _inline_html(quote.group(1)) + "</i>")
        else:
            paragraph.append(_inline_html(line))
    if code is not None:
        blocks.append("<pre>" + html.escape("\n".join(code)) + "</pre>")
    flush()
    return "<html><body>\n" + "\n".join(blocks) + "\n</body></html>\n"


def _inline_html(text: str) -> str:
    hold = (kept := Holes()).hold

    def link(label: str, url: str) -> str:
        if not linkable(url) or reaches_here(url):  # another scheme, or this machine or its network: text
            return hold(html.escape(f"{label} <{url}>"))
        return hold(f'<a href="{html.escape(url, quote=True)}">{html.escape(label)}</a>')

    text = CODE_SPAN.sub(lambda m: hold(f"<code>{html.escape(m.group(2).strip())}</code>"), text)
    text = IMAGE.sub(lambda m: link(m.group(1) or m.group(2), m.group(2)), text)
    text = LINK.sub(lambda m: link(BOLD.sub(lambda b: b.group(2), m.group(1)), m.group(2)), text)
    text = AUTOLINK.sub(lambda m: link(m.group(1), m.group(1)), text)
    text = html.escape(text, quote=False)
    text = BOLD.sub(lambda m: f"<b>{m.group(2)}</b>", text)
    text = STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", text)
    text = ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
    return kept.fill(text)


# --- mail in ---------------------------------------------------------------------------------------------------------


# what a mail reader hides: text so styled never reaches the model as the sender's words
HIDDEN_STYLE = re.compile(r"(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*(?:hidden|collapse)"
                          r"|(?:font-size|max-height|max-width|height|width)\s*:\s*0*\.?0*(?:px|em|rem|pt|%)?\s*(?:!important)?\s*(?:;|$)"
                          r"|opacity\s*:\s*0*\.?0*\s*(?:!important)?\s*(?:;|$))", re.I)
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})


def _hidden(attrs: list[tuple[str, str | None]]) -> bool:
    found = dict(attrs)
    return "hidden" in found or (found.get("aria-hidden") or "").lower() == "true" \
        or bool(HIDDEN_STYLE.search(found.get("style") or ""))


class _Text(HTMLParser):
    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote",
                        "table", "ul", "ol", "hr"})
    SKIP = frozenset({"script", "style", "head", "title", "template"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skipping = 0
        self.href: list[str | None] = []
        self.open: list[str] = []  # the elements open now (void ones never are)
        self.hidden_from: int | None = None  # the depth of the outermost hidden element open, if any

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.open.append(tag)
            if self.hidden_from is None and _hidden(attrs):
                self.hidden_from = len(self.open)
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCKS:
            self.out.append("\n")
            if tag == "li":
                self.out.append("- ")
        elif tag == "a":
            self.href.append(dict(attrs).get("href"))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.open:  # closes it and whatever was left open inside it
            while self.open.pop() != tag:
                pass
            if self.hidden_from is not None and len(self.open) < self.hidden_from:
                self.hidden_from = None
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCKS:
            self.out.append("\n")
        elif tag == "a" and self.href:
            href = self.href.pop()
            if href and linkable(href):
                self.out.append(f" <{href}>")

    def handle_data(self, data: str) -> None:
        if not self.skipping and self.hidden_from is None:
            self.out.append(re.sub(r"\s+", " ", data))


def html_text(markup: str) -> str:
    """An HTML mail's text: blocks on lines of their own, links as `text <url>`; scripts, styles and what a mail
    reader hides (`display:none`, `visibility:hidden`, a zero size or opacity, `hidden`) left out."""
    parser = _Text()
    parser.feed(markup)
    parser.close()
    lines = [line.strip() for line in "".join(parser.out).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


QUOTE_INTRO = re.compile(r"^(On .{4,200} wrote:|Am .{4,200} schrieb .*:|Le .{4,200} a écrit ?:|-{2,} ?Original Message ?-{2,})$",
                         re.I)


def without_quote(text: str) -> str:
    """The person's own words: the quoted mail a client appends below them (`> ` lines and their `On ... wrote:`
    line at the end) is left out; quotes between their words are kept, and a mail that is nothing but a quote is
    kept whole."""
    lines = text.rstrip().split("\n")
    end = len(lines)
    while end > 0 and (QUOTE.match(lines[end - 1]) or not lines[end - 1].strip()):
        end -= 1
    if end < len(lines) and end > 0 and QUOTE_INTRO.match(lines[end - 1].strip()):
        end -= 1
    elif end < len(lines) and end > 1 and QUOTE_INTRO.match(f"{lines[end - 2]} {lines[end - 1]}".strip()):
        end -= 2  # the intro line wrapped in two
    kept = "\n".join(lines[:end]).rstrip()
    return kept if kept.strip() else text.strip()
