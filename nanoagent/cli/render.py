"""Turn agent events into terminal output: the reply on stdout, activity on stderr.

Text from a model or a tool never reaches the terminal as it came: `terminal_safe` drops escape and control
sequences first, so a reply cannot retitle the window, move the cursor or hide what follows.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable

from nanoagent.agent import events as ev

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the one-shot fast path loads no typing)
if TYPE_CHECKING:
    import threading
    from typing import Any

    from rich.console import Console

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
# Whole ESC-introduced sequences (CSI, OSC up to BEL or ST, DCS/SOS/PM/APC strings up to ST, two-character
# escapes) and the 8-bit CSI; after them, any control character left but newline and tab, a lone ESC included.
# Compiled at first use (`_pattern`), not at import: a one-shot whose reply is plain text never needs them.
_SEQUENCE = (r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[PX^_].*?\x1b\\"
             r"|\x1b[ -/]*(?![\[\]PX^_])[0-~]|\x9b[0-?]*[ -/]*[@-~]")
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"
_HOLD_AT_MOST = 4096  # an escape sequence still open after this many characters is not one


@functools.cache
def _pattern(source: str) -> re.Pattern[str]:
    return re.compile(source, re.DOTALL)


def terminal_safe(text: str) -> str:
    """Text a terminal prints as text: no escape sequences, no control characters but newline and tab."""
    if text.isprintable():
        return text
    return _pattern(_CONTROL).sub("", _pattern(_SEQUENCE).sub("", text.replace("\r\n", "\n")))


class EscapeFilter:
    """`terminal_safe` for text that arrives in pieces: a sequence begun at the end of one piece is held back
    until the next completes it (or shows it never will), so a split sequence is dropped whole too."""

    def __init__(self) -> None:
        self.held = ""

    def feed(self, text: str) -> str:
        text, self.held = self.held + text, ""
        start = max(text.rfind("\x1b"), text.rfind("\x9b"))
        if start >= 0 and not _pattern(_SEQUENCE).match(text, start) and len(text) - start < _HOLD_AT_MOST:
            text, self.held = text[:start], text[start:]
        return terminal_safe(text)

    def flush(self) -> str:
        held, self.held = self.held, ""
        return terminal_safe(held)


REPLY_WIDTH = 100  # replies wrap at most this wide, however wide the terminal


def terminal_width(fallback: int = 80) -> int:
    """The terminal's width now (asked of stdout's terminal each time, so a resize counts), at most REPLY_WIDTH;
    `fallback` when stdout is not a terminal."""
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        columns = 0
    return min(columns or fallback, REPLY_WIDTH)


Width = int | Callable[[], int]  # a fixed width, or a function measuring it at each render


def table_console() -> Console:
    """A console for tables: the terminal's width on a terminal; pipes and files get whole rows, never an
    ellipsis (a table is only as wide as its content)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=1000)


def wrapped(line: str, width: int, hang: int | None = None) -> list[str]:
    """`line` as rows of at most `width` columns, broken at spaces, each following row indented `hang` columns (two
    past the line's own indent by default). A word longer than a row keeps a row of its own, whole: nothing is cut."""
    if len(line) <= width:
        return [line]
    import textwrap

    indent = len(line) - len(line.lstrip(" ")) + 2 if hang is None else hang
    return textwrap.wrap(line, width, subsequent_indent=" " * min(indent, width // 2), break_long_words=False,
                         break_on_hyphens=False) or [line]


def say(*texts: str, hang: int | None = None, err: bool = False) -> None:
    """Print plain text (never markup), a line at a time. On a terminal each line wraps at words to the terminal's
    width (`wrapped`), so the terminal never breaks a word at its edge; piped or to a file, lines stay whole, one
    record a line for grep and scripts. A terminal is whatever rich takes for one (`TTY_COMPATIBLE`, `COLUMNS`)."""
    from rich.console import Console

    console = Console(stderr=err)
    width = console.width if console.is_terminal else None
    for text in texts:
        for line in text.split("\n"):
            print(*(wrapped(line, width, hang) if width else [line]), sep="\n", file=console.file)
    console.file.flush()


def print_table(table: Any, console: Console | None = None) -> None:
    """A rich table as `table_console` shows it, its cells wrapped at words. When the terminal is narrower than the
    table's longest words need (rich would cut them with an ellipsis), each row becomes lines instead: its first
    cell, then `header: value` for the rest, wrapped at words under it."""
    from rich.measure import Measurement
    from rich.text import Text

    console = console or table_console()
    needs = Measurement.get(console, console.options.update_width(10_000), table).minimum
    if not console.is_terminal or needs <= console.width:
        console.print(table)
        return

    def plain(cell: Any) -> str:
        return (Text.from_markup(cell) if isinstance(cell, str) else cell).plain.replace("\n", " ")

    headers = [plain(column.header) for column in table.columns]
    cells = [[plain(cell) for cell in column.cells] for column in table.columns]
    for head, *rest in zip(*cells, strict=True):
        fields = " · ".join(f"{name}: {value}" for name, value in zip(headers[1:], rest, strict=True) if value.strip())
        console.print("\n".join([*wrapped(head, console.width), *wrapped("  " + fields, console.width)]),
                      markup=False, highlight=False, soft_wrap=True)


def short_args(arguments: dict[str, Any], width: int = 60) -> str:
    parts = []
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(terminal_safe(str(text)).split())
        parts.append(f"{key}={text[:40] + '…' if len(text) > 40 else text}")
    joined = " ".join(parts)
    return joined if len(joined) <= width else joined[: width - 1] + "…"


def subagent_line(event: ev.Event) -> str | None:
    """What a sub-agent's events fold into: a line (markup) as it starts and as it ends, its notices; None for the
    rest (its tool calls are counted in the end line and kept in its own session)."""
    match event:
        case ev.SubagentStarted(task=task, background=background, agent=run_id):
            where = " in the background" if background else ""
            return f"[dim]⇢ sub-agent {run_id}{where}: {_escape(_one_line(task, 70))}[/dim]"
        case ev.SubagentEnded(status=status, elapsed=elapsed, tool_calls=calls, agent=run_id, result=result):
            mark = {ev.RunStatus.DONE: "[green]✓[/green]", ev.RunStatus.STOPPED: "[yellow]![/yellow]"}.get(
                status, "[red]✗[/red]")
            why = f" {_escape(_one_line(result, 70))}" if status is ev.RunStatus.FAILED else ""
            return f"  {mark} [dim]sub-agent {run_id} {status.value} {elapsed:.1f}s, {calls} tool call{'' if calls == 1 else 's'}[/dim]{why}"
        case ev.Notice(text=text, agent=run_id) | ev.Retrying(reason=text, agent=run_id):
            return f"[yellow]  sub-agent {run_id}: {_escape(_one_line(text, 120))}[/yellow]"
    return None


FOLD_LINES = 4  # lines of a command's output shown under its tool line
DIFF_SHOWN = 6  # changed lines of an edit shown under its tool line
_EXIT_CODE = r"\n?\[exit code: (-?\d+)\]$"


def tool_detail(name: str, arguments: dict[str, Any], result: str, width: int) -> list[str]:
    """What a finished call did, folded into a few lines (markup) to show under its tool line: a command's
    or an MCP tool's output (its first lines, then how many more) and an edit's changed lines coloured as a diff.
    Empty for other tools and failed calls. Everything shown passes `terminal_safe`."""
    from nanoagent.mcp.names import PREFIX as MCP_PREFIX
    from nanoagent.messages import unwrap_untrusted
    from nanoagent.tools.fs import NEW_FILE

    text = unwrap_untrusted(result)
    if name.startswith(MCP_PREFIX):
        return _fold(terminal_safe(text).rstrip("\n").splitlines(), FOLD_LINES, width, "[dim]{}[/dim]")
    if name == "exec":
        found = _pattern(_EXIT_CODE).search(text)
        output = text[:found.start()] if found else text
        lines = _fold(terminal_safe(output).rstrip("\n").splitlines(), FOLD_LINES, width, "[dim]{}[/dim]")
        if found and found.group(1) != "0":
            lines.append(f"    [red]exit code {found.group(1)}[/red]")
        return lines
    if name not in ("write_file", "edit_file"):
        return []
    head, _, diff = text.partition("\n")
    changed = diff.splitlines()
    if name == "write_file" and head.endswith(NEW_FILE):
        changed = ["+" + line for line in str(arguments.get("content", "")).splitlines()]
    return _fold([terminal_safe(line) for line in changed], DIFF_SHOWN, width, _diff_style)


def _diff_style(line: str) -> str:
    colour = {"+": "green", "-": "red", "@": "cyan", "[": "dim"}.get(line[:1], "dim")
    return f"[{colour}]{{}}[/{colour}]"


def _fold(lines: list[str], keep: int, width: int, style: str | Callable[[str], str]) -> list[str]:
    """The first `keep` lines, indented, each cut to the width, then how many more there are (markup)."""
    from rich.markup import escape

    shown = []
    for line in lines[:keep]:
        line = line.expandtabs(4)
        cut = line if len(line) <= width - 4 else line[: max(1, width - 5)] + "…"
        template = style(line) if callable(style) else style
        shown.append("    " + template.format(escape(cut)))
    if len(lines) > keep:
        more = len(lines) - keep
        shown.append(f"    [dim]… {more} more line{'' if more == 1 else 's'}[/dim]")
    return shown


def _one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


LONG_BLOCK_LINES = 6
LONG_PARAGRAPH_CHARS = 320


class MarkdownStream:
    """Prints a streamed reply block by block, each rendered as Markdown once complete, at the width the
    terminal has when the block is printed."""

    def __init__(self, write: Callable[[str], None], width: Width, plain: bool):
        self.write = write
        self._width = width
        self.plain = plain
        self.buffer = ""
        self.printed = ""

    @property
    def width(self) -> int:
        return self._width() if callable(self._width) else self._width

    def feed(self, text: str) -> None:
        self.buffer += text
        cut = self._complete_prefix()
        if cut:
            self._emit(self.buffer[:cut])
            self.buffer = self.buffer[cut:]

    def flush(self) -> None:
        if self.buffer.strip():
            self._emit(self.buffer)
        self.buffer = ""

    def _complete_prefix(self) -> int:
        """End of the last finished block: a blank line outside any code fence. A long run of lines with no
        blank line (a list, a log) is cut at its last complete line instead, so it still streams; tables
        are kept whole because their rows only render together."""
        index = self.buffer.rfind("\n\n")
        while index > 0:
            if self.buffer.count("```", 0, index) % 2 == 0:
                return index + 2
            index = self.buffer.rfind("\n\n", 0, index)
        last = self.buffer.rfind("\n")
        if self.buffer.count("\n") >= LONG_BLOCK_LINES and self.buffer.count("```", 0, last) % 2 == 0:
            line_start = self.buffer.rfind("\n", 0, last) + 1
            if not self.buffer[line_start:last].lstrip().startswith("|"):
                return last + 1
        return self._sentence_cut()

    def _sentence_cut(self) -> int:
        """A long paragraph still being written is printed up to its last finished sentence, so prose
        streams too; never inside a code fence, a table, or an open `**` or backtick span."""
        if len(self.buffer) < LONG_PARAGRAPH_CHARS or "```" in self.buffer or self.buffer.lstrip().startswith("|"):
            return 0
        cut = max(self.buffer.rfind(mark) for mark in (". ", "! ", "? ", "。", "！", "？"))
        if cut <= 0:
            return 0
        cut += 1 if self.buffer[cut] in "。！？" else 2
        head = self.buffer[:cut]
        if head.count("**") % 2 or head.count("`") % 2 or head.count("[") != head.count("]"):
            return 0
        return cut

    def _emit(self, text: str) -> None:
        text = terminal_safe(text)
        self.printed += text
        if self.plain:
            self.write(text if text.endswith("\n") else text + "\n")
            return
        from rich.markdown import Markdown  # markdown-it loads on the first reply, not at start

        out = io.StringIO()
        from rich.console import Console

        Console(file=out, width=self.width, force_terminal=True, color_system="standard").print(Markdown(text))
        self.write(out.getvalue())


class Spinner:
    """A transient status line on stderr (a terminal's), redrawn ten times a second by a daemon thread and
    wiped before anything else is written."""

    def __init__(self) -> None:
        import threading  # only on a terminal: a piped one-shot draws no spinner

        self.what: str | None = None
        self.since = time.monotonic()
        self.lock = threading.Lock()
        self.shown = False
        self._thread: threading.Thread | None = None

    def show(self, what: str | None) -> None:
        with self.lock:
            self.what, self.since = what, time.monotonic()
            if what is None:
                self._wipe()
        if what is not None and self._thread is None:
            import threading

            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def write(self, stream: Any, text: str) -> None:
        """Write to stdout or stderr with the status line out of the way."""
        with self.lock:
            self._wipe()
            stream.write(text)
            stream.flush()

    def _wipe(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False

    def _run(self) -> None:
        while True:
            time.sleep(0.1)
            with self.lock:
                if self.what is None:
                    continue
                frame = SPINNER[int(time.monotonic() * 10) % len(SPINNER)]
                sys.stderr.write(f"\r\x1b[K{frame} {self.what[:60]} {time.monotonic() - self.since:.1f}s")
                sys.stderr.flush()
                self.shown = True


class OneShotRenderer:
    """For `agent -m`. On a terminal the reply streams block by block as Markdown, with a spinner on stderr
    while the model thinks or a tool runs; piped, it streams as plain text. Every text block the model writes
    is kept: text before a tool call stays, and blocks are separated by a blank line."""

    def __init__(self, quiet_reply: bool = False):
        self.quiet_reply = quiet_reply  # --json prints everything at the end
        self.streamed = ""
        on_terminal = sys.stdout.isatty()  # rich loads only when something is drawn with it (not for a piped reply)
        self.terminal = on_terminal and not quiet_reply
        self.stream_plain = not on_terminal and not quiet_reply
        self.spinner = Spinner() if self.terminal and sys.stderr.isatty() else None
        self.markdown = MarkdownStream(self._write, lambda: terminal_width(self.out.width), plain=False)
        self.block_ended = False  # a tool call came since the last text: the next text is a new block
        self.escapes = EscapeFilter()
        self.background: list[ev.SubagentEnded] = []  # answers of background runs, shown after the reply

    def warm_up(self) -> None:
        """On a terminal, load the Markdown renderer in a thread while the model thinks, not after its first
        words (about 0.1 s)."""
        if self.terminal:
            import threading

            threading.Thread(target=_load_markdown, name="load-rich", daemon=True).start()

    @functools.cached_property
    def out(self) -> Console:
        from rich.console import Console

        return Console(soft_wrap=False)

    @functools.cached_property
    def err(self) -> Console:
        from rich.console import Console

        # soft_wrap: each activity line and the final error stay one line when piped (rich wraps at 80 otherwise)
        return Console(stderr=True, highlight=False, soft_wrap=True)

    def _write(self, text: str) -> None:
        if self.spinner is not None:
            self.spinner.write(sys.stdout, text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()

    def _say(self, markup: str) -> None:
        """An activity line on stderr."""
        if self.spinner is not None:
            with self.spinner.lock:
                self.spinner._wipe()
                self.err.print(markup)
        else:
            self.err.print(markup)

    def __call__(self, event: ev.Event) -> None:
        if event.agent:
            line = subagent_line(event)
            if line is not None:
                self.err.print(line)
            if isinstance(event, ev.SubagentEnded) and event.background:
                self.background.append(event)
            return
        match event:
            case ev.TurnStarted() if self.spinner is not None:
                self.spinner.show("thinking")
            case ev.TextDelta(text=text) if not self.quiet_reply:
                self._text(text)
            case ev.ToolStarted(name=name, arguments=arguments):
                self.block_ended = bool(self.streamed)
                if self.terminal:
                    self.markdown.flush()
                elif self.stream_plain:
                    self._write(self.escapes.flush())
                self._say(f"[dim]→ {_escape(name)}[/dim] {_escape(short_args(arguments))}")
                if self.spinner is not None:
                    self.spinner.show(f"{name} {short_args(arguments, 40)}")
            case ev.ToolFinished(name=name, error=error, elapsed=elapsed):
                status = "[green]ok[/green]" if error is None else f"[red]error[/red] {_escape(error[:73])}"
                self._say(f"[dim]  {_escape(name)} {status} {elapsed:.2f}s[/dim]")
                if self.spinner is not None:
                    self.spinner.show("thinking")
            case ev.Retrying(model=model, reason=reason, wait=wait, next_model=next_model):
                action = f"retrying in {wait:.1f}s" if next_model == model else f"trying {next_model}"
                self._say(f"[yellow]{_escape(model)}: {_escape(reason[:120])}; {action}[/yellow]")
            case ev.Notice(text=text):
                self._say(f"[yellow]{_escape(text)}[/yellow]")
            case ev.TurnEnded() if self.spinner is not None:
                self.spinner.show(None)
            case _:
                pass

    def _text(self, text: str) -> None:
        if self.block_ended and text.strip():
            self.block_ended = False
            if self.stream_plain and not self.streamed.endswith("\n\n"):
                self._write("\n" if self.streamed.endswith("\n") else "\n\n")
        self.streamed += text
        if self.spinner is not None:
            self.spinner.show("writing")
        if self.terminal:
            self.markdown.feed(text)
        else:
            self._write(self.escapes.feed(text))

    def finish(self, reply: str, failed: bool) -> None:
        if self.spinner is not None:
            self.spinner.show(None)
        self._reply(reply, failed)
        for event in self.background:
            self._write("\n" + terminal_safe(event.as_message()) + "\n")

    def _reply(self, reply: str, failed: bool) -> None:
        if self.terminal:
            self.markdown.flush()
        elif self.stream_plain:
            self._write(self.escapes.flush())
        reply = terminal_safe(reply)
        if failed:
            if self.streamed and self.stream_plain:
                sys.stdout.write("\n")
            self.err.print(f"[red]{_escape(' '.join(reply.split()))}[/red]")  # one line, even if the provider sent several
            return
        if self.streamed:
            if not terminal_safe(self.streamed).rstrip().endswith(reply.rstrip()):
                self._write("\n" + reply + "\n")  # a reply that did not stream (a command's, a cut stream)
            elif self.stream_plain:
                sys.stdout.write("\n")
            return
        if sys.stdout.isatty():
            from rich.markdown import Markdown

            self.out.print(Markdown(reply))
        else:
            sys.stdout.write(reply + "\n")


def _load_markdown() -> None:
    import rich.console  # noqa: F401
    import rich.markdown  # noqa: F401


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(terminal_safe(text))
