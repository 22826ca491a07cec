"""Markdown as the model writes it, turned into Mattermost posts.

Mattermost renders Markdown itself (bold, italics, strikethrough, code spans and fenced blocks with a language,
quotes, lists, tables, headings, links), so text passes as written, with three changes: a link whose target is not
http(s) or mailto (`markdown.linkable`) becomes its label and its target in a code span; a link to this machine or
its network (`linkhost.reaches_here`) becomes text the same way (Mattermost links bare URLs too, so those go in code);
and `@channel`, `@all` and `@here` get a word joiner after the `@`, so a reply never notifies a whole channel.

A reply is split at paragraph boundaries, then at line boundaries, and only a line longer than a whole post is cut
inside; a code block split across posts is closed at the end of one and reopened, with its language, at the start of
the next. `LIMIT` is 16,383 characters: the server's maximum post size since Mattermost 5.0.

Text from Mattermost comes the other way through `from_mattermost`: the bot's own mention removed.
"""

from __future__ import annotations

import re

from nanoagent.channels.base import Chunk
from nanoagent.channels.markdown import Block as MarkdownBlock
from nanoagent.channels.markdown import Packer, parse_blocks, text_shows, web_links

LIMIT = 16383  # characters in one post
EVERYONE = re.compile(r"@(channel|all|here)\b", re.I)
JOINER = "\u2060"


class Block(MarkdownBlock):
    def markup(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            return self.plain(lines)
        return "\n".join(map(inline, lines))


def inline(line: str) -> str:
    """One line of text: links only to the web and not to this machine, no channel-wide mention; code spans kept."""
    return web_links(line, lambda text: EVERYONE.sub(lambda m: f"@{JOINER}{m.group(1)}", text))


def split_markdown(text: str, limit: int = LIMIT) -> list[Chunk]:
    """The posts `text` becomes: each under `limit`; none empty."""
    return Packer(limit, Block.markup, text_shows).pack(parse_blocks(text, Block))


def from_mattermost(text: str, bot_name: str = "") -> str:
    """A post's text as a person meant it for the bot: its mention of the bot (`@name`) removed."""
    if bot_name:
        text = re.sub(rf"[ \t]?(?<![\w.-])@{re.escape(bot_name)}(?![\w.-])", "", text, flags=re.I)
    return text.strip()
