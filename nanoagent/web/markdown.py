"""Markdown to HTML for the web app, on the server: whatever a model, a tool, a skill or a web page wrote becomes
text in the page, never markup.

markdown-it-py (rich's dependency) with raw HTML off, so `<script>` is shown as text; links only to http(s) and
mailto (any other target, `javascript:` among them, stays as the literal text); and no image from outside the
gateway: an image whose source is not a path on the gateway itself becomes a link naming it, so reading a reply
never makes the browser fetch from a server the reply chose.

An http(s) link (or image) to this machine or its network stays text too, its host read as the browser will read
it (`nanoagent.linkhost`: percent-decoding, IDNA mapping, numeric addresses): a loopback, private, link-local or
unspecified address, `localhost`/`*.localhost` or a host the gateway is reached at. Cookies ignore ports, so
another service on the gateway's host would receive the sign-in cookie if the person followed such a link."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from nanoagent.linkhost import reaches_here

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML
    from markdown_it.token import Token
    from markdown_it.utils import EnvType, OptionsDict

LINK_SCHEMES = ("http://", "https://", "mailto:")


def allowed_link(url: str) -> bool:
    """Only http(s) and mailto targets become links, and an http(s) one only when a browser following it would not
    reach this machine or its network (`linkhost.reaches_here`, which reads the host as the browser will)."""
    lowered = url.strip().lower()
    return lowered.startswith(LINK_SCHEMES) and (lowered.startswith("mailto:") or not reaches_here(url))


def own_image(src: str) -> bool:
    """An image the gateway itself serves (`/api/media/<name>`): no scheme, no other host, no way out of the folder."""
    return re.fullmatch(r"/api/media/[\w.-]+", src) is not None and ".." not in src


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    md.validateLink = lambda url: allowed_link(url) or own_image(url)  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("image", _image)
    return md


def _link_open(self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    token = tokens[idx]
    if not allowed_link(str(token.attrGet("href") or "")):  # an own path that passed for an image: no link
        token.attrSet("href", "#")
    token.attrSet("rel", "noopener noreferrer nofollow")
    token.attrSet("target", "_blank")
    return self.renderToken(tokens, idx, options, env)


def _image(self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    from markdown_it.common.utils import escapeHtml

    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = self.renderInlineAsText(token.children or [], options, env)
    if own_image(src):
        return f'<img src="{escapeHtml(src)}" alt="{escapeHtml(alt)}" loading="lazy">'
    label = escapeHtml(f"image: {alt or src}")
    if allowed_link(src):  # shown as a link the person may follow, never loaded by the page
        return f'<a href="{escapeHtml(src)}" rel="noopener noreferrer nofollow" target="_blank">{label}</a>'
    return f"<span>{label}</span>"


def render(text: str) -> str:
    """`text` (Markdown written by anyone) as HTML safe to put in the page."""
    return _parser().render(text)


__all__ = ["allowed_link", "own_image", "render"]
