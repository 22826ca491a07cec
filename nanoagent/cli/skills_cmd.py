"""`nanoagent skills list` and `nanoagent skills validate`."""

from __future__ import annotations

from pathlib import Path

import typer

from nanoagent.cli.common import WorkspaceOpt
from nanoagent.errors import NanoagentError

skills_app = typer.Typer(help="List and validate skills.", no_args_is_help=True)


@skills_app.command("list")
def list_skills(
    workspace: WorkspaceOpt = None,
) -> None:
    """Show every skill with its source and whether it can be used here."""
    from rich.table import Table

    from nanoagent.cli.render import table_console
    from nanoagent.paths import Paths
    from nanoagent.skills import SkillsLoader

    paths = Paths.from_env(workspace)
    warnings: list[str] = []
    skills = SkillsLoader(paths.workspace / "skills", warn=warnings.append).skills()
    table = Table("name", "source", "available", "description", box=None)
    for s in skills:
        state = "yes" + (", always loaded" if s.always else "") if s.available else "no: " + "; ".join(s.missing)
        table.add_row(s.name, s.source, state, s.description)
    console = table_console()
    console.print(table)
    for warning in warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")


@skills_app.command("validate")
def validate(path: Path) -> None:
    """Check a skill folder or SKILL.md the way the agent reads it."""
    from nanoagent.skills import SkillError, parse_skill

    file = path / "SKILL.md" if path.is_dir() else path
    if not file.exists():
        raise NanoagentError(f"{file} does not exist; a skill is a folder holding SKILL.md.")
    try:
        skill = parse_skill(file, "workspace")
    except (SkillError, UnicodeDecodeError) as e:
        raise NanoagentError(f"{file}: {e}") from None
    problems = []
    if skill.name != file.parent.name:
        problems.append(f"name `{skill.name}` differs from the folder name `{file.parent.name}`")
    if len(skill.description) < 20:
        problems.append("description is too short to tell when to use the skill")
    if not skill.body.strip():
        problems.append("the body has no instructions")
    if problems:
        raise NanoagentError(f"{file}: " + "; ".join(problems) + ".")
    print(f"{file}: ok ({skill.name}: {skill.description})")
