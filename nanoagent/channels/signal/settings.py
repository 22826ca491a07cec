"""`channels.signal` in config.json (camelCase there), read by the config loader with this class."""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.config.schema import GROUP_POLICIES, check_choices, choice, ids


@dataclass
class SignalConfig:
    enabled: bool = False
    account: str = ""  # the bot's own Signal number ("+15551234567") as signal-cli is registered or linked with it
    # signal-cli's daemon started with `--http 127.0.0.1:8080`: nanoagent posts JSON-RPC to {apiBase}/api/v1/rpc and
    # reads {apiBase}/api/v1/events
    api_base: str = "http://127.0.0.1:8080"
    allow_from: list[str] = ids()  # phone numbers ("+15551234567") or Signal UUIDs; empty: nobody until paired
    owner: list[str] = ids()  # your own number or UUID: your private chat is yours (channels/owners.py)
    group_policy: str = choice("mention", GROUP_POLICIES)  # in groups: mention (mentioned or quoted) | all | off

    def __post_init__(self) -> None:
        check_choices(self, "channels.signal")


# setting -> the environment variable that overrides it (`Channel.env`)
ENV = {"account": "SIGNAL_ACCOUNT", "api_base": "SIGNAL_CLI_URL"}
