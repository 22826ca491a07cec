"""Markdown as the model writes it, turned into WhatsApp messages (its own text markup) under a message's limit.

WhatsApp shows `*bold*`, `_italic_`, `~strikethrough~`, `` `code` ``, ```` ``` ```` blocks, `- ` lists and `> `
quotes, and links bare URLs itself; it has no headings, tables nor link labels. A chunk's body is therefore a small
Markdown (links as `[label](url)`), which `to_whatsapp` turns into the text the link sends: headings become bold
lines, `**bold**` `*bold*`, `*italic*` `_italic_`, `~~strike~~` `~strike~`, a fenced block loses its language, and a
link becomes its label followed by its address (the address alone when the label is it). Only http(s) and mailto
targets stay links (`markdown.linkable`); any other becomes its label and the target as text, and an address of this
machine or its network (`linkhost.reaches_here`) is set in monospace, which WhatsApp does not link. A reply is split
at paragraphs, then lines, a longer line cut inside; a code block split in two is closed and reopened.
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
)
from nanoagent.channels.markdown import Block as MarkdownBlock

LIMIT = 4096  # characters of a text message's body
INLINE = re.compile(
    r"(?P<tick>`+)(?P<code>.+?)(?P=tick)"
    r"|\[(?P<label>[^\]\n]+)\]\((?P<url>[^\s()]+(?:\([^\s()]*\))?[^\s()]*)\)"
    r"|(?P<mark>\*\*|__)(?=\S)(?P<bold>.+?)(?<=\S)(?P=mark)"
    r"|~~(?=\S)(?P<strike>.+?)(?<=\S)~~"
    r"|(?<![\w*])\*(?![\s*])(?P<star>[^*\n]+?)(?<!\s)\*(?![\w*])"
    r"|(?<![\w_])_(?![\s_])(?P<under>[^_\n]+?)(?<!\s)_(?![\w_])")


def split(markdown: str, limit: int = LIMIT) -> list[Chunk]:
    """The messages `markdown` becomes, none empty: each chunk's body the Markdown `to_whatsapp` reads, its plain
    the reply's own Markdown for that part."""
    return Packer(limit, Block.whatsapp, _shows).pack(parse_blocks(markdown, Block))


class Block(MarkdownBlock):
    def whatsapp(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            return "\n".join(["```", *lines, "```"])
        return "\n".join(_line(line) for line in lines)


def _line(line: str) -> str:
    if heading := HEADING.match(line):
        return f"**{plain_links(heading.group(1))}**"
    if RULE.match(line):
        return "──────────"
    bullet = BULLET.match(line)
    return f"{bullet.group(1)}- {plain_links(bullet.group(2))}" if bullet else plain_links(line)


def to_whatsapp(body: str) -> str:
    """A chunk's body as the text WhatsApp shows with its markup."""
    out: list[str] = []
    code = False
    for line in body.split("\n"):
        if line.startswith("```"):
            code = not code
            out.append("```")
        else:
            out.append(line if code else _inline(line))
    return "\n".join(out)


def _inline(text: str) -> str:
    out = ""
    end = 0
    for m in INLINE.finditer(text):
        out += text[end:m.start()]
        end = m.end()
        if m.group("tick"):
            out += f"`{m.group('code').strip()}`"
        elif m.group("label"):
            label, url = _inline(m.group("label")), m.group("url")
            out += url if label.strip() in (url, url.split(":", 1)[-1].lstrip("/")) else f"{label} ({url})"
        else:
            kind = next(k for k in ("bold", "strike", "star", "under") if m.group(k))
            mark = {"bold": "*", "strike": "~"}.get(kind, "_")
            out += f"{mark}{_inline(m.group(kind))}{mark}"
    return out + text[end:]


def _shows(body: str, plain: str) -> bool:
    return bool(to_whatsapp(body).replace("```", "").strip())
