"""`channels.slack` in config.json (camelCase there), read by the config loader with this class."""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.config.schema import GROUP_POLICIES, check_choices, choice, ids


@dataclass
class SlackConfig:
    enabled: bool = False
    bot_token: str | None = None  # xoxb-...; the SLACK_BOT_TOKEN variable overrides it
    app_token: str | None = None  # xapp-... with connections:write, for Socket Mode; SLACK_APP_TOKEN overrides it
    allow_from: list[str] = ids()  # member ids (U...); empty: nobody until paired
    owner: list[str] = ids()  # your own member id(s): your DMs are yours (channels/owners.py); others are guests
    group_policy: str = choice("mention", GROUP_POLICIES)  # in channels: mention | all (every message) | off
    streaming: bool = True
    api_base: str = "https://slack.com/api/"  # the Web API's base URL

    def __post_init__(self) -> None:
        check_choices(self, "channels.slack")


# setting -> the environment variable that overrides it (`Channel.env`)
ENV = {"bot_token": "SLACK_BOT_TOKEN", "app_token": "SLACK_APP_TOKEN"}
