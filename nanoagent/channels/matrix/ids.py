"""Matrix ids as parts of session keys, and back.

A Matrix id holds `!`, `$` and `:`, which a key cannot (`keys.py`): each is written without its sigil and with `:`
as `=`, but for the first `:` of a person's id, written `@` (so a part holding `@` is a person's).
"""

from __future__ import annotations


def to_key(matrix_id: str) -> str:
    """A Matrix id as a key's part: `@ann:example.org` -> `ann@example.org`, `!AbC:example.org` -> `AbC=example.org`,
    `$ev` -> `ev`."""
    sigil, rest = matrix_id[:1], matrix_id[1:]
    if sigil == "@":
        local, _, server = rest.partition(":")
        return f"{local}@{server.replace(':', '=')}"
    return rest.replace(":", "=")


def from_key(part: str, sigil: str) -> str:
    """A key's part back as the Matrix id it stands for (`sigil`: "!" a room, "$" an event); a person's id is the
    part holding an `@`."""
    if "@" in part:
        local, _, server = part.partition("@")
        return f"@{local}:{server.replace('=', ':')}"
    return sigil + part.replace("=", ":")
