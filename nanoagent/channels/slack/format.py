"""Markdown as the model writes it, turned into Slack messages: mrkdwn, split under a message's length limit.

mrkdwn knows `*bold*`, `_italic_`, `~strike~`, `` `code` ``, fenced code blocks, `<url|text>` links and `>` quotes;
it has no headings and no tables. Headings become bold lines, list items bullet lines, and `&`, `<` and `>` are
escaped everywhere (code included: Slack reads entities there too), so nothing the model writes becomes a mention
or a link it did not mean. A code fence's language is dropped (Slack would show it as the first line).

A reply is split at paragraph boundaries, then at line boundaries, and only a line longer than a whole message is
cut inside; a code block split across messages is closed at the end of one and reopened at the start of the next.
`LIMIT` is 4,000 characters of mrkdwn as sent: Slack's documentation advises at most 4,000 characters of `text` (it
truncates past 40,000), and `chat.update` keeps to the same. Each piece also carries its Markdown source (the
`plain` of a `Chunk`), sent when Slack refuses the formatted text.

Text from Slack comes the other way through `from_slack`: mentions, channel links and links back to plain text.
"""

from __future__ import annotations

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
    text_shows,
)
from nanoagent.channels.markdown import Block as MarkdownBlock
from nanoagent.linkhost import reaches_here

LIMIT = 4000  # characters of mrkdwn in one message (see the module's docstring)
NUMBERED = re.compile(r"^(\s*)(\d{1,9}[.)])\s+(.*)$")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
BARE_URL = re.compile(r"(?:https?)://[^\s<>\"]+")
BOLD_MARK = re.compile(r"\*\*|__")
ITALIC = re.compile(r"(?<![\w*])\*(?![\s*])([^*\n]+?)(?<!\s)\*(?![\w*])|(?<![\w_])_(?![\s_])([^_\n]+?)(?<!\s)_(?![\w_])")
# what Slack puts in a message's text: <@U123>, <#C123|name>, <!here>, <https://x|label>, <mailto:a@b|a@b>
SPECIAL = re.compile(r"<([@#!]?)([^<>|]+)(?:\|([^<>]*))?>")


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def markdown_to_mrkdwn(text: str) -> str:
    return "\n\n".join(block.mrkdwn() for block in parse_blocks(text, Block))


def split_markdown(text: str, limit: int = LIMIT) -> list[Chunk]:
    """The messages `text` becomes: each under `limit` as mrkdwn and as plain text; none empty."""
    return Packer(limit, Block.mrkdwn, text_shows).pack(parse_blocks(text, Block))


def from_slack(text: str, bot_user: str = "") -> str:
    """A message's text as a person meant it: the bot's own mention removed, other mentions as `@U123`, channels as
    `#name`, links as their URL (with the label when it differs), entities decoded."""
    def special(m: re.Match[str]) -> str:
        sigil, target, label = m.group(1), m.group(2), m.group(3)
        if sigil == "@":
            return "" if target == bot_user else f"@{label or target}"
        if sigil == "#":
            return f"#{label or target}"
        if sigil == "!":
            return f"@{label or target.split('^')[0]}"
        url = target.removeprefix("mailto:")
        bare = url.split("://", 1)[-1].rstrip("/")
        return url if not label or label.rstrip("/") in (url, target, bare) else f"{label} ({url})"

    return unescape(SPECIAL.sub(special, text)).strip()


# --- blocks ----------------------------------------------------------------------------------------


class Block(MarkdownBlock):
    def mrkdwn(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            return "```\n" + escape("\n".join(lines)) + "\n```"
        return _text_mrkdwn(lines)


def _text_mrkdwn(lines: list[str]) -> str:
    out = []
    for line in lines:
        quote = QUOTE.match(line)
        out.append("&gt; " + inline_mrkdwn(quote.group(1)) if quote else _line_mrkdwn(line))
    return "\n".join(line for line in out if line is not None)


def _line_mrkdwn(line: str) -> str:
    heading = HEADING.match(line)
    if heading:  # bold already: emphasis inside would close it early
        return "*" + inline_mrkdwn(BOLD_MARK.sub("", heading.group(1))) + "*"
    if RULE.match(line):
        return "──────────"
    if TABLE_RULE.match(line) and "|" in line:
        return ""  # a table's header rule: its rows stay as text, cells between bars
    bullet = BULLET.match(line)
    if bullet:
        return f"{bullet.group(1)}• {inline_mrkdwn(bullet.group(2))}"
    numbered = NUMBERED.match(line)
    if numbered:
        return f"{numbered.group(1)}{numbered.group(2)} {inline_mrkdwn(numbered.group(3))}"
    return inline_mrkdwn(line)


def inline_mrkdwn(text: str) -> str:
    """Code spans, links, bold, italic and strikethrough; everything else escaped. Code and URLs are set aside
    first, so an underscore or asterisk inside them is never taken for emphasis."""
    hole = (holes := Holes()).hold

    def link(m: re.Match[str]) -> str:
        label = escape(m.group(1)).replace("|", "¦")
        if reaches_here(m.group(2)):  # this machine or its network: text, and code so Slack links nothing
            return label + " " + hole(f"`{escape(m.group(2))}`")
        return hole(f"<{escape(m.group(2))}|") + label + hole(">")

    text = CODE_SPAN.sub(lambda m: hole(f"`{escape(m.group(2).strip())}`"), text.replace("\x00", ""))
    text = LINK.sub(link, text)
    text = BARE_URL.sub(lambda m: hole(f"`{escape(m.group(0))}`" if reaches_here(m.group(0)) else escape(m.group(0))),
                        text)
    text = escape(text)
    text = BOLD.sub(lambda m: hole("*") + m.group(2) + hole("*"), text)
    text = STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    text = ITALIC.sub(lambda m: f"_{m.group(1) or m.group(2)}_", text)
    return holes.fill(text)
