"""`nanoagent gateway` (run it), `gateway status`, `gateway stop` and `gateway install`."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nanoagent.cli.common import App, WorkspaceOpt, setup, warn
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from nanoagent.config.schema import Config
    from nanoagent.gateway.hub import Hub
    from nanoagent.gateway.server import Component
    from nanoagent.paths import Paths

gateway_app = App(help="Keep the agent running for terminals, programs and chat apps.\n\nRun it in the foreground; Ctrl-C or SIGTERM stops it cleanly.\n\nExample: nanoagent gateway",
                          invoke_without_command=True)

UNIT = """[Unit]
Description=nanoagent gateway (a personal AI agent)
After=network-online.target

[Service]
Type=simple
ExecStart={exe} gateway
Environment=NANOAGENT_HOME={home}
Restart=on-failure
RestartSec=5
TimeoutStopSec=30

[Install]
WantedBy=default.target
"""


@gateway_app.callback()
def gateway(ctx: typer.Context, workspace: WorkspaceOpt = None) -> None:
    """Run the gateway in the foreground (logs to stderr and logs/); Ctrl-C or SIGTERM stops it cleanly.

    Example: nanoagent gateway
    """
    if ctx.invoked_subcommand is not None:
        return
    import asyncio

    from nanoagent.agent.build import build_agent, build_outbox
    from nanoagent.gateway.hub import Hub
    from nanoagent.gateway.server import Gateway

    paths, config = setup(workspace, seeds=True)
    outbox = build_outbox(config, paths, warn)
    loop = build_agent(config, paths, warn=warn, outbox=outbox)
    gateway_config = config.gateway
    hub = Hub(loop, gateway_config.max_concurrent_turns)
    components = []
    serving = str(paths.gateway_socket)
    listener = None
    if gateway_config.http.enabled:
        from nanoagent.gateway.http import Listener, url

        listener = Listener(hub, paths, config, lambda component: server.start_component(component))
        components.append(listener.component(gateway_config.http))
        serving += (f" and {url(gateway_config.http.host, gateway_config.http.port)} (the OpenAI-compatible "
                    "endpoint; its token is in run/http-token; the web app: `nanoagent web`)")
    components += _channels(config, paths, hub)
    from nanoagent.gateway.server import Component

    components.append(Component("incognito", hub.end_idle_incognito))  # temporary chats end after an idle hour
    if config.cron.enabled:
        from nanoagent.gateway.cron import cron_component

        components.append(cron_component(config, paths, hub, outbox))
    if loop.mcp is not None:  # one set of connections for every session, kept up while the gateway runs
        components.append(Component("mcp", loop.mcp.run))
    if loop.closers:  # the browser, started by its first use: closed when the gateway stops
        components.append(Component("browser", lambda: _close_when_stopped(loop.closers)))
    server = Gateway(hub, paths, components=components, grace=gateway_config.shutdown_grace,
                     settings=_settings(config))

    async def signin(enable: bool) -> dict:
        """`nanoagent web`: aiohttp loads only once the web app is asked for (or gateway.http is on)."""
        nonlocal listener
        if listener is None:
            from nanoagent.gateway.http import Listener

            listener = Listener(hub, paths, config, server.start_component)
        listener.gateway = server
        return await listener.signin(enable)

    server.signin = signin
    server.outbox = outbox  # `nanoagent mcp serve`'s messages go out as the gateway's own do
    if listener is not None:
        listener.gateway = server

    def ready() -> None:
        print(f"nanoagent gateway: listening on {serving} (pid {os.getpid()}); Ctrl-C stops it.", file=sys.stderr,
              flush=True)
        provider = loop.providers.get(loop.models.default)  # the SDK loads now, not in the first turn
        asyncio.get_running_loop().run_in_executor(None, provider.prepare)
        # the sandbox's smoke test, which the prompt reports on, runs now off the event loop (its result is kept)
        asyncio.get_running_loop().run_in_executor(None, loop.context.confinement)

    _log_to_stderr()  # from here on: a refusal before this is one line, not also a log line
    asyncio.run(server.serve(ready))


async def _close_when_stopped(closers: tuple[Callable[[], Awaitable[None]], ...]) -> None:
    """A component that only waits; when the gateway stops it, what the loop keeps running is closed."""
    import asyncio

    try:
        await asyncio.Event().wait()
    finally:
        for close in closers:
            await close()


def _channels(config: Config, paths: Paths, hub: Hub) -> list[Component]:
    """A component for every enabled channel of the registry, installed packages' included; a channel that cannot start (no token, its extra not
    installed) stops the gateway before it starts, with the one line that says how to fix it."""
    from nanoagent.channels import registry
    from nanoagent.gateway.channels.engine import channel_component
    from nanoagent.transcribe import transcriber

    components = []
    for name in registry.include_installed():
        channel = registry.get(name)
        settings = channel.settings(config)
        if not settings.enabled:
            continue
        problem = channel.problem(settings)
        if problem is not None:
            raise NanoagentError(problem)
        components.append(channel_component(channel, settings, paths, hub,
                                            max_image_bytes=config.tools.attachments.max_image_bytes,
                                            max_text_bytes=config.tools.attachments.max_text_bytes,
                                            transcriber=transcriber(config, paths),
                                            reply_limit=config.channels.reply_limit))
    return components


def _settings(config: Config) -> dict[str, str]:
    """What each model and provider variable stands for in this gateway (from the environment or config.json):
    a client whose own variables say otherwise runs in its own process (`gateway.oneshot.settings_differ`)."""
    from nanoagent.config.loader import ENV_KEYS

    settings = {"NANOAGENT_MODEL": config.agents.defaults.model}
    for name, variables in ENV_KEYS.items():
        provider = config.providers.get(name)
        for variable, value in zip(variables, (provider.api_key, provider.api_base) if provider else ("", ""),
                                   strict=True):
            if variable:
                settings[variable] = value or ""
    return settings


def _log_to_stderr() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(lambda record: not getattr(record, "shown", False))  # the error line says it already
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("nanoagent")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


@gateway_app.command("status")
def status(workspace: WorkspaceOpt = None) -> None:
    """Whether a gateway runs for this home, and what it is doing.

    It shows the gateway's pid, uptime, running turns and clients.

    Example: nanoagent gateway status
    """
    import asyncio

    paths, _ = setup(workspace)
    from nanoagent.gateway.oneshot import gateway_answers

    if not gateway_answers(paths.gateway_socket):
        print(f"No gateway is running for {paths.home}. Start one with `nanoagent gateway`.")
        raise typer.Exit(3)
    info = asyncio.run(_ask_status(paths.gateway_socket))
    uptime = time.time() - float(info.get("started") or time.time())
    running = ", ".join(info.get("running") or []) or "none"
    health = info.get("health") or {}
    components = [f"{name} ({health[name]})" if health.get(name) else name for name in info.get("components") or []]
    from nanoagent.channels.state import backlog
    from nanoagent.cli.render import say

    say(f"gateway running: pid {info.get('pid')}, up {uptime:.0f} s, socket {paths.gateway_socket}",
        f"turns running: {running}; clients: {info.get('clients')}; channels: {', '.join(components) or 'none'}",
        *(f"{name}: {waiting}" for name in info.get("components") or [] if (waiting := backlog(paths, name))))


async def _ask_status(socket: Path) -> dict:
    import asyncio

    from nanoagent.gateway import protocol

    reader, writer = await asyncio.open_unix_connection(str(socket))
    try:
        writer.write(protocol.encode({"type": "status"}))
        return protocol.decode(await asyncio.wait_for(reader.readline(), 5))
    finally:
        writer.close()


@gateway_app.command("stop")
def stop(workspace: WorkspaceOpt = None,
         wait: Annotated[float, typer.Option(help="Seconds to wait for it to finish running turns.")] = 30.0) -> None:
    """Ask the running gateway to stop (SIGTERM).

    Running turns get their grace period, then it exits.

    Example: nanoagent gateway stop
    """
    paths, _ = setup(workspace)
    pid_file = paths.run_dir / "gateway.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        print(f"No gateway is running for {paths.home}.")
        raise typer.Exit(3) from None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        print(f"No gateway is running for {paths.home} (pid {pid} is gone; its files are cleaned up at the next "
              "start).")
        raise typer.Exit(3) from None
    deadline = time.monotonic() + wait
    while pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_file.exists():
        raise NanoagentError(f"The gateway (pid {pid}) is still finishing after {wait:g} s; check "
                             "`nanoagent gateway status`, or kill it.")
    print(f"Stopped the gateway (pid {pid}).")


@gateway_app.command("install")
def install(
    print_only: Annotated[bool, typer.Option("--print", help="Print the systemd unit instead of installing it.")] = False,
) -> None:
    """Install a systemd user unit: the gateway starts at login.

    It is restarted when it fails.

    Example: nanoagent gateway install --print
    """
    paths, _ = setup(None)
    exe = shutil.which("nanoagent") or f"{sys.executable} -m nanoagent"
    unit = UNIT.format(exe=exe, home=paths.home)
    if print_only:
        print(unit, end="")
        return
    target = Path(os.path.expanduser("~/.config/systemd/user/nanoagent-gateway.service"))
    from nanoagent.fsutil import atomic_write

    atomic_write(target, unit, mode=0o644)
    print(f"Wrote {target}. Start it now and at every login with:\n"
          "  systemctl --user daemon-reload && systemctl --user enable --now nanoagent-gateway\n"
          "(to keep it running after you log out: loginctl enable-linger $USER)")


__all__ = ["gateway_app"]
