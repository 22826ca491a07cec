"""`channels.discord` in config.json (camelCase there), read by the config loader with this class."""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.config.schema import GROUP_POLICIES, check_choices, choice, ids


@dataclass
class DiscordConfig:
    enabled: bool = False
    token: str | None = None  # the bot's token (Developer Portal > Bot); the DISCORD_BOT_TOKEN variable overrides it
    allow_from: list[str] = ids()  # user ids (snowflakes); empty: nobody until paired
    owner: list[str] = ids()  # your own user id(s): your DMs are yours (channels/owners.py); others are guests
    group_policy: str = choice("mention", GROUP_POLICIES)  # in guild channels: mention (or reply) | all | off
    streaming: bool = True
    api_base: str = "https://discord.com/api/v10"  # REST base; the gateway's URL comes from GET {apiBase}/gateway/bot

    def __post_init__(self) -> None:
        check_choices(self, "channels.discord")


# setting -> the environment variable that overrides it (`Channel.env`)
ENV = {"token": "DISCORD_BOT_TOKEN"}
