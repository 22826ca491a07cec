"""The local test HTTP server, for the web tool's and the browser tool's tests and the bench: routes are functions of
the request handler (`reply`, `redirect`, or the browser tests' `page`).

    with WebServer({"/page": reply(b"<p>hi</p>", "text/html")}) as server:
        fetch(server.url + "/page")

Every request is recorded (method, path, headers, body). With `tls` (a server-side SSLContext) it
speaks HTTPS and records the SNI name each handshake asked for; `host` another loopback address (127.0.0.2).
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

Route = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class WebServer:
    def __init__(self, routes: dict[str, Route], tls: ssl.SSLContext | None = None, host: str = "127.0.0.1"):
        self.routes = routes
        self.requests: list[Seen] = []
        self.sni_names: list[str | None] = []
        self.closing = threading.Event()  # set on close: routes that stall wait on it
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests.append(Seen(self.command, self.path, dict(self.headers.items()), body))
                route = server.routes.get(urlsplit(self.path).path)
                if route is None:
                    reply(b"not found", "text/plain", status=404)(self)
                    return
                try:
                    route(self)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    pass  # the client stopped reading, as the caps make it do

            do_GET = do_POST = handle_one

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: self.sni_names.append(name)
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def paths(self) -> list[str]:
        """The path (with its query) of every request so far, in order."""
        return [seen.path for seen in self.requests]

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> WebServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reply(body: bytes | str, content_type: str = "text/html; charset=utf-8", status: int = 200,
          headers: dict[str, str] | None = None) -> Route:
    data = body.encode() if isinstance(body, str) else body

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        if content_type:
            handler.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return route


def redirect(location: str, status: int = 302) -> Route:
    return reply(b"", "", status=status, headers={"Location": location})


def html_page(size: int) -> str:
    """A plausible article of about `size` characters: headings, paragraphs, links, lists, tables, code."""
    import random

    pick = random.Random(size).choice  # the same page every run, but text that does not repeat
    words = ("the agent reads a page over the network and keeps what matters for the task at hand while "
             "servers send headers bodies redirects markdown tables lists code quotes images links").split()
    parts = ["<!doctype html><html><head><title>A long page</title><style>p{color:red}</style>"
             "<script>var tracking = 1;</script></head><body><nav><a href='/'>Home</a> <a href='/about'>About</a>"
             "</nav><main><article><h1>A long page</h1>"]
    length = sum(map(len, parts))
    section = 0
    while length < size:
        section += 1
        text = " ".join(pick(words) for _ in range(80))
        part = (f"<h2>Section {section}</h2><p>{text} <a href='https://example.com/{section}'>link {section}</a> "
                f"<b>bold</b> <i>italic</i></p><ul><li>first {section}</li><li>second</li></ul>")
        if section % 20 == 0:
            part += ("<table><tr><th>name</th><th>value</th></tr><tr><td>a</td><td>1</td></tr></table>"
                     "<pre><code>print('hello')</code></pre>")
        parts.append(part)
        length += len(part)
    parts.append("</article></main><footer>footer</footer></body></html>")
    return "".join(parts)
