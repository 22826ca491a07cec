"""`nanoagent mcp list`, `mcp add` and `mcp remove`: the MCP servers in config.json (`mcpServers`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from nanoagent.cli.common import App, WorkspaceOpt, setup, warn
from nanoagent.cli.render import say, terminal_safe
from nanoagent.errors import NanoagentError

mcp_app = App(help="Add, list and remove MCP servers: their tools become the agent's.\n\nExample: nanoagent mcp list",
                      no_args_is_help=True)
CHECK_TIMEOUT = 15.0


@mcp_app.command("list")
def list_servers(
    timeout: Annotated[float, typer.Option(help="Seconds each server gets to start and list its tools.")] = CHECK_TIMEOUT,
    workspace: WorkspaceOpt = None,
) -> None:
    """Start each server, then show its state and its tools.

    Tools are named as the agent sees them: mcp__SERVER__TOOL.

    Example: nanoagent mcp list
    """
    paths, config = setup(workspace)
    if not config.mcp_servers:
        print(f"No MCP servers in {paths.config_file}. Add one with `nanoagent mcp add NAME -- COMMAND ARGS...` "
              "or `nanoagent mcp add NAME --url URL`.")
        return
    enabled = {name: c for name, c in config.mcp_servers.items() if c.enabled}
    results = check_servers(paths, enabled, timeout)
    for name, server in config.mcp_servers.items():
        say(_line(f"{name} ({_describe(server)})"))
        result = results.get(name, "disabled (enabled: false)" if not server.enabled else "left out")
        if isinstance(result, list):
            say(f"  connected, {len(result)} tool(s): {_names(result)}", hang=4)
        else:
            say(f"  {_line(result)}", hang=4)


@mcp_app.command("add", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A name for the server: its tools are called mcp__NAME__TOOL.")],
    url: Annotated[str | None, typer.Option(help="A remote server's URL (streamable HTTP, or SSE with "
                                                 "--transport sse).")] = None,
    header: Annotated[list[str] | None, typer.Option(help="A header for a remote server, as 'Key: value' "
                                                          "(repeatable).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="A variable for a local server, as "
                                                                      "KEY=value (repeatable).")] = None,
    transport: Annotated[str | None, typer.Option(help="http (default for --url) or sse.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds for starting and for each call (default 60).")] = None,
    wait: Annotated[float, typer.Option(help="Seconds the server gets now to start and list its tools.")] = CHECK_TIMEOUT,
    workspace: WorkspaceOpt = None,
) -> None:
    """Add a server: a command to run, or a URL.

    `nanoagent mcp add NAME -- COMMAND ARGS...` (runs on this machine, as you) or
    `nanoagent mcp add NAME --url URL [--header 'Authorization: Bearer ...']`. It is started once to list its
    tools.

    Example: nanoagent mcp add files -- npx -y @modelcontextprotocol/server-filesystem ~/notes
    """
    command = list(ctx.args)
    if bool(command) == bool(url):
        raise NanoagentError("Give the server either a command (after `--`) or --url, e.g. "
                             "`nanoagent mcp add files -- npx -y @modelcontextprotocol/server-filesystem ~/notes`.")
    entry: dict[str, Any] = {}
    if command:
        entry.update(command=command[0], args=command[1:])
        if env:
            entry["env"] = dict(_pair(e, "=", "--env", "KEY=value") for e in env)
    else:
        entry["url"] = url
        if header:
            entry["headers"] = dict(_pair(h, ":", "--header", "'Key: value'") for h in header)
        if transport:
            entry["type"] = transport
    if timeout is not None:
        entry["timeout"] = timeout
    paths, _ = setup(workspace)
    data = _raw(paths.config_file)
    servers = data.setdefault("mcpServers", {})
    if name in servers:
        raise NanoagentError(f"An MCP server named {name!r} exists already; `nanoagent mcp remove {name}` first, "
                             "or pick another name.")
    servers[name] = entry
    from nanoagent.config import load_config, save_config

    save_config(paths.config_file, data)
    config, _ = load_config(paths.config_file)
    print(f"Added MCP server {name!r} to {paths.config_file}.")
    result = check_servers(paths, {name: config.mcp_servers[name]}, wait).get(name)
    if isinstance(result, list):
        print(f"It answered with {len(result)} tool(s): {_names(result)}")
    elif result:
        warn(_line(result))


@mcp_app.command("remove")
def remove(name: str, workspace: WorkspaceOpt = None) -> None:
    """Remove a server from config.json (and its cached tool list).

    Example: nanoagent mcp remove files
    """
    from nanoagent.config import save_config
    from nanoagent.mcp.cache import ToolCache

    paths, _ = setup(workspace)
    data = _raw(paths.config_file)
    servers = data.get("mcpServers")
    if not isinstance(servers, dict) or name not in servers:
        known = ", ".join(servers) if isinstance(servers, dict) and servers else "none"
        raise NanoagentError(f"No MCP server named {name!r} in {paths.config_file} (servers: {known}).")
    del servers[name]
    save_config(paths.config_file, data)
    ToolCache(paths.mcp_cache_dir).forget(name)
    print(f"Removed MCP server {name!r}.")


@mcp_app.command("serve")
def serve(workspace: WorkspaceOpt = None) -> None:
    """Serve this agent over MCP to other agents, such as Claude Code.

    Over stdio. Its tools: send_message (to the owner's own chats; `mcp.serve.targets` widens it), ask (a turn of a session,
    through the running gateway when one runs), memory_search, memory_get, sessions_list, session_read, cron_list
    and cron_add. Stdout carries only MCP; errors go to logs/nanoagent.log. The running gateway serves the same
    tools over HTTP at /mcp on its listener (gateway.http), with the token in run/http-token.

    Claude Code: claude mcp add nanoagent -- nanoagent mcp serve

    Codex, in ~/.codex/config.toml: [mcp_servers.nanoagent] with command = "nanoagent" and args = ["mcp", "serve"]

    Claude Desktop, in claude_desktop_config.json under mcpServers: an entry "nanoagent" with command "nanoagent"
    and args ["mcp", "serve"] (docs/mcp.md has the JSON).

    Example: nanoagent mcp serve
    """
    import asyncio

    from nanoagent.mcp.serve.stdio import serve_stdio

    paths, config = setup(workspace)  # the log is logs/nanoagent.log from here on
    asyncio.run(serve_stdio(config, paths))


def check_servers(paths: Any, configs: dict[str, Any], timeout: float) -> dict[str, str | list[str]]:
    """Start each of `configs` once (`mcp.servers.check`): its tool names, or why it failed in one line."""
    import asyncio

    from nanoagent.mcp.cache import ToolCache
    from nanoagent.mcp.servers import McpServers, check
    from nanoagent.tools import ToolRegistry

    if not configs:
        return {}
    servers = McpServers.from_config(configs, ToolRegistry(), ToolCache(paths.mcp_cache_dir), paths.logs_dir,
                                     lambda message: warn(_line(message)))
    return asyncio.run(check(servers, timeout))


def _line(text: str) -> str:
    """What a server said (a tool's name, its last error line) as one line of plain text: it may hold escape
    sequences that would retitle the window or clear the screen, or newlines that would forge a line."""
    return " ".join(terminal_safe(text).split("\n")).replace("\t", " ")


def _names(names: list[str]) -> str:
    return ", ".join(_line(n) for n in names) or "-"


def _describe(server: Any) -> str:
    if server.command:
        return "stdio: " + " ".join([server.command, *server.args])
    return f"{server.type or server.transport or 'http'}: {server.url}"


def _pair(text: str, sep: str, option: str, shape: str) -> tuple[str, str]:
    key, found, value = text.partition(sep)
    if not found or not key.strip():
        raise NanoagentError(f"{option} {text!r} is not {shape}.")
    return key.strip(), value.strip()


def _raw(path: Path) -> dict[str, Any]:
    """config.json as JSON, every other key kept as it is."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError) as e:
        raise NanoagentError(f"Cannot read {path} ({e}); fix it first.") from None
    if not isinstance(data, dict):
        raise NanoagentError(f"{path} must hold a JSON object; fix it first.")
    return data
