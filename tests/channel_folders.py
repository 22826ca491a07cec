"""Channel folders a test adds to nanoagent's, found by the registry's own discovery as `nanoagent/channels/<name>/`
is: the test's channels are folders under `tests/channels/` (`fifth`, `pigeon`), and `add` puts one in a temporary
folder that joins `nanoagent.channels.__path__` for the test (a folder of its own, so no other comes with it), where
it is imported as `nanoagent.channels.<name>`."""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

import nanoagent.channels as package
from nanoagent.channels.base import Question

SOURCES = Path(__file__).resolve().parent / "channels"


def add(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """`tests/channels/<name>/` is one of nanoagent's channels until the test ends."""
    place = _place()
    (place / name).symlink_to(SOURCES / name, target_is_directory=True)
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(place)])


def add_like(monkeypatch: pytest.MonkeyPatch, name: str, like: str = "fifth", pairing: bool = True,
             questions: list[Question] | None = None) -> None:
    """One more channel folder, written now: channel `like`'s class (already added) under `name`, sharing its settings;
    one that pairs or not (`pairing=False`, as email), asking `questions` when given."""
    monkeypatch.delitem(sys.modules, f"{package.__name__}.{name}", raising=False)  # made anew for this test
    folder = _place() / name
    folder.mkdir()
    base = like.title()
    attributes = f"{{'name': {name!r}, 'title': {name.title()!r}, 'pairing': {pairing!r}}}"
    if questions is not None:
        attributes = f"{{**{attributes}, 'questions': lambda self: {questions!r}}}"
    (folder / "__init__.py").write_text(
        "from nanoagent.channels.base import Question  # noqa: F401 - the questions' repr names it\n"
        f"from nanoagent.channels.{like} import {base}\n\n"
        f"CHANNEL = type({name.title()!r}, ({base},), {attributes})()\n", encoding="utf-8")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder.parent)])


def _place() -> Path:
    place = Path(tempfile.mkdtemp(prefix="nanoagent-channels-"))
    atexit.register(shutil.rmtree, place, ignore_errors=True)
    return place
