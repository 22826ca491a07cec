"""`nanoagent skills list`, `validate`, `trust` and `untrust`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nanoagent.cli.common import App, WorkspaceOpt
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from nanoagent.skills import Skill, SkillsLoader, SkillTrust

skills_app = App(help="List, validate and trust skills.\n\nExample: nanoagent skills list", no_args_is_help=True)


def _loader(workspace: Path | None, warn: Callable[[str], None]) -> tuple[SkillsLoader, SkillTrust]:
    from nanoagent.paths import Paths
    from nanoagent.skills import SkillsLoader, SkillTrust

    paths = Paths.from_env(workspace)
    trust = SkillTrust(paths.trusted_skills_file, warn)
    return SkillsLoader(paths.workspace / "skills", warn=warn, trust=trust), trust


def _workspace_skill(loader: SkillsLoader, name: str) -> Skill:
    scan = loader.scan()
    skill = next((s for s in [*scan.skills, *scan.left_out] if s.name == name), None)
    if skill is None:
        raise NanoagentError(f"No skill named {name!r} in {loader.workspace_skills}: `nanoagent skills list` shows "
                             "the names (use -w for another workspace).")
    return skill


@skills_app.command("list")
def list_skills(workspace: WorkspaceOpt = None) -> None:
    """List the skills: source, trust, and whether each works here.

    Example: nanoagent skills list
    """
    from rich.markup import escape
    from rich.table import Table

    from nanoagent.cli.render import print_table, table_console, terminal_safe

    warnings: list[str] = []
    loader, _ = _loader(workspace, warnings.append)
    scan = loader.scan()
    table = Table("name", "source", "trust", "available", "description", box=None)
    for s in scan.skills:
        note = loader.always_note(s)
        state = "yes" + (f", {note}" if note else "") if s.available else "no: " + "; ".join(s.missing)
        table.add_row(escape(terminal_safe(s.name)), s.source, str(loader.trust_state(s)), escape(state),
                      escape(terminal_safe(s.description)))
    console = table_console()
    print_table(table, console)
    for s in scan.replacing:
        warnings.append(f"workspace skill {s.name} {loader.replacement_note(s)}.")
    for s in scan.left_out:
        warnings.append(s.left_out_note())
    for warning in dict.fromkeys(warnings):
        console.print(f"[yellow]warning: {escape(terminal_safe(warning))}[/yellow]")


@skills_app.command("trust")
def trust(name: str, workspace: WorkspaceOpt = None) -> None:
    """Let an `always: true` workspace skill load into every prompt.

    It loads as its SKILL.md is now.

    Example: nanoagent skills trust my-habits
    """
    loader, trusted = _loader(workspace, lambda message: print(f"warning: {message}", file=sys.stderr))
    skill = _workspace_skill(loader, name)
    if skill.source == "builtin":
        print(f"{name} is built in: built-in skills are always trusted.")
        return
    trusted.trust(skill)
    effect = ("its instructions now load into every prompt" if skill.always
              else "it is not marked `always`, so this changes nothing until it is")
    print(f"Trusted {name} ({skill.path}, sha256 {skill.digest[:12]}): {effect}. "
          f"Any edit to the file withdraws the trust; `nanoagent skills untrust {name}` withdraws it now.")


@skills_app.command("untrust")
def untrust(name: str, workspace: WorkspaceOpt = None) -> None:
    """Stop loading a workspace skill into every prompt.

    The model still sees it listed.

    Example: nanoagent skills untrust my-habits
    """
    loader, trusted = _loader(workspace, lambda message: None)
    skill = _workspace_skill(loader, name)
    if skill.source == "builtin":
        raise NanoagentError(f"{name} is built in and always trusted; to change it, copy it into "
                             f"{loader.workspace_skills} and edit the copy.")
    if trusted.untrust(skill):
        print(f"{name} is no longer trusted: it is listed in the prompt, and read only when needed.")
    else:
        print(f"{name} was not trusted; nothing changed.")


@skills_app.command("validate")
def validate(path: Path) -> None:
    """Check a skill folder or SKILL.md the way the agent reads it.

    Example: nanoagent skills validate skills/my-habits
    """
    from nanoagent.skills import SkillError, parse_skill

    file = path / "SKILL.md" if path.is_dir() else path
    if not file.exists():
        raise NanoagentError(f"{file} does not exist; a skill is a folder holding SKILL.md.")
    try:
        skill = parse_skill(file, "workspace")
    except (SkillError, UnicodeDecodeError) as e:
        raise NanoagentError(f"{file}: {e}") from None
    problems = list(skill.problems)
    if len(skill.description) < 20:
        problems.append("description is too short to tell when to use the skill")
    if not skill.body.strip():
        problems.append("the body has no instructions")
    if problems:
        raise NanoagentError(f"{file}: " + "; ".join(problems) + ".")
    from nanoagent.cli.render import terminal_safe

    print(terminal_safe(f"{file}: ok ({skill.name}: {skill.description})"))
