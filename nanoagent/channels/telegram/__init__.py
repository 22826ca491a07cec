"""The Telegram channel: a bot through the Bot API (python-telegram-bot, the `telegram` extra).

`CHANNEL` is what the rest of nanoagent knows of it; `link.py` is the connection the shared engine drives (our own
getUpdates loop, the offset as acknowledgement); `format.py` turns Markdown into Telegram's HTML under its length
limit. Sessions are `telegram:<chat id>`, a forum topic `telegram:<chat id>:<topic id>`; a user's private chat has
their user id. Importing this module imports no app library.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nanoagent.channels.base import Chunk, DeliveryError, Question, Route, Timing
from nanoagent.channels.telegram.settings import ENV, TelegramConfig
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place

if TYPE_CHECKING:
    from pathlib import Path

    from nanoagent.channels.telegram.link import TelegramLink
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

MAX_RETRY_AFTER = 30.0  # a delivery waits out a 429 up to this long
PHOTO_BYTES = 10 * 1024 * 1024  # sendPhoto takes images up to 10 MB; a larger one goes as a document
ATTEMPTS = 3  # a delivery's tries of one message through 429s and network failures


class Telegram:
    name = "telegram"
    title = "Telegram"
    hint = "Telegram: no tables, short paragraphs, Markdown is shown as Telegram HTML"
    limit = 4096
    edits = True
    pairing = True
    settings_class = TelegramConfig
    env = ENV

    def settings(self, config: Config) -> TelegramConfig:
        return config.channels.of(self.name, TelegramConfig, self.env)

    def routes(self, settings: TelegramConfig) -> list[Route]:
        return []  # it connects out: no webhook

    def problem(self, settings: TelegramConfig) -> str | None:
        if not settings.token:
            return ("channels.telegram.enabled is true but there is no bot token: set TELEGRAM_BOT_TOKEN or "
                    "channels.telegram.token (create a bot with @BotFather in Telegram).")
        if importlib.util.find_spec("telegram") is None:
            return "The Telegram channel needs python-telegram-bot: pip install 'nanoagent[telegram]'."
        wrong = next((entry for entry in settings.allow_from if not _user_id(entry)), None)
        if wrong is not None:
            return (f"channels.telegram.allowFrom holds {wrong!r}, which is not a Telegram user id: write the "
                    "number (a message to @userinfobot shows yours).")
        return None

    def allowed(self, settings: TelegramConfig, user: str) -> bool:
        return bool(_user_id(user)) and _user_id(user) in {_user_id(entry) for entry in settings.allow_from}

    def home(self, user: str) -> Place | None:
        return Place(self.name, _user_id(user)) if _user_id(user) else None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.telegram.format import split_markdown

        return split_markdown(markdown, self.limit)

    def link(self, settings: TelegramConfig, paths: Paths, timing: Timing) -> TelegramLink:
        from nanoagent.channels.telegram.link import TelegramLink

        return TelegramLink(settings, paths, timing)

    async def verify(self, settings: TelegramConfig) -> str:
        from telegram.error import InvalidToken, TelegramError

        from nanoagent.channels.telegram.link import make_bot

        if not settings.token:
            raise NanoagentError(self.problem(settings) or "no bot token")
        bot = make_bot(settings)
        try:
            await bot.initialize()
            return f"@{bot.username}"
        except InvalidToken:
            raise NanoagentError("Telegram rejected the bot token: copy it again from @BotFather.") from None
        except TelegramError as e:
            raise NanoagentError(f"Telegram could not check the token ({type(e).__name__}: {e}); check your "
                                 "network and channels.telegram.apiBase.") from None
        finally:
            await _shutdown(bot)

    async def deliver(self, settings: TelegramConfig, place: Place, text: str, files: Sequence[Path] = (), *,
                      backoff: tuple[float, ...] = (1.0, 3.0)) -> None:
        """sendMessage as Telegram HTML split under the limit, sent again as plain text when Telegram refuses the
        markup; a 429 waited out (up to MAX_RETRY_AFTER), a network failure tried again after `backoff`. Then each
        file: sendPhoto for an image (by its bytes) up to PHOTO_BYTES, sendDocument otherwise."""
        from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

        from nanoagent.channels.telegram.link import make_bot, retry_after, unparsable

        if not settings.token:
            raise DeliveryError("no Telegram bot token: set channels.telegram.token or TELEGRAM_BOT_TOKEN")
        bot = make_bot(settings)
        thread = int(place.thread) if place.thread else None
        try:
            for chunk in self.split(text) if text.strip() or not files else []:
                for body, mode in ((chunk.body, "HTML"), (chunk.plain, None)):
                    call = functools.partial(bot.send_message, int(place.chat), body, parse_mode=mode,
                                             message_thread_id=thread, read_timeout=Timing().send_timeout)
                    try:
                        await _persist(call, backoff)
                        break
                    except BadRequest as e:
                        if mode and unparsable(e):
                            continue
                        raise DeliveryError(f"Telegram refused the message to chat {place.chat}: {e.message}") \
                            from None
                    except RetryAfter as e:
                        raise DeliveryError(f"Telegram kept asking to wait (429, {retry_after(e):g} s)") from None
                    except NetworkError as e:
                        raise DeliveryError(f"Telegram could not be reached ({type(e).__name__})") from None
                    except TelegramError as e:
                        raise DeliveryError(f"Telegram refused the message to chat {place.chat}: {e.message}") \
                            from None
            for path in files:
                await _send_file(bot, place, path, backoff)
        finally:
            await _shutdown(bot)

    def questions(self) -> list[Question]:
        return [Question("token", "Bot token (from @BotFather)", secret=True),
                Question("allowFrom", "Your Telegram user id (a message to @userinfobot shows it)")]


async def _persist(call: Any, backoff: tuple[float, ...]) -> Any:
    """`call()`, through 429s (waiting as Telegram says, up to MAX_RETRY_AFTER) and network failures (waiting
    `backoff`), ATTEMPTS times at most; the last failure is raised. A call that timed out once it was sent (it may
    have arrived) is made once more at most."""
    from telegram.error import BadRequest, NetworkError, RetryAfter, TimedOut

    from nanoagent.channels.telegram.link import perhaps_sent, retry_after

    resent = False
    for attempt in range(ATTEMPTS):
        try:
            return await call()
        except RetryAfter as e:
            if retry_after(e) > MAX_RETRY_AFTER:
                raise
            await asyncio.sleep(retry_after(e))
        except BadRequest:  # the library's BadRequest is a NetworkError: a refusal, not a network failure
            raise
        except TimedOut as e:
            if perhaps_sent(e):
                if resent:
                    raise
                resent = True
            await asyncio.sleep(backoff[min(attempt, len(backoff) - 1)])
        except NetworkError:
            await asyncio.sleep(backoff[min(attempt, len(backoff) - 1)])
    return await call()


async def _send_file(bot: Any, place: Place, path: Path, backoff: tuple[float, ...]) -> None:
    """One file to `place`: a photo when its bytes are an image Telegram shows as one (else, or when Telegram
    refuses it as a photo, a document under its name); DeliveryError when it did not arrive."""
    from telegram import InputFile
    from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

    from nanoagent.attachments import outgoing
    from nanoagent.channels.telegram.link import retry_after

    name, data, image = outgoing(path)
    thread = int(place.thread) if place.thread else None
    as_photo = image is not None and len(data) <= PHOTO_BYTES
    for method in ("send_photo", "send_document") if as_photo else ("send_document",):
        field = "photo" if method == "send_photo" else "document"
        call = functools.partial(getattr(bot, method), int(place.chat), **{field: InputFile(data, filename=name)},
                                 message_thread_id=thread, read_timeout=60, write_timeout=60)
        try:
            await _persist(call, backoff)
            return
        except BadRequest as e:
            if method == "send_photo":
                continue  # too large a picture, odd dimensions: it still goes, as a document
            raise DeliveryError(f"Telegram refused the file {name} for chat {place.chat}: {e.message}") from None
        except RetryAfter as e:
            raise DeliveryError(f"Telegram kept asking to wait (429, {retry_after(e):g} s)") from None
        except NetworkError as e:
            raise DeliveryError(f"Telegram could not be reached ({type(e).__name__}); {name} was not sent") from None
        except TelegramError as e:
            raise DeliveryError(f"Telegram refused the file {name} for chat {place.chat}: {e.message}") from None


async def _shutdown(bot: Any) -> None:
    try:
        await bot.shutdown()
    except Exception:  # noqa: BLE001 - closing the HTTP client; nothing left to do if it fails
        pass


def _user_id(entry: str) -> str:
    """A Telegram user id as its digits ("1001", " 1001 "); "" for anything else."""
    entry = entry.strip()
    return entry if entry.isdigit() else ""


CHANNEL = Telegram()
