"""Find the bundled `templates/` and `skills/` folders.

In a wheel they live inside the package (`nanoagent/templates`); in an editable
checkout they sit beside the package at the repository root.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"nanoagent is installed without its {name}/ folder; reinstall it")


def templates_dir() -> Path:
    return _find("templates")


def skills_dir() -> Path:
    return _find("skills")
