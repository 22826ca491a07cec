"""The `nanoagent` command. Exceptions become exit codes here and nowhere else.

Keep module-level imports light: `nanoagent --help` must not load a provider SDK.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from nanoagent import __version__
from nanoagent.cli.common import DebugOpt, WorkspaceOpt, log, setup, state, warn
from nanoagent.errors import NanoagentError, describe_os_error

if TYPE_CHECKING:
    from nanoagent.agent.events import EventSink, TurnResult
    from nanoagent.cli.attach import LocalAgent
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths
    from nanoagent.tools import Ask

app = typer.Typer(
    name="nanoagent",
    help="A personal AI agent for your terminal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

def _register_subcommands() -> None:
    from nanoagent.cli import dream_cmd
    from nanoagent.cli.gateway_cmd import gateway_app
    from nanoagent.cli.memory_cmd import memory_app
    from nanoagent.cli.pairing_cmd import pairing_app
    from nanoagent.cli.skills_cmd import skills_app

    app.add_typer(gateway_app, name="gateway")
    app.add_typer(pairing_app, name="pairing")
    app.add_typer(skills_app, name="skills")
    app.add_typer(memory_app, name="memory")
    dream_cmd.register(app)


def _version(value: bool) -> None:
    if value:
        print(f"nanoagent {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
    debug: DebugOpt = False,
) -> None:
    """A personal AI agent for your terminal."""


@app.command()
def agent(
    message: Annotated[str | None, typer.Option("--message", "-m", help="Send one message and exit.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model to use, e.g. anthropic/claude-sonnet-4-5.")] = None,
    session: Annotated[str, typer.Option("--session", "-s", help="Session key (channel:chat_id).")] = "cli:direct",
    workspace: WorkspaceOpt = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object with reply, usage and tool calls.")] = False,
    local: Annotated[bool, typer.Option("--local", help="Run the agent in this process even when a gateway is "
                                                        "running.")] = False,
    debug: DebugOpt = False,
) -> None:
    """Talk to the agent: `-m` for one message; interactive when no message is given.

    When a gateway is running (`nanoagent gateway`), both go through it; otherwise, or with --local, -w or
    --model, the agent runs in this process.
    """
    if message is not None:
        _check_message(message)
    paths, config = setup(workspace)
    key = session if ":" in session else f"cli:{session}"
    remote = not local and workspace is None and model is None and _gateway_running(paths)
    if message is None:
        _interactive(paths, config, model, key, remote)
        return

    from nanoagent.cli.render import OneShotRenderer
    from nanoagent.cli.running import ask_terminal, run_main

    renderer = OneShotRenderer(quiet_reply=json_output)
    ask = ask_terminal if sys.stdin.isatty() else None  # a person at the terminal can approve a command
    turn = run_main(_one_shot(paths, config, model, key, message, renderer, ask, remote))
    error = turn.result.error if turn.result is not None else None
    failed = error is not None
    if failed:
        log.error("turn failed in session %s: %s", turn.session, error)
    if json_output:
        print(json.dumps(_turn_json(turn), ensure_ascii=False))
    else:
        renderer.finish(turn.reply, failed)
    if failed:
        raise typer.Exit(1)


def _check_message(message: str) -> None:
    """A message the model can be sent: not blank, and text (argv that is not UTF-8 arrives as surrogates)."""
    if not message.strip():
        raise NanoagentError("Nothing to send: the message after -m is empty; give it some text.")
    try:
        message.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(message[e.start])
        byte = f" (byte 0x{code - 0xdc00:02x})" if 0xdc80 <= code <= 0xdcff else ""
        raise NanoagentError(f"The message is not valid UTF-8{byte}; set your terminal and locale to UTF-8 "
                             "(e.g. LANG=C.UTF-8) and send it again.") from None


def _gateway_running(paths: Paths) -> bool:
    from nanoagent.gateway.client import gateway_answers

    return gateway_answers(paths.gateway_socket)


def _local(config: Config, paths: Paths, model: str | None) -> LocalAgent:
    from nanoagent.agent.build import build_agent
    from nanoagent.cli.attach import LocalAgent

    return LocalAgent(build_agent(config, paths, model=model, warn=warn))


async def _one_shot(paths: Paths, config: Config, model: str | None, key: str, message: str, renderer: EventSink,
                    ask: Ask | None, remote: bool) -> TurnResult:
    if not remote:
        local = _local(config, paths, model)
        turn = await local.handle(message, key, renderer, ask=ask)
        if local.loop.subagents is not None:  # background runs finish before the process ends (Ctrl-C stops them)
            await local.loop.subagents.wait(key)
        return turn
    from nanoagent.cli.attach import connect

    agent = await connect(paths.gateway_socket, key, renderer, ask)
    try:
        return await agent.handle(message, key, renderer, ask=ask)
    finally:
        await agent.client.close()


def _interactive(paths: Paths, config: Config, model: str | None, key: str, remote: bool) -> None:
    from rich.console import Console

    from nanoagent.cli.interactive import TerminalUI, run_interactive, run_plain
    from nanoagent.cli.running import run_main

    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    ui = TerminalUI(min(Console().width, 100) if terminal else 100, plain=not terminal)

    async def session() -> None:
        from nanoagent.cli.attach import RemoteAgent, connect

        agent: LocalAgent | RemoteAgent = (await connect(paths.gateway_socket, key, ui, None) if remote
                                           else _local(config, paths, model))
        try:
            if terminal:
                await run_interactive(agent, key, paths.home / "history" / "cli_history", ui,
                                      " (through the gateway)" if remote else "")
            else:
                await run_plain(agent, key, ui)
        finally:
            if isinstance(agent, RemoteAgent):
                await agent.client.close()

    run_main(session())


def _turn_json(turn: TurnResult) -> dict[str, Any]:
    result = turn.result
    data: dict[str, Any] = {"reply": turn.reply, "session": turn.session, "model": turn.model}
    if result is not None:
        data.update(
            stop=result.stop.value,
            error=result.error,
            usage=result.usage.to_dict(),
            tool_calls=[{"name": c.name, "arguments": c.arguments, "ok": c.ok, "elapsed": round(c.elapsed, 3)}
                        for c in result.tool_calls],
        )
    return data


@app.command()
def onboard(
    provider: Annotated[str | None, typer.Option(help="Provider name, e.g. anthropic, openai, openrouter, ollama.")] = None,
    model: Annotated[str | None, typer.Option(help="Default model, e.g. anthropic/claude-sonnet-4-5.")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="API key for the provider.")] = None,
    api_base: Annotated[str | None, typer.Option("--api-base", help="Base URL for an OpenAI-compatible server.")] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Create config.json (mode 0600) and the workspace, keeping anything that already exists.

    With no options on a terminal, asks for provider, model and key.
    """
    from nanoagent.cli.setup import onboard as run_onboard

    ask = not any((provider, model, api_key, api_base)) and sys.stdin.isatty() and sys.stdout.isatty()
    run_onboard(workspace, provider=provider, model=model, api_key=api_key, api_base=api_base, interactive=ask)


@app.command()
def status(workspace: WorkspaceOpt = None) -> None:
    """Show the model, provider, key presence, workspace and session paths."""
    from nanoagent.cli.setup import status_lines

    paths, config = setup(workspace)
    for line in status_lines(paths, config):
        print(line)


_register_subcommands()


@app.command()
def usage(
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session key.")] = None,
    days: Annotated[int | None, typer.Option("--days", "-d", help="Only the last N days.")] = None,
) -> None:
    """Tokens and cost per day, session and model."""
    from rich.table import Table

    from nanoagent.agent.subagents import root_key
    from nanoagent.cli.render import table_console
    from nanoagent.session.store import SessionStore
    from nanoagent.usage import Total, summarize

    paths, _ = setup(None)
    store = SessionStore(paths.sessions_dir, warn=warn)
    keys = [session if session is None or ":" in session else f"cli:{session}"] if session else store.keys()
    if session:  # the session's sub-agents count under it
        keys += [k for k in store.keys_with_prefix("subagent:") if root_key(k) == keys[0]]
    records = [(root_key(key), record) for key in keys for record in store.load(key).usage]
    rows = summarize(records, days=days)
    if not rows:
        print("No usage recorded" + (f" for session {keys[0]}" if session else "") + ".")
        return
    table = Table("day", "session", "model", "calls", "input", "output", "cache read", "cache write", "cost")
    grand = Total()
    for day, key, model, total in rows:
        u = total.usage
        table.add_row(day, key, model, str(total.calls), f"{u.input_tokens:,}", f"{u.output_tokens:,}",
                      f"{u.cache_read_tokens:,}", f"{u.cache_write_tokens:,}", total.cost_text())
        grand.merge(total)
    g = grand.usage
    table.add_row("total", "", "", str(grand.calls), f"{g.input_tokens:,}", f"{g.output_tokens:,}",
                  f"{g.cache_read_tokens:,}", f"{g.cache_write_tokens:,}", grand.cost_text(), style="bold")
    table_console().print(table)


@app.command()
def dream(
    all_entries: Annotated[bool, typer.Option("--all", help="Keep going, batch after batch, until every entry is processed.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the analysis and the edits it would make; change nothing.")] = False,
    batch: Annotated[bool, typer.Option("--batch", help="Use Anthropic's Message Batches API (half price, slower).")] = False,
    model: Annotated[str | None, typer.Option("--model", help="Model for this run (default: memory.dreamModel, then the agent's model).")] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Fold new conversation history into long-term memory (SOUL.md, USER.md, memory/MEMORY.md).

    Each edit becomes its own commit: see them with `nanoagent dream-log`, undo one with
    `nanoagent dream-restore SHA`. Safe to run from cron; only one Dream runs at a time.
    """
    import asyncio

    from nanoagent.agent.build import build_dream
    from nanoagent.cli.render import OneShotRenderer
    from nanoagent.memory.dream import describe

    paths, config = setup(workspace)
    runner = build_dream(config, paths, sink=OneShotRenderer(quiet_reply=True), model=model, batch=batch, warn=warn)
    results = asyncio.run(runner.run(all_entries=all_entries, dry_run=dry_run))
    print(describe(results, runner.history.dream_cursor))


@app.command()
def doctor(
    workspace: WorkspaceOpt = None,
    fix: Annotated[bool, typer.Option("--fix", help="Migrate renamed config keys (a backup is kept).")] = False,
) -> None:
    """Check config, keys, workspace, git and the offline tokenizer, and say what to fix."""
    from nanoagent.cli.setup import run_doctor

    if not run_doctor(workspace, fix):
        raise typer.Exit(1)


def main(args: list[str] | None = None) -> None:
    """Run the command in `args` (default: the command line). `--debug` lets tracebacks through."""
    state.debug = False
    try:
        app(args=args, prog_name="nanoagent")  # not `python -m nanoagent`: completion scripts name the command
    except NanoagentError as e:
        log.error("%s", e)
        if state.debug:
            raise
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except OSError as e:
        message = describe_os_error(e)
        if message is None:
            _unexpected(e)
        log.error("%s", message)
        if state.debug:
            raise
        print(f"Error: {message}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - the one boundary where surprises become exit codes
        _unexpected(e)


def _unexpected(e: Exception) -> NoReturn:
    log.error("unexpected error", exc_info=True)
    if state.debug:
        raise e
    print(f"Error: {type(e).__name__}: {e} (run again with --debug for the traceback)", file=sys.stderr)
    sys.exit(1)
