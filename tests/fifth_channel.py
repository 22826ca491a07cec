"""A fifth channel, as small as the contract allows, and a stand-in of its API: what a new chat app brings to
nanoagent (a module with `CHANNEL`, its settings under `channels.fifth`, a registry line). `register` makes it one of
the registered channels for a test, the way a folder under `channels/` and a line in `registry.REGISTRY` would, and
its settings class joins `channels` in config.json's shape the way a field in `config/schema.py` would.

The stand-in answers `GET /me` with the bot's name when the `Authorization` header holds `TOKEN`, and 401 else."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from nanoagent.channels import registry
from nanoagent.channels.base import Chunk, DeliveryError, Question
from nanoagent.config import schema
from nanoagent.errors import NanoagentError

TOKEN = "fifth-secret-token-0123456789"
BOT = "fifthbot"


@dataclass
class FifthConfig:
    enabled: bool = False
    token: str | None = None
    allow_from: list[str] = field(default_factory=list)
    owner: list[str] = field(default_factory=list)
    api_base: str = "https://fifth.invalid"


class Fifth:
    name = "fifth"
    title = "Fifth"
    hint = "Fifth shows plain text only."
    limit = 1000
    edits = False
    pairing = True

    def settings(self, config: Any) -> FifthConfig:
        return getattr(config.channels, "fifth", None) or FifthConfig()

    def problem(self, settings: FifthConfig) -> str | None:
        return None if settings.token else "no token: set channels.fifth.token (`nanoagent channels add fifth`)"

    def allowed(self, settings: FifthConfig, user: str) -> bool:
        return user in settings.allow_from

    def home(self, user: str) -> None:
        return None

    def split(self, markdown: str) -> list[Chunk]:
        return [Chunk(markdown[i:i + self.limit], markdown[i:i + self.limit])
                for i in range(0, len(markdown), self.limit)]

    def link(self, settings: FifthConfig, paths: Any, timing: Any) -> Any:
        raise NotImplementedError("the command line never connects")

    async def verify(self, settings: FifthConfig) -> str:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(f"{settings.api_base}/me", headers={"Authorization": settings.token or ""})
        try:
            with await asyncio.to_thread(urllib.request.urlopen, request, timeout=10) as answer:
                return "@" + json.load(answer)["name"]
        except urllib.error.HTTPError as e:
            raise NanoagentError(f"Fifth refused the token (HTTP {e.code}); copy it again from Fifth's settings") from None
        except urllib.error.URLError as e:
            raise NanoagentError(f"cannot reach {settings.api_base} ({e.reason})") from None

    async def deliver(self, settings: FifthConfig, place: Any, text: str, files: Any = ()) -> None:
        raise DeliveryError("the fifth channel delivers nothing outside a gateway")

    def questions(self) -> list[Question]:
        return [Question("apiBase", "API base URL", default="https://fifth.invalid"),
                Question("token", "Bot token", secret=True),
                Question("allowFrom", "Your user id (more than one: separate them with commas)")]


CHANNEL = Fifth()


@dataclass
class ChannelsWithFifth(schema.ChannelsConfig):
    fifth: FifthConfig = field(default_factory=FifthConfig)


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fifth channel registered beside the others, and its settings accepted under `channels.fifth` in
    config.json."""
    monkeypatch.setitem(registry.REGISTRY, "fifth", __name__)
    monkeypatch.setattr(schema, "ChannelsConfig", ChannelsWithFifth)


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


def register_also(monkeypatch: pytest.MonkeyPatch, name: str, pairing: bool = True, **more: Any) -> None:
    """One more registered channel like the fifth (sharing its settings) under `name`: a second channel that pairs,
    or one that does not (`pairing=False`, as email); `more` replaces other attributes (`questions`)."""
    import sys
    import types

    module = types.ModuleType(f"tests.channel_{name}")
    attributes = {"name": name, "title": name.title(), "pairing": pairing, **more}
    module.CHANNEL = type(name.title(), (Fifth,), attributes)()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry.REGISTRY, name, module.__name__)
