"""Chat apps nanoagent talks through, by name. A channel is one folder: a subpackage of `channels/` whose `__init__.py`
defines `CHANNEL` (a `base.Channel`: its settings class, its environment variables, its link and format, any HTTP
routes), found here by listing the folder; or the same shape in an installed package that names it under the
`nanoagent.channels` entry-point group. Nothing outside `channels/` names a channel: config, cron, the CLI and the
gateway ask this module.

Listing the folder imports no channel; a channel is imported when it is asked for by name (`get`). The installed
packages' entry points are read only when asked for (`include_installed`: the gateway and `nanoagent channels`), or
when a name is no folder here (`get`: config.json's block for it); never by `--help` or a one-shot.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

import nanoagent.channels as package
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from nanoagent.channels.base import Channel

GROUP = "nanoagent.channels"  # the entry-point group of installed packages' channels: `<name> = <package>`

_installed: dict[str, EntryPoint] | None = None  # the group's entry points by name, once read


class UnknownChannel(LookupError):
    pass


def names() -> list[str]:
    """The channels this install has, each folder's in alphabetical order, then those of installed packages once
    their entry points were read (a folder's name wins over a package's)."""
    folders = _folders(tuple(package.__path__))
    return [*folders, *(name for name in _installed or {} if name not in folders)]


def include_installed() -> list[str]:
    """Read the installed packages' channels (once per process) and give every name, theirs included."""
    global _installed
    if _installed is None:
        from importlib.metadata import entry_points

        _installed = {point.name: point for point in entry_points(group=GROUP)}
    return names()


def get(name: str) -> Channel:
    """The channel called `name`, imported now (its app's library is not: that waits until it connects)."""
    if name in _folders(tuple(package.__path__)):
        module: Any = importlib.import_module(f"{package.__name__}.{name}")
    elif name in include_installed():
        module = _load((_installed or {})[name])
    else:
        raise UnknownChannel(name)
    channel: Channel | None = getattr(module, "CHANNEL", None)
    if channel is None or channel.name != name:
        raise NanoagentError(f"{module.__name__} is in the place of the channel {name!r} but defines no CHANNEL named "
                             f"{name!r}; give its __init__.py `CHANNEL`, or move it out of nanoagent's channels.")
    return channel


def _load(point: EntryPoint) -> Any:
    try:
        return point.load()
    except Exception as e:  # noqa: BLE001 - a broken package is named in one line, not a traceback
        raise NanoagentError(f"The channel {point.name!r} of an installed package ({point.value}) failed to load "
                             f"({type(e).__name__}: {e}); reinstall or uninstall that package.") from None


@functools.cache
def _folders(path: tuple[str, ...]) -> list[str]:
    """The subpackages of `channels/` (each a channel's folder), listed without importing them."""
    return sorted(module.name for module in pkgutil.iter_modules(list(path)) if module.ispkg)
