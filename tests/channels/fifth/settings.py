"""`channels.fifth` in config.json: read by the config loader with this class, as a built-in channel's block is."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FifthConfig:
    enabled: bool = False
    token: str | None = None  # the FIFTH_TOKEN variable overrides it
    allow_from: list[str] = field(default_factory=list)
    owner: list[str] = field(default_factory=list)
    api_base: str = "https://fifth.invalid"
    webhook_secret: str | None = None  # set: Fifth posts its events to /channels/fifth/events, signed with it


ENV = {"token": "FIFTH_TOKEN"}
