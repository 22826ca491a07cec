"""`nanoagent mcp serve` over stdio: the MCP client started this process; stdout carries only the protocol.

A question goes to the running gateway (its turn shows in the web app, its spend in the ledger as "mcp"), the
way `agent -m` sends one; with no gateway (or with model settings of this process's own), an agent built in this
process answers, as `agent -m` does then. Messages go through the gateway too (its `deliver` request: the message
tool's delivery, `cron.deliver.Outbox`); with none, from here, as `cron tick` delivers while no gateway runs. A job
added is announced to the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from nanoagent.agent.events import TurnResult
from nanoagent.config.schema import Config
from nanoagent.keys import Place
from nanoagent.mcp.serve import mcp_server
from nanoagent.mcp.serve.tools import SOURCE, Doors, serve_tools
from nanoagent.paths import Paths

if TYPE_CHECKING:
    from nanoagent.agent.loop import AgentLoop


async def serve_stdio(config: Config, paths: Paths) -> None:
    """Serve until the client closes stdin."""
    from mcp.server.stdio import stdio_server

    here = _Here(config, paths)
    server = mcp_server(serve_tools(config, paths, Doors(here.ask, here.deliver, here.jobs_changed)), paths.workspace)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await here.aclose()


class _Here:
    """The doors of a server in its own process: the gateway when one answers, else this process."""

    def __init__(self, config: Config, paths: Paths):
        self.config = config
        self.paths = paths
        self.loop: AgentLoop | None = None  # built at the first question no gateway takes

    async def ask(self, key: str, question: str) -> TurnResult | None:
        from nanoagent.gateway.oneshot import gateway_answers, send_one, settings_differ
        from nanoagent.gateway.protocol import NoGateway

        paths = self.paths
        if gateway_answers(paths.gateway_socket) and not settings_differ(paths.run_dir):
            with contextlib.suppress(NoGateway):  # gone since: answered here
                return await asyncio.to_thread(send_one, paths.gateway_socket, key, question, lambda event: None,
                                               None, None, "", "mcp")
        return await self._local(key, question)

    async def _local(self, key: str, question: str) -> TurnResult:
        from nanoagent.spend import working_as

        if self.loop is None:
            from nanoagent.agent.build import build_agent

            self.loop = build_agent(self.config, self.paths)
        with working_as("mcp", key):
            return await self.loop.handle(question, key)

    async def deliver(self, target: Place, text: str) -> None:
        from nanoagent.agent.build import build_outbox
        from nanoagent.gateway.oneshot import deliver, gateway_answers
        from nanoagent.gateway.protocol import NoGateway

        socket = self.paths.gateway_socket
        if gateway_answers(socket):
            with contextlib.suppress(NoGateway):  # gone since: delivered from here
                return await asyncio.to_thread(deliver, socket, target.key, text, SOURCE)
        await build_outbox(self.config, self.paths).send(target, text, SOURCE)

    def jobs_changed(self) -> None:
        from nanoagent.gateway.oneshot import tell

        tell(self.paths.gateway_socket, {"type": "jobs_changed"})

    async def aclose(self) -> None:
        if self.loop is not None:
            await self.loop.aclose()
