"""Render Markdown prompt templates from `templates/` with `{{name}}` placeholders.

Rendering is strict: a placeholder without a value is an error, never an empty string.
"""

from __future__ import annotations

import re
from pathlib import Path

from nanoagent.resources import templates_dir

PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


class TemplateError(Exception):
    pass


def render_text(text: str, name: str = "<text>", **values: object) -> str:
    missing = sorted({m.group(1) for m in PLACEHOLDER.finditer(text)} - values.keys())
    if missing:
        raise TemplateError(f"template {name} needs values for: {', '.join(missing)}")
    return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def render(name: str, **values: object) -> str:
    """Render `templates/<name>` (e.g. "prompts/identity.md")."""
    path = templates_dir() / name
    return render_text(path.read_text(encoding="utf-8"), name, **values)


def workspace_templates() -> list[tuple[Path, Path]]:
    """(source, path relative to the workspace) for every file a new workspace starts with."""
    root = templates_dir() / "workspace"
    return [(p, p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file()]


def seed_workspace(workspace: Path) -> list[Path]:
    """Copy missing template files into the workspace; never overwrite the user's. Returns what was created."""
    from nanoagent.fsutil import atomic_write, private_dir

    created = []
    for source, rel in workspace_templates():
        target = workspace / rel
        if not target.exists():
            atomic_write(target, source.read_bytes())
            created.append(target)
    private_dir(workspace / "skills")
    return created


def seeded_names() -> list[str]:
    """What seeding adds at the top of a workspace: its files, and folders with a trailing slash."""
    names = {rel.parts[0] + ("/" if len(rel.parts) > 1 else "") for _, rel in workspace_templates()}
    return sorted(names | {"skills/"})


def needs_consent(folder: Path) -> bool:
    """True for a folder seeding would add files to that holds other files and is not a workspace yet (no SOUL.md,
    no memory/MEMORY.md): a project folder given with -w, whose owner has not asked for nanoagent's files."""
    if not folder.is_dir() or (folder / "SOUL.md").exists() or (folder / "memory" / "MEMORY.md").exists():
        return False
    return any(folder.iterdir())
