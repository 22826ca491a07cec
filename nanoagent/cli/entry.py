"""The `nanoagent` command's entry. Exceptions become exit codes here and nowhere else.

A plain `nanoagent agent -m TEXT` to a running gateway is answered before typer loads (oneshot.py); every
other command line goes to the typer app in app.py. Nothing here loads logging unless there is an error.
"""

from __future__ import annotations

import os
import sys

from nanoagent.errors import NanoagentError, describe_os_error

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the one-shot fast path loads no typing)
if TYPE_CHECKING:
    import logging
    from typing import NoReturn


def main(args: list[str] | None = None) -> None:
    """Run `nanoagent ARGS` (default: the command line). `--debug` lets tracebacks through."""
    args = sys.argv[1:] if args is None else list(args)
    if sys.stdin is None:  # started with stdin closed (`<&-`): it reads as empty, and commands run get /dev/null
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - stdin for the rest of the process
    full = False  # the typer command line ran: only it reads --debug (the fast path leaves --debug to it)
    try:
        from nanoagent.cli.oneshot import attached

        if not attached(args):
            full = True
            from nanoagent.cli.app import run

            run(args)
    except NanoagentError as e:
        _fail(e, str(e), e.exit_code, full)
    except OSError as e:
        message = describe_os_error(e)
        if message is None:
            _unexpected(e, full)
        _fail(e, message, 1, full)
    except KeyboardInterrupt:  # the fast path's Ctrl-C; typer's own ends the same way
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the one boundary where surprises become exit codes
        _unexpected(e, full)


def _fail(e: Exception, message: str, code: int, full: bool) -> NoReturn:
    """One line on stderr (and in the log) and the exit code; the traceback instead with --debug."""
    from nanoagent.cli.logs import state

    _log(full).error("%s", message, extra={"shown": True})  # said on stderr below: a log to stderr skips it
    if full and state.debug:
        raise e
    print(f"Error: {message}", file=sys.stderr)
    sys.exit(code)


def _unexpected(e: Exception, full: bool) -> NoReturn:
    from nanoagent.cli.logs import state

    _log(full).error("unexpected error", exc_info=True)
    if full and state.debug:
        raise e
    print(f"Error: {type(e).__name__}: {e} (run again with --debug for the traceback)", file=sys.stderr)
    sys.exit(1)


def _log(full: bool) -> logging.Logger:
    """The nanoagent logger; the fast path opens the log file only now, when it has something to say."""
    from nanoagent.cli.logs import log, start_log

    if not full:
        from nanoagent.paths import Paths

        start_log(Paths.from_env().logs_dir)
    return log
