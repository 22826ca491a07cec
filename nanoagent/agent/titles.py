"""A chat's title from one short model call (`gateway.web.modelTitles`): housekeeping counted in the spend ledger as
its own kind, `title`, against the session it names."""

from __future__ import annotations

from nanoagent.messages import wrap_untrusted
from nanoagent.providers.base import Providers
from nanoagent.session.titles import MAX_CHARS, clean
from nanoagent.spend import working_as
from nanoagent.templates import render

MAX_TOKENS = 30  # a title of a few words
FIRST_CHARS = 2000  # of the first message: enough to say what it is about


async def model_title(providers: Providers, model: str, key: str, first: str) -> str:
    """A title of a few words for session `key`, whose person first said `first`; "" when the model gave none.
    NanoagentError (a ProviderError, a spend cap reached) when the call failed."""
    with working_as("title", key):
        text, _, _ = await providers.complete(model, render("prompts/title.md"),
                                              wrap_untrusted("the first message", first[:FIRST_CHARS]), MAX_TOKENS)
    line = next((part for part in text.splitlines() if part.strip()), "")
    return clean(line.strip().strip("\"'“”«»").rstrip("."))[:MAX_CHARS]


__all__ = ["model_title"]
