"""`channels.feishu` in config.json (camelCase there), read by the config loader with this class."""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.config.schema import GROUP_POLICIES, check_choices, choice, ids

# the open platform's address for each host: Feishu (China) and Lark (international) are separate deployments
HOSTS = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}


@dataclass
class FeishuConfig:
    enabled: bool = False
    app_id: str = ""  # the app's App ID (cli_...), under Credentials & Basic Info; FEISHU_APP_ID overrides it
    app_secret: str | None = None  # the app's App Secret; the FEISHU_APP_SECRET variable overrides it
    host: str = choice("feishu", tuple(HOSTS))  # feishu: open.feishu.cn (China) | lark: open.larksuite.com
    allow_from: list[str] = ids()  # open ids (ou_...); empty: nobody until paired
    owner: list[str] = ids()  # your own open id(s): your private chat is yours (channels/owners.py); others are guests
    group_policy: str = choice("mention", GROUP_POLICIES)  # in group chats: mention | all (every message) | off
    streaming: bool = True  # edit the reply's card as it grows; false: send it at the end
    api_base: str = ""  # the open platform's address when not the host's own (a proxy); empty: the host's

    def __post_init__(self) -> None:
        check_choices(self, "channels.feishu")

    @property
    def base(self) -> str:
        """Where the REST API and the event websocket's endpoint are: `apiBase`, else the host's address."""
        return (self.api_base or HOSTS.get(self.host, HOSTS["feishu"])).rstrip("/")


# setting -> the environment variable that overrides it (`Channel.env`)
ENV = {"app_id": "FEISHU_APP_ID", "app_secret": "FEISHU_APP_SECRET"}
