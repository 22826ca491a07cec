"""The browser's only way out: a small HTTP proxy on 127.0.0.1 that checks every connection as web_fetch does.

Chromium is started with `--proxy-server` pointing here and `--proxy-bypass-list=<-loopback>` (without it Chromium
connects to localhost itself), so every navigation, redirect, frame, sub-request, service-worker fetch and websocket
arrives here: https and wss as CONNECT host:port, plain http (and ws) as a request with an absolute URL. Each
connection's host is resolved once through netguard's `Guard`, every address checked, and the connection made to
the checked address itself (pinned: a second DNS answer cannot move it). A refused connection gets a 403 whose page
says why, and is remembered (`refusals`) so the tool can tell the model what was refused.
"""

from __future__ import annotations

import asyncio
import contextlib
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
        # one request per connection (a websocket keeps it): what follows on it can only go to this checked address
        connection = "Connection: Upgrade" if upgrade else "Connection: close"
        up_reader, up_writer = upstream
        up_writer.write("\r\n".join([f"{method} {path} {version}", *kept, connection, "", ""]).encode("latin-1"))
        await _pipe(reader, writer, up_reader, up_writer)

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

    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = f"<!doctype html><title>{reason}</title><p>{html.escape(text)}</p>".encode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(OSError):
        await writer.drain()


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
