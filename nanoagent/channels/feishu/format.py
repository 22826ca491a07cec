"""Markdown as the model writes it, turned into the Markdown of a Feishu/Lark card.

A reply is an interactive card (schema 2.0) holding one `markdown` element: the card's Markdown renders bold,
italics, strikethrough, code spans and fenced blocks, lists, quotes, headings, tables and links, and a card sent by
the bot can be updated in place (PATCH), which is how a reply streams. Text passes as written, with three changes:
a link whose target is not http(s) or mailto (`markdown.linkable`), or that leads to this machine or its network
(`linkhost.reaches_here`), becomes its label and its target in a code span (cards link bare URLs too, so such a bare
URL goes in code as well); and `<`, outside code, becomes `&#60;`, since the card's Markdown reads tags of its own
(`<at id=all></at>` would notify everyone, `<link url=...>` and `<font>` would be markup the model did not mean).

A reply is split at paragraph boundaries, then at line boundaries, and only a line longer than a whole card is cut
inside; a code block split across cards is closed and reopened with its language. `LIMIT` is 8,000 characters: a
card's request may hold 30 KB, and 8,000 Chinese characters are 24 KB in UTF-8.

Text from Feishu comes the other way through `from_feishu`: a text message's or a post's words, mentions as
`@name` and the bot's own mention removed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from nanoagent.channels.base import Chunk
from nanoagent.channels.markdown import Block as MarkdownBlock
from nanoagent.channels.markdown import Packer, parse_blocks, text_shows, web_links

LIMIT = 8000  # characters in one card's Markdown


class Block(MarkdownBlock):
    def markup(self, lines: list[str] | None = None) -> str:
        lines = self.lines if lines is None else lines
        if self.code:
            return self.plain(lines)
        return "\n".join(map(inline, lines))


def inline(line: str) -> str:
    """One line of text: links only to the web and not to this machine, no tag of the card's; code spans kept."""
    return web_links(line, lambda text: text.replace("<", "&#60;"))


def split_markdown(text: str, limit: int = LIMIT) -> list[Chunk]:
    """The cards `text` becomes: each under `limit`; none empty."""
    return Packer(limit, Block.markup, text_shows).pack(parse_blocks(text, Block))


def card(markdown: str) -> str:
    """A card (schema 2.0, shared so it can be updated) showing `markdown`: a message's `content`."""
    return json.dumps({"schema": "2.0", "config": {"update_multi": True},
                       "body": {"elements": [{"tag": "markdown", "content": markdown}]}}, ensure_ascii=False)


def from_feishu(kind: str, content: dict[str, Any], mentions: list[dict[str, Any]], bot: str) -> str:
    """A `text` or `post` message's words as a person meant them for the bot: each `@_user_N` as `@name`, the bot's
    own mention (by its open id) removed; a post's title first."""
    names = {str(m.get("key")): ("" if _open_id(m) == bot else f"@{m.get('name') or ''}") for m in mentions}
    if kind == "post":
        lines = [str(content.get("title") or "")]
        for paragraph in content.get("content") or []:
            lines.append("".join(_element(e, names) for e in paragraph if isinstance(e, dict)))
        text = "\n".join(line for line in lines if line.strip())
    else:
        text = str(content.get("text") or "")
    for key, name in names.items():
        text = text.replace(key, name)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _element(element: dict[str, Any], names: dict[str, str]) -> str:
    tag = element.get("tag")
    if tag in ("text", "md"):
        return str(element.get("text") or "")
    if tag == "a":
        return f"[{element.get('text') or ''}]({element.get('href') or ''})"
    if tag == "at":
        return names.get(str(element.get("user_id")), f"@{element.get('user_name') or ''}")
    if tag == "code_block":
        return f"\n```{element.get('language') or ''}\n{element.get('text') or ''}\n```\n"
    return ""


def _open_id(mention: dict[str, Any]) -> str:
    found = mention.get("id")
    return str(found.get("open_id") or "") if isinstance(found, dict) else str(found or "")
