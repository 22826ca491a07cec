"""`nanoagent sessions list|show|export|rm`: conversations read, exported or removed outside a session."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nanoagent import keys
from nanoagent.cli.common import App, setup, warn
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from collections.abc import Callable

    from nanoagent.messages import Message, ToolCallData
    from nanoagent.session.store import Session, SessionStore
    from nanoagent.usage import Total

sessions_app = App(help="List, read, export and remove saved conversations.\n\nExample: nanoagent sessions list", no_args_is_help=True)

KeyArg = Annotated[str, typer.Argument(help="Session key, e.g. cli:direct or telegram:123 (a bare name means cli:NAME).")]


@dataclass
class Summary:
    key: str
    messages: int
    last_active: str  # ISO time, UTC
    tokens: int
    spend: Total
    preview: str = ""  # the start of the last thing the user said
    title: str = ""  # its name, else the first words of its first message (`session/titles.py`)

    def to_dict(self) -> dict[str, Any]:
        """As `agent --json` gives cost: a number in USD at the listed prices, null when no call had a price;
        `unpriced` says some calls had none, and the cost counts only the others."""
        spend = self.spend
        cost = None if spend.unpriced and spend.cost == 0 else spend.cost
        return {"key": self.key, "messages": self.messages, "last_active": self.last_active, "tokens": self.tokens,
                "cost": cost, "unpriced": spend.unpriced, "preview": self.preview, "title": self.title}


def _store() -> SessionStore:
    from nanoagent.session.store import SessionStore

    paths, _ = setup(None)
    return SessionStore(paths.sessions_dir, warn=warn)


def _key(key: str) -> str:
    return key if ":" in key else f"cli:{key}"


def _existing(store: SessionStore, key: str) -> Session:
    key = _key(key)
    if key not in store.keys():
        raise NanoagentError(f"No session {key!r}; `nanoagent sessions list` shows the saved ones.")
    return store.load(key)


def summarize(store: SessionStore, keys: list[str] | None = None, limit: int | None = None) -> list[Summary]:
    """Saved sessions (`keys`, else all), the most recently active first; with `limit`, only that many with
    messages are read (the newest files first), so picking a recent one does not load every session."""
    from nanoagent.session.titles import title_of
    from nanoagent.usage import session_total

    stamps = {key: os.stat(store.path_for(key)).st_mtime for key in (store.keys() if keys is None else keys)}
    rows: list[Summary] = []
    for key in sorted(stamps, key=stamps.__getitem__, reverse=True):
        session = store.load(key)
        if limit is not None and not session.messages:
            continue
        total = session_total(session.usage)
        stamp = datetime.fromtimestamp(stamps[key], UTC).isoformat(timespec="seconds")
        rows.append(Summary(key, len(session.messages), stamp, total.usage.input_tokens + total.usage.output_tokens,
                            total, _preview(session), title_of(session)))
        if limit is not None and len(rows) >= limit:
            break
    return rows


def conversations(store: SessionStore, limit: int, within: Callable[[str], bool] | None = None) -> list[Summary]:
    """Up to `limit` sessions with messages a person had, the most recently active first (for -c and --resume);
    only the keys `within` takes, when given (a working folder's)."""
    found = [key for key in store.keys() if not keys.is_machine(key)]  # a person's conversations, not the agent's runs
    return summarize(store, [key for key in found if within is None or within(key)], limit)


def _preview(session: Session) -> str:
    from nanoagent.messages import is_user

    last = next((m for m in reversed(session.messages) if is_user(m)), None)
    text = " ".join(_text(last).split()) if last is not None else ""
    return text[:50] + ("…" if len(text) > 50 else "")


@sessions_app.command("list")
def list_sessions(
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """Saved sessions, the most recent first, with their size and cost.

    Each row: its title, messages, last active, tokens and cost.

    Example: nanoagent sessions list --json
    """
    rows = summarize(_store())
    if json_output:
        print(json.dumps([row.to_dict() for row in rows], ensure_ascii=False, indent=2))
        return
    if not rows:
        print("No saved sessions yet; `nanoagent agent` starts one.")
        return
    from rich.table import Table

    from nanoagent.cli.render import print_table, terminal_safe

    table = Table("session", "title", "messages", "last active", "tokens", "cost")
    for row in rows:
        table.add_row(terminal_safe(row.key), terminal_safe(row.title), f"{row.messages:,}", _local_time(row.last_active), f"{row.tokens:,}",
                      row.spend.cost_text())
    print_table(table)


@sessions_app.command("show")
def show(key: KeyArg) -> None:
    """The conversation as the terminal shows it, tool calls folded.

    Each tool call is folded to one line.

    Example: nanoagent sessions show cli:direct | less -R
    """
    from rich.console import Console

    from nanoagent.cli.render import terminal_safe

    session = _existing(_store(), key)
    console = Console(highlight=False, soft_wrap=not sys.stdout.isatty())
    results = _results(session.messages)
    for message in session.messages:
        text = terminal_safe(_text(message))
        if message["role"] == "user":
            console.print(f"[bold cyan]›[/bold cyan] {_escape(text)}")
        elif message["role"] == "assistant":
            if text.strip():
                if console.is_terminal:
                    from rich.markdown import Markdown

                    console.print(Markdown(text))
                else:
                    console.print(_escape(text))
            for call in message.get("tool_calls", []):
                console.print(_call_line(call, results.get(call["id"])))
        console.print()


@sessions_app.command("export")
def export(
    key: KeyArg,
    format: Annotated[str, typer.Option("--format", "-f", help="md (readable) or json (every record).")] = "md",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists.")] = False,
) -> None:
    """Export a conversation as Markdown or JSON, to stdout or a file.

    Example: nanoagent sessions export cli:direct -f md -o chat.md
    """
    if format not in ("md", "json"):
        raise NanoagentError(f"Unknown format {format!r}; use --format md or --format json.")
    session = _existing(_store(), key)
    text = _markdown(session) if format == "md" else _json(session)
    if output is None:
        sys.stdout.write(text)
        return
    from nanoagent.fsutil import atomic_write

    if output.exists() and not force:
        raise NanoagentError(f"{output} exists; choose another path or add --force to overwrite it.")
    if output.is_dir():
        raise NanoagentError(f"{output} is a folder; give a file name.")
    atomic_write(output, text, mode=0o600)
    print(f"Wrote {session.key} ({len(session.messages)} messages) to {output}.", file=sys.stderr)


@sessions_app.command("rm")
def remove(
    key: KeyArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask first.")] = False,
) -> None:
    """Delete a saved conversation. What was archived to memory (history.jsonl, MEMORY.md) stays.

    Example: nanoagent sessions rm cli:old-project
    """
    store = _store()
    session = _existing(store, key)
    if not yes:
        if not sys.stdin.isatty():
            raise NanoagentError(f"Not removing {session.key} without asking; add --yes to remove it from a script.")
        answer = input(f"Remove {session.key} ({len(session.messages)} messages)? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("Kept it.")
            return
    store.remove(session)  # a turn running on it (a gateway, another terminal) keeps it
    print(f"Removed {session.key}; what was archived to memory stays.")


# --- rendering helpers ---------------------------------------------------------------------------


def _text(message: Message) -> str:
    """A message's text, each image named on a line; a user's without the runtime block, and with each attached
    file and piped input folded to one line (`[attached notes.txt, 2 lines]`)."""
    from nanoagent.attachments import folded
    from nanoagent.messages import shown_text, strip_runtime_context

    text = shown_text(message)
    return folded(strip_runtime_context(text)) if message["role"] == "user" else text


def _results(messages: list[Message]) -> dict[str, Message]:
    from nanoagent.messages import is_tool

    return {m["tool_call_id"]: m for m in messages if is_tool(m)}


def _call_line(call: ToolCallData, result: Message | None) -> str:
    from nanoagent.cli.render import short_args
    from nanoagent.messages import parse_arguments

    arguments, _ = parse_arguments(call.get("arguments", ""))
    failed = result is None or bool(result.get("is_error"))
    mark = "[red]✗[/red]" if failed else "[green]✓[/green]"
    lines = len(_text(result).splitlines()) if result is not None else 0
    outcome = "no result" if result is None else f"{lines} line{'s' if lines != 1 else ''}"
    return f"  {mark} [dim]{_escape(call.get('name', ''))} {_escape(short_args(arguments))} · {outcome}[/dim]"


def _markdown(session: Session) -> str:
    from nanoagent.messages import parse_arguments

    out = [f"# {session.key}\n"]
    results = _results(session.messages)
    for message in session.messages:
        text = _text(message).strip()
        if message["role"] == "user":
            out.append(f"## User\n\n{text}\n")
        elif message["role"] == "assistant":
            out.append(f"## Assistant\n\n{text}\n" if text else "## Assistant\n")
            for call in message.get("tool_calls", []):
                arguments, _ = parse_arguments(call.get("arguments", ""))
                result = results.get(call["id"])
                body = _text(result).strip() if result is not None else "(no result)"
                fence = "````" if "```" in body else "```"
                out.append(f"<details><summary>{call.get('name', '')} {json.dumps(arguments, ensure_ascii=False)}"
                           f"</summary>\n\n{fence}\n{body}\n{fence}\n\n</details>\n")
    return "\n".join(out)


def _json(session: Session) -> str:
    # the session's own model (set with /model), else the one its last call used; null before any call
    model = session.meta.model or (session.usage[-1].model if session.usage else None)
    data = {"key": session.key, "model": model, "created": session.meta.created,
            "messages": session.messages, "usage": [record.to_json() for record in session.usage]}
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _local_time(stamp: str) -> str:
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return stamp


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
