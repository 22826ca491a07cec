"""`channels.telegram` in config.json (camelCase there), read by the config loader with this class."""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.config.schema import GROUP_POLICIES, check_choices, choice, ids


@dataclass
class TelegramConfig:
    enabled: bool = False
    token: str | None = None  # from @BotFather; the TELEGRAM_BOT_TOKEN variable overrides it
    allow_from: list[str] = ids()  # numeric user ids ("1001" or 1001); empty: nobody until paired
    owner: list[str] = ids()  # your own user id(s): your private chat is yours (channels/owners.py); others are guests
    group_policy: str = choice("mention", GROUP_POLICIES)  # in groups: mention (mentioned or replied to) | all | off
    streaming: bool = True  # edit the reply as it grows (at most about once a second); false: send it at the end
    api_base: str = "https://api.telegram.org"  # requests go to {apiBase}/bot{token}/{method}

    def __post_init__(self) -> None:
        check_choices(self, "channels.telegram")


# setting -> the environment variable that overrides it (`Channel.env`)
ENV = {"token": "TELEGRAM_BOT_TOKEN"}
