"""`nanoagent gateway` (run it in the foreground), `gateway start` (in the background, supervised), `stop`, `restart`,
`status`, `logs` and `install`."""

from __future__ import annotations

import logging
import os
import shutil
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
    from nanoagent.gateway.http import Listener
    from nanoagent.gateway.hub import Hub
    from nanoagent.gateway.server import Component
    from nanoagent.paths import Paths

gateway_app = App(help="Keep the agent running for terminals, programs and chat apps.\n\nAlone it runs in the "
                       "foreground (Ctrl-C or SIGTERM stops it cleanly); `start` runs it in the background.\n\n"
                       "Example: nanoagent gateway start",
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
    """Run the gateway in the foreground (logs to stderr and logs/gateway.log); Ctrl-C or SIGTERM stops it cleanly.

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
        serving += (f" and {url(gateway_config.http.host, gateway_config.http.port).removesuffix('v1')} (the web "
                    "app: `nanoagent web`; the OpenAI-compatible API under /v1, its token in run/http-token)")
    channels = _channels(config, paths, hub)
    components += channels
    from nanoagent.gateway.server import Component

    # temporary chats end after an idle hour, and sessions idle as long are no longer held in memory
    components.append(Component("incognito", hub.sweep_idle))
    if config.cron.enabled:
        from nanoagent.gateway.cron import cron_component

        components.append(cron_component(config, paths, hub, outbox))
    if loop.mcp is not None:  # one set of connections for every session, kept up while the gateway runs
        components.append(Component("mcp", loop.mcp.run))
    if loop.closers:  # the browser, started by its first use: closed when the gateway stops
        components.append(Component("browser", lambda: _close_when_stopped(loop.closers)))
    server = Gateway(hub, paths, components=components, grace=gateway_config.shutdown_grace,
                     settings=_settings(config), watchdog=gateway_config.watchdog_seconds,
                     web=lambda: _web_address(listener))

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
        names = ", ".join(c.name for c in channels) or "none"
        print(f"nanoagent gateway: listening on {serving}; channels: {names}; pid {os.getpid()}. Ctrl-C stops it.",
              file=sys.stderr, flush=True)
        provider = loop.providers.get(loop.models.default)  # the SDK loads now, not in the first turn
        asyncio.get_running_loop().run_in_executor(None, provider.prepare)
        # the sandbox's smoke test, which the prompt reports on, runs now off the event loop (its result is kept)
        asyncio.get_running_loop().run_in_executor(None, loop.context.confinement)

    _start_logging(paths)  # from here on: a refusal before this is one line, not also a log line
    asyncio.run(server.serve(ready))


def _web_address(listener: Listener | None) -> str:
    """The web app's address while the HTTP listener listens ("" while it is off)."""
    if listener is None or listener.address is None:
        return ""
    host, port = listener.address
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


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


def _start_logging(paths: Paths) -> None:
    """The gateway's records: as JSON into logs/gateway.log, and as human lines on stderr (not the start record,
    which the start line says, nor an error the error line says). logs/nanoagent.log keeps warnings only, as for
    every other command: it is never moved aside."""
    from nanoagent.gateway.logfile import Human, JsonLog, log_path

    root = logging.getLogger("nanoagent")
    for handler in root.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.WARNING)
    root.addHandler(JsonLog(log_path(paths.logs_dir)))
    terminal = logging.StreamHandler(sys.stderr)
    terminal.addFilter(lambda record: not getattr(record, "shown", False) and getattr(record, "terminal", True))
    terminal.setFormatter(Human())
    root.addHandler(terminal)
    root.setLevel(logging.INFO)


@gateway_app.command("start")
def start(workspace: WorkspaceOpt = None,
          wait: Annotated[float, typer.Option(help="Seconds to wait for it to answer.")] = 60.0) -> None:
    """Run the gateway in the background, restarted when it fails.

    A supervisor runs it detached from the terminal and starts it again after a crash or a stalled event loop
    (with backoff); its log is logs/gateway.log (`nanoagent gateway logs`).

    Example: nanoagent gateway start
    """
    from nanoagent.gateway import service

    paths, _ = setup(workspace)
    pid, started = service.start(paths, _args(workspace), wait)
    if not started:
        print(f"A gateway is already running for {paths.home} (pid {pid}).")
        return
    print(f"Started the gateway for {paths.home} (pid {pid}); `nanoagent gateway logs -f` follows its log.")


@gateway_app.command("restart")
def restart(workspace: WorkspaceOpt = None,
            wait: Annotated[float, typer.Option(help="Seconds to wait for each step.")] = 60.0) -> None:
    """Stop the gateway and start it again in the background.

    A gateway started with `gateway start` is restarted by its supervisor; one in a terminal is stopped and
    started in the background.

    Example: nanoagent gateway restart
    """
    from nanoagent.gateway import service

    paths, _ = setup(workspace)
    pid = service.restart(paths, _args(workspace), wait)
    print(f"Restarted the gateway for {paths.home} (pid {pid}).")


def _args(workspace: Path | None) -> list[str]:
    """The supervised `nanoagent gateway`'s options: this command's workspace."""
    return ["-w", str(workspace.expanduser().absolute())] if workspace is not None else []


@gateway_app.command("status")
def status(workspace: WorkspaceOpt = None) -> None:
    """Whether a gateway runs for this home, and what it is doing.

    It shows the gateway's pid, uptime, running turns, clients, channels, the web app's address and, for one
    started with `gateway start`, its restarts.

    Example: nanoagent gateway status
    """
    import asyncio

    paths, _ = setup(workspace)
    from nanoagent.cli.render import say
    from nanoagent.gateway import supervisor
    from nanoagent.gateway.oneshot import gateway_answers

    supervised = supervisor.state(paths)
    if not gateway_answers(paths.gateway_socket):
        if supervised is not None:
            say(f"No gateway is answering for {paths.home}; its supervisor (pid {supervised.get('pid')}) starts it "
                "again.", _restarts(supervised))
        else:
            print(f"No gateway is running for {paths.home}. Start one with `nanoagent gateway start`.")
        raise typer.Exit(3)
    info = asyncio.run(_ask_status(paths.gateway_socket))
    uptime = time.time() - float(info.get("started") or time.time())
    running = ", ".join(info.get("running") or []) or "none"
    health = info.get("health") or {}
    components = [f"{name} ({health[name]})" if health.get(name) else name for name in info.get("components") or []]
    from nanoagent.channels.state import backlog

    web = info.get("web") or "off (`nanoagent web` turns it on)"
    say(f"gateway running: pid {info.get('pid')}, up {uptime:.0f} s, socket {paths.gateway_socket}",
        f"turns running: {running}; clients: {info.get('clients')}; channels: {', '.join(components) or 'none'}",
        f"web: {web}",
        _loop_line(info),
        _restarts(supervised) if supervised is not None else "supervisor: none (not started with `gateway start`)",
        *(f"{name}: {waiting}" for name in info.get("components") or [] if (waiting := backlog(paths, name))))


def _loop_line(info: dict) -> str:
    lag = info.get("lag_ms") or {}
    line = f"event loop: {info.get('tasks')} tasks"
    if lag:
        line += (f", lag p99 {lag.get('p99')} ms (worst {lag.get('max')} ms) over its last {lag.get('beats')} "
                 "watchdog beats")
    return line


def _restarts(supervised: dict) -> str:
    """The supervisor's line: its pid, the restarts and the last exit that caused one."""
    line = f"supervisor: pid {supervised.get('pid')}, restarts: {supervised.get('restarts', 0)}"
    last = supervised.get("last_exit")
    if isinstance(last, dict):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(last.get("time") or 0)))
        said = f": {last['said']}" if last.get("said") else ""
        line += f" (the last after exit {last.get('code')} at {when}{said})"
    return line


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

    Running turns get their grace period, then it exits; a supervisor (`gateway start`) ends with it.

    Example: nanoagent gateway stop
    """
    from nanoagent.gateway import service

    paths, _ = setup(workspace)
    try:
        pid = service.stop(paths, wait)
    except service.NotRunning as e:
        print(e)
        raise typer.Exit(3) from None
    print(f"Stopped the gateway (pid {pid}).")


@gateway_app.command("logs")
def logs(workspace: WorkspaceOpt = None,
         follow: Annotated[bool, typer.Option("--follow", "-f", help="Go on showing new lines as they come.")] = False,
         as_json: Annotated[bool, typer.Option("--json", help="The JSON records as written.")] = False,
         lines: Annotated[int, typer.Option("--lines", "-n", help="How many of the last lines to show.")] = 50) -> None:
    """Show the gateway's log: its last lines, or follow it.

    The log is logs/gateway.log; human lines by default, --json gives the records themselves, one a line.

    Example: nanoagent gateway logs -f
    """
    from nanoagent.cli.common import open_paths
    from nanoagent.cli.render import terminal_safe
    from nanoagent.gateway import logfile

    paths = open_paths(workspace)
    path = logfile.log_path(paths.logs_dir)
    if not follow and not path.exists():
        print(f"No gateway log yet ({path}); start a gateway with `nanoagent gateway start`.", file=sys.stderr)
        return

    def show(line: str) -> None:
        print(line if as_json else terminal_safe(_human(line)), flush=True)

    coming = logfile.follow(path) if follow else iter(())  # opened first: a line written meanwhile is not lost
    for line in logfile.last_lines(path, lines):
        show(line)
    for line in coming:
        show(line)


def _human(line: str) -> str:
    import json

    from nanoagent.gateway.logfile import human

    try:
        record = json.loads(line)
    except ValueError:
        return line
    return human(record) if isinstance(record, dict) else line


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
