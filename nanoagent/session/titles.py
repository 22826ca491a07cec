"""A chat's title: the name its person gave it or a model call made (`SessionMeta.title`), else the first words of
its first message, worked out when shown (nothing to store, so nothing to get out of date). The web app's sidebar and
`nanoagent sessions list` show it."""

from __future__ import annotations

from nanoagent.attachments import folded
from nanoagent.messages import is_user, shown_text, strip_runtime_context
from nanoagent.session.store import Session

TITLE_WORDS = 6  # of the first message, when nobody named the chat
MAX_CHARS = 80


def clean(text: str) -> str:
    """`text` as a title: one line of at most MAX_CHARS, control and format characters (bidi overrides) dropped."""
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1].rstrip() + "…"


def first_words(session: Session) -> str:
    """The first TITLE_WORDS words of what the person first said; "" before they said anything."""
    words = first_text(session).split()
    return clean(" ".join(words[:TITLE_WORDS]) + ("…" if len(words) > TITLE_WORDS else ""))


def first_text(session: Session) -> str:
    """What the person first said, for a model to name the chat by."""
    first = next((m for m in session.messages if is_user(m)), None)
    return folded(strip_runtime_context(shown_text(first))) if first is not None else ""


def title_of(session: Session) -> str:
    return clean(session.meta.title) or first_words(session)


__all__ = ["MAX_CHARS", "TITLE_WORDS", "clean", "first_text", "first_words", "title_of"]
