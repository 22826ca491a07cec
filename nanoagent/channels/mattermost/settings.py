"""`channels.mattermost` in config.json (camelCase there), read by the config loader with this class."""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.config.schema import GROUP_POLICIES, check_choices, choice, ids


@dataclass
class MattermostConfig:
    enabled: bool = False
    url: str = ""  # the server's address, as people open it: https://chat.example.com; MATTERMOST_URL overrides it
    token: str | None = None  # the bot account's access token; the MATTERMOST_TOKEN variable overrides it
    allow_from: list[str] = ids()  # user ids (26 characters, a profile's "Copy user ID"); empty: nobody until paired
    owner: list[str] = ids()  # your own user id(s): your DMs are yours (channels/owners.py); others are guests
    group_policy: str = choice("mention", GROUP_POLICIES)  # in channels: mention | all (every message) | off
    streaming: bool = True

    def __post_init__(self) -> None:
        check_choices(self, "channels.mattermost")


# setting -> the environment variable that overrides it (`Channel.env`)
ENV = {"url": "MATTERMOST_URL", "token": "MATTERMOST_TOKEN"}
