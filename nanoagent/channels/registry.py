"""Chat apps nanoagent talks through. A channel is a subpackage here that follows the contract in `base.py`; this
registry maps its name to it. A channel is imported only when it is asked for by name, so a one-shot or an attached
terminal imports none of them, and nothing outside `channels/` (and its settings in `config/`) names one.

Adding a channel: a folder `channels/<name>/` whose `__init__.py` defines `CHANNEL` (a `base.Channel`), its settings
under `channels.<name>` in `config/schema.py`, a line in `REGISTRY`, and a stand-in of its API under `tests/`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanoagent.channels.base import Channel

# name -> the module whose CHANNEL it is, in the order `channels list` shows them
REGISTRY: dict[str, str] = {
    "telegram": "nanoagent.channels.telegram",
    "discord": "nanoagent.channels.discord",
    "slack": "nanoagent.channels.slack",
    "email": "nanoagent.channels.email",
}


class UnknownChannel(LookupError):
    pass


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Channel:
    """The channel called `name`, imported now (its app's library is not: that waits until it connects)."""
    try:
        module = REGISTRY[name]
    except KeyError:
        raise UnknownChannel(name) from None
    channel: Channel = importlib.import_module(module).CHANNEL
    return channel
