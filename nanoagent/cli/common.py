"""What every command shares: opening the home (config, log, warnings), the `-w` option and `--debug`.

Commands import from here, never from `app.py`, which imports them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core

from nanoagent.cli.logs import start_log, state, warn
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from typer._click import Command as ClickCommand
    from typer._click import Context, HelpFormatter


class Command(typer.core.TyperCommand):
    """A command whose arguments read as `SHA` in its usage line and help (`[SHA]` when optional), not typer's
    `{sha}`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, typer.core.TyperArgument) and param.metavar is None and param.name:
                param.metavar = param.name.upper()

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, typer.core.TyperArgument):
                name = param.make_metavar(ctx)
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


def summary(command: ClickCommand) -> str:
    """A command's line in its group's help: its `short_help`, else its help's first sentence, whole (click would
    cut it at about 45 characters, whatever the terminal's width). Each fits on one line at 80 columns
    (tests/test_help.py checks)."""
    return command.get_short_help_str(limit=sys.maxsize)


def write_commands(formatter: HelpFormatter, title: str, commands: list[tuple[str, ClickCommand]]) -> None:
    rows = [(name, summary(command)) for name, command in commands if not command.hidden]
    if rows:
        with formatter.section(title):
            formatter.write_dl(rows)


class Group(typer.core.TyperGroup):
    """A command group whose help lists each command with its whole summary."""

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        commands = [(name, command) for name in self.list_commands(ctx)
                    if (command := self.get_command(ctx, name)) is not None]
        write_commands(formatter, "Commands", commands)


class App(typer.Typer):
    """`typer.Typer` whose groups and commands are the `Group` and `Command` above."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"cls": Group, **kwargs})

    def command(self, *args: Any, **kwargs: Any) -> Any:
        return super().command(*args, **{"cls": Command, **kwargs})


WorkspaceOpt = Annotated[Path | None, typer.Option("--workspace", "-w", help="The workspace: the folder of its identity, memory and skills.")]


def _want_debug(value: bool) -> None:
    if value:
        state.debug = True


# `nanoagent --debug CMD` and `nanoagent agent --debug` both land here (and NANOAGENT_DEBUG=1).
DebugOpt = Annotated[bool, typer.Option("--debug", envvar="NANOAGENT_DEBUG", callback=_want_debug,
                                        expose_value=False, help="Show tracebacks for errors.")]


def setup(workspace: Path | None, seeds: bool = False):
    """The paths and config every command starts from; the home is checked and made private first. `seeds`: the
    command adds the workspace's starting files, so a -w folder that holds other files is asked about first."""
    paths = open_paths(workspace, seeds)
    return paths, read_config(paths)


def open_paths(workspace: Path | None, seeds: bool = False):
    """`setup` without reading config.json: for a terminal that attaches to a running gateway, whose config counts."""
    from nanoagent.paths import Paths

    paths = Paths.from_env(workspace)
    open_home(paths.home)
    start_log(paths.logs_dir)
    if paths.workspace.exists() and not paths.workspace.is_dir():
        fix = "pass a folder with -w (a missing one is created)" if workspace else "move that file away"
        raise NanoagentError(f"The workspace {paths.workspace} is a file, not a folder: {fix}.")
    if seeds and workspace is not None:
        confirm_workspace(paths.workspace)
    return paths


def read_config(paths):  # noqa: ANN001, ANN201 - Paths in, Config out (typed where they are defined)
    from nanoagent.config import load_config

    config, warnings = load_config(paths.config_file)
    for warning in warnings:
        warn(warning)
    return config


def confirm_workspace(folder: Path) -> None:
    """A folder with other files in it becomes a workspace only when its owner says so: asked on a terminal,
    refused otherwise (`nanoagent onboard -w FOLDER` makes it one)."""
    from nanoagent.templates import needs_consent, seeded_names

    if not needs_consent(folder):
        return
    names = seeded_names()
    adds = ", ".join(names[:-1]) + " and " + names[-1]
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise NanoagentError(f"{folder} holds other files and is not a nanoagent workspace yet: to work on its files, "
                             f"use `nanoagent agent -C {folder}`; `nanoagent onboard -w {folder}` makes it a "
                             f"workspace (adds {adds}).")
    print(f"{folder} is not a nanoagent workspace yet. Add {adds} to it? [y/N] ", end="", file=sys.stderr,
          flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise NanoagentError(f"Nothing was added to {folder}: to work on its files, use `nanoagent agent -C "
                             f"{folder}`; or leave -w out to use your own workspace.")


def open_home(home: Path) -> None:
    """Create the home (0700), or check that it is a folder nanoagent can write. The home is nanoagent's own: one
    open to other users (made by an older version, or under a loose umask) is made private."""
    from nanoagent.fsutil import private_dir
    from nanoagent.paths import check_owned

    where = f"NANOAGENT_HOME {home}" if os.environ.get("NANOAGENT_HOME") else f"The home folder {home}"
    if home.exists() and not home.is_dir():
        raise NanoagentError(f"{where} is a file, not a folder: move the file away, or set NANOAGENT_HOME to a folder.")
    check_owned(home)  # before it is made private: one another user could write must not be quietly adopted
    try:
        private_dir(home)
    except OSError as e:
        raise NanoagentError(f"Cannot create {where} ({e.strerror}): create it yourself, or set NANOAGENT_HOME "
                             "to a folder you can write.") from e
    if not os.access(home, os.W_OK | os.X_OK):
        reason = "on a read-only file system" if _read_only_fs(home) else "not writable for you"
        raise NanoagentError(f"{where} is {reason}: make it writable, or set NANOAGENT_HOME to a folder you can "
                             "write.")
    if home.stat().st_mode & 0o077:
        try:
            os.chmod(home, 0o700)
        except OSError:  # owned by someone else: theirs to change
            pass


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
