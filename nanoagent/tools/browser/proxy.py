"""The browser's only way out: a small HTTP proxy on 127.0.0.1 that checks every connection as web_fetch does.

Chromium is started with this as its proxy (Playwright's `proxy` option) and `--proxy-bypass-list=<-loopback>`
(without it Chromium connects to localhost itself), so every navigation, redirect, frame, sub-request, service-worker fetch and websocket
arrives here: https and wss as CONNECT host:port, plain http (and ws) as a request with an absolute URL. Each
connection's host is resolved once through netguard's `Guard`, every address checked, and the connection made to
the checked address itself (pinned: a second DNS answer cannot move it). A refused connection gets a 403 whose page
says why, and is remembered (`refusals`) so the tool can tell the model what was refused.

Other processes on the machine reach 127.0.0.1 too: every request must carry this proxy's own credentials (a random
password made per proxy, given to Chromium through Playwright's `proxy` launch option) as `Proxy-Authorization`,
else it gets a 407 and goes nowhere.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import secrets
import time
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

from nanoagent.tools.base import ToolError
from nanoagent.tools.netguard import Guard, Refused

HEAD_LIMIT = 64 * 1024  # a request's head (line and headers) may not be longer
HEAD_TIMEOUT = 30.0  # seconds a client gets to send its request's head
CONNECT_TIMEOUT = 10.0
HOP_HEADERS = ("proxy-connection", "proxy-authorization", "connection", "keep-alive")


@dataclass(frozen=True)
class Refusal:
    at: float  # time.monotonic() when refused
    target: str  # host:port, or the URL for plain http
    host: str
    reason: str


class GuardedProxy:
    """Started with `start()`, stopped with `close()`; `port` is where it listens on 127.0.0.1."""

    def __init__(self, guard: Guard):
        self.guard = guard
        self.port = 0
        self.refusals: deque[Refusal] = deque(maxlen=50)
        self.username = "nanoagent"
        self.password = secrets.token_urlsafe(24)
        self._credential = "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_LIMIT)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    def refused_since(self, since: float) -> list[Refusal]:
        return [r for r in self.refusals if r.at >= since]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, TimeoutError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(HEAD_TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
        line, *header_lines = head.decode("latin-1").split("\r\n")
        method, _, rest = line.partition(" ")
        target, _, version = rest.rpartition(" ")
        if not self._authorized(header_lines):
            await _reply(writer, 407, "nanoagent's browser proxy serves only nanoagent's browser.")
            return
        if method == "CONNECT":
            host, port = _split_host_port(target, 443)
            upstream = await self._open(host, port, target, writer)
            if upstream is None:
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await _pipe(reader, writer, *upstream)
            return
        url = urlsplit(target)
        if url.scheme not in ("http", "ws") or not url.hostname:
            await _reply(writer, 400, f"nanoagent's browser proxy takes absolute http URLs, not {target[:100]!r}.")
            return
        upstream = await self._open(url.hostname, url.port or 80, target, writer)
        if upstream is None:
            return
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        kept = [h for h in header_lines if h and h.split(":", 1)[0].strip().lower() not in HOP_HEADERS]
        upgrade = any(h.lower().startswith("upgrade:") for h in kept)
        connection = "Connection: Upgrade" if upgrade else "Connection: close"
        up_reader, up_writer = upstream
        try:
            # one request per connection: its head and body go to the checked address, and nothing after them (a
            # later request on a kept-alive connection would reach this address unchecked); the browser is told
            # the connection closes, so it sends its next request on a new one, checked again
            up_writer.write("\r\n".join([f"{method} {path} {version}", *kept, connection, "", ""]).encode("latin-1"))
            await _copy_body(reader, up_writer, kept)
            await up_writer.drain()
            response = await up_reader.readuntil(b"\r\n\r\n")  # as long as it takes: the browser's timeout rules
            status_line, *response_headers = response.decode("latin-1").split("\r\n")
            if upgrade and status_line.split(" ")[1:2] == ["101"]:  # a websocket: both ways, to this address only
                writer.write(response)
                await _pipe(reader, writer, up_reader, up_writer)
                return
            kept_response = [h for h in response_headers
                             if h and h.split(":", 1)[0].strip().lower() not in ("connection", "keep-alive")]
            writer.write("\r\n".join([status_line, *kept_response, "Connection: close", "", ""]).encode("latin-1"))
            await _answer_until_either_ends(reader, writer, up_reader)
        finally:
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()

    def _authorized(self, header_lines: list[str]) -> bool:
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "proxy-authorization" and hmac.compare_digest(
                    value.strip().encode("latin-1"), self._credential.encode()):
                return True
        return False

    async def _open(self, host: str, port: int, target: str, writer: asyncio.StreamWriter
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to a checked address of `host`, or None after answering the browser with the refusal."""
        host = host.strip("[]").rstrip(".")
        try:
            addresses = await self.guard.resolve(host, port)
        except Refused as e:
            reason = str(e).replace("web_fetch reaches", "The browser reaches")
            self.refusals.append(Refusal(time.monotonic(), target, host, reason))
            await _reply(writer, 403, reason)
            return None
        except ToolError as e:
            await _reply(writer, 502, str(e))
            return None
        last: Exception | None = None
        for address in addresses:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    return await asyncio.open_connection(address, port)
            except (OSError, TimeoutError) as e:
                last = e
        await _reply(writer, 502, f"Could not connect to {host} ({', '.join(addresses)}): {last}.")
        return None


def _split_host_port(target: str, default: int) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or "]" in port or not port.isdigit():
        return target, default
    return host, int(port)


async def _reply(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    import html

    reason = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"}[status]
    body = f"<!doctype html><title>{reason}</title><p>{html.escape(text)}</p>".encode()
    challenge = 'Proxy-Authenticate: Basic realm="nanoagent browser"\r\n' if status == 407 else ""
    writer.write(f"HTTP/1.1 {status} {reason}\r\n{challenge}Content-Type: text/html; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(OSError):
        await writer.drain()


async def _copy_body(reader: asyncio.StreamReader, sink: asyncio.StreamWriter, headers: list[str]) -> None:
    """Copy a request's body, framed by its Content-Length or chunked, and not a byte more."""
    fields = {h.split(":", 1)[0].strip().lower(): h.split(":", 1)[1].strip() for h in headers if ":" in h}
    if "chunked" in fields.get("transfer-encoding", "").lower():
        while True:
            line = await reader.readuntil(b"\r\n")
            sink.write(line)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                    sink.write(trailer)
                sink.write(b"\r\n")
                return
            sink.write(await reader.readexactly(size + 2))
            await sink.drain()
    left = int(fields.get("content-length", "0") or 0)
    if left < 0:
        raise ValueError("a negative Content-Length")
    while left:
        data = await reader.read(min(left, 65536))
        if not data:
            raise asyncio.IncompleteReadError(b"", left)
        sink.write(data)
        await sink.drain()
        left -= len(data)


async def _answer_until_either_ends(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                    up_reader: asyncio.StreamReader) -> None:
    """Copy the server's answer to the browser until the server closes, or the browser closes or sends anything
    more (a next request on a connection said to close: it is dropped, never forwarded)."""
    async def answer() -> None:
        while data := await up_reader.read(65536):
            writer.write(data)
            await writer.drain()

    tasks = [asyncio.create_task(answer()), asyncio.create_task(reader.read(1))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> None:
    """Copy both ways until either side closes."""
    async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                if sink.can_write_eof():
                    sink.write_eof()

    try:
        tasks = [asyncio.create_task(copy(reader, up_writer)), asyncio.create_task(copy(up_reader, writer))]
        try:
            # the server's side ending ends the exchange (the browser may keep its side open for reuse)
            await tasks[1]
        finally:
            tasks[0].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        up_writer.close()
        with contextlib.suppress(Exception):
            await up_writer.wait_closed()
