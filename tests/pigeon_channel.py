"""The pigeon channel (`tests/channels/pigeon/`) for the tests of targets and delivery: `register` adds its folder
to nanoagent's channels for a test; `configure` gives it settings; `arrived` reads what a chat received."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nanoagent.channels import registry
from tests import channel_folders


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pigeon, one of nanoagent's channels until the test ends."""
    channel_folders.add(monkeypatch, "pigeon")


def configure(config: Any, loft: Path, allow_from: list[str], token: str | None = "pigeon-token",
              owner: list[str] | None = None) -> None:
    """Pigeon's settings in `config`, as `channels.pigeon` in config.json would give them; `owner` None: the first
    of `allow_from` is the owner."""
    loft.mkdir(parents=True, exist_ok=True)
    settings = registry.get("pigeon").settings_class
    config.channels.blocks["pigeon"] = settings(enabled=True, token=token, allow_from=allow_from, api_base=str(loft),
                                                owner=allow_from[:1] if owner is None else owner)


def arrived(loft: Path, key: str) -> list[str]:
    """The texts delivered to session `key`'s chat, oldest first."""
    path = loft / f"{key.replace(':', '_')}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]
