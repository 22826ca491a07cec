"""A channel for the tests of targets and delivery, registered by `register` the way a folder under `channels/` and a
line in the registry would be: its app is a folder (`apiBase`), each chat a JSON-lines file in it, so a test reads
what arrived. A user's private chat is `pigeon:<user id>`, as Telegram's is. A chat called `gone` no longer
exists: delivering there fails as a deleted chat does."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import nanoagent.channels.registry as registry
from nanoagent.channels.base import Chunk, DeliveryError, Question
from nanoagent.keys import Place


@dataclass
class PigeonConfig:
    enabled: bool = False
    token: str | None = None
    allow_from: list[str] = field(default_factory=list)
    owner: list[str] = field(default_factory=list)
    api_base: str = ""  # the loft: a folder of chats


class Pigeon:
    name = "pigeon"
    title = "Pigeon"
    hint = "Pigeon carries plain text only, at most 300 characters a message."
    limit = 300
    edits = False
    pairing = True

    def settings(self, config: Any) -> PigeonConfig:
        return getattr(config.channels, "pigeon", None) or PigeonConfig()

    def problem(self, settings: PigeonConfig) -> str | None:
        return None if settings.token else "no Pigeon token: set channels.pigeon.token"

    def allowed(self, settings: PigeonConfig, user: str) -> bool:
        return user in settings.allow_from

    def home(self, user: str) -> Place | None:
        return Place("pigeon", user) if user.isdigit() else None

    def split(self, markdown: str) -> list[Chunk]:
        return [Chunk(markdown[i:i + self.limit], markdown[i:i + self.limit])
                for i in range(0, len(markdown), self.limit)] or [Chunk("", "")]

    def link(self, settings: PigeonConfig, paths: Any, timing: Any = None) -> Any:
        raise NotImplementedError("the tests of delivery never connect")

    async def verify(self, settings: PigeonConfig) -> str:
        return "@pigeonbot"

    async def deliver(self, settings: PigeonConfig, place: Place, text: str, files: Any = ()) -> None:
        if problem := self.problem(settings):
            raise DeliveryError(problem)
        if place.chat == "gone":
            raise DeliveryError(f"Pigeon found no chat {place.chat}")
        with open(Path(settings.api_base) / f"{place.key.replace(':', '_')}.jsonl", "a", encoding="utf-8") as f:
            for chunk in self.split(text):
                f.write(json.dumps({"text": chunk.body}) + "\n")
            for path in files:
                f.write(json.dumps({"file": Path(path).name, "size": Path(path).stat().st_size}) + "\n")

    def questions(self) -> list[Question]:
        return [Question("token", "Pigeon token", secret=True)]


CHANNEL = Pigeon()


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pigeon registered beside the channels this checkout has (a branch made before every channel's folder was
    merged lists only those present)."""
    present = {name: module for name, module in registry.REGISTRY.items() if importlib.util.find_spec(module)}
    monkeypatch.setattr(registry, "REGISTRY", {**present, "pigeon": __name__})


def configure(config: Any, loft: Path, allow_from: list[str], token: str | None = "pigeon-token",
              owner: list[str] | None = None) -> None:
    """Pigeon's settings in `config`, as `channels.pigeon` in config.json would give them; `owner` None: the first
    of `allow_from` is the owner."""
    loft.mkdir(parents=True, exist_ok=True)
    config.channels.pigeon = PigeonConfig(enabled=True, token=token, allow_from=allow_from, api_base=str(loft),
                                          owner=allow_from[:1] if owner is None else owner)


def arrived(loft: Path, key: str) -> list[str]:
    """The texts delivered to session `key`'s chat, oldest first."""
    path = loft / f"{key.replace(':', '_')}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]
