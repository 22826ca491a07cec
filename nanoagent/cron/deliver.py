"""Delivering a scheduled reply or a message to a target, from the gateway or from a process without one.

Telegram: the Bot API's sendMessage over plain HTTP against `channels.telegram.apiBase` (no polling, so a crontab
`cron tick` can deliver while no gateway runs), as Telegram HTML split under the length limit, sent again as plain
text when Telegram refuses the markup. A terminal session: its log. Either way the text is also written to the
target's session as an assistant message that starts with a `⏰` line naming where it came from: the conversation
there knows what was said, the terminal shows it, and it is never taken for the user's words. A gateway watching
that terminal session shows it at once (`listeners`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nanoagent import messages as msg
from nanoagent.config.schema import TelegramConfig
from nanoagent.cron.targets import Target
from nanoagent.errors import NanoagentError
from nanoagent.session.store import SessionStore

log = logging.getLogger("nanoagent.cron")
NOTE_MARK = "⏰ "
REPAIRED = "Error: interrupted before this tool finished (nanoagent stopped); its effect is unknown."
ATTEMPTS = 3
MAX_RETRY_AFTER = 30.0


class DeliveryError(NanoagentError):
    """The target could not be reached; the message says why (a chat that no longer exists, no bot token...)."""


@dataclass
class Outbox:
    sessions: SessionStore
    telegram: TelegramConfig
    listeners: list[Callable[[str, str], None]] = field(default_factory=list)  # (session key, note) shown live
    timeout: float = 20.0  # seconds for one Bot API call
    lock_timeout: float = 120.0  # seconds to wait for a busy session before giving up on the note
    backoff: tuple[float, ...] = (1.0, 3.0)

    async def send(self, target: Target, text: str, source: str) -> None:
        """Deliver `text` to `target`, marked as coming from `source` ("scheduled job 3f9a1c2e «tea»"). Raises
        DeliveryError when it did not arrive."""
        if target.channel == "none":
            return
        note = f"{NOTE_MARK}{source}\n\n{text}"
        if target.channel == "telegram":
            await self._telegram(int(target.chat), target.thread, text)
            try:
                await self._note(target.key, note)
            except (NanoagentError, OSError) as e:  # it reached the chat; only the conversation's copy is missing
                log.warning("cron: delivered to %s but could not note it in the session: %s", target, e)
            return
        try:
            await self._note(target.key, note)
        except (NanoagentError, OSError) as e:
            raise DeliveryError(f"could not write to the session {target.key}: {e}") from None
        for listener in list(self.listeners):
            listener(target.key, note)

    async def _note(self, key: str, note: str) -> None:
        session = self.sessions.load(key)
        async with self.sessions.lock_async(session, timeout=self.lock_timeout):
            repairs = msg.closing_results(session.messages, REPAIRED)  # a turn killed mid-tool: close it first
            self.sessions.add_messages(session, [*repairs, msg.assistant(note)], sync=True)

    # --- Telegram ---------------------------------------------------------------------------------------------

    async def _telegram(self, chat_id: int, thread: int | None, text: str) -> None:
        import httpx

        from nanoagent.channels.telegram.format import split_markdown

        token = self.telegram.token
        if not token:
            raise DeliveryError("no Telegram bot token: set channels.telegram.token or TELEGRAM_BOT_TOKEN")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # it logs each URL, and ours hold the token
        url = f"{self.telegram.api_base.rstrip('/')}/bot{token}/sendMessage"
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for chunk in split_markdown(text):
                body: dict[str, object] = {"chat_id": chat_id, "text": chunk.body, "parse_mode": "HTML"}
                if thread:
                    body["message_thread_id"] = thread
                answer = await self._call(client, url, body)
                if not answer.get("ok") and "parse entities" in str(answer.get("description", "")).lower():
                    body.update(text=chunk.plain)
                    body.pop("parse_mode")
                    answer = await self._call(client, url, body)
                if not answer.get("ok"):
                    description = str(answer.get("description") or f"error {answer.get('error_code')}")
                    raise DeliveryError(f"Telegram refused the message to chat {chat_id}: {description}")

    async def _call(self, client: object, url: str, body: dict[str, object]) -> dict[str, object]:
        import httpx

        assert isinstance(client, httpx.AsyncClient)
        for attempt in range(ATTEMPTS + 1):
            try:
                response = await client.post(url, json=body)
                answer = response.json()
            except (httpx.HTTPError, ValueError) as e:
                if attempt >= len(self.backoff):
                    raise DeliveryError(f"Telegram could not be reached ({type(e).__name__})") from None
                await asyncio.sleep(self.backoff[attempt])
                continue
            if not isinstance(answer, dict):
                raise DeliveryError(f"Telegram answered {response.status_code} with no result")
            retry = (answer.get("parameters") or {}).get("retry_after") if answer.get("error_code") == 429 else None
            if isinstance(retry, int | float) and attempt < ATTEMPTS:
                await asyncio.sleep(min(float(retry), MAX_RETRY_AFTER))
                continue
            return answer
        raise DeliveryError("Telegram kept asking to wait (429)")


def recent_notes(path: Path, limit: int = 262_144) -> list[str]:
    """The delivered notes at the end of a session file, after the user's last message (what a terminal opening
    the session has not seen): read from the last `limit` bytes only."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            tail = f.read()
    except OSError:
        return []
    notes: list[str] = []
    for line in reversed(tail.splitlines()[1:] if size > limit else tail.splitlines()):
        try:
            record = json.loads(line)
            message = record.get("message") if record.get("type") == "message" else None
        except (ValueError, AttributeError):
            continue
        if not isinstance(message, dict):
            continue
        if message.get("role") == "user":
            break
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, str) and content.startswith(NOTE_MARK):
            notes.append(content)
    return notes[::-1]
