"""One MCP server's connection: started on first use (or in the background), calls with a deadline, reconnects
with backoff after a drop, and a fresh tool list when the server announces a change.

The connection lives in a task of its own (the SDK's streams belong to the task that opened them); calls from
turns talk to it through the session and race its end, so a server that dies mid-call is an error at once,
never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nanoagent.config.schema import McpServerConfig
from nanoagent.errors import ConfigError
from nanoagent.mcp.cache import McpTool
from nanoagent.mcp.stdio import StdioProcess, stdio_transport

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp_types import CallToolResult

log = logging.getLogger("nanoagent.mcp")
START_MIN = 30.0  # seconds a server always gets to start and list its tools
BACKOFF = (1.0, 2.0, 5.0, 15.0, 60.0)  # seconds before the next start after 1, 2, ... failures in a row


class McpUnavailable(Exception):
    """The server cannot be used now; the message says why and what to do, in one line."""


class McpServer:
    def __init__(self, name: str, config: McpServerConfig, log_dir: Path,
                 on_tools: Callable[[McpServer], None] = lambda server: None,
                 backoff: tuple[float, ...] = BACKOFF, clock: Callable[[], float] = time.monotonic,
                 start_within: float | None = None):
        self.name = name
        self.config = config
        self.start_within = start_within  # seconds a start may take, when not the default (`mcp list --timeout`)
        self.log_path = log_dir / f"mcp-{name}.log"
        self.on_tools = on_tools  # called after every fresh tool list
        self.backoff = backoff
        self.clock = clock
        self.tools: list[McpTool] | None = None  # the last list the server gave (or the cache)
        self.error: str | None = None  # why the last start failed or the connection ended
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Future[ClientSession] | None = None
        self._stop = asyncio.Event()
        self._gone = asyncio.Event()  # the current connection ended
        self._refresh = asyncio.Event()
        self._refreshed: asyncio.Event | None = None  # set when the list a notification asked for is in
        self._failures = 0
        self._retry_at = 0.0
        self._statuses: list[int] = []  # HTTP error statuses of the current connection (a 401 explains a failure)

    @property
    def state(self) -> str:
        if self._session is not None:
            return "connected"
        if self._starting is not None:
            return "starting"
        return "failed" if self.error else "not started"

    @property
    def start_timeout(self) -> float:
        """A start may take longer than a call (npx fetching a package): the call timeout, at least START_MIN."""
        if self.start_within is not None:
            return self.start_within
        return max(self.config.timeout, START_MIN)

    def retry_in(self) -> float:
        return max(0.0, self._retry_at - self.clock())

    async def session(self) -> ClientSession:
        """The live session, starting the server if needed. McpUnavailable when it cannot start, or failed so
        recently that the backoff has not run out."""
        if self._session is not None:
            return self._session
        if self._starting is None:
            wait = self.retry_in()
            if wait > 0 and self.error:
                raise McpUnavailable(f"{self.error} (nanoagent tries again in {wait:.0f} s)")
            loop = asyncio.get_running_loop()
            self._starting = loop.create_future()
            self._stop, self._gone, self._refresh = asyncio.Event(), asyncio.Event(), asyncio.Event()
            self._task = asyncio.create_task(self._serve(self._starting), name=f"mcp-{self.name}")
        return await asyncio.shield(self._starting)

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call `tool`; McpUnavailable for a server that cannot start, TimeoutError past the deadline, McpDropped when
        the connection ends during the call; the SDK's MCPError for an error the server answered."""
        session = await self.session()
        gone = self._gone
        call = asyncio.ensure_future(session.call_tool(tool, arguments))
        ended = asyncio.ensure_future(gone.wait())
        try:
            done, _ = await asyncio.wait({call, ended}, timeout=self.config.timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if not call.done():
                call.cancel()
        if not done:
            raise TimeoutError
        if call in done and not _closed(call.exception()):
            await self._settle_tools()
            return call.result()
        with contextlib.suppress(TimeoutError):  # the connection's task says why it ended
            await asyncio.wait_for(gone.wait(), 2.0)
        raise McpDropped(self.error or "the connection ended")

    async def _settle_tools(self) -> None:
        """A tool that changed the list announces it before its result: let the new list in before the next model
        call, so the model sees what the call made."""
        for _ in range(3):
            await asyncio.sleep(0)  # the SDK hands the notification to a task of its own
        pending = self._refreshed
        if pending is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pending.wait(), self.config.timeout)

    async def wait_gone(self) -> None:
        """Until the current connection ends."""
        await self._gone.wait()

    async def aclose(self) -> None:
        """Stop the server (a start still under way is cancelled); it may be started again later."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None and self._session is None:
            task.cancel()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- the connection's own task ---------------------------------------------------------------

    async def _serve(self, ready: asyncio.Future[ClientSession]) -> None:
        process: StdioProcess | None = None
        try:
            await asyncio.to_thread(_import_sdk)  # ~0.7 s; not on the event loop
            from mcp import ClientSession

            async with contextlib.AsyncExitStack() as stack:
                kind = self.config.kind(self.name)
                if kind == "stdio":
                    process = StdioProcess(self.log_path)
                    streams = await stack.enter_async_context(self._stdio(process))
                else:
                    streams = await stack.enter_async_context(self._remote(kind))
                session = await stack.enter_async_context(
                    ClientSession(streams[0], streams[1], message_handler=self._on_message))
                await asyncio.wait_for(self._handshake(session, process), self.start_timeout)
                self._session, self._failures, self.error = session, 0, None
                ready.set_result(session)
                await self._hold(session, process)
        except asyncio.CancelledError:
            self._lost(ready, "it was stopped")
            raise
        except BaseException as e:  # noqa: BLE001 - any failure of the server is its own, reported as a line
            self._lost(ready, self._describe(e, process))
        else:
            self._lost(ready, self._describe(None, process))
        finally:
            self._session = None
            self._starting = None
            self._gone.set()
            self._tools_settled()

    async def _handshake(self, session: ClientSession, process: StdioProcess | None) -> None:
        steps = asyncio.ensure_future(self._initialize(session))
        steps.add_done_callback(_retrieve)  # a start given up on ends with the closed connection's error: not news
        if process is None:
            await steps
            return
        exited = asyncio.ensure_future(process.exited.wait())
        try:
            await asyncio.wait({steps, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # cancelled (the start's deadline) or the server exited: the steps end here too
            exited.cancel()
            steps.cancel()
        if not steps.done() or steps.cancelled():
            raise McpDropped("")
        steps.result()

    async def _initialize(self, session: ClientSession) -> None:
        await session.initialize()
        await self._list_tools(session)

    async def _hold(self, session: ClientSession, process: StdioProcess | None) -> None:
        """Keep the connection until asked to stop or the server goes; list the tools again when it says so."""
        while not self._stop.is_set():
            waits = [asyncio.ensure_future(e.wait()) for e in (self._stop, self._refresh)]
            if process is not None:
                waits.append(asyncio.ensure_future(process.exited.wait()))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if process is not None and process.exited.is_set():
                raise McpDropped("")
            if self._refresh.is_set() and not self._stop.is_set():
                self._refresh.clear()
                try:
                    await asyncio.wait_for(self._list_tools(session), self.config.timeout)
                finally:
                    self._tools_settled()

    async def _list_tools(self, session: ClientSession) -> None:
        tools: list[McpTool] = []
        cursor = None
        while True:
            from mcp_types import PaginatedRequestParams

            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            for t in page.tools:
                hints = t.annotations
                tools.append(McpTool(t.name, t.description or t.title or "", dict(t.input_schema or {}),
                                     bool(hints and hints.read_only_hint)))
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        self.on_tools(self)

    async def _on_message(self, message: Any) -> None:
        from mcp_types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            if self._refreshed is None:
                self._refreshed = asyncio.Event()
            self._refresh.set()

    def _tools_settled(self) -> None:
        settled, self._refreshed = self._refreshed, None
        if settled is not None:
            settled.set()

    def _lost(self, ready: asyncio.Future[ClientSession], reason: str) -> None:
        """The connection ended (or never began): remember why, and when to try again."""
        was_up = ready.done()
        self.error = reason
        if not ready.done():
            self._failures += 1
            self._retry_at = self.clock() + self.backoff[min(self._failures, len(self.backoff)) - 1]
            ready.set_exception(McpUnavailable(reason))
            ready.exception()  # retrieved: nobody may be waiting for it
        elif was_up and not self._stop.is_set():
            log.warning("MCP server %s: connection lost: %s", self.name, reason)

    # --- transports ------------------------------------------------------------------------------

    def _stdio(self, process: StdioProcess) -> contextlib.AbstractAsyncContextManager[Any]:
        c = self.config
        assert c.command is not None
        return stdio_transport(c.command, c.args, c.env, c.cwd, self.log_path, process, c.stop_grace)

    @contextlib.asynccontextmanager
    async def _remote(self, kind: str) -> Any:
        from mcp.shared._httpx_utils import create_mcp_http_client

        url = self.config.url
        assert url is not None
        statuses: list[int] = []

        async def note(response: Any) -> None:
            if response.status_code >= 400:
                statuses.append(response.status_code)

        self._statuses = statuses
        if kind == "sse":
            from mcp.client.sse import sse_client

            def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
                client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
                client.event_hooks["response"].append(note)
                return client

            async with sse_client(url, headers=self.config.headers, httpx_client_factory=factory) as streams:
                yield streams
            return
        from mcp.client.streamable_http import streamable_http_client

        async with create_mcp_http_client(headers=self.config.headers) as http:
            http.event_hooks["response"].append(note)
            async with streamable_http_client(url, http_client=http) as streams:
                yield streams

    def _describe(self, error: BaseException | None, process: StdioProcess | None) -> str:
        """One line: which server, what failed, how to fix it."""
        c = self.config
        where = f"MCP server {self.name!r}"
        fix = f"fix `mcpServers.{self.name}` in config.json, or `nanoagent mcp remove {self.name}`"
        if isinstance(error, ConfigError):
            return f"{where}: {error}"
        leaf = _leaf(error) if error is not None else None
        if isinstance(leaf, FileNotFoundError) and process is not None:
            return f"{where}: the command {c.command!r} was not found; install it or {fix}"
        if isinstance(leaf, PermissionError) and process is not None:
            return f"{where}: the command {c.command!r} cannot be run (permission denied); {fix}"
        if isinstance(leaf, TimeoutError):
            return self.too_slow()
        if process is not None and (process.exited.is_set() or leaf is None or isinstance(leaf, McpDropped)):
            what = process.describe_exit() or "it closed its output"
            return f"{where} stopped: {what}; see {self.log_path}"
        statuses = self._statuses
        if statuses and statuses[-1] in (401, 403):
            return (f"{where} at {c.url} refused the request (HTTP {statuses[-1]}): set its token in "
                    f"`mcpServers.{self.name}.headers` (e.g. \"Authorization\": \"Bearer ...\")")
        if statuses:
            return f"{where} at {c.url} answered HTTP {statuses[-1]}; check the URL and that the server is up"
        if leaf is not None and type(leaf).__name__ in ("ConnectError", "ConnectTimeout"):
            return f"{where}: cannot reach {c.url} ({leaf}); check the URL and that the server is running"
        text = f"{type(leaf).__name__}: {leaf}" if leaf is not None else "the connection ended"
        return f"{where} failed: {text}; {fix}"

    def too_slow(self) -> str:
        """A start past its deadline, in one line."""
        return (f"MCP server {self.name!r} did not answer within {self.start_timeout:g} s of starting; check it starts "
                f"on its own{self._log_hint()}")

    def _log_hint(self) -> str:
        return f"; its log is {self.log_path}" if self.config.command else ""


class McpDropped(Exception):
    """The connection ended during a call."""


def _leaf(error: BaseException) -> BaseException:
    """The first real error inside the exception groups task groups wrap it in."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _closed(error: BaseException | None) -> bool:
    """The SDK's way of saying the connection ended under a request."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    return isinstance(error, MCPError) and error.code == CONNECTION_CLOSED


def _import_sdk() -> None:
    import mcp  # noqa: F401
    import mcp.client.stdio  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401
