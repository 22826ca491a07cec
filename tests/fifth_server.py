"""A stand-in of the fifth channel's API (`tests/channels/fifth/`): `GET /me` answers the bot's name when the
`Authorization` header holds `TOKEN`, and 401 else."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "fifth-secret-token-0123456789"
BOT = "fifthbot"


class _Api(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        ok = self.path == "/me" and self.headers.get("Authorization") == TOKEN
        body = json.dumps({"name": BOT} if ok else {"error": "unauthorized"}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def stand_in() -> Iterator[str]:
    """Fifth's API on a free loopback port; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
