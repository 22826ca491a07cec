"""Markdown to HTML for the web app, on the server: whatever a model, a tool, a skill or a web page wrote becomes
text in the page, never markup.

markdown-it-py (rich's dependency) with raw HTML off, so `<script>` is shown as text; links only to http(s) and
mailto (any other target, `javascript:` among them, stays as the literal text); and no image from outside the
gateway: an image whose source is not a path on the gateway itself becomes a link naming it, so reading a reply
never makes the browser fetch from a server the reply chose.

An http(s) link (or image) to this machine or its network stays text too: a host that is loopback, private,
link-local, unspecified, `localhost`/`*.localhost` or the gateway's own listening host. Cookies ignore ports, so
another service on the gateway's host would receive the sign-in cookie if the person followed such a link."""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML
    from markdown_it.token import Token
    from markdown_it.utils import EnvType, OptionsDict

LINK_SCHEMES = ("http://", "https://", "mailto:")
OWN_HOSTS: set[str] = set()  # the hosts the gateway listens on (`listen_on` adds them)


def listen_on(host: str) -> None:
    """The gateway listens on `host`: a link to it stays text (another port of it would get the cookie)."""
    if host.strip():
        OWN_HOSTS.add(_bare(host))


def _bare(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def local_host(host: str) -> bool:
    """True for a host on this machine or its network, decided from the name alone (no DNS): loopback, private,
    link-local or unspecified addresses, `localhost` and `*.localhost`, and the gateway's own listening host."""
    from urllib.parse import unquote

    name = _bare(unquote(host))
    if not name or name == "localhost" or name.endswith(".localhost") or name in OWN_HOSTS:
        return True
    try:
        ip = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        try:  # forms a browser reads as an IPv4 address: 2130706433, 0x7f.1, 127.1
            import socket

            ip = ipaddress.ip_address(socket.inet_aton(name))
        except (OSError, ValueError):
            return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_unspecified or str(ip) in OWN_HOSTS


def allowed_link(url: str) -> bool:
    """Only http(s) and mailto targets become links, and an http(s) one only to a host off this machine and its
    network (`local_host`)."""
    target = url.strip()
    lowered = target.lower()
    if not lowered.startswith(LINK_SCHEMES):
        return False
    if lowered.startswith("mailto:"):
        return True
    from urllib.parse import urlsplit

    try:
        host = urlsplit(target.replace("\\", "/")).hostname
    except ValueError:
        return False
    return host is not None and not local_host(host)


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
