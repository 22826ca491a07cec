"""`channels.whatsapp` in config.json (camelCase there), read by the config loader with this class."""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.config.schema import GROUP_POLICIES, check_choices, choice, ids


@dataclass
class WhatsAppConfig:
    enabled: bool = False
    phone_number_id: str = ""  # the business number's id in Meta's app dashboard (not the number itself)
    access_token: str | None = None  # a system user's permanent token; WHATSAPP_ACCESS_TOKEN overrides it
    app_secret: str | None = None  # the Meta app's secret: every webhook POST is signed with it; WHATSAPP_APP_SECRET
    verify_token: str | None = None  # any string you choose, typed in Meta's webhook form too; WHATSAPP_VERIFY_TOKEN
    api_base: str = "https://graph.facebook.com/v24.0"  # the Graph API with its version
    allow_from: list[str] = ids()  # phone numbers with the country code ("+15557654321"); empty: nobody until paired
    owner: list[str] = ids()  # your own number: your chat is yours (channels/owners.py); others are guests
    group_policy: str = choice("mention", GROUP_POLICIES)  # in groups (Groups API): mention | all | off

    def __post_init__(self) -> None:
        check_choices(self, "channels.whatsapp")


# setting -> the environment variable that overrides it (`Channel.env`)
ENV = {"access_token": "WHATSAPP_ACCESS_TOKEN", "app_secret": "WHATSAPP_APP_SECRET",
       "verify_token": "WHATSAPP_VERIFY_TOKEN"}
