"""All configured MCP servers as tools of one ToolRegistry.

Start-up costs nothing: tools come from each server's cached list, and a server starts at the first call of one
of its tools (the one-shot), or in the background (the interactive session, the gateway, which keeps them
connected). A server with no cached list is started when a turn begins, waited for up to STARTUP_WAIT seconds;
one not ready by then joins the tool list as soon as it is. A server that fails is reported once (one line:
which, what, how to fix) and its tools are left out until it works again.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nanoagent.attachments import Limits, sniff, store_image
from nanoagent.config.schema import McpServerConfig
from nanoagent.errors import ConfigError
from nanoagent.mcp.cache import McpTool, ToolCache
from nanoagent.mcp.client import BACKOFF, McpDropped, McpServer, McpUnavailable
from nanoagent.mcp.names import clean_schema, tool_names
from nanoagent.messages import ImageBlock
from nanoagent.tools.base import SchemaTool, ToolContext, ToolError, ToolResult, current_turn
from nanoagent.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from mcp_types import CallToolResult

log = logging.getLogger("nanoagent.mcp")
STARTUP_WAIT = 10.0  # seconds a turn waits for servers whose tools are not cached yet
CHECK_SLACK = 15.0  # seconds `check` gives a start past its own deadline (the SDK's import, connecting)
# Keeps an image a tool returned (its bytes, media type) under media/ and gives its reference.
KeepImage = Callable[[bytes, str], ImageBlock]


class McpServers:
    def __init__(self, servers: list[McpServer], registry: ToolRegistry, cache: ToolCache,
                 warn: Callable[[str], None] = lambda message: None,
                 max_image_bytes: int = Limits.max_image_bytes):
        self.servers = servers
        self.registry = registry
        self.cache = cache
        self.warn = warn  # where a failure goes when no turn is running (the gateway's log, stderr)
        self.max_image_bytes = max_image_bytes  # an image result over it reaches the model as a note
        self._names: set[str] = set()  # the registry names that are MCP tools now
        self._reported: set[str] = set()  # servers whose current failure was reported
        self._background: set[asyncio.Task[None]] = set()

    @classmethod
    def from_config(cls, configs: dict[str, McpServerConfig], registry: ToolRegistry, cache: ToolCache,
                    log_dir: Path, warn: Callable[[str], None] = lambda message: None,
                    backoff: tuple[float, ...] = BACKOFF, max_image_bytes: int = Limits.max_image_bytes) -> McpServers:
        """The enabled servers with their cached tools in `registry`. Reads small files only: no SDK, no process."""
        servers: list[McpServer] = []
        manager = cls(servers, registry, cache, warn, max_image_bytes)
        for name, config in configs.items():
            if not config.enabled:
                continue
            try:
                config.kind(name)
            except ConfigError as e:
                warn(f"{e} Its tools are left out.")
                continue
            server = McpServer(name, config, log_dir, on_tools=manager._listed, backoff=backoff)
            server.tools = cache.load(name, config)
            servers.append(server)
        manager._sync()
        return manager

    def get(self, name: str) -> McpServer | None:
        return next((s for s in self.servers if s.name == name), None)

    # --- when the agent runs ---------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before a turn: start the servers whose tools nobody knows yet and wait for them a little; try failed
        ones again in the background once their backoff has run out."""
        fresh = [s for s in self.servers if s.tools is None and s.name not in self._reported]
        retry = [s for s in self.servers if s.name in self._reported and s.state == "failed" and s.retry_in() == 0]
        for server in retry:
            self._in_background(self._start(server))
        if not fresh:
            return
        starts = [asyncio.ensure_future(self._start(s)) for s in fresh]
        _, pending = await asyncio.wait(starts, timeout=STARTUP_WAIT)
        for task in pending:  # they go on; their tools join the list when they are ready
            self._in_background(task)
        if pending:
            self._report_now(f"MCP servers still starting after {STARTUP_WAIT:g} s: their tools join when ready.")

    def _in_background(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def warm_up(self) -> None:
        """Start every server in the background (the interactive session): the first call need not wait."""
        for server in self.servers:
            self._in_background(self._start(server))

    async def run(self) -> None:
        """The gateway's component: keep every server connected, starting again with backoff after a drop."""
        try:
            async with asyncio.TaskGroup() as group:
                for server in self.servers:
                    group.create_task(self._keep(server))
        finally:
            await self.aclose()

    async def _keep(self, server: McpServer) -> None:
        while True:
            if await self._start(server):
                await server.wait_gone()
            await asyncio.sleep(max(server.retry_in(), 0.5))

    async def _start(self, server: McpServer) -> bool:
        try:
            await server.session()
        except McpUnavailable as e:
            self._failed(server, str(e))
            return False
        return True

    async def aclose(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.gather(*(s.aclose() for s in self.servers), return_exceptions=True)

    # --- tools -----------------------------------------------------------------------------------

    def _listed(self, server: McpServer) -> None:
        """A server gave its tool list (at start, or after announcing a change): cache it and offer it."""
        self._reported.discard(server.name)
        if server.tools is not None:
            try:
                self.cache.save(server.name, server.config, server.tools)
            except OSError as e:
                log.warning("cannot cache MCP server %s's tools: %s", server.name, e)
        self._sync()

    def _sync(self) -> None:
        """The registry's MCP tools: those of every server not failing, named deterministically."""
        offered = [(s, t) for s in self.servers if s.tools and s.name not in self._reported for t in s.tools]
        names = tool_names([(s.name, t.name) for s, t in offered])
        for name in self._names:
            self.registry.unregister(name)
        self._names = set()
        for server, mcp_tool in offered:
            name = names[(server.name, mcp_tool.name)]
            self.registry.register(self._tool(name, server, mcp_tool))
            self._names.add(name)

    def _tool(self, name: str, server: McpServer, mcp_tool: McpTool) -> SchemaTool:
        async def call(ctx: ToolContext, arguments: dict[str, Any]) -> str | ToolResult:
            result = await self._call(server, mcp_tool.name, arguments)
            keep = functools.partial(store_image, ctx.workspace)
            return await asyncio.to_thread(result_content, server.name, mcp_tool.name, result, keep,
                                           self.max_image_bytes)

        description = mcp_tool.description or f"The {mcp_tool.name} tool of MCP server {server.name}."
        return SchemaTool(name, f"[MCP server {server.name}] {description}", clean_schema(mcp_tool.input_schema),
                          call, read_only=mcp_tool.read_only)

    async def _call(self, server: McpServer, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        c = server.config
        try:
            result = await server.call(tool, arguments)
        except McpUnavailable as e:
            self._failed(server, str(e))
            raise ToolError(f"{e}. Its tools are left out for now; carry on without them.") from None
        except TimeoutError:
            raise ToolError(f"{tool} on MCP server {server.name} did not finish within {c.timeout:g} s "
                            f"(mcpServers.{server.name}.timeout); it was cancelled. Try again with less work, "
                            "or do without it.") from None
        except McpDropped as e:
            raise ToolError(f"MCP server {server.name} stopped during the call ({e}); what the call did is "
                            "unknown. The server is started again at the next call.") from None
        except Exception as e:
            from mcp.shared.exceptions import MCPError

            if isinstance(e, MCPError):
                raise ToolError(f"MCP server {server.name} refused the call to {tool}: {e.message}") from None
            raise
        return result

    # --- reporting -------------------------------------------------------------------------------

    def _failed(self, server: McpServer, message: str) -> None:
        """Report a server's failure once, and leave its tools out until it lists them again."""
        if server.name in self._reported:
            return
        self._reported.add(server.name)
        self._sync()
        self._report_now(message)

    def _report_now(self, message: str) -> None:
        turn = current_turn.get()
        if turn.session_key:  # a turn is running: tell its person
            turn.notify(message)
        else:
            self.warn(message)
        log.warning("%s", message)


def result_content(server: str, tool: str, result: CallToolResult, keep: KeepImage,
                   max_image_bytes: int = Limits.max_image_bytes) -> ToolResult:
    """The result for the model: its text (the runner puts it in the untrusted envelope), and its images kept under
    media/ by `keep` (each also named in the text, so a model that cannot see it still knows it was there). An
    error result raises. Blocking: it writes the images."""
    images: list[ImageBlock] = []

    def image(data: str, mime_type: str) -> str:
        note, block = image_result(data, mime_type, keep, max_image_bytes)
        if block is not None:
            images.append(block)
        return note

    parts = [_block_text(block, image) for block in result.content]
    if not any(parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    text = "\n".join(p for p in parts if p)
    if result.is_error:
        raise ToolError(f"{tool} on MCP server {server} reported an error: {text or '(no details)'}")
    return ToolResult(text or "(no output)", tuple(images))


def _block_text(block: Any, image: Callable[[str, str], str]) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind == "image":
        return image(block.data, block.mime_type)
    if kind == "audio":
        return f"[audio result: {_size(block.data)} bytes, {block.mime_type}]"
    if kind == "resource_link":
        return f"[resource: {block.uri}" + (f" ({block.name})" if getattr(block, "name", None) else "") + "]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return str(text)
        blob, mime_type = getattr(resource, "blob", ""), resource.mime_type or ""
        if mime_type.startswith("image/"):
            return f"[resource {resource.uri}] " + image(blob, mime_type)
        return f"[resource {resource.uri}: {_size(blob)} bytes, {mime_type}]"
    return f"[{kind or 'unknown'} result]"


def image_result(data: str, mime_type: str, keep: KeepImage, max_image_bytes: int) -> tuple[str, ImageBlock | None]:
    """How an image result reaches the model: a line naming it, and the image kept under media/ when it is one a
    model can take (PNG, JPEG, GIF or WebP by its bytes, within tools.attachments.maxImageBytes). Otherwise the
    line says why it stays a note."""
    raw = _decoded(data)
    if raw is None:
        return f"[image result: not valid base64, {mime_type}]", None
    note = f"[image result: {len(raw)} bytes, {mime_type}"
    kind = sniff(raw)
    if kind is None:
        return note + "; not sent: not a PNG, JPEG, GIF or WebP image]", None
    if len(raw) > max_image_bytes:
        return note + f"; not sent: over the {max_image_bytes:,}-byte limit (tools.attachments.maxImageBytes)]", None
    try:
        return note + "]", keep(raw, kind)
    except OSError as e:  # the workspace's media/ cannot take it: the result still goes, as text
        log.warning("cannot keep an image result under media/: %s", e)
        return note + f"; not sent: it could not be saved under media/ ({e.strerror or e})]", None


def _decoded(b64: str) -> bytes | None:
    try:
        return base64.b64decode("".join(b64.split()), validate=True)
    except (binascii.Error, ValueError):
        return None


def _size(b64: str) -> int:
    raw = _decoded(b64)
    return len(raw) if raw is not None else len(b64) * 3 // 4


async def check(servers: McpServers, timeout: float | None = None) -> dict[str, str | list[str]]:
    """Start every server (all at once, each within `timeout` seconds, else its own start timeout): its tool names,
    or why it failed in one line (the server's own account: it exited, it did not answer in time). The tool lists
    are cached on the way. Every server is stopped again."""
    if timeout is not None:
        for server in servers.servers:
            server.start_within = timeout
    async def one(server: McpServer) -> str | list[str]:
        try:  # the start's own deadline answers first; this one is for a connection that hangs before it
            await asyncio.wait_for(server.session(), server.start_timeout + CHECK_SLACK)
        except McpUnavailable as e:
            return str(e)
        except TimeoutError:
            return server.too_slow()
        return [t.name for t in server.tools or []]

    try:
        results = await asyncio.gather(*(one(s) for s in servers.servers))
    finally:
        await servers.aclose()
    return {s.name: r for s, r in zip(servers.servers, results, strict=True)}
