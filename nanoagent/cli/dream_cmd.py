"""`nanoagent dream-log` and `nanoagent dream-restore`: read and undo the edits made to long-term memory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nanoagent.cli.common import WorkspaceOpt, setup


def register(app: typer.Typer) -> None:
    app.command("dream-log")(dream_log)
    app.command("dream-restore")(dream_restore)


def _memory_git(workspace: Path | None):
    from nanoagent.memory.gitlog import MemoryGit

    paths, _ = setup(workspace)
    return MemoryGit(paths.workspace, paths.memory_git_dir)


def dream_log(
    sha: Annotated[str | None, typer.Argument(help="Show the diff of this commit instead of the list.")] = None,
    n: Annotated[int, typer.Option("-n", help="How many commits to list, newest first.")] = 20,
    workspace: WorkspaceOpt = None,
) -> None:
    """List the edits made to memory, or show one edit's diff.

    Memory is SOUL.md, USER.md, memory/MEMORY.md and the skills Dream made.

    Example: nanoagent dream-log -n 5
    """
    from nanoagent.cli.render import print_table, table_console

    console = table_console()
    memory = _memory_git(workspace)
    if sha is not None:
        diff = memory.show(sha)
        if console.is_terminal:
            from rich.syntax import Syntax

            console.print(Syntax(diff, "diff", background_color="default"))
        else:
            print(diff)
        return
    commits = memory.log(n)
    if not commits:
        print(f"No memory edits recorded yet for {memory.workspace}.")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    table.add_column("sha", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("file(s)", overflow="fold")
    table.add_column("summary")
    for c in commits:
        table.add_row(c.short, c.time.strftime("%Y-%m-%d %H:%M"), ", ".join(c.files) or "-", c.summary)
    print_table(table, console)
    console.print("`nanoagent dream-log SHA` shows one; `nanoagent dream-restore SHA` undoes it.",
                  style="dim", highlight=False)


def dream_restore(
    sha: Annotated[str, typer.Argument(help="The commit to undo (a short sha from `nanoagent dream-log`).")],
    workspace: WorkspaceOpt = None,
) -> None:
    """Undo one memory edit, keeping every later change.

    The undo is itself a new commit.

    Example: nanoagent dream-restore 1a2b3c4
    """
    memory = _memory_git(workspace)
    made = memory.restore(sha)
    print(f"{made.summary}\nChanged {', '.join(made.files)}; recorded as {made.short} "
          f"(undo this too with `nanoagent dream-restore {made.short}`).")
