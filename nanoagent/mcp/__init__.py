"""The MCP client: tools of the user's MCP servers (config.json `mcpServers`) as `mcp__<server>__<tool>` tools.

`names.py` (tool names and input schemas providers accept), `cache.py` (each server's tool list on disk),
`stdio.py` (the stdio transport: the server's process, its log, its guard against orphans), `client.py` (one
server's connection: start, calls with a deadline, reconnects, list changes), `servers.py` (all of them as tools
of a ToolRegistry). The `mcp` SDK is imported only when a server is actually started.
"""
