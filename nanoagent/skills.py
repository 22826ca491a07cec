"""Skills: folders with a SKILL.md (YAML frontmatter + instructions).

The frontmatter is the one AgentSkills, Claude Code and OpenClaw use:
`name`, `description`, optional `always`, and `metadata.requires.{bins,env}`
(also accepted under `metadata.<vendor>.requires` for openclaw, clawdis, clawdbot and nanobot,
with OpenClaw's `anyBins`: at least one of them on PATH).
The system prompt lists every skill (name, description, path); `always` skills
are included in full; the model reads the others when it needs them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanoagent.resources import skills_dir


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path
    source: str  # "builtin" | "workspace"
    body: str
    always: bool = False
    missing: tuple[str, ...] = field(default_factory=tuple)  # unmet requirements

    @property
    def available(self) -> bool:
        return not self.missing


class SkillError(ValueError):
    pass


def parse_skill(path: Path, source: str) -> Skill:
    return parse_skill_text(path.read_text(encoding="utf-8"), path, source)


def parse_skill_text(text: str, path: Path, source: str) -> Skill:
    if not text.startswith("---"):
        raise SkillError("no YAML frontmatter (the file must start with a line '---')")
    end = text.find("\n---", 3)
    if end < 0:
        raise SkillError("frontmatter is not closed by a line '---'")
    import yaml

    try:
        meta = yaml.safe_load(text[3:end]) or {}
    except yaml.YAMLError as e:
        raise SkillError(f"invalid YAML in frontmatter: {str(e).splitlines()[0]}") from None
    if not isinstance(meta, dict):
        raise SkillError("frontmatter must be a mapping of keys to values")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip():
        raise SkillError("frontmatter has no `name`")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("frontmatter has no `description`")
    body = text[end + 4:].lstrip("\n")
    return Skill(name=name.strip(), description=" ".join(description.split()), path=path, source=source,
                 body=body, always=_truthy(meta.get("always", False)), missing=_missing(meta))


def _truthy(value: Any) -> bool:
    """YAML gives a bool for `always: true`; a quoted "false" must not count as true."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _missing(meta: dict[str, Any]) -> tuple[str, ...]:
    found = meta.get("metadata")
    metadata: dict[str, Any] = found if isinstance(found, dict) else {}
    requires = metadata.get("requires")
    for vendor in ("openclaw", "clawdis", "clawdbot", "nanobot"):
        if requires is None and isinstance(metadata.get(vendor), dict):
            requires = metadata[vendor].get("requires")
    requires = requires if isinstance(requires, dict) else {}
    missing = [f"needs `{b}` on PATH" for b in _as_list(requires.get("bins")) if shutil.which(b) is None]
    any_bins = _as_list(requires.get("anyBins") or requires.get("any_bins"))
    if any_bins and not any(shutil.which(b) for b in any_bins):
        missing.append("needs one of " + ", ".join(f"`{b}`" for b in any_bins) + " on PATH")
    missing += [f"needs ${v}" for v in _as_list(requires.get("env")) if not os.environ.get(v)]
    return tuple(missing)


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []


class SkillsLoader:
    def __init__(self, workspace_skills: Path, builtin: Path | None = None,
                 warn: Callable[[str], None] = lambda message: None):
        self.workspace_skills = workspace_skills
        self.builtin = builtin
        self.warn = warn
        self._cache: dict[Path, tuple[float, Skill | None]] = {}

    def skills(self) -> list[Skill]:
        """All skills by name; a workspace skill replaces a built-in one of the same name."""
        found: dict[str, Skill] = {}
        builtin = self.builtin or skills_dir()
        for source, root in (("builtin", builtin), ("workspace", self.workspace_skills)):
            for path in sorted(root.glob("*/SKILL.md")) if root.is_dir() else ():
                skill = self._load(path, source)
                if skill is not None:
                    found[skill.name] = skill
        return [found[name] for name in sorted(found)]

    def _load(self, path: Path, source: str) -> Skill | None:
        mtime = path.stat().st_mtime
        cached = self._cache.get(path)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            skill: Skill | None = parse_skill(path, source)
        except UnicodeDecodeError:
            self.warn(f"Skipped skill {path}: it is not UTF-8 text; save it as UTF-8.")
            skill = None
        except (SkillError, OSError) as e:
            self.warn(f"Skipped skill {path}: {e}")
            skill = None
        self._cache[path] = (mtime, skill)
        return skill

    def summary(self) -> str:
        skills = self.skills()
        if not skills:
            return ""
        lines = ["# Skills", "", "Read a skill's SKILL.md with read_file before using it.", ""]
        for s in skills:
            state = "" if s.available else f" (unavailable: {'; '.join(s.missing)})"
            lines.append(f"- **{s.name}**: {s.description} `{s.path}`{state}")
        for s in skills:
            if s.always and s.available:
                lines += ["", f"## Skill: {s.name}", "", s.body.strip()]
        return "\n".join(lines)
