"""The server side of HTTP/1.1, small and strict, for the gateway's OpenAI-compatible endpoint.

Requests: a request line and headers of at most MAX_HEAD bytes (CRLF line ends, no folded headers), a body
framed by Content-Length only (at most MAX_BODY bytes; a request with Transfer-Encoding is refused, so the
two framings can never disagree). Responses: Content-Length, or chunked for server-sent events. Connections
stay open between requests (HTTP/1.1) until the client closes them or goes quiet for IDLE_TIMEOUT (or the
caller's deadline); a client that sends its head or body too slowly is answered 408 and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

MAX_HEAD = 16 * 1024  # request line and headers together
MAX_BODY = 10 * 1024 * 1024
IDLE_TIMEOUT = 60.0  # seconds a kept-alive connection may wait for its next request
HEAD_TIMEOUT = 10.0  # seconds from a request's first byte to the end of its headers
BODY_TIMEOUT = 30.0  # seconds for the body
WRITE_TIMEOUT = 30.0  # seconds a client may take to read what was written (a stalled reader is dropped)
LINGER = 2.0  # seconds a closing connection waits for the client to close its side

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token: methods and header names
_LENGTH = re.compile(r"[0-9]{1,12}")


class HttpError(Exception):
    """A request answered with an error status; `close` when the connection cannot be trusted afterwards."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None,
                 close: bool = False, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.close = close
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The OpenAI-shaped error object."""
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.code}}


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]  # lower-case names; a repeated header's values joined with ", "
    body: bytes = b""
    spoiled: bool = False  # the connection cannot carry another request (the client sent more than expected)
    path: str = field(init=False)
    query: list[tuple[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.target)
        self.path = parts.path
        self.query = parse_qsl(parts.query, keep_blank_values=True)

    @property
    def keep_alive(self) -> bool:
        if self.spoiled:
            return False
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens

    @property
    def length(self) -> int:
        return int(self.headers.get("content-length", "0"))

    @property
    def expects_continue(self) -> bool:
        return self.headers.get("expect", "").lower() == "100-continue"

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as e:
            raise HttpError(400, f"The body is not valid JSON ({e}); send a JSON object.") from None
        except RecursionError:
            raise HttpError(400, "The body's JSON is nested too deeply.") from None


async def read_head(reader: asyncio.StreamReader, deadline: float | None = None) -> Request | None:
    """The next request's line and headers (its body is read by `read_body`); None when the client closed the
    connection or sent nothing for IDLE_TIMEOUT. A `deadline` (event-loop time) cuts both waits short: the head
    must be whole by then. The reader's limit must be MAX_HEAD."""
    now = asyncio.get_running_loop().time()
    try:
        async with asyncio.timeout_at(now + IDLE_TIMEOUT if deadline is None else deadline):
            first = await reader.read(1)
    except (TimeoutError, ConnectionError):
        return None
    if not first:
        return None
    too_long = HttpError(431, f"The request line and headers are longer than {MAX_HEAD} bytes.", close=True)
    head_by = asyncio.get_running_loop().time() + HEAD_TIMEOUT
    try:
        async with asyncio.timeout_at(head_by if deadline is None else min(head_by, deadline)):
            head = first + await reader.readuntil(b"\r\n\r\n")
    except TimeoutError:
        raise HttpError(408, f"The request's headers took longer than {HEAD_TIMEOUT:g} s.", close=True) from None
    except (asyncio.LimitOverrunError, ValueError):  # ValueError: the buffer outgrew the limit while waiting
        raise too_long from None
    except (asyncio.IncompleteReadError, ConnectionError):
        return None  # the client went away mid-request
    if len(head) > MAX_HEAD:
        raise too_long
    return parse_head(head)


def parse_head(head: bytes) -> Request:
    lines = head[:-4].decode("latin-1").split("\r\n")
    if any("\n" in line or "\0" in line for line in lines):
        raise HttpError(400, "Malformed request: a bare LF or a NUL byte in the head.", close=True)
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1].startswith("/"):
        raise HttpError(400, "Malformed request line; expected `METHOD /path HTTP/1.1`.", close=True)
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"{version[:20]} is not supported; use HTTP/1.1.", close=True)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name) or "\r" in value:
            raise HttpError(400, "Malformed header line (folded headers are not accepted).", close=True)
        name, value = name.lower(), value.strip(" \t")
        if name in headers and name in ("content-length", "host", "authorization"):
            raise HttpError(400, f"The {name} header is repeated; send it once.", close=True)
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if "transfer-encoding" in headers:
        raise HttpError(501, "Request bodies with Transfer-Encoding are not supported; send Content-Length.",
                        close=True)
    if not _LENGTH.fullmatch(headers.get("content-length", "0")):
        raise HttpError(400, "Content-Length must be a number of bytes.", close=True)
    request = Request(method, target, version, headers)
    if request.length > MAX_BODY:
        raise HttpError(413, f"The body is larger than {MAX_BODY // (1024 * 1024)} MB.", close=True)
    return request


async def read_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: Request) -> bool:
    """Read the request's body into it; False when the client went away first."""
    if request.length == 0:
        return True
    if request.expects_continue:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        async with asyncio.timeout(BODY_TIMEOUT):
            request.body = await reader.readexactly(request.length)
    except TimeoutError:
        raise HttpError(408, f"The body took longer than {BODY_TIMEOUT:g} s to arrive.", close=True) from None
    except asyncio.IncompleteReadError:
        return False
    return True


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def response(status: int, data: Any, *, close: bool = False, headers: dict[str, str] | None = None) -> bytes:
    """A complete JSON response."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return _head(status, {"Content-Type": "application/json", "Content-Length": str(len(body)),
                          "Cache-Control": "no-store", "Connection": "close" if close else "keep-alive",
                          **(headers or {})}) + body


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write and wait until the client took it (ConnectionError when it is gone or stalls)."""
    writer.write(data)
    await drain(writer)


async def drain(writer: asyncio.StreamWriter) -> None:
    try:
        async with asyncio.timeout(WRITE_TIMEOUT):
            await writer.drain()
    except TimeoutError:
        raise ConnectionError("the client stopped reading") from None


class EventStream:
    """A `text/event-stream` response: chunked for HTTP/1.1, ended by closing the connection for HTTP/1.0.
    Writes after the client went away are dropped; `gone` says so."""

    def __init__(self, writer: asyncio.StreamWriter, request: Request):
        self.writer = writer
        self.chunked = request.version == "HTTP/1.1"
        self.gone = False

    def start(self, headers: dict[str, str] | None = None) -> None:
        framing = {"Transfer-Encoding": "chunked", "Connection": "keep-alive"} if self.chunked else {
            "Connection": "close"}
        self.writer.write(_head(200, {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-store",
                                      "X-Accel-Buffering": "no", **framing, **(headers or {})}))

    def data(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        self._chunk(f"data: {text}\n\n".encode())

    def comment(self, text: str) -> None:
        """A line every event-stream reader ignores: tool activity and keep-alives."""
        self._chunk(f": {' '.join(text.splitlines())}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        if self.gone or self.writer.is_closing():
            self.gone = True
            return
        self.writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if self.chunked else data)

    def end(self) -> None:
        if self.chunked and not self.gone and not self.writer.is_closing():
            self.writer.write(b"0\r\n\r\n")

    async def flush(self) -> None:
        if self.gone:
            return
        try:
            await drain(self.writer)
        except ConnectionError:
            self.gone = True


async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close the connection without losing the last response: send EOF, then read and drop what the client
    still sends (an unread body) until it closes too, for at most LINGER seconds. Closing a socket with unread
    input would send a reset, which can destroy the response before the client reads it."""
    with contextlib.suppress(ConnectionError, TimeoutError, OSError):
        async with asyncio.timeout(LINGER):
            if writer.can_write_eof():
                writer.write_eof()
            await writer.drain()
            while await reader.read(65536):
                pass
    writer.close()

