"""Where web_fetch may connect: public internet addresses, and the networks the user lists in allowPrivate.

A URL's host is resolved once, through the OS resolver (so `0x7f.1` and `2130706433` mean what
the connection would make of them), and every address it resolves to must pass. IPv6 forms that
carry an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo) are judged by the IPv4 address they lead
to. The request then goes to the checked address itself, with the Host header and TLS SNI of the
name, so a second DNS answer (rebinding) can never change where it lands.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nanoagent.tools.base import ToolError

if TYPE_CHECKING:
    import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = ("http", "https")
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT, and tailnets


class Refused(ToolError):
    """The URL or one of its addresses is not one web_fetch may reach."""


def reached(address: IPAddress) -> list[IPAddress]:
    """The addresses a packet to `address` really goes to: the IPv4 address inside a wrapping IPv6 form."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped:
            return [address.ipv4_mapped]
        if address in NAT64:
            return [ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)]
        if address.sixtofour:
            return [address.sixtofour]
        if address.teredo:
            return list(address.teredo)  # the relay server and the client behind it
    return [address]


def kind(address: IPAddress) -> str | None:
    """Why the address is not public (a few words), or None for a globally routable one."""
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in SHARED:
        return "shared (carrier-grade NAT)"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    if not address.is_global:
        return "non-global"
    return None


@dataclass(frozen=True)
class Guard:
    """The address policy: public addresses, plus the networks in `allowed` (tools.web.allowPrivate)."""

    allowed: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_config(cls, allow_private: Iterable[str]) -> Guard:
        return cls(tuple(ipaddress.ip_network(entry, strict=False) for entry in allow_private))

    def _listed(self, address: IPAddress) -> bool:
        return any(address.version == net.version and address in net for net in self.allowed)

    def refusal(self, address: IPAddress) -> str | None:
        """Why `address` may not be reached ("a loopback address"), or None when it may."""
        if self._listed(address):
            return None
        mapped = isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped
        for inner in reached(address):
            # an IPv4-mapped address is the same host; NAT64, 6to4 and Teredo lead to other networks,
            # where the user's own ranges mean nothing, so those must lead to public addresses
            why = None if mapped and self._listed(inner) else kind(inner)
            if why:
                article = "an" if why[0] in "aeiou" else "a"
                described = f"{article} {why} address"
                return described if inner == address else f"an IPv6 form of {inner}, {described}"
        return None

    async def resolve(self, host: str, port: int) -> list[str]:
        """Every address `host` resolves to, all checked; refuses if any one is not allowed."""
        try:
            infos = await asyncio.to_thread(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as e:
            raise ToolError(f"Cannot resolve the host {host!r} ({getattr(e, 'strerror', None) or e}); "
                            "check the URL.") from None
        found = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for text in found:
            address = ipaddress.ip_address(text)
            why = self.refusal(address)
            if why:
                what = f"{host} is {why}" if host == text else f"{host} resolves to {text}, {why}"
                raise Refused(f"Refused: {what}. web_fetch reaches public internet addresses only; a network "
                              "of the user's own (LAN, tailnet) can be allowed with tools.web.allowPrivate "
                              "in config.json.")
        if not found:
            raise ToolError(f"The host {host!r} resolves to no address; check the URL.")
        return found


def parse_url(url: str) -> httpx.URL:
    """The URL as httpx reads it, when it is one web_fetch may ask for; the address check comes later."""
    import httpx

    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as e:
        raise Refused(f"{url!r} is not a valid URL ({e}); give a full http:// or https:// URL.") from None
    if not parsed.scheme:
        raise Refused(f"{url!r} has no scheme; give a full URL such as https://{url.strip()}.")
    if parsed.scheme not in SCHEMES:
        raise Refused(f"Refused the {parsed.scheme}: URL {url!r}: web_fetch reads http:// and https:// URLs only.")
    if not parsed.host:
        raise Refused(f"{url!r} names no host; give a full http:// or https:// URL.")
    if parsed.userinfo:
        raise Refused(f"{url!r} carries a user name or password; web_fetch does not send credentials. "
                      "Give the URL without them.")
    return parsed


def host_of(url: httpx.URL) -> str:
    """The host as the resolver and TLS see it: IDNA-encoded, without brackets or a trailing dot."""
    return url.raw_host.decode("ascii").rstrip(".")


async def send_pinned(client: httpx.AsyncClient, url: httpx.URL, addresses: list[str],
                      headers: dict[str, str]) -> httpx.Response:
    """GET `url` from the first checked address that accepts a connection, keeping its Host and SNI."""
    import httpx

    host = host_of(url)
    extensions = {}
    if url.scheme == "https" and not _is_literal(host):
        extensions["sni_hostname"] = host  # the certificate is checked against the name, not the address
    last: Exception | None = None
    for address in addresses:
        request = client.build_request("GET", url.copy_with(host=address), extensions=extensions,
                                       headers={**headers, "Host": url.netloc.decode("ascii")})
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as e:
            last = e
    raise ToolError(f"Could not connect to {host} ({', '.join(addresses)}): {last}. "
                    "Check the URL, or try again later.")


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
