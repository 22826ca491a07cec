"""Markdown as the model writes it, turned into Discord messages.

Discord renders most Markdown itself (bold, italics, strikethrough, code spans and fenced blocks with a language,
quotes, lists, masked links, `#`-`###` headings), so text passes as written. What it does not render is changed:
a table becomes a code block with its columns aligned, and a `####` heading or deeper (shown by Discord as the
hashes) becomes a bold line. A reply is split under the limit at paragraph boundaries, then at line boundaries,
and only a line longer than a whole message is cut inside it; a code block split across messages is closed at the
end of one and reopened, with its language, at the start of the next.

A masked link whose target is not http(s) or mailto (`markdown.linkable`) becomes its label and the target in a code
span, which Discord shows as text. Lengths are counted in UTF-16 code units, which is never less than Discord's count, so a piece never goes over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nanoagent.channels.base import Chunk
from nanoagent.channels.markdown import ANY_LINK, CODE_SPAN, Holes, linkable, units
from nanoagent.linkhost import reaches_here

LIMIT = 2000  # characters in one Discord message
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)")
DEEP_HEADING = re.compile(r"^\s{0,3}#{4,6}\s+(.*?)\s*#*\s*$")
MASKED_LINK = re.compile(r"\[([^\]\n]+)\]\(<?([^\s()<>]+(?:\([^\s()]*\))?[^\s()<>]*)>?\)")
BARE_URL = re.compile(r"<?([a-zA-Z][\w+.-]*://[^\s<>]+)>?")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)+\|?\s*$")


@dataclass
class Block:
    """A paragraph, list or quote (lines of text), or a code block (its lines without the fences)."""

    lines: list[str]
    code: bool = False
    lang: str = ""

    def text(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            return "\n".join([f"```{self.lang}", *lines, "```"])
        return "\n".join(map(links_here_as_code, lines))


def links_here_as_code(line: str) -> str:
    """A link to this machine or its network (`linkhost.reaches_here`) as text: a masked link as its label and its
    address in code, a bare address in code (Discord links any URL in text); code spans are left alone."""
    held = Holes()
    line = CODE_SPAN.sub(lambda m: held.hold(m.group(0)), line.replace("\x00", ""))
    line = MASKED_LINK.sub(lambda m: f"{m.group(1)} {held.hold(_code(m.group(2)))}" if reaches_here(m.group(2))
                           else held.hold(m.group(0)), line)
    line = BARE_URL.sub(lambda m: held.hold(_code(m.group(1))) if reaches_here(m.group(1)) else m.group(0), line)
    return held.fill(line)


def _code(url: str) -> str:
    return "`" + url.replace("`", "%60") + "`"


def to_discord(markdown: str) -> str:
    """The whole reply in Discord's Markdown, unsplit."""
    return "\n\n".join(block.text() for block in blocks(markdown))


def split(markdown: str, limit: int = LIMIT) -> list[Chunk]:
    """The messages `markdown` becomes, each at most `limit` long; none empty. Discord refuses no markup, so a chunk's
    plain text is its body."""
    pieces: list[str] = []
    for block in blocks(markdown):
        for part in _parts(block, limit):
            if pieces and units(pieces[-1]) + 2 + units(part) <= limit:
                pieces[-1] += "\n\n" + part
            else:
                pieces.append(part)
    return [Chunk(piece, piece) for piece in pieces if piece.strip()]


def blocks(markdown: str) -> list[Block]:
    found: list[Block] = []
    lines = markdown.replace("\r\n", "\n").split("\n")
    text: list[str] = []

    def flush() -> None:
        if any(line.strip() for line in text):
            found.extend(_text_blocks(text))
        text.clear()

    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            if lines[i].strip():
                text.append(lines[i])
            else:
                flush()
            i += 1
            continue
        flush()
        mark, body = fence.group(1), []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(mark[0] * len(mark))
                                      and not lines[i].strip().strip(mark[0])):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence (or the end: an unclosed block is closed)
        found.append(Block(body, code=True, lang=fence.group(2)))
    flush()
    return found


def _text_blocks(lines: list[str]) -> list[Block]:
    """A run of non-blank lines: text, with any table in it made a code block."""
    found: list[Block] = []
    text: list[str] = []
    i = 0
    while i < len(lines):
        if "|" in lines[i] and i + 1 < len(lines) and TABLE_RULE.match(lines[i + 1]):
            if text:
                found.append(Block(text))
                text = []
            rows = [lines[i]]
            i += 2
            while i < len(lines) and "|" in lines[i]:
                rows.append(lines[i])
                i += 1
            found.append(Block(_table(rows), code=True))
            continue
        heading = DEEP_HEADING.match(lines[i])
        line = _links_only_to_the_web(lines[i])
        text.append(f"**{heading.group(1)}**" if heading else line)
        i += 1
    if text:
        found.append(Block(text))
    return found


def _links_only_to_the_web(line: str) -> str:
    """Masked links to anything but http(s) or mailto as text; code spans left as they are."""
    def unlinked(m: re.Match[str]) -> str:
        return m.group(0) if linkable(m.group(2)) else f"{m.group(1)} (`{m.group(2).replace('`', '')}`)"

    if "](" not in line:
        return line
    out, end = [], 0
    for span in CODE_SPAN.finditer(line):
        out += [ANY_LINK.sub(unlinked, line[end:span.start()]), span.group(0)]
        end = span.end()
    return "".join([*out, ANY_LINK.sub(unlinked, line[end:])])


def _table(rows: list[str]) -> list[str]:
    """A Markdown table's rows as aligned columns, a rule under the header."""
    cells = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    columns = max(len(row) for row in cells)
    cells = [row + [""] * (columns - len(row)) for row in cells]
    widths = [max(len(row[c]) for row in cells) for c in range(columns)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return [lines[0], "  ".join("-" * width for width in widths), *lines[1:]]


def _parts(block: Block, limit: int) -> list[str]:
    """The block as pieces each at most `limit` long: whole when it fits, else by lines (a code block closed and
    reopened in each piece), a line too long for a piece cut inside."""
    whole = block.text()
    if units(whole) <= limit:
        return [whole]
    budget = limit - (units(block.text([])) + 1 if block.code else 0)
    parts: list[str] = []
    group: list[str] = []
    size = 0
    for line in (piece for whole_line in block.lines for piece in _cut(whole_line, budget)):
        if group and size + 1 + units(line) > budget:
            parts.append(block.text(group))
            group, size = [], 0
        size += units(line) + (1 if group else 0)
        group.append(line)
    if group:
        parts.append(block.text(group))
    return parts


def _cut(line: str, budget: int) -> list[str]:
    """A line as pieces of at most `budget` units, cut at a space where one is in the second half of a piece."""
    pieces = []
    while units(line) > budget:
        end = budget
        while units(line[:end]) > budget:
            end -= 1
        space = line.rfind(" ", end // 2, end)
        end = space + 1 if space > 0 else end
        pieces.append(line[:end])
        line = line[end:]
    return [*pieces, line]
