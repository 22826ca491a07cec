"""The `nanoagent` command line (entry.py runs it, and turns its exceptions into exit codes).

Keep module-level imports light: `nanoagent --help` must not load a provider SDK.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core

from nanoagent import __version__
from nanoagent.cli.common import (
    App,
    DebugOpt,
    Group,
    WorkspaceOpt,
    open_paths,
    read_config,
    setup,
    warn,
    write_commands,
)
from nanoagent.cli.logs import state
from nanoagent.cli.oneshot import (
    check_message,
    finish,
    session_key,
    stdin_has_data,
    stdin_is_terminal,
    through_gateway,
)
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from typer._click import Context, HelpFormatter  # typer 0.28 carries its own click

    from nanoagent.agent.events import EventSink, TurnResult
    from nanoagent.attachments import Attached
    from nanoagent.cli.attach import LocalAgent
    from nanoagent.config.schema import Config
    from nanoagent.messages import ImageBlock
    from nanoagent.paths import Paths
    from nanoagent.session.store import Session
    from nanoagent.tools import Ask

# `nanoagent --help` lists commands in these groups, in this order; a command in none of them goes last.
SECTIONS = (
    ("Talk", ("agent", "sessions", "acp")),
    ("Memory", ("memory", "dream", "dream-log", "dream-restore")),
    ("Always on", ("gateway", "web", "channels", "pairing", "cron", "heartbeat", "mcp")),
    ("Setup", ("onboard", "status", "doctor", "skills", "usage", "budget", "browser")),
)


# Command groups, loaded only when named (or for --help): `nanoagent agent -m` does not pay for building the
# other groups' commands, which typer does for every registered command on each start.
LAZY_GROUPS = {
    "sessions": "nanoagent.cli.sessions_cmd:sessions_app",
    "memory": "nanoagent.cli.memory_cmd:memory_app",
    "gateway": "nanoagent.cli.gateway_cmd:gateway_app",
    "web": "nanoagent.cli.web_cmd:web_app",
    "channels": "nanoagent.cli.channels_cmd:channels_app",
    "pairing": "nanoagent.cli.pairing_cmd:pairing_app",
    "cron": "nanoagent.cli.cron_cmd:cron_app",
    "mcp": "nanoagent.cli.mcp_cmd:mcp_app",
    "skills": "nanoagent.cli.skills_cmd:skills_app",
    "browser": "nanoagent.cli.browser_cmd:browser_app",
}


class GroupedHelp(Group):
    """Help that reads in order: commands grouped by what a person wants to do, not by when they were added.
    The groups in LAZY_GROUPS are imported and built when asked for."""

    def list_commands(self, ctx: Context) -> list[str]:
        order = [name for _, names in SECTIONS for name in names]
        known = [*super().list_commands(ctx), *LAZY_GROUPS]
        return sorted(known, key=lambda name: order.index(name) if name in order else len(order))

    def get_command(self, ctx: Context, name: str) -> Any:
        if name not in LAZY_GROUPS:
            return super().get_command(ctx, name)
        import importlib

        module, attr = LAZY_GROUPS[name].split(":")
        group = typer.main.get_group(getattr(importlib.import_module(module), attr))  # a group even with one command
        group.name = name
        for command in (group, *group.commands.values()):  # plain help, as the commands registered here have
            command.rich_markup_mode = None  # type: ignore[attr-defined]
        return group

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        commands = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        placed: set[str] = set()
        for title, names in (*SECTIONS, ("Other", tuple(commands))):
            shown = [(name, command) for name in names if name not in placed
                     and (command := commands.get(name)) is not None]
            placed.update(name for name, _ in shown)
            write_commands(formatter, title, shown)


app = App(
    name="nanoagent",
    help="A personal AI agent for your terminal.",
    cls=GroupedHelp,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

def _register_subcommands() -> None:
    from nanoagent.cli import acp_cmd, budget_cmd, dream_cmd, heartbeat_cmd

    dream_cmd.register(app)
    heartbeat_cmd.register(app)
    budget_cmd.register(app)
    acp_cmd.register(app)


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
    prompt: Annotated[str | None, typer.Argument(help="The message, as with -m (`nanoagent agent \"hi\"`).",
                                                 show_default=False, metavar="MESSAGE")] = None,
    message: Annotated[str | None, typer.Option("--message", "-m", help="Send one message and exit; `-m -` reads "
                       "it from stdin, and text piped in with `-m TEXT` goes before TEXT.")] = None,
    continue_last: Annotated[bool, typer.Option("--continue", "-c", help="Continue the most recent conversation "
                                                "(see `nanoagent sessions list`).")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Pick a recent conversation to continue from a list "
                                         "(on a terminal).")] = False,
    model: Annotated[str | None, typer.Option("--model", help="Model to use, e.g. anthropic/claude-sonnet-4-5.")] = None,
    session: Annotated[str, typer.Option("--session", "-s", help="Session key (channel:chat_id).")] = "cli:direct",
    attach: Annotated[list[str] | None, typer.Option("--attach", "-a", help="Attach a file to the -m message "
                      "(repeatable): an image (PNG, JPEG, GIF, WebP), a text file, or audio to transcribe.")] = None,
    workspace: WorkspaceOpt = None,
    folder: Annotated[Path | None, typer.Option("--dir", "-C", metavar="DIR", help="Work in DIR: the file tools and "
                      "exec act there, while memory and sessions stay in the workspace.", show_default=False)] = None,
    here: Annotated[bool, typer.Option("--here", help="Work in the current folder (as -C .).")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object with reply, usage and tool calls.")] = False,
    local: Annotated[bool, typer.Option("--local", help="Run the agent in this process even when a gateway is "
                                                        "running.")] = False,
    incognito: Annotated[bool, typer.Option("--incognito", help="A temporary chat, run in this process: never "
                                            "archived, Dreamed or searchable, deleted when it ends.")] = False,
    debug: DebugOpt = False,
) -> None:
    """Talk to the agent: one message with `-m`, else a conversation.

    With no message it is interactive, continuing the session it names (cli:direct unless -s, -c or --resume
    says otherwise; `/new` starts afresh). When a gateway is running (`nanoagent gateway`), both go through it; otherwise, or with --local, -w,
    --model or --incognito, the agent runs in this process.

    With -C DIR (or --here) it works in that folder, in a session of that folder's own (-c and --resume pick
    among them), and writes nothing there but what its tools are asked to.

    Example: nanoagent agent -m "what is on my list today?"
    """
    if prompt is not None:
        if message is not None:
            raise NanoagentError("Give the message once: either as an argument or after -m, not both.")
        message = prompt
    elif message is None and not stdin_is_terminal() and stdin_has_data():
        message = "-"  # `cat notes.txt | nanoagent agent`: what was piped in is one message
    if message is not None and message != "-":
        check_message(message)
    elif attach and message is None:
        raise NanoagentError("-a/--attach goes with -m; in an interactive session type /attach PATH instead.")
    paths = open_paths(workspace, seeds=True)
    from nanoagent.cli.workdir import session_in, working_folder

    workdir = working_folder(paths, folder, here)
    key = session_in(workdir, session) if workdir else session_key(session)
    if continue_last or resume:
        if session != "cli:direct":
            raise NanoagentError("-s names a session and -c/--resume pick one; give one of them.")
        key = _pick_session(paths, resume, workdir)
    remote = not local and not incognito and workspace is None and model is None and _gateway_running(paths)
    config = functools.cache(lambda: read_config(paths))  # attached to a gateway, its config is what counts
    if message is None:
        _interactive(paths, config(), model, key, remote, replay=continue_last or resume, incognito=incognito,
                     workdir=workdir)
        return
    message = _with_stdin(message, lambda: config().tools.attachments.max_stdin_bytes)
    images: list[ImageBlock] = []
    if attach:
        from nanoagent.attachments import compose

        attached = [_attacher(paths, config(), key)(name) for name in attach]
        for note in (a.heard.note for a in attached if a.heard is not None):
            if note:
                warn(note)
        message, images = compose(message, attached)

    from nanoagent.cli.render import OneShotRenderer

    renderer = OneShotRenderer(quiet_reply=json_output)
    renderer.warm_up()
    if remote:
        turn = through_gateway(paths, key, message, renderer, images, workdir)
    else:
        from nanoagent.cli.running import ask_terminal, run_main

        ask = ask_terminal if stdin_is_terminal() else None  # a person at the terminal can approve a command
        turn = run_main(_one_shot(paths, config(), model, key, message, renderer, ask, images, incognito, workdir))
    finish(paths, turn, renderer, json_output)


def _pick_session(paths: Paths, choose: bool, workdir: str = "") -> str:
    """-c: the most recently active conversation; --resume: one picked from a numbered list on a terminal. With a
    working folder, among that folder's conversations; without, among those of no folder."""
    from nanoagent.cli.sessions_cmd import conversations
    from nanoagent.cli.workdir import belongs, of_a_folder
    from nanoagent.session.store import SessionStore

    within = (lambda key: belongs(key, workdir)) if workdir else (lambda key: not of_a_folder(key))
    rows = conversations(SessionStore(paths.sessions_dir, warn=warn), limit=15 if choose else 1, within=within)
    if not rows and workdir:
        raise NanoagentError(f"No earlier conversation in {workdir} to continue; start one with "
                             "`nanoagent agent -C DIR` (or --here).")
    if not rows:
        raise NanoagentError("No earlier conversation to continue; start one with `nanoagent agent`.")
    if not choose:
        return rows[0].key
    if not (stdin_is_terminal() and sys.stdout.isatty()):
        raise NanoagentError("--resume asks which conversation on a terminal; here use -c (the most recent) "
                             "or -s KEY (see `nanoagent sessions list`).")
    from nanoagent.cli.render import say, terminal_safe

    for number, row in enumerate(rows, 1):
        say(f"{number:>3}  {terminal_safe(row.key):<32} {row.messages:>6,} messages  {terminal_safe(row.preview)}",
            hang=5)
    answer = input(f"Continue which (1-{len(rows)}, Enter for 1)? ").strip() or "1"
    if not answer.isdigit() or not 1 <= int(answer) <= len(rows):
        raise NanoagentError(f"{answer!r} is not one of 1-{len(rows)}; run it again and type a number.")
    return rows[int(answer) - 1].key


def _with_stdin(message: str, limit_of: Callable[[], int]) -> str:
    """`-m -`: the message is all of stdin. `-m TEXT` with text piped in: the piped text, marked, then TEXT."""
    if message == "-" and stdin_is_terminal():
        raise NanoagentError("-m - reads the message from stdin, but stdin is a terminal; pipe the message in "
                             "(echo hi | nanoagent agent -m -) or give it after -m.")
    limit = limit_of() if stdin_has_data() else 0  # config.json is read only when something was piped in
    data = _read_stdin(limit) if limit else None
    if not data:
        if message == "-":
            raise NanoagentError("Nothing to send: -m - reads the message from stdin, and nothing was piped in.")
        return message
    if len(data) > limit:
        raise NanoagentError(f"The input piped to nanoagent is over the {limit:,}-byte limit "
                             "(tools.attachments.maxStdinBytes in config.json); send less, or a file with -a.")
    from nanoagent.attachments import as_text, piped

    text = as_text(data)
    if text is None:
        raise NanoagentError("The input piped to nanoagent is not text (UTF-8); pipe text, or attach an image "
                             "with -a.")

    if message == "-":
        check_message(text)
        return text
    return piped(text, message) if text.strip() else message


def _read_stdin(limit: int) -> bytes:
    """Up to `limit` + 1 bytes of what was piped in; only called when `stdin_has_data` says something was (a
    terminal, /dev/null or a socket is never read: that could wait for ever or means nothing)."""
    buffer = getattr(sys.stdin, "buffer", None)
    return buffer.read(limit + 1) if buffer is not None else sys.stdin.read(limit + 1).encode("utf-8")


def _attacher(paths: Paths, config: Config, key: str) -> Callable[[str], Attached]:
    """Reads a file the user names (images go to the workspace's media/; audio is transcribed, counted against the
    session `key`'s spend caps); AttachmentError says why it cannot."""
    from pathlib import Path

    from nanoagent.attachments import Limits, prepare
    from nanoagent.transcribe import transcriber

    a = config.tools.attachments
    limits, ears = Limits(a.max_image_bytes, a.max_text_bytes), transcriber(config, paths)
    return lambda name: prepare(Path(name).expanduser(), paths.workspace, limits, shown=name, transcriber=ears,
                                session=key)


def _gateway_running(paths: Paths) -> bool:
    """A gateway answers, and this process's model and provider variables (if any) are the ones it uses."""
    from nanoagent.gateway.oneshot import gateway_answers, settings_differ

    return gateway_answers(paths.gateway_socket) and not settings_differ(paths.run_dir)


def _local(config: Config, paths: Paths, model: str | None, check_model: bool = True, workdir: str = "") -> LocalAgent:
    from nanoagent.agent.build import build_agent
    from nanoagent.cli.attach import LocalAgent

    return LocalAgent(build_agent(config, paths, model=model, warn=warn, check_model=check_model), workdir)


async def _one_shot(paths: Paths, config: Config, model: str | None, key: str, message: str, renderer: EventSink,
                    ask: Ask | None, images: list[ImageBlock], incognito: bool = False, workdir: str = "") -> TurnResult:
    """The agent in this process answers; MCP servers it started stop with it, and so does a temporary session."""
    local = _local(config, paths, model, check_model=not message.lstrip().startswith("/"),  # /help needs no key
                   workdir=workdir)
    if incognito:
        local.loop.start_incognito(key)
    try:
        turn = await local.handle(message, key, renderer, ask=ask, images=images)
        if local.loop.subagents is not None:  # background runs finish before the process ends (Ctrl-C stops them)
            await local.loop.subagents.wait(key)
        return turn
    finally:
        await local.aclose()


def _interactive(paths: Paths, config: Config, model: str | None, key: str, remote: bool,
                 replay: bool = False, incognito: bool = False, workdir: str = "") -> None:
    from nanoagent.cli.interactive import TerminalUI, run_interactive, run_plain
    from nanoagent.cli.render import REPLY_WIDTH, terminal_width
    from nanoagent.cli.running import run_main

    terminal = stdin_is_terminal() and sys.stdout.isatty()
    ui = TerminalUI(terminal_width if terminal else REPLY_WIDTH, plain=not terminal)

    async def session() -> None:
        from nanoagent.cli.attach import LocalAgent, RemoteAgent, connect

        here = functools.partial(_local, config, paths, model, workdir=workdir)
        agent: LocalAgent | RemoteAgent = (await connect(paths.gateway_socket, key, ui, local=here, workdir=workdir)
                                           if remote else here())
        if incognito and isinstance(agent, LocalAgent):  # --incognito never attaches: its session ends with us
            agent.loop.start_incognito(key)
        try:
            attacher = _attacher(paths, config, key)
            if terminal:
                _show_notes(paths, key, ui)
                saved = _saved(paths, key) if isinstance(agent, RemoteAgent) else agent.loop.session(key)
                await run_interactive(agent, key, paths.home / "history" / "cli_history", ui,
                                      " (through the gateway)" if remote else "", attacher, saved, replay,
                                      incognito=incognito)
            else:
                await run_plain(agent, key, ui, attacher)
        finally:
            await agent.aclose()

    run_main(session())


def _saved(paths: Paths, key: str) -> Session:
    """The session as the gateway keeps it, read from its file (the same home)."""
    from nanoagent.session.store import SessionStore

    return SessionStore(paths.sessions_dir, warn=warn).load(key)


def _show_notes(paths: Paths, key: str, ui: Any) -> None:
    """Scheduled replies and messages delivered to this session since the user last wrote in it."""
    from rich.markup import escape

    from nanoagent.cron.deliver import recent_notes

    for note in recent_notes(paths.session_file(key)):
        ui.line(f"[cyan]{escape(note)}[/cyan]")


@app.command()
def onboard(
    provider: Annotated[str | None, typer.Option(help="Provider name, e.g. anthropic, openai, openrouter, ollama.")] = None,
    model: Annotated[str | None, typer.Option(help="Default model, e.g. anthropic/claude-sonnet-4-5.")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="API key for the provider.")] = None,
    api_base: Annotated[str | None, typer.Option("--api-base", help="Base URL for an OpenAI-compatible server.")] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Create config.json and the workspace, keeping what exists.

    config.json is made with mode 0600; files already there are left as they are.

    With no options on a terminal, asks for provider, model and key.

    Example: nanoagent onboard --provider anthropic
    """
    from nanoagent.cli.setup import onboard as run_onboard

    ask = not any((provider, model, api_key, api_base)) and sys.stdin.isatty() and sys.stdout.isatty()
    run_onboard(workspace, provider=provider, model=model, api_key=api_key, api_base=api_base, interactive=ask)


@app.command()
def status(workspace: WorkspaceOpt = None) -> None:
    """Show the model, provider, key, workspace and session paths.

    Example: nanoagent status
    """
    from nanoagent.cli.render import say
    from nanoagent.cli.setup import status_lines

    paths, config = setup(workspace)
    say(*status_lines(paths, config), hang=11)  # under the values, past the labels


_register_subcommands()


@app.command()
def usage(
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session key.")] = None,
    days: Annotated[int | None, typer.Option("--days", "-d", help="Only the last N days.")] = None,
    by: Annotated[str | None, typer.Option("--by", metavar="source|channel|session",
                                           help="Sum the spend ledger's calls by source (the kind of work and its "
                                                "model), channel or session.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the rows, the total and the spend caps as JSON "
                                                             "(costs in USD).")] = False,
) -> None:
    """Tokens and cost per day, session and model.

    The table reads the session files; the line under it, the spend ledger, which also counts deleted sessions,
    transcriptions, embeddings and failed attempts. `--by source` splits the ledger by the kind of work (turn,
    flush, summary, heartbeat, Dream...) and its model. When caps are set (`nanoagent budget`), what each has spent
    of its limit.

    Example: nanoagent usage --by source --days 7
    """
    from nanoagent.cli.usage_cmd import show_usage
    from nanoagent.spend.sources import GROUPS

    if by is not None and by not in GROUPS:
        raise typer.BadParameter(f"{by!r} is not one of source, channel, session.", param_hint="'--by'")
    paths, config = setup(None)
    show_usage(paths, config, session, days, by, json_output)


@app.command()
def dream(
    all_entries: Annotated[bool, typer.Option("--all", help="Keep going, batch after batch, until every entry is processed.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the analysis and the edits it would make; change nothing.")] = False,
    batch: Annotated[bool, typer.Option("--batch", help="Use Anthropic's Message Batches API (half price, slower).")] = False,
    model: Annotated[str | None, typer.Option("--model", help="Model for this run (default: memory.dreamModel, then the agent's model).")] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Fold new conversation history into long-term memory.

    Dream edits SOUL.md, USER.md and memory/MEMORY.md. Each edit becomes its own commit: see them with `nanoagent dream-log`, undo one with
    `nanoagent dream-restore SHA`. Safe to run from cron: only one Dream runs at a time (a second one says so
    and exits 0), each run not on a terminal starts with a timestamped line, and with nothing new it needs
    no API key.

    Example: nanoagent dream --dry-run
    """
    import asyncio

    from nanoagent.agent.build import build_dream
    from nanoagent.cli.render import OneShotRenderer
    from nanoagent.memory.dream import DreamBusy, describe, run_header

    if not sys.stdout.isatty():  # a log file from cron: say when each run's lines were written
        print(run_header("nanoagent dream"), flush=True)
    paths, config = setup(workspace, seeds=True)
    runner = build_dream(config, paths, sink=OneShotRenderer(quiet_reply=True), model=model, batch=batch, warn=warn)
    try:
        results = asyncio.run(runner.run(all_entries=all_entries, dry_run=dry_run))
    except DreamBusy as e:  # not a failure: the other run does the work (cron must not mail an alarm)
        print(e)
        return
    print(describe(results, runner.history.dream_cursor))


@app.command()
def doctor(
    workspace: WorkspaceOpt = None,
    fix: Annotated[bool, typer.Option("--fix", help="Migrate renamed config keys (a backup is kept).")] = False,
    offline: Annotated[bool, typer.Option("--offline", help="Make no request to the model providers.")] = False,
) -> None:
    """Check config, keys, workspace and git, and say what to fix.

    Makes one small request to the provider of the default model and of each fallback (a one-token reply, or
    Ollama's model list), unless --offline. The offline tokenizer is checked too.

    Example: nanoagent doctor --fix
    """
    from nanoagent.cli.setup import run_doctor

    if not run_doctor(workspace, fix, offline):
        raise typer.Exit(1)


def run(args: list[str]) -> None:
    """The full command line (entry.main is the error boundary around it)."""
    state.debug = False  # until --debug says otherwise (tests run many command lines in one process)
    app(args=args, prog_name="nanoagent")  # not `python -m nanoagent`: completion scripts name the command
