"""`nanoagent acp`: nanoagent as an Agent Client Protocol agent over stdio, for Zed and other editors."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from nanoagent.cli.common import WorkspaceOpt, open_paths, read_config, warn


def register(app: typer.Typer) -> None:
    app.command("acp")(acp)


def acp(
    local: Annotated[bool, typer.Option("--local", help="Run turns in this process even when a gateway is "
                                                        "running.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Serve an editor (Zed, any ACP client) as its ACP agent on stdio.

    The editor starts it and speaks JSON-RPC on its stdio; nothing else is printed there (logs go to stderr
    and logs/nanoagent.log). Each editor session works in the editor's folder, as `agent -C DIR` does, and
    runs through a running gateway when one answers (with -w or --local, in this process). Needs the `acp`
    extra (pip install 'nanoagent[acp]'). See docs/acp.md for Zed's settings.

    Example: nanoagent acp
    """
    import importlib.util

    from nanoagent.errors import NanoagentError

    if importlib.util.find_spec("acp") is None:
        raise NanoagentError("`nanoagent acp` needs the agent-client-protocol package: install the acp extra "
                             "(pip install 'nanoagent[acp]').")
    paths = open_paths(workspace)
    config = functools.cache(lambda: read_config(paths))

    def build():  # noqa: ANN202 - an AgentLoop, built at the first session that runs here
        from nanoagent.agent.build import build_agent

        return build_agent(config(), paths, warn=warn)

    from nanoagent.acp.serve import serve

    serve(paths, config, build, local=local or workspace is not None)
