"""Turn agent events into terminal output: the reply on stdout, activity on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from nanoagent.agent import events as ev


def table_console() -> Console:
    """A console for tables: the terminal's width on a terminal; pipes and files get whole rows, never an
    ellipsis (a table is only as wide as its content)."""
    console = Console()
    return console if console.is_terminal else Console(width=1000)


def short_args(arguments: dict[str, Any], width: int = 60) -> str:
    parts = []
    for key, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(str(text).split())
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


def _one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class OneShotRenderer:
    """For `agent -m`: streams plain text when piped, renders Markdown at the end on a terminal."""

    def __init__(self, quiet_reply: bool = False):
        self.out = Console(soft_wrap=False)
        # soft_wrap: each activity line and the final error stay one line when piped (rich wraps at 80 otherwise)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.quiet_reply = quiet_reply  # --json prints everything at the end
        self.streamed = ""
        self.stream_plain = not self.out.is_terminal and not quiet_reply
        self.background: list[ev.SubagentEnded] = []  # answers of background runs, shown after the reply

    def __call__(self, event: ev.Event) -> None:
        if event.agent:
            line = subagent_line(event)
            if line is not None:
                self.err.print(line)
            if isinstance(event, ev.SubagentEnded) and event.background:
                self.background.append(event)
            return
        match event:
            case ev.TextDelta(text=text) if self.stream_plain:
                sys.stdout.write(text)
                sys.stdout.flush()
                self.streamed += text
            case ev.ToolStarted(name=name, arguments=arguments):
                self.err.print(f"[dim]→ {name}[/dim] {_escape(short_args(arguments))}")
            case ev.ToolFinished(name=name, error=error, elapsed=elapsed):
                status = "[green]ok[/green]" if error is None else f"[red]error[/red] {_escape(error[:73])}"
                self.err.print(f"[dim]  {name} {status} {elapsed:.2f}s[/dim]")
            case ev.Retrying(model=model, reason=reason, wait=wait, next_model=next_model):
                action = f"retrying in {wait:.1f}s" if next_model == model else f"trying {next_model}"
                self.err.print(f"[yellow]{model}: {_escape(reason[:120])}; {action}[/yellow]")
            case ev.Notice(text=text):
                self.err.print(f"[yellow]{_escape(text)}[/yellow]")
            case _:
                pass

    def finish(self, reply: str, failed: bool) -> None:
        self._reply(reply, failed)
        for event in self.background:
            sys.stdout.write("\n" + event.as_message() + "\n")

    def _reply(self, reply: str, failed: bool) -> None:
        if failed:
            if self.streamed:
                sys.stdout.write("\n")
            self.err.print(f"[red]{_escape(' '.join(reply.split()))}[/red]")  # one line, even if the provider sent several
            return
        if self.streamed:
            if not self.streamed.rstrip().endswith(reply.rstrip()):
                sys.stdout.write("\n" + reply)
            sys.stdout.write("\n")
            return
        if self.out.is_terminal:
            from rich.markdown import Markdown

            self.out.print(Markdown(reply))
        else:
            sys.stdout.write(reply + "\n")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
