"""The interactive terminal session: `nanoagent agent` with no -m.

Input stays live while a turn or a slash command runs: a message typed meanwhile joins the
running turn before its next model call (or waits for the command). Ctrl-C cancels the turn
(model call and tools) or the command (/new, /dream), and so does Esc while one runs; at an
empty prompt Ctrl-C warns, and a second Ctrl-C, Ctrl-D or /exit quits.
Replies stream paragraph by paragraph, rendered as Markdown. Nothing on the
per-keystroke path touches the disk or the network.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from nanoagent.agent import events as ev
from nanoagent.agent.commands import INCOGNITO_NOTICE, STOP_COMMANDS
from nanoagent.cli.attach import LocalAgent, RemoteAgent
from nanoagent.cli.render import (
    SPINNER,
    MarkdownStream,
    Width,
    short_args,
    subagent_line,
    terminal_safe,
    tool_detail,
)
from nanoagent.usage import turn_line

if TYPE_CHECKING:
    from datetime import datetime

    from nanoagent.attachments import Attached
    from nanoagent.session.store import Session as SavedSession

    Attacher = Callable[[str], Attached]

_SLASH_WORD = re.compile(r"^/\w*")
EXIT_COMMANDS = {"/exit", "/quit"}
ATTACH = "/attach"
ATTACH_HELP = f"{ATTACH} PATH  attach a file to your next message (an image, or a text file); {ATTACH} lists them"
# the commands only a terminal session has, added to /help's list
TERMINAL_HELP = f"\nIn this terminal:\n{ATTACH_HELP}\n/exit, /quit   end the session (Ctrl-D does too)"
Agent = LocalAgent | RemoteAgent
# after a turn that failed once its message had gone to the model (not in a one-shot, nor when no server answered)
RETRY_HINT = "Your message is kept but will not be sent again: /retry sends it once more, or just write again."
ESC_WAIT = 0.4  # seconds an Esc waits for a key that makes it Esc Enter (a new line) before it cancels alone


class TerminalUI:
    """The event sink for interactive sessions, plus the status line under the prompt. `width` may be a
    function: then the terminal is measured again for each thing printed, so a resize takes effect at once."""

    def __init__(self, width: Width, plain: bool):
        self._width = width
        self.plain = plain
        self.console = Console(width=self.width, force_terminal=not plain, highlight=False,
                               no_color=plain, soft_wrap=True)
        self.stream = MarkdownStream(self._write, width, plain)
        self.activity: str | None = None
        self.tool_args: dict[str, dict[str, Any]] = {}  # call id -> arguments, until the call finishes
        self.since = time.monotonic()
        self.idle_status = ""

    def _write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    @property
    def width(self) -> int:
        return self._width() if callable(self._width) else self._width

    def line(self, markup: str, wrap: bool = False) -> None:
        """Print `markup`; `wrap`: text of any length (a command's answer) wraps at words to the terminal's width,
        rather than letting the terminal cut it mid-word. Lines made to fit (tool lines) need not."""
        self.console.width = self.width
        self.console.print(terminal_safe(markup), soft_wrap=not wrap)

    def __call__(self, event: ev.Event) -> None:
        if event.agent:
            self._subagent(event)
            return
        match event:
            case ev.TextDelta(text=text):
                if self.activity == "thinking":
                    self.activity = "writing"
                self.stream.feed(text)
            case ev.ToolStarted(call_id=call_id, name=name, arguments=arguments):
                self.stream.flush()
                self.tool_args[call_id] = arguments
                self._busy(f"{name} {short_args(arguments, max(20, self.width - 30))}")
            case ev.ToolFinished(call_id=call_id, name=name, result=result, error=error, elapsed=elapsed):
                arguments = self.tool_args.pop(call_id, {})
                detail = tool_detail(name, arguments, result, self.width) if error is None else []
                self.line("\n".join([self._tool_line(name, arguments, error, elapsed), *detail]))  # one write
                self._busy("thinking")
            case ev.Retrying(model=model, reason=reason, wait=wait, next_model=next_model):
                action = f"retrying in {wait:.1f}s" if next_model == model else f"trying {next_model}"
                self.line(f"[yellow]  {escape(model)}: {escape(reason[:80])}; {action}[/yellow]")
            case ev.Injected(text=text):
                self.stream.flush()
                self.line(f"[cyan]  ↳ your message joined the turn here: {escape(text[:60])}[/cyan]")
            case ev.Notice(text=text):
                self.line(f"[yellow]{escape(text)}[/yellow]")
            case ev.Progress(text=text) if self.activity is not None:
                if self.activity.startswith("/"):  # what a command first says it does stays on screen, as a line
                    self.line(f"[dim]  {escape(text)}…[/dim]")
                self._busy(text)
            case ev.TurnStarted():
                if self.activity is None:  # a turn this terminal did not start (the gateway's follow-up)
                    self.start_turn()
            case ev.TurnEnded():
                self.stream.flush()
                self.activity = None
            case _:
                pass

    def _subagent(self, event: ev.Event) -> None:
        """A sub-agent's events fold into a line as it starts and ends; a background run's answer is shown whole."""
        line = subagent_line(event)
        if line is not None:
            self.stream.flush()
            self.line(line)
        if isinstance(event, ev.SubagentEnded) and event.background:
            answer = MarkdownStream(self._write, self._width, self.plain)
            answer.feed(event.as_message())
            answer.flush()

    def _tool_line(self, name: str, arguments: dict[str, Any], error: str | None, elapsed: float) -> str:
        """The lasting line for a finished call, at most `width` columns: mark, name, short arguments,
        elapsed time and, on failure, as much of the error as fits (it gets at least half the room)."""
        timing = f"{elapsed:.2f}s"
        room = self.width - len(f"  ✓ {name}  {timing}")
        ok = error is None
        error = " ".join((error or "").split())
        args_room = room if ok else min(room // 2, len(short_args(arguments, room)))
        args = short_args(arguments, args_room) if args_room >= 8 and arguments else ""
        head = f"[dim]{escape(name)}{' ' + escape(args) if args else ''} {timing}[/dim]"
        if ok:
            return f"  [green]✓[/green] {head}"
        error_room = room - (len(args) + 1 if args else 0)
        if len(error) > error_room:
            error = error[: max(0, error_room - 1)] + "…"
        return f"  [red]✗[/red] {head} [red]{escape(error)}[/red]"

    def _busy(self, what: str) -> None:
        self.activity = what
        self.since = time.monotonic()

    def start_turn(self) -> None:
        self.stream = MarkdownStream(self._write, self._width, self.plain)
        self._busy("thinking")

    def start_command(self, name: str) -> None:
        """A slash command runs: its name in the status line until it says what it does (a Progress event)."""
        self.stream = MarkdownStream(self._write, self._width, self.plain)
        self._busy(name)

    def toolbar(self) -> str:
        if self.activity is None:
            return self.idle_status
        frame = SPINNER[int(time.monotonic() * 10) % len(SPINNER)]
        return f" {frame} {self.activity} {time.monotonic() - self.since:.1f}s   (Esc or Ctrl-C cancels)"


class Session:
    """Runs turns as tasks while the prompt keeps reading input."""

    def __init__(self, agent: Agent, key: str, ui: TerminalUI, attacher: Attacher | None = None):
        self.agent = agent
        self.key = key
        self.ui = ui
        self.attacher = attacher
        self.attached: list[Attached] = []  # files for the next message that starts a turn
        self.turn: asyncio.Task | None = None  # the running turn, or the slash command running in its place
        self.command_name = ""  # the command `turn` runs; "" when it is a turn
        self.beside: set[asyncio.Task] = set()  # commands typed while something else runs (/status)
        self.pending: list[str] = []
        self.question: asyncio.Future[str] | None = None  # an approval waiting for the next line typed
        self.incognito = False  # a temporary chat (/incognito): a gateway's is ended (/new) when this terminal leaves

    @property
    def busy(self) -> bool:
        return self.turn is not None and not self.turn.done()

    @property
    def running_command(self) -> bool:
        return self.busy and bool(self.command_name)

    def cancel(self) -> bool:
        """Cancel the running turn or command; False when none runs."""
        if self.turn is None or self.turn.done():
            return False
        self.turn.cancel()
        return True

    async def ask(self, question: str) -> str:
        """An approval question: the next line typed answers it (the prompt stays live during a turn)."""
        self.ui.stream.flush()
        self.ui.line(f"[bold yellow]{escape(question)}[/bold yellow]")
        self.question = asyncio.get_running_loop().create_future()
        try:
            return await self.question
        finally:
            self.question = None

    def take_pending(self) -> list[str]:
        taken, self.pending = self.pending, []
        return taken

    async def attach(self, argument: str) -> None:
        """/attach PATH: read the file now (an image is stored under media/, audio transcribed: in a thread, so a
        running turn goes on showing), send it with the next message."""
        if not argument:
            listed = ", ".join(a.describe() for a in self.attached)
            self.ui.line(escape(f"Attached for your next message: {listed}." if listed else
                                f"Nothing attached. {ATTACH_HELP}."))
            return
        if self.attacher is None:
            self.ui.line("[red]Attachments are not available here.[/red]")
            return
        from nanoagent.errors import NanoagentError

        try:
            found = await asyncio.to_thread(self.attacher, argument)
        except NanoagentError as e:
            self.ui.line(f"[red]{escape(str(e))}[/red]")
            return
        self.attached.append(found)
        self.ui.line(f"[dim]Attached {escape(found.describe())}; it goes with your next message.[/dim]")

    def start(self, text: str) -> None:
        attached, self.attached = self.attached, []
        self.command_name = ""
        self.turn = asyncio.create_task(self._run(text, attached))

    async def _run(self, text: str, attached: list[Attached] | None = None) -> None:
        self.ui.start_turn()
        images = None
        if attached:
            from nanoagent.attachments import compose

            text, images = compose(text, attached)
        try:
            turn = await self.agent.handle(text, self.key, self.ui, ask=self.ask, injections=self.take_pending,
                                           images=images)
        except asyncio.CancelledError:
            self.ui.stream.flush()
            self.ui.activity = None
            self.ui.line("[yellow]Cancelled.[/yellow]")
            return
        except Exception as e:  # noqa: BLE001 - one failed turn must not end the session
            self.ui.activity = None
            self.ui.line(f"[red]Error: {escape(str(e))}[/red]")
            return
        result = turn.result
        if result is not None and result.error:
            self.ui.line(f"[red]{escape(turn.reply)}[/red]")
            if result.sent:
                self.ui.line(f"[dim]{RETRY_HINT}[/dim]")
        elif not self.ui.stream.printed.strip().endswith(terminal_safe(turn.reply).strip()):
            self.ui.stream.feed(turn.reply)
            self.ui.stream.flush()
        if result is not None and (spent := turn_line(turn.model, result.usage)):
            self.ui.line(f"[dim]  {spent}[/dim]")
        self.refresh_status()
        if self.pending:  # typed after the turn's last model call: it starts the next turn
            self.start("\n\n".join(self.take_pending()))

    def refresh_status(self) -> None:
        context = self.agent.context(self.key)
        tokens = f" · context {context[0]:,} tokens ({context[0] / context[1]:.0%})" if context else ""
        self.ui.idle_status = f" {self.agent.model(self.key)} · {self.key}{tokens} · /help"

    def command(self, text: str) -> None:
        """Start a slash command; one that runs a turn (/retry) runs like a message. A command runs as a task, as
        a turn does, so the prompt stays live: Esc or Ctrl-C cancels it and the status line shows its progress.
        Typed while something runs, it runs beside it (the loop refuses one that changes the session during a
        turn)."""
        name = text.split()[0]
        if name in STOP_COMMANDS:  # as Esc: the running turn or command stops here, attached or not
            if not self.cancel():
                self.ui.line("[dim]Nothing is running.[/dim]")
            return
        if name == "/retry" and not self.busy:
            self.start(text)
            return
        if self.busy:
            task = asyncio.create_task(self._command(text, beside=True))
            self.beside.add(task)
            task.add_done_callback(self.beside.discard)
            return
        self.command_name = name
        self.turn = asyncio.create_task(self._command(text, beside=False))

    async def _command(self, text: str, beside: bool) -> None:
        name = text.split()[0]
        if not beside:
            self.ui.start_command(name)
        try:
            reply = await self.agent.handle(text, self.key, self.ui, ask=self.ask)
        except asyncio.CancelledError:
            self.ui.line(f"[yellow]Cancelled {escape(name)}.[/yellow]")
            return
        except Exception as e:  # noqa: BLE001 - one failed command must not end the session
            self.ui.line(f"[red]Error: {escape(str(e))}[/red]")
            return
        finally:
            if not beside:
                self.ui.activity = None
        self.ui.line(escape(reply.reply + (TERMINAL_HELP if name == "/help" else "")), wrap=True)
        if name in ("/incognito", "/new") and not reply.refused:
            self.incognito = name == "/incognito"
        self.refresh_status()
        if not beside and self.pending:  # typed while the command ran: it starts a turn now
            self.start("\n\n".join(self.take_pending()))


def build_prompt(commands: list[str], toolbar: Callable[[], str], history_file: Path,
                 busy: Callable[[], bool] = lambda: False, cancel: Callable[[], object] = lambda: None,
                 private: Callable[[], bool] = lambda: False, **io):
    """The prompt-toolkit session: history on disk (not while `private`: a temporary chat's lines stay in memory),
    slash-command completion, multi-line keys, and Esc to cancel what runs (`busy`, `cancel`).

    Keystrokes touch only memory: completion is a fixed word list, the toolbar reads cached state,
    and history is written only when a line is accepted.
    """
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import WordCompleter
    from prompt_toolkit.filters import Condition
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    # Esc alone cancels only while a turn or command runs; at an idle prompt it keeps its usual meaning. Esc Enter
    # (what Alt-Enter sends) still adds a line either way: an Esc waits ESC_WAIT seconds for a key that completes
    # a longer binding before it counts alone.
    @bindings.add("escape", filter=Condition(busy))
    def _cancel(event) -> None:
        cancel()

    @bindings.add("escape", "enter")
    @bindings.add("c-j")
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    # Ctrl-C cancels what runs from inside the prompt, as Esc does: leaving the prompt to cancel would end its line
    # on screen, and a reply streaming above would go on under that stray `›` line.
    @bindings.add("c-c")
    def _interrupt(event) -> None:
        if event.current_buffer.text:
            event.current_buffer.reset()
        elif busy():
            cancel()
        else:
            event.app.exit(exception=KeyboardInterrupt)

    from nanoagent.fsutil import private_dir, private_file

    private_file(private_dir(history_file.parent) / history_file.name)  # 0600: prompt_toolkit keeps the mode
    session: PromptSession = PromptSession(
        history=_history(FileHistory, history_file, private),
        completer=WordCompleter([*commands, *sorted(EXIT_COMMANDS)], pattern=_SLASH_WORD, sentence=True),
        complete_while_typing=True,
        key_bindings=bindings,
        bottom_toolbar=toolbar,
        refresh_interval=0.1,
        **io,
    )
    session.app.timeoutlen = ESC_WAIT
    return session


def continuing(saved: SavedSession, now: datetime | None = None) -> str | None:
    """What a session opened at the terminal carries into its next turn, in one line, or None when it starts fresh:
    `continuing cli:direct · 7 turns answered · last 18:40 · /new starts fresh`. A failed turn is not answered: it is
    counted apart (its messages are never sent again)."""
    import os
    from datetime import datetime

    if len(saved.messages) - saved.last_consolidated <= 0:
        return None
    try:
        stamp = datetime.fromtimestamp(os.stat(saved.path).st_mtime)
    except OSError:
        return None
    now = now or datetime.now()
    when = (stamp.strftime("%H:%M") if stamp.date() == now.date() else
            stamp.strftime("%b %d %H:%M") if stamp.year == now.year else stamp.strftime("%Y-%m-%d"))
    answered = sum(1 for _, reply in _exchanges(saved) if reply)
    failed = sum(1 for start, _ in saved.failed_turns if start >= saved.last_consolidated)
    counts = f"{answered} turn{'' if answered == 1 else 's'} answered" + (f", {failed} failed" if failed else "")
    return f"continuing {saved.key} · {counts} · last {when} · /new starts fresh"


def _exchanges(saved: SavedSession) -> list[tuple[str, str]]:
    """(what the person said, the reply's last text or "") for each message of theirs still in the conversation's
    context, failed turns left out."""
    from nanoagent.messages import is_assistant, is_user, shown_text, strip_runtime_context

    failed = saved.failed()
    exchanges: list[tuple[str, str]] = []
    for index in range(saved.last_consolidated, len(saved.messages)):
        message = saved.messages[index]
        if index in failed:
            continue
        if is_user(message):
            exchanges.append((strip_runtime_context(shown_text(message)), ""))
        elif is_assistant(message) and exchanges and (text := shown_text(message).strip()):
            exchanges[-1] = (exchanges[-1][0], text)  # the reply: the last text before the next message of the user
    return exchanges


def last_exchanges(saved: SavedSession, width: int, count: int = 3) -> list[str]:
    """The last `count` exchanges still in the conversation's context, a line for each side, cut to `width`."""

    def cut(text: str, room: int) -> str:
        text = " ".join(text.split())
        return text if len(text) <= room else text[:max(0, room - 1)] + "…"

    lines = []
    for said, reply in _exchanges(saved)[-count:]:
        lines.append(f"[dim]  you:   {escape(cut(said, width - 9))}[/dim]")
        if reply:
            lines.append(f"[dim]  agent: {escape(cut(reply, width - 9))}[/dim]")
    return lines


def opening(saved: SavedSession | None, replay: bool, width: int) -> list[str]:
    """Under the banner: the last exchanges of a conversation picked with -c or --resume, then what the session
    continues, so a one-shot's history in cli:direct never joins a conversation unannounced."""
    line = continuing(saved) if saved is not None else None
    if saved is None or line is None:
        return []
    return [*(last_exchanges(saved, width) if replay else []), f"[cyan]{escape(line)}[/cyan]"]


def _history(base: type, path: Path, private: Callable[[], bool]) -> Any:
    """prompt-toolkit's FileHistory, but a line typed while `private` is kept only in memory."""
    class History(base):
        def store_string(self, string: str) -> None:
            if not private():
                super().store_string(string)

    return History(str(path))


async def run_interactive(agent: Agent, key: str, history_file: Path, ui: TerminalUI,
                          through: str = "", attacher: Attacher | None = None,
                          saved: SavedSession | None = None, replay: bool = False, incognito: bool = False) -> None:
    """`saved`: the session as it is on disk, for the lines under the banner; `replay`: it was picked (-c,
    --resume), so its last exchanges are shown too."""
    from prompt_toolkit.patch_stdout import patch_stdout

    session = Session(agent, key, ui, attacher)
    session.refresh_status()
    prompt = build_prompt([*agent.command_names(), ATTACH], ui.toolbar, history_file,
                          busy=lambda: session.busy, cancel=session.cancel, private=lambda: session.incognito)
    agent.warm_up(key)
    folder = f" · in {escape(terminal_safe(agent.workdir))}" if agent.workdir else ""
    ui.line(f"[bold]nanoagent[/bold] · {escape(agent.model(key))} · session {escape(key)}{folder}{through}. "
            "Type /help for commands, Ctrl-D to quit.", wrap=True)
    if incognito:
        session.incognito = True
        ui.line(f"[magenta]{escape(INCOGNITO_NOTICE)}[/magenta]", wrap=True)
    for line in opening(saved, replay, ui.width) if not incognito else []:
        ui.line(line)
    with patch_stdout(raw=True):
        try:
            await _read_lines(session, prompt, ui)
        finally:  # Ctrl-D, /exit, SIGTERM or SIGHUP: a turn here ends as interrupted, recorded; a gateway's goes on
            if session.turn is not None and not agent.detach_on_exit and session.cancel():
                await asyncio.gather(session.turn, return_exceptions=True)
            if session.incognito and agent.detach_on_exit:  # a gateway's temporary chat ends when we leave it
                try:
                    await agent.handle("/new", key, ev.discard)
                except Exception:  # noqa: BLE001 - the gateway is gone: it ended the chat as it stopped
                    pass


async def _read_lines(session: Session, prompt: Any, ui: TerminalUI) -> None:
    warned = False
    while True:
        try:
            text = await prompt.prompt_async("› ")
        except KeyboardInterrupt:
            if session.cancel():
                continue
            if warned:
                return
            warned = True
            ui.line("[dim]Press Ctrl-C again, Ctrl-D or type /exit to quit.[/dim]")
            continue
        except EOFError:
            return
        warned = False
        if not await _dispatch(session, text.strip()):
            return


async def _dispatch(session: Session, text: str) -> bool:
    """Handle one line of input; False means quit."""
    if session.question is not None and not session.question.done():
        session.question.set_result(text)
        return True
    if not text:
        return True
    if text.split()[0] in EXIT_COMMANDS:
        return False
    if text.split()[0] == ATTACH:
        await session.attach(text[len(ATTACH):].strip())
    elif text.startswith("/"):
        session.command(text)
    elif session.running_command:  # /new or /dream decides what the message goes to: it waits for the end
        session.pending.append(text)
    elif session.busy:
        if session.attached:
            session.ui.line("[dim]This joins the running turn as text; your attachments wait for the next "
                            "message.[/dim]")
        if not session.agent.inject(session.key, text):
            session.pending.append(text)
    else:
        session.start(text)
    return True


async def run_plain(agent: Agent, key: str, ui: TerminalUI, attacher: Attacher | None = None) -> None:
    """No terminal: read one message a line from stdin, print plain replies."""
    session = Session(agent, key, ui, attacher)  # for /attach
    for line in sys.stdin:
        text = line.strip()
        if not text:
            continue
        if text.split()[0] in EXIT_COMMANDS:
            break
        if text.split()[0] == ATTACH:
            await session.attach(text[len(ATTACH):].strip())
            continue
        images = None
        if session.attached and not text.startswith("/"):
            from nanoagent.attachments import compose

            text, images = compose(text, session.attached)
            session.attached = []
        ui.start_turn()
        turn = await agent.handle(text, key, ui, images=images)
        if turn.result is None or turn.result.error:
            print(terminal_safe(turn.reply), flush=True)
        elif not ui.stream.printed.strip().endswith(terminal_safe(turn.reply).strip()):
            print(terminal_safe(turn.reply), flush=True)
