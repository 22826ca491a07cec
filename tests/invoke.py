"""Run the `nanoagent` command in this process, through its real error boundary (`cli.entry.main`), with typer's
CliRunner isolating stdin, stdout, stderr and the environment."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from typer.testing import CliRunner


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def nanoagent(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Ran:
    """Exit code and output of `nanoagent ARGS`. With `--debug` the command's exception propagates."""
    from nanoagent.cli.entry import main

    with CliRunner().isolation(input=input, env=env) as (out, err, _):
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return Ran(code, out.getvalue().decode(), err.getvalue().decode())
