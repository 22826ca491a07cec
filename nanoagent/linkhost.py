"""Where a link leads, read the way a browser reads it: whether following it would reach this machine or its network.

A reply's link to this machine must stay text wherever it is shown (the web app, every channel's markup): cookies
ignore ports, so a program on another port of the gateway's host would receive the web app's session cookie, and a
link into the network lets a reply make the person's browser call a local service.

The host is decided as a browser decides it (WHATWG URL parsing): tabs and newlines dropped, any run of slashes or
backslashes after a special scheme's colon, the host after the authority's last `@`, percent-decoded as UTF-8,
mapped as IDNA (UTS-46) maps it (NFKC and case folding, the ideographic, fullwidth and halfwidth full stops as dots,
invisible characters dropped; an `xn--` label decoded and mapped the same way), then read as an address when it ends in a number (`127.1`, `0x7f000001`,
`１２７．０．０．１`). A host the browser would refuse (bad percent-encoding, a forbidden character, a malformed
number) counts as reaching here: whatever cannot be decided stays text. No DNS: a public name that resolves to a
private address is not caught (the browser's own private-network checks are the guard there).
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

SPECIAL_SCHEMES = frozenset({"http", "https", "ws", "wss", "ftp"})  # the browser finds their host without `//`
LOCAL_NAMES = frozenset({"localhost", "localhost6", "localhost.localdomain", "localhost6.localdomain6",
                         "ip6-localhost", "ip6-loopback"})
OWN_HOSTS: set[str] = set()  # names and addresses the gateway is reached at (`listen_on` adds them)
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*):(.*)", re.S)
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})  # UTS-46 maps these full stops to `.`
_FORBIDDEN = re.compile(r"[\x00-\x20\x7f#%/:<>?@\[\\\]^|]")  # a host holding one is refused by the browser
_INVISIBLE = ("Cf", "Mn", "Me")  # dropped (UTS-46 ignores most; dropping the rest only keeps more links as text)
_NUMBER = re.compile(r"(0[xX][0-9a-fA-F]*|[0-9]+)")


def listen_on(host: str) -> None:
    """The gateway is reached at `host` (a name or address, a port allowed: its listening host, an allowed Host, the
    host a browser signed in at): a link to it on any port stays text, since the cookie would go along."""
    host = host.strip()
    try:
        name = browser_host(f"http://[{host}]/" if host.count(":") > 1 and "[" not in host else f"http://{host}/")
        ip = _address(name.rstrip(".")) if name else None
    except ValueError:
        return
    if name:
        OWN_HOSTS.add(str(ip) if ip is not None else name.rstrip("."))


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches: 127.0.0.0/8, ::1 (with or without brackets), localhost."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def reaches_here(url: str) -> bool:
    """True when a browser following `url` would reach this machine or its network (see the module's doc), or when
    it is not clear where it would go; False for a public host and for a URL without one (`mailto:`, `tg:`)."""
    try:
        host = browser_host(url)
        return host is not None and local_host(host)
    except ValueError:
        return True


def browser_host(url: str) -> str | None:
    """The host of `url` as a browser reads it (`canonical_host`), "" for a `file:` URL (this machine), None when
    the URL names no host (`mailto:`, a path); ValueError when the browser would refuse it."""
    text = re.sub(r"[\t\n\r]", "", url).strip("".join(map(chr, range(0x21))))
    match = _SCHEME.match(text)
    if match is None:
        scheme, rest, special = "", text, True  # a relative URL: only `//host/...` leaves the page's own host
        if not re.match(r"[/\\]{2}", rest):
            return None
    else:
        scheme, rest = match.group(1).lower(), match.group(2)
        special = scheme in SPECIAL_SCHEMES
    if scheme == "file":
        return ""
    if special:
        rest = rest.lstrip("/\\")
    elif rest.startswith("//"):
        rest = rest[2:]
    else:
        return None
    authority = re.split(r"[/?#\\]" if special else r"[/?#]", rest, maxsplit=1)[0]
    host = authority.rpartition("@")[2]
    if host.startswith("["):
        inside, closed, after = host[1:].partition("]")
        if not closed or (after and not after.startswith(":")):
            raise ValueError(f"not a host: {host!r}")
        return str(ipaddress.IPv6Address(inside))
    return canonical_host(host.partition(":")[0])


def canonical_host(host: str) -> str:
    """A host name as the browser will use it: percent-decoded, mapped as IDNA maps it, lower case; a label that
    stays outside ASCII becomes `xn--` (punycode: a name, never a number), and an `xn--` label is read as what it
    encodes. ValueError for a host the browser refuses."""
    from urllib.parse import unquote

    if host.startswith("[") and host.endswith("]"):
        return str(ipaddress.IPv6Address(host[1:-1]))
    labels = []
    for label in _mapped(unquote(host, errors="strict")).split("."):
        if label.startswith("xn--"):
            try:
                label = _mapped(label[4:].encode("ascii").decode("punycode"))
            except UnicodeError:
                raise ValueError(f"not a host: {host!r}") from None
        labels += [part if part.isascii() else "xn--" for part in label.split(".")]
    return ".".join(labels)


def _mapped(text: str) -> str:
    """`text` mapped as UTS-46 maps a host (NFKC and case folding, the full stops as dots, invisible characters
    dropped); ValueError when it holds a character no host may hold."""
    mapped = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text.translate(_DOTS)).casefold())
    mapped = mapped.translate(_DOTS)
    if _FORBIDDEN.search(mapped) or "\ufffd" in mapped:
        raise ValueError(f"not a host: {text!r}")
    return "".join(c for c in mapped if c.isascii() or unicodedata.category(c) not in _INVISIBLE)


def local_host(host: str) -> bool:
    """True for a host (as `canonical_host` gives it) on this machine or its network: loopback, private, link-local,
    unspecified or otherwise non-public addresses, `localhost` and `*.localhost`, and the gateway's own hosts.
    ValueError for a number that is no address (the browser refuses the URL)."""
    name = host.strip("[]").rstrip(".")
    if not name or name in LOCAL_NAMES or name.endswith(".localhost") or name in OWN_HOSTS:
        return True
    ip = _address(name)
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif int(ip) >> 32 == 0 and int(ip) > 1:  # IPv4-compatible (::127.0.0.1): read as the IPv4 address
            ip = ipaddress.IPv4Address(int(ip))
    return not ip.is_global or str(ip) in OWN_HOSTS


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host names, read as a browser reads one: IPv6 when it holds a colon, IPv4 when its last label
    is a number (`127.1`, `0x7f.1`, `017700000001`: decimal, hex or octal parts, the last filling what is left)."""
    if ":" in name:
        return ipaddress.IPv6Address(name.split("%", 1)[0])
    parts = name.rstrip(".").split(".")
    if not _NUMBER.fullmatch(parts[-1]):
        return None
    if len(parts) > 4 or not all(_NUMBER.fullmatch(p) for p in parts):
        raise ValueError(f"not an address: {name!r}")
    numbers = [int(p, 16) if p[:2].lower() == "0x" and len(p) > 2 else 0 if p[:2].lower() == "0x"
               else int(p, 8) if len(p) > 1 and p[0] == "0" else int(p) for p in parts]
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(f"not an address: {name!r}")
    value = last + sum(n << (8 * (3 - i)) for i, n in enumerate(head))
    return ipaddress.IPv4Address(value)


__all__ = ["OWN_HOSTS", "browser_host", "canonical_host", "is_loopback", "listen_on", "local_host", "reaches_here"]
