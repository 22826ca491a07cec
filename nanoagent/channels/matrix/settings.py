"""`channels.matrix` in config.json (camelCase there), read by the config loader with this class."""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.config.schema import GROUP_POLICIES, check_choices, choice, ids


@dataclass
class MatrixConfig:
    enabled: bool = False
    homeserver: str = "https://matrix.org"  # the bot account's homeserver (its client-server API's base URL)
    user_id: str | None = None  # the bot account, "@nano:example.org"
    password: str | None = None  # signs in once; the device is kept; the MATRIX_PASSWORD variable overrides it
    access_token: str | None = None  # instead of a password; the MATRIX_ACCESS_TOKEN variable overrides it
    device_name: str = "nanoagent"  # the device's name in the account's session list
    allow_from: list[str] = ids()  # Matrix ids ("@ann:example.org"): their invites and messages; empty: nobody
    owner: list[str] = ids()  # your own Matrix id(s): your direct chats are yours (channels/owners.py)
    group_policy: str = choice("mention", GROUP_POLICIES)  # in rooms: mention | all (every message) | off
    streaming: bool = True  # edit the reply as it grows (m.replace); false: send it at the end

    def __post_init__(self) -> None:
        check_choices(self, "channels.matrix")


# setting -> the environment variable that overrides it (`Channel.env`)
ENV = {"password": "MATRIX_PASSWORD", "access_token": "MATRIX_ACCESS_TOKEN"}
