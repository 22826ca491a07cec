"""`make size`: the core's lines (the files one turn needs), then each plug-in folder's, by the same count: lines that
are neither blank nor comments. Exits non-zero when the core is over its budget.

The core is the list below, which AGENTS.md shows at its top (a test keeps the two the same): what a person reads to
know how one turn runs. Everything else plugs in around it through a seam the core names (a provider, a tool, a
channel, a sink, a hook), and is counted by folder so growth shows where it happens."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nanoagent"
CORE = (
    "agent/build.py",  # the composition root: every collaborator wired once
    "agent/loop.py",  # sessions, dispatch, a person's turn
    "agent/turn.py",  # one turn in a session: the opening message on disk first, checkpoints, failures
    "agent/runner.py",  # one LLM-and-tools loop
    "agent/events.py",  # what the runner tells its one sink
    "agent/context.py",  # the system prompt, the tool list, the runtime block
    "agent/budget.py",  # the prompt's budget
    "messages.py",  # the message types and their guards
    "providers/base.py",  # the Provider seam: request, events, errors
    "providers/retry.py",  # retries, fallbacks, the one deadline
    "providers/anthropic.py",  # the default provider
    "tools/base.py",  # the Tool seam
    "tools/registry.py",  # the tools a session is offered
    "session/store.py",  # append-only sessions
)
BUDGET = 3500
COMMENT_OR_BLANK = re.compile(r"^\s*(#|$)")


def lines(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if not COMMENT_OR_BLANK.match(line))


def folder_of(rel: str) -> str:
    """The plug-in folder a file is counted in: a channel's or the browser's own folder, else its top folder."""
    parts = rel.split("/")
    if len(parts) > 2 and parts[0] in ("channels", "tools"):
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else "(top-level modules)"


def main() -> int:
    core = {rel: lines(PACKAGE / rel) for rel in CORE}
    print("core: the files one turn needs (AGENTS.md, top)")
    for rel, count in core.items():
        print(f"  {rel:<38} {count:5d}")
    total = sum(core.values())
    print(f"  {'core total':<38} {total:5d}  (budget {BUDGET:,})")
    folders: dict[str, int] = defaultdict(int)
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel not in core:
            folders[folder_of(rel)] += lines(path)
    print("around it, by folder:")
    for folder, count in sorted(folders.items()):
        if count:
            print(f"  {folder:<38} {count:5d}")
    print(f"  {'all of nanoagent/':<38} {total + sum(folders.values()):5d}")
    if total > BUDGET:
        print(f"the core is {total - BUDGET} lines over its budget of {BUDGET:,}: say why in the commit, or move "
              "what is not needed for a turn out of it")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
