"""A channel for the tests of targets and delivery (`tests/pigeon_channel.py` adds it): its app is a folder
(`apiBase`), each chat a JSON-lines file in it, so a test reads what arrived. A user's private chat is
`pigeon:<user id>`, as Telegram's is. A chat called `gone` no longer exists: delivering there fails as a deleted chat
does."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanoagent.channels.base import Chunk, DeliveryError, Question, Route
from nanoagent.keys import Place


@dataclass
class PigeonConfig:
    enabled: bool = False
    token: str | None = None  # the PIGEON_TOKEN variable overrides it
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
    settings_class = PigeonConfig
    env = {"token": "PIGEON_TOKEN"}

    def settings(self, config: Any) -> PigeonConfig:
        return config.channels.of(self.name, PigeonConfig, self.env)

    def routes(self, settings: PigeonConfig) -> list[Route]:
        return []

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
