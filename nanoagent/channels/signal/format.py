"""Markdown as the model writes it, turned into Signal messages: text with Signal's text styles, split under a
message's length limit.

Signal shows no markup: a message is text, with ranges of it styled (bold, italic, strikethrough, monospace; its
`textStyle`, counted in UTF-16 code units). A chunk's body is therefore a small Markdown (`**bold**`, `*italic*`,
`~~strike~~`, `` `code` ``, fenced blocks, `[label](url)` links), which `styled` turns into the text and the ranges
the link sends: headings become bold lines, list items bullet lines, a fenced block monospace lines, and a link its
label followed by its address, which Signal's apps make clickable themselves. Only http(s) and mailto targets stay
links (`markdown.linkable`); any other becomes its label and the target as text, and an address of this machine or its
network (`linkhost.reaches_here`) is set in monospace. A reply is split at paragraph boundaries, then lines, and a
line longer than a message is cut inside; a code block split in two is closed and reopened.
"""

from __future__ import annotations

import re

from nanoagent.channels.base import Chunk
from nanoagent.channels.markdown import (
    BULLET,
    HEADING,
    RULE,
    Packer,
    parse_blocks,
    plain_links,
    units,
)
from nanoagent.channels.markdown import Block as MarkdownBlock

# Signal's apps send a text over 2,000 bytes as an attachment of its own; a message stays under it in characters
LIMIT = 2000
INLINE = re.compile(
    r"(?P<tick>`+)(?P<code>.+?)(?P=tick)"
    r"|\[(?P<label>[^\]\n]+)\]\((?P<url>[^\s()]+(?:\([^\s()]*\))?[^\s()]*)\)"
    r"|(?P<mark>\*\*|__)(?=\S)(?P<bold>.+?)(?<=\S)(?P=mark)"
    r"|~~(?=\S)(?P<strike>.+?)(?<=\S)~~"
    r"|(?<![\w*])\*(?![\s*])(?P<star>[^*\n]+?)(?<!\s)\*(?![\w*])"
    r"|(?<![\w_])_(?![\s_])(?P<under>[^_\n]+?)(?<!\s)_(?![\w_])")
FENCE_LINE = re.compile(r"^```")
Style = tuple[int, int, str]  # start and length in UTF-16 code units, the style's name


def split(markdown: str, limit: int = LIMIT) -> list[Chunk]:
    """The messages `markdown` becomes, none empty: each chunk's body the Markdown `styled` reads, its plain the
    reply's own Markdown for that part."""
    return Packer(limit, Block.signal, _shows, units).pack(parse_blocks(markdown, Block))


class Block(MarkdownBlock):
    def signal(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            return "\n".join(["```", *lines, "```"])
        return "\n".join(_line(line) for line in lines)


def _line(line: str) -> str:
    heading = HEADING.match(line)
    if heading:
        return f"**{plain_links(heading.group(1))}**"
    if RULE.match(line):
        return "──────────"
    bullet = BULLET.match(line)
    if bullet:
        return f"{bullet.group(1)}• {plain_links(bullet.group(2))}"
    return plain_links(line)


def styled(body: str) -> tuple[str, list[str]]:
    """A chunk's body as Signal's text and its `textStyle` list ("start:length:STYLE")."""
    out: list[str] = []
    styles: list[Style] = []
    at = 0
    code = False
    for line in body.split("\n"):
        if FENCE_LINE.match(line):
            code = not code
            continue
        if out:
            out.append("\n")
            at += 1
        text, found = (line, [(0, units(line), "MONOSPACE")] if line else []) if code else _inline(line)
        out.append(text)
        styles += [(at + start, length, name) for start, length, name in found if length]
        at += units(text)
    return "".join(out), [f"{start}:{length}:{name}" for start, length, name in styles]


def _inline(text: str) -> tuple[str, list[Style]]:
    out = ""
    styles: list[Style] = []
    end = 0
    for m in INLINE.finditer(text):
        out += text[end:m.start()]
        end = m.end()
        start = units(out)
        found: list[Style] = []
        if m.group("tick"):
            inner, name = m.group("code").strip(), "MONOSPACE"
        elif m.group("label"):
            label, _ = _inline(m.group("label"))
            out += m.group("url") if label.strip() in (m.group("url"), m.group("url").split(":", 1)[-1].lstrip("/")) \
                else f"{label} ({m.group('url')})"
            continue
        else:
            kind = next(k for k in ("bold", "strike", "star", "under") if m.group(k))
            inner, found = _inline(m.group(kind))
            name = {"bold": "BOLD", "strike": "STRIKETHROUGH"}.get(kind, "ITALIC")
        styles += [(start + s, n, style) for s, n, style in found]
        styles.append((start, units(inner), name))
        out += inner
    return out + text[end:], styles


def _shows(body: str, plain: str) -> bool:
    return bool(styled(body)[0].strip())
