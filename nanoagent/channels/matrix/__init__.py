"""The Matrix channel: a bot account on any homeserver through matrix-nio; replies in Matrix HTML streamed by
`m.replace` edits.

Keys: a Matrix id holds `!`, `$` and `:`, which a session key cannot (`keys.py`), so each is written without its
sigil and with `:` as `=` (the first `:` of a person's id as `@`): a direct chat is its person's place,
`matrix:ann@example.org` for `@ann:example.org`, a room `matrix:AbCdEf=example.org` for `!AbCdEf:example.org`, and
a thread (`m.thread`) adds its root event's id: `matrix:AbCdEf=example.org:<root without $>`.

This module imports no Matrix library: `link`, `verify` and `deliver` import matrix-nio when called.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from nanoagent.channels.base import Chunk, Question, Route, Timing
from nanoagent.channels.matrix.ids import to_key
from nanoagent.channels.matrix.settings import ENV, MatrixConfig

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.channels.matrix.link import MatrixLink
    from nanoagent.config.schema import Config
    from nanoagent.keys import Place
    from nanoagent.paths import Paths

LIMIT = 12_000  # bytes of a message (format.LIMIT, kept here so the format module loads lazily)


class MatrixChannel:
    name = "matrix"
    title = "Matrix"
    hint = "Matrix: Markdown (headings, lists, code blocks, links; no tables)"
    limit = LIMIT
    edits = True
    pairing = False  # invites are taken only from allowFrom people: a stranger has no direct chat to pair in
    settings_class = MatrixConfig
    env = ENV

    def settings(self, config: Config) -> MatrixConfig:
        return config.channels.of(self.name, MatrixConfig, self.env)

    def routes(self, settings: MatrixConfig) -> list[Route]:
        return []  # it syncs from the homeserver: no webhook

    def problem(self, settings: MatrixConfig) -> str | None:
        if not settings.user_id or not settings.user_id.startswith("@") or ":" not in settings.user_id:
            return ("channels.matrix.enabled is true but channels.matrix.userId is not a Matrix id: set it to the "
                    "bot account's, as \"@nano:example.org\" (`nanoagent channels add matrix`).")
        if not settings.access_token and not settings.password:
            return ("channels.matrix.enabled is true but there is no password nor access token: set MATRIX_PASSWORD "
                    "or MATRIX_ACCESS_TOKEN (or channels.matrix.password / accessToken).")
        if importlib.util.find_spec("nio") is None:
            return "The Matrix channel needs matrix-nio: pip install 'nanoagent[matrix]'."
        return None

    def allowed(self, settings: MatrixConfig, user: str) -> bool:
        return user.strip().casefold() in {a.strip().casefold() for a in settings.allow_from}

    def home(self, user: str) -> Place | None:
        """A person's direct chat is their id's place (`matrix:ann@example.org`): the link finds or opens the room."""
        from nanoagent.keys import make

        if not user.strip().startswith("@"):
            return None
        try:
            return make(self.name, to_key(user.strip().casefold()))
        except ValueError:
            return None

    def split(self, markdown: str) -> list[Chunk]:
        from nanoagent.channels.matrix.format import split_markdown

        return split_markdown(markdown)

    def link(self, settings: MatrixConfig, paths: Paths, timing: Timing) -> MatrixLink:
        from nanoagent.channels.matrix.link import MatrixLink

        return MatrixLink(settings, paths, timing)

    async def verify(self, settings: MatrixConfig) -> str:
        """whoami with the access token; with a password, a login whose device is signed out again."""
        from nanoagent.channels.matrix.link import verify

        return await verify(settings)

    async def deliver(self, settings: MatrixConfig, place: Place, text: str, files: Sequence[Path] = ()) -> None:
        """Send `text` to `place` with a client of its own (the gateway's device, kept in the state file), then
        `files` through the content repository."""
        from nanoagent.channels.matrix.link import deliver
        from nanoagent.paths import Paths

        await deliver(settings, Paths.from_env(), place, self.split(text) if text.strip() or not files else [], files)

    def questions(self) -> list[Question]:
        return [Question("homeserver", "Homeserver URL", default="https://matrix.org"),
                Question("userId", "The bot account's Matrix id (@nano:example.org)"),
                Question("accessToken", "Its access token (Enter to give a password instead)", secret=True),
                Question("password", "Its password (Enter if you gave an access token)", secret=True),
                Question("allowFrom", "Your own Matrix id (@you:example.org)")]


CHANNEL = MatrixChannel()
