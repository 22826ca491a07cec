"""`channels.email` in config.json (camelCase there), read by the config loader with these classes."""

from __future__ import annotations

from dataclasses import dataclass, field

from nanoagent.config.schema import bounded, check_choices, choice, ids

MAIL_SECURITY = ("tls", "starttls", "none")


@dataclass
class MailServerConfig:
    host: str = ""
    port: int = bounded(0, 0, 65535)  # 0: the usual port (IMAP 993 with tls, 143 otherwise; SMTP 465 with tls, 587)
    user: str = ""
    password: str | None = None  # the EMAIL_PASSWORD variable overrides it (both servers) when set
    security: str = choice("tls", MAIL_SECURITY)  # tls | starttls | none (refused unless the host is loopback)

    def __post_init__(self) -> None:
        check_choices(self, "channels.email.imap/smtp")


@dataclass
class EmailConfig:
    enabled: bool = False
    imap: MailServerConfig = field(default_factory=MailServerConfig)
    smtp: MailServerConfig = field(default_factory=lambda: MailServerConfig(security="starttls"))
    address: str = ""  # the From address of replies; default: imap.user
    allow_from: list[str] = ids()  # addresses, or "@example.com" for a whole domain; nobody else gets an answer
    owner: list[str] = ids()  # your own address(es): mail from them is yours (channels/owners.py); others are guests
    poll_seconds: int = bounded(60, 5, 86_400)  # how often to look for mail when the server has no IDLE
    folder: str = "INBOX"


# setting -> the environment variable that overrides it (`Channel.env`): one password for both servers
ENV = {"imap.password": "EMAIL_PASSWORD", "smtp.password": "EMAIL_PASSWORD"}
