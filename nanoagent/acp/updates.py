"""The runner's events, and a saved session's messages, as ACP session updates.

A text delta is an agent message chunk, a thinking delta a thought chunk; a tool call is a `tool_call` with its kind
(read, edit, search, execute, fetch...), its file as a location, and for a file edit a diff from its arguments (an
edit's old and new text, a write's new content), so the editor shows it before the tool has run; its end is a
`tool_call_update` completed or failed, with what the tool said. nanoagent has no plan tool, so no plan is sent.
"""

from __future__ import annotations

import os
from typing import Any

import acp
from acp.schema import ToolCallLocation

from nanoagent import messages as msg
from nanoagent.agent import events as ev

KINDS = {"read_file": "read", "write_file": "edit", "edit_file": "edit", "list_dir": "search", "glob": "search",
         "grep": "search", "memory_search": "search", "memory_get": "read", "exec": "execute", "web_fetch": "fetch",
         "web_search": "fetch", "browser": "fetch"}
SHOWN = 4000  # characters of a tool's result the editor is shown


def kind_of(name: str) -> str:
    return KINDS.get(name, "other")


def _path(folder: str, arguments: dict[str, Any]) -> str:
    """The absolute path a file tool's `path` argument names, from the session's folder ("" for none)."""
    path = arguments.get("path")
    if not isinstance(path, str) or not path:
        return ""
    return os.path.normpath(os.path.join(folder, os.path.expanduser(path)))


def title_of(name: str, arguments: dict[str, Any]) -> str:
    if name == "exec":
        return f"Run `{' '.join(str(arguments.get('command', '')).split())[:120]}`"
    detail = arguments.get("path") or arguments.get("pattern") or arguments.get("query") or arguments.get("url")
    return f"{name} {detail}" if isinstance(detail, str) and detail else name


def _old_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def tool_started(folder: str, call_id: str, name: str, arguments: dict[str, Any], *, replay: bool = False) -> Any:
    """A `tool_call`: in progress (or, replayed from a session, pending until its result follows)."""
    path = _path(folder, arguments)
    content = []
    if name == "edit_file" and isinstance(arguments.get("new_text"), str):
        content = [acp.tool_diff_content(path, arguments["new_text"], str(arguments.get("old_text", "")))]
    elif name == "write_file" and isinstance(arguments.get("content"), str):
        content = [acp.tool_diff_content(path, arguments["content"], None if replay else _old_text(path))]
    return acp.start_tool_call(call_id, title_of(name, arguments), kind=kind_of(name),  # type: ignore[arg-type]
                               status="pending" if replay else "in_progress", content=content or None,
                               locations=[ToolCallLocation(path=path)] if path else None, raw_input=arguments)


def tool_finished(call_id: str, result: str, ok: bool) -> Any:
    text = msg.unwrap_untrusted(result) if ok else result
    shown = text if len(text) <= SHOWN else text[:SHOWN] + f"\n[... {len(text) - SHOWN:,} more characters]"
    return acp.update_tool_call(call_id, status="completed" if ok else "failed",
                                content=[acp.tool_content(acp.text_block(shown))], raw_output={"result": text})


def of_event(folder: str, event: ev.Event) -> Any | None:
    """The update an event makes (None: nothing the editor shows). Sub-agents' own text and tools stay inside their
    run; what the person should read comes as the session's agent's reply."""
    if event.agent:
        return None
    if isinstance(event, ev.TextDelta):
        return acp.update_agent_message_text(event.text)
    if isinstance(event, ev.ThinkingDelta):
        return acp.update_agent_thought_text(event.text)
    if isinstance(event, ev.ToolStarted):
        return tool_started(folder, event.call_id, event.name, event.arguments)
    if isinstance(event, ev.ToolFinished):
        return tool_finished(event.call_id, event.error or event.result, event.ok)
    if isinstance(event, ev.Notice):
        return acp.update_agent_thought_text(f"{event.text}\n")
    if isinstance(event, ev.SubagentEnded) and event.background:
        return acp.update_agent_message_text(f"\n\n{event.as_message()}\n\n")
    return None


def commands() -> Any:
    """nanoagent's slash commands, for the editor's `/` menu (the editor's stop button is /stop's)."""
    from acp.helpers import update_available_commands
    from acp.schema import AvailableCommand

    from nanoagent.agent.commands import COMMANDS, STOP_COMMANDS

    return update_available_commands(AvailableCommand(name=c.name.removeprefix("/"), description=c.help)
                                     for c in sorted(COMMANDS.values(), key=lambda c: c.name)
                                     if c.name not in STOP_COMMANDS)


def of_messages(folder: str, messages: list[msg.Message]) -> list[Any]:
    """A saved conversation replayed: the person's words, the replies, each tool call and its result."""
    updates: list[Any] = []
    for message in messages:
        if msg.is_user(message):
            text = msg.strip_runtime_context(message["content"])
            if text.strip():
                updates.append(acp.update_user_message_text(text))
        elif msg.is_assistant(message):
            if msg.text_of(message).strip():
                updates.append(acp.update_agent_message_text(msg.text_of(message)))
            for call in msg.calls_of(message):
                arguments, _ = msg.parse_arguments(call["arguments"])
                updates.append(tool_started(folder, call["id"], call["name"], arguments, replay=True))
        elif msg.is_tool(message):
            updates.append(tool_finished(message["tool_call_id"], message["content"], not message.get("is_error")))
    return updates
