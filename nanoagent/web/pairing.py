"""Pairing a phone: the addresses another device can reach the web app at, and the one-time link as a QR code.

The listener reaches beyond this machine when its host is not loopback: a named host or address is used as it is,
a wildcard (`0.0.0.0`, `::`) by this machine's LAN address (the source address of its default route; no packet is
sent). `gateway.http.allowedHosts` names come after it: with the listener beyond loopback as `http://NAME:PORT`
(a name the LAN gives this machine), with it on loopback as `https://NAME` (only a reverse proxy on this machine can
bring another device there, and docs/gateway.md has it add TLS). No address at all: loopback only, and `LOOPBACK_ONLY`
says how to change that. The QR code is made by segno (the `web` extra), imported only when one is asked for.
Imported by `nanoagent web`: no aiohttp here.
"""

from __future__ import annotations

import socket

from nanoagent.linkhost import is_loopback

LOOPBACK_ONLY = ("The listener is on loopback only: a phone cannot reach this link. Set gateway.http.host to "
                 "\"0.0.0.0\" (or this machine's LAN address) in config.json and restart the gateway, or put a "
                 "reverse proxy in front and name it in gateway.http.allowedHosts (see docs/gateway.md).")
NO_QR = "QR codes need the segno package: pip install 'nanoagent[web]'"


def lan_address() -> str | None:
    """This machine's address on its network (the default route's source), or None when it has none but loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: a route lookup only, nothing is sent
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def bases(host: str, port: int, allowed: list[str]) -> list[str]:
    """The origins another device may reach the web app at, best first ([] when loopback only)."""
    found: list[str] = []
    if host.strip("[]") in ("", "0.0.0.0", "::"):
        address = lan_address()
        if address:
            found.append(f"http://{address}:{port}")
    elif not is_loopback(host):
        found.append(f"http://{_shown(host)}:{port}")
    beyond = bool(found) or not is_loopback(host)
    for name in allowed:
        name = name.strip().rstrip(".")
        if name and not is_loopback(name):
            found.append(f"http://{_shown(name)}:{port}" if beyond else f"https://{_shown(name)}")
    return list(dict.fromkeys(found))


def _shown(host: str) -> str:
    host = host.strip("[]")
    return f"[{host}]" if ":" in host else host


def qr_rows(text: str) -> list[str]:
    """The QR code of `text` as rows of "1" (dark) and "0", without the quiet zone; ImportError without segno."""
    import segno

    rows = segno.make(text, micro=False).matrix_iter(scale=1, border=0)
    return ["".join("1" if cell else "0" for cell in row) for row in rows]


def qr_text(text: str) -> str:
    """The QR code of `text` for a terminal: two rows a line in Unicode half blocks, with its quiet zone; the light
    modules are the drawn ones, for a terminal with a dark background (as `qrencode -t UTF8` draws it)."""
    import io

    import segno

    out = io.StringIO()
    segno.make(text, micro=False).terminal(out, compact=True, border=2)
    return out.getvalue()


__all__ = ["LOOPBACK_ONLY", "NO_QR", "bases", "is_loopback", "lan_address", "qr_rows", "qr_text"]
