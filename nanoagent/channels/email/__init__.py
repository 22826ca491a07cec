"""The email channel: a mailbox read by IMAP (IDLE where offered, else every `pollSeconds`) and answered by SMTP.

A thread of mail is one session, `email:<sender's address>:<12 hex of its root Message-ID's hash>` (so all of one
sender's threads are one person's); only senders in `allowFrom` (addresses, or `@domain`) are answered, and nobody
else gets anything (no pairing by mail), nor do automatic mail and mailing lists. A person's own place is `email:<address>`: delivering there (a scheduled message) starts a new
thread, and their answer continues in that thread's session. Replies are plain text with a simple HTML part, sent
whole (mail cannot be edited), with `Re:` and the thread's headers.

Importing this module imports neither aioimaplib nor aiosmtplib: `link`, `verify` and `deliver` do.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from nanoagent import keys
from nanoagent.channels.base import Chunk, Question, Route, Timing
from nanoagent.channels.email.settings import ENV, EmailConfig

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.channels.base import Link
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths


class EmailChannel:
    name = "email"
    title = "Email"
    hint = "email: plain text with a subject line; no Markdown tables; write it as a letter"
    limit = 100_000
    edits = False
    pairing = False
    settings_class = EmailConfig
    env = ENV

    def settings(self, config: Config) -> EmailConfig:
        return config.channels.of(self.name, EmailConfig, self.env)

    def routes(self, settings: EmailConfig) -> list[Route]:
        return []  # it connects out: no webhook

    def problem(self, settings: EmailConfig) -> str | None:
        from nanoagent.channels.email.link import loopback

        for side, server in (("imap", settings.imap), ("smtp", settings.smtp)):
            where = f"channels.email.{side}"
            if not server.host:
                return f"No {side.upper()} server for email: set {where}.host (and port, user, password)."
            if side == "imap" and not server.user:
                return f"No IMAP user for email: set {where}.user (the mailbox's login)."
            if server.user and not server.password:
                return f"No password for the {side.upper()} login {server.user!r}: set {where}.password or EMAIL_PASSWORD."
            if server.security == "none" and not loopback(server.host):
                return (f"{where}.security is \"none\" for {server.host}, which sends the password in clear; use "
                        "\"tls\" or \"starttls\" (\"none\" is for a server on this machine only).")
        if "@" not in (settings.address or settings.imap.user):
            return "No address to answer from: set channels.email.address (the mailbox's address)."
        missing = [m for m in ("aioimaplib", "aiosmtplib") if importlib.util.find_spec(m) is None]
        if missing:
            return f"Email needs {' and '.join(missing)}: install them with `pip install 'nanoagent[email]'`."
        return None

    def allowed(self, settings: EmailConfig, user: str) -> bool:
        from nanoagent.channels.email.mail import allowed

        return allowed(settings.allow_from, user)

    def home(self, user: str) -> keys.Place | None:
        """A person's own place is their address: mail sent there starts a new thread."""
        from nanoagent.channels.email.mail import ADDRESS

        try:
            return keys.make(self.name, user.strip().lower()) if ADDRESS.fullmatch(user.strip()) else None
        except ValueError:  # an address a session key cannot hold
            return None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.email import format as fmt

        return fmt.split(markdown, self.limit)

    def link(self, settings: EmailConfig, paths: Paths, timing: Timing) -> Link:
        from nanoagent.channels.email.link import EmailLink

        return EmailLink(settings, paths, timing)

    async def verify(self, settings: EmailConfig) -> str:
        """An IMAP login (and the folder) and an SMTP login; the address replies come from."""
        from nanoagent.channels.email.link import TIMEOUT, Imap, Refused, _imap_errors, own_address, smtp_send
        from nanoagent.errors import NanoagentError

        try:
            imap = await Imap.open(settings.imap, settings.folder, TIMEOUT)
            await imap.close()
            await smtp_send(settings, None, TIMEOUT)
        except Refused:
            raise
        except _imap_errors() as e:
            raise NanoagentError(f"Cannot reach the mail servers ({e or type(e).__name__}); check channels.email.imap "
                                 "and smtp (host, port, security).") from None
        return own_address(settings)

    async def deliver(self, settings: EmailConfig, place: keys.Place, text: str, files: Sequence[Path] = ()) -> None:
        from nanoagent.channels.email.link import deliver
        from nanoagent.paths import Paths

        await deliver(settings, Paths.from_env(), place, text, files)

    def questions(self) -> list[Question]:
        return [
            Question("imap.host", "IMAP server (host name)"),
            Question("imap.user", "Mailbox login (usually the address)"),
            Question("imap.password", "Mailbox password (an app password where the provider offers one)", secret=True),
            Question("smtp.host", "SMTP server (host name; it takes the mailbox login unless smtp.user is set)"),
            Question("allowFrom", "Who may write (addresses or @domain, separated by commas)"),
        ]


CHANNEL: Any = EmailChannel()
