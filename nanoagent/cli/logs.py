"""The `nanoagent` logger and its file, warnings, and the --debug switch."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("nanoagent")
log.addHandler(logging.NullHandler())  # until start_log: never logging's last-resort print to stderr
log.propagate = False
log.setLevel(logging.WARNING)


@dataclass
class _State:
    debug: bool = False  # tracebacks instead of one-line errors; set by --debug, read by entry.main


state = _State()


def warn(message: str) -> None:
    """A warning on stderr, as text only: it may quote what a server or a tool said (an MCP server's error)."""
    from nanoagent.cli.render import terminal_safe

    print(f"warning: {terminal_safe(message)}", file=sys.stderr)
    log.warning(message)


def start_log(logs_dir: Path) -> None:
    """Warnings and errors go to logs/nanoagent.log (0600): never keys, never message contents.
    When the log cannot be opened, nothing is logged (and nothing reaches the terminal through logging)."""
    from nanoagent.fsutil import private_dir, private_file

    path = logs_dir / "nanoagent.log"
    for old in [h for h in log.handlers if isinstance(h, _LogFile)]:
        if old.baseFilename == str(path.absolute()):
            return
        log.removeHandler(old)  # another home in this process (tests run many)
        old.close()
    try:
        private_dir(logs_dir)
        handler = _LogFile(private_file(path), encoding="utf-8")
    except OSError:
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)


class _LogFile(logging.FileHandler):
    def handleError(self, record: logging.LogRecord) -> None:
        """A log that cannot be written (a full disk) is skipped: the error that matters reaches the terminal."""
