"""The Signal channel: an account of signal-cli's JSON-RPC daemon (`signal-cli -a +NUMBER daemon --http
127.0.0.1:8080`), which the person installs, registers or links, and runs; nanoagent does not ship it.

`CHANNEL` is what the rest of nanoagent knows of it; `link.py` is the connection the shared engine drives (the
daemon's event stream in, JSON-RPC calls out, over httpx: a dependency already, so the channel needs no library of
its own); `format.py` turns Markdown into Signal's text and text styles. Sessions are `signal:<number or UUID>` for a
private chat and `signal:group.<group id>` for a group. Signal cannot edit a sent message: replies go whole, a long
one in several messages split at paragraph ends.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from nanoagent.channels.base import Chunk, Question, Route, Timing
from nanoagent.channels.signal.settings import ENV, SignalConfig
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.channels.signal.link import SignalLink
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

NUMBER = re.compile(r"\+[1-9]\d{6,14}")  # E.164, as Signal registers numbers
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Signal:
    name = "signal"
    title = "Signal"
    hint = ("Signal: plain text with bold, italic, strikethrough and monospace; no tables or headings; "
            "write links as bare URLs")
    limit = 2000
    edits = False
    pairing = True
    settings_class = SignalConfig
    env = ENV

    def settings(self, config: Config) -> SignalConfig:
        return config.channels.of(self.name, SignalConfig, self.env)

    def routes(self, settings: SignalConfig) -> list[Route]:
        return []  # it connects out to the daemon: no webhook

    def problem(self, settings: SignalConfig) -> str | None:
        if not user_id(settings.account):
            return ("channels.signal.account is not set to the bot's Signal number: set it (or SIGNAL_ACCOUNT) to the "
                    "number signal-cli is registered or linked as, like \"+15551234567\".")
        if not re.match(r"https?://[^/\s]+", settings.api_base):
            return (f"channels.signal.apiBase {settings.api_base!r} is no http(s) address: set it to where "
                    "`signal-cli daemon --http HOST:PORT` listens, like \"http://127.0.0.1:8080\".")
        for where, entries in (("allowFrom", settings.allow_from), ("owner", settings.owner)):
            wrong = next((entry for entry in entries if not user_id(entry)), None)
            if wrong is not None:
                return (f"channels.signal.{where} holds {wrong!r}, which is no Signal number or UUID: write a number "
                        "with its country code (\"+15551234567\") or a UUID.")
        return None

    def allowed(self, settings: SignalConfig, user: str) -> bool:
        return bool(user_id(user)) and user_id(user) in {user_id(entry) for entry in settings.allow_from}

    def home(self, user: str) -> Place | None:
        return Place(self.name, user_id(user)) if user_id(user) else None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.signal.format import split

        return split(markdown, self.limit)

    def link(self, settings: SignalConfig, paths: Paths, timing: Timing) -> SignalLink:
        from nanoagent.channels.signal.link import SignalLink

        return SignalLink(settings, paths, timing)

    async def verify(self, settings: SignalConfig) -> str:
        """One call the daemon answers for the account (`listGroups`, from signal-cli's own store)."""
        import httpx

        from nanoagent.channels.signal.link import Refused, Rpc, Unreachable, masked

        if (problem := self.problem(settings)) is not None:
            raise NanoagentError(problem)
        rpc = Rpc(settings, Timing().timeout)
        try:
            await rpc.call("listGroups", {})
        except Refused as e:
            raise NanoagentError(f"signal-cli refused the account {settings.account}: {e}. Check that signal-cli is "
                                 "registered or linked as that number (signal-cli listAccounts).") from None
        except (httpx.HTTPError, Unreachable) as e:
            raise NanoagentError(f"Cannot reach signal-cli at {settings.api_base} ({type(e).__name__}): start "
                                 "`signal-cli -a NUMBER daemon --http 127.0.0.1:8080` and check "
                                 "channels.signal.apiBase.") from None
        finally:
            await rpc.close()
        return masked(settings.account)

    async def deliver(self, settings: SignalConfig, place: Place, text: str, files: Sequence[Path] = ()) -> None:
        from nanoagent.channels.signal.link import deliver

        await deliver(settings, place, text, files)

    def questions(self) -> list[Question]:
        return [Question("account", "The bot's Signal number, as signal-cli is registered or linked (+15551234567)"),
                Question("apiBase", "Where signal-cli's daemon listens (signal-cli daemon --http)",
                         default="http://127.0.0.1:8080"),
                Question("allowFrom", "Your own Signal number or UUID")]


def user_id(entry: str) -> str:
    """A Signal number or UUID as ids are compared ("+15551234567", a UUID in lower case); "" for anything else."""
    entry = "".join(entry.split()).lower()
    return entry if NUMBER.fullmatch(entry) or UUID.fullmatch(entry) else ""


CHANNEL = Signal()
