"""`nanoagent mcp serve`: this agent as an MCP server, for other agents (Claude Code, Codex, Claude Desktop).

`tools.py` (the tools, declared once as typed functions), this module (them as the `mcp` SDK's low-level server),
`stdio.py` (over stdio: the running gateway answers questions, else an agent in this process, as `agent -m`
chooses) and `http.py` (over streamable HTTP at `/mcp` on the gateway's listener, behind its token). The SDK is
imported only by the function that builds the server: the command line stays fast.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nanoagent import __version__
from nanoagent.tools.base import Tool, ToolContext, ToolError

if TYPE_CHECKING:
    from mcp.server import Server

log = logging.getLogger("nanoagent.mcp.serve")
INSTRUCTIONS = ("The person's own always-on nanoagent agent: message them on their chat apps (send_message), ask "
                "their agent or hand it a task (ask), search their memory (memory_search, memory_get), read their "
                "conversations (sessions_list, session_read) and schedule work (cron_list, cron_add).")


def mcp_server(tools: list[Tool], workspace: Path) -> Server[Any]:
    """The tools as an MCP server: listed with their schemas (read-only ones marked), called with their own argument
    check; an expected failure (`ToolError`) is a tool error with its one line, any other one line naming it."""
    import mcp_types as types
    from mcp.server import Server

    by_name = {t.name: t for t in tools}
    where = ToolContext(workspace)

    async def list_tools(ctx: object, params: object) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=t.spec().parameters,
                       annotations=types.ToolAnnotations(read_only_hint=t.read_only)) for t in tools])

    async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
        found = by_name.get(params.name)
        try:
            if found is None:
                raise ToolError(f"No tool {params.name!r}; the tools are {', '.join(by_name)}.")
            result = await found.call(where, dict(params.arguments or {}))
        except ToolError as e:
            return _result(str(e), error=True)
        except Exception as e:  # noqa: BLE001 - the client gets one line; the log gets the kind of failure
            log.exception("mcp serve: %s failed", params.name)
            return _result(f"{params.name} failed inside nanoagent ({type(e).__name__}); see its log in logs/.",
                           error=True)
        return _result(result if isinstance(result, str) else result.text)

    return Server("nanoagent", version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def _result(text: str, error: bool = False) -> Any:
    import mcp_types as types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)
