"""`nanoagent memory search QUERY`: what the agent's memory_search tool sees, from the terminal."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from nanoagent.cli.common import App, WorkspaceOpt, setup, warn
from nanoagent.errors import NanoagentError

memory_app = App(help="Search what the agent remembers.\n\nExample: nanoagent memory search \"sister's birthday\"", no_args_is_help=True)


@memory_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="Words to look for, in any language.")],
    limit: Annotated[int, typer.Option("--limit", "-n", help="Most results to show.")] = 8,
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON list of results.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Search memory files, history and past conversations.

    Best matches come first, each with its source.

    Example: nanoagent memory search "dentist appointment"
    """
    from nanoagent.memory.embeddings import metered_settings
    from nanoagent.memory.search import MemorySearch

    if limit < 1:
        raise NanoagentError(f"--limit must be at least 1, got {limit}.")
    paths, config = setup(workspace)
    searcher = MemorySearch(paths, metered_settings(config, paths), warn=warn)
    try:
        hits = searcher.search(query, limit)
    finally:
        searcher.close()
    if json_output:
        print(json.dumps([hit.to_dict() for hit in hits], ensure_ascii=False, indent=2))
        return
    if not hits:
        print(f"No memory matches {query!r} in {paths.workspace}.")
        return
    from nanoagent.cli.render import say

    for hit in hits:
        role = f"  {hit.role}" if hit.role else ""
        say(f"{hit.source}{role}  score {hit.score:.3g}", f"    {hit.snippet}")
