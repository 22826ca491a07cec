"""The gateway's socket protocol: newline-delimited JSON objects, version 1. See docs/gateway.md, "The gateway protocol".

Client to gateway:
    {"type": "hello", "v": 1, "session": "cli:direct"}       -> {"type": "welcome", "v": 1, "session", "model", "busy",
                                                                 "commands", "features": ["attachments"]}
    {"type": "send", "id": "r1", "session": KEY, "text": "..."}  a message or a slash command
        optional "attachments": [{"type": "image", "path": "media/...", "sha256": HEX, "media_type": "image/png",
        "name": "cat.png"}]: images the client stored under the workspace's media/ (by reference, never bytes)
        optional "workdir": "/abs/path": the folder the turn works in (`agent -C DIR`; feature "workdir")
        optional "profile": "minimal": a tool profile the turn is narrowed to (an editor's mode; feature "profile")
        optional "files": ["read", "write"]: the client holds the working folder's files (an editor's buffers): the
        turn's file tools ask it for them (feature "files")
    {"type": "file_answer", "id": "f1", "text": "..."}           the answer to a "file" read ("ok": true a write;
                                                                 neither: use the disk)
    {"type": "cancel", "session": KEY}                           Ctrl-C or Esc: cancel the running turn and commands
    {"type": "answer", "id": "q1", "text": "y"}                  the answer to an "ask"
    {"type": "signin", "id": "w1", "enable": false}              `nanoagent web`: a one-time sign-in link for the
                                                                 web app; "enable": turn the HTTP listener on
                                                                 (on gateway.http.host) when it is off
    {"type": "devices_changed"}                                  `nanoagent web revoke`: the web app's devices file
                                                                 changed; no answer
Gateway to client:
    {"type": "event", "event": {"kind": "TextDelta", "session": KEY, "text": "..."}}   the runner's typed events
    {"type": "ask", "id": "q1", "question": "..."}               an approval question for this client's turn
    {"type": "file", "id": "f1", "op": "read", "path": "/abs"}   a file tool of this client's turn reads ("write",
                                                                 with "text": writes) a file of its working folder
    {"type": "result", "id": "r1", "reply": "...", "joined": false, "run": {...} | null}
    {"type": "signin", "id": "w1", "url": "http://127.0.0.1:8765/signin/CODE", "remote": [...]}   the same code at
        each address another device may reach ([] on loopback only); or {"type": "signin", "id": "w1", "off": true,
        "host": "127.0.0.1", "port": 8765}: the listener is off (send again with "enable": true)
    {"type": "error", "message": "..."}                          a bad line; the connection stays

This module is light on purpose: an attaching terminal imports it, never a provider SDK.
"""

from __future__ import annotations

import functools
import json
import os

from nanoagent.errors import NanoagentError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: a one-shot loads this module and not typing
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from nanoagent.agent import events as ev
    from nanoagent.messages import ImageBlock

VERSION = 1
MAX_LINE = 8 << 20  # a client's line longer than this is refused (the connection is closed): 1 MB of piped text fits
MAX_EVENT_LINE = 4 * MAX_LINE  # clients read the gateway's lines up to this (an event echoes a message with context)
FEATURES = ("attachments", "workdir", "profile", "files")  # what this gateway takes beyond version 1's first form, named in its welcome



@functools.cache
def _events() -> dict[str, type]:
    """Every kind of event the runner emits, by name (agent.events loads here: a one-shot sends its message
    before it needs them)."""
    from nanoagent.agent import events as ev

    return {cls.__name__: cls for cls in ev.Event.__args__}  # typing.get_args without loading typing


class GatewayGone(NanoagentError):
    pass


class NoGateway(GatewayGone):
    """The socket cannot be connected to: no gateway was started, a killed one left its socket file, or the
    home is not one (a file, a folder this user cannot enter)."""


GONE_MID_TURN = ("The gateway went away mid-turn; the turn goes on there if it is still running. See "
                 "`nanoagent gateway status`.")


def unreachable(path: Path, e: OSError) -> NoGateway:
    return NoGateway(f"Cannot reach the gateway at {path}: {e.strerror or e}; start it with `nanoagent gateway`, "
                "or use --local.")


def check_features(welcome: dict[str, Any], images: list[ImageBlock] | None, workdir: str = "",
                   profile: str = "", files: tuple[str, ...] = ()) -> None:
    features = welcome.get("features") or []
    for wanted, needed, what in ((images, "attachments", "the attachment"), (workdir, "workdir", "the working folder"),
                                 (profile, "profile", "the session's mode"), (files, "files", "the editor's files")):
        if wanted and needed not in features:
            raise NanoagentError(f"The running gateway is older than this client and would drop {what}; restart "
                                 "it (`nanoagent gateway stop`, then `nanoagent gateway`) or use --local.")


def hello(session: str) -> dict[str, Any]:
    """A client's first line: which session it watches."""
    return {"type": "hello", "v": VERSION, "session": session, "pid": os.getpid()}


def send(request_id: str, session: str, text: str, images: list[ImageBlock] | None = None,
         workdir: str = "", profile: str = "", files: tuple[str, ...] = ()) -> dict[str, Any]:
    """A message or slash command for `session`, with references to images already under the workspace's media/,
    the folder its turn works in (`agent -C DIR`; "" the workspace), the tool profile it is narrowed to ("" none) and
    what the client does with the folder's files for its file tools ("read", "write")."""
    return {"type": "send", "id": request_id, "session": session, "text": text,
            **({"attachments": images} if images else {}), **({"workdir": workdir} if workdir else {}),
            **({"profile": profile} if profile else {}), **({"files": list(files)} if files else {})}


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """One line as a message; ValueError saying what is wrong with it."""
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ValueError("each line must be a JSON object with a string \"type\"")
    return message


def attachments_from_wire(raw: Any) -> tuple[list[ImageBlock], str]:
    """A send's image references (none when the key is absent), or ([], what is wrong with them)."""
    from nanoagent.messages import checked_image

    if raw is None:
        return [], ""
    if not isinstance(raw, list):
        return [], "\"attachments\" must be a list of image references"
    images = []
    for item in raw:
        image, problem = checked_image(item)
        if image is None:
            return [], f"bad attachment: {problem}"
        images.append(image)
    return images, ""


def event_to_wire(event: ev.Event) -> dict[str, Any]:
    import dataclasses

    from nanoagent.agent import events as ev
    from nanoagent.usage import Usage

    data: dict[str, Any] = {"kind": type(event).__name__}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, Usage):
            value = value.to_dict()
        elif isinstance(value, ev.StopReason | ev.RunStatus):
            value = value.value
        data[f.name] = value
    return data


def event_from_wire(data: dict[str, Any]) -> ev.Event | None:
    """The typed event, or None for a kind this version does not know (a newer gateway)."""
    import dataclasses

    from nanoagent.agent import events as ev
    from nanoagent.usage import Usage

    cls = _events().get(str(data.get("kind")))
    if cls is None:
        return None
    values = {f.name: data.get(f.name) for f in dataclasses.fields(cls) if f.name in data}
    if cls is ev.UsageRecorded:
        values["usage"] = Usage(**{k: int(v) for k, v in (values.get("usage") or {}).items()})
    if cls is ev.TurnEnded:
        values["reason"] = ev.StopReason(values.get("reason", "completed"))
    if cls is ev.SubagentEnded:
        values["status"] = ev.RunStatus(values.get("status", "done"))
    try:
        return cls(**values)
    except TypeError:
        return None


def result_to_wire(turn: ev.TurnResult | None, request_id: str) -> dict[str, Any]:
    if turn is None:
        return {"type": "result", "id": request_id, "reply": "", "joined": True, "run": None}
    run = turn.result
    wire_run = None if run is None else {
        "stop": run.stop.value, "error": run.error, "sent": run.sent, "usage": run.usage.to_dict(),
        "tool_calls": [{"name": c.name, "arguments": c.arguments, "ok": c.ok, "elapsed": c.elapsed}
                       for c in run.tool_calls],
    }
    return {"type": "result", "id": request_id, "reply": turn.reply, "session": turn.session, "model": turn.model,
            "joined": False, "run": wire_run, "refused": turn.refused}


def result_from_wire(data: dict[str, Any]) -> ev.TurnResult | None:
    """The TurnResult a local turn would have given; None when the message joined a running turn."""
    from nanoagent.agent import events as ev
    from nanoagent.usage import Usage

    if data.get("joined"):
        return None
    run = data.get("run")
    result = None
    if isinstance(run, dict):
        result = ev.RunResult(
            reply=str(data.get("reply", "")), stop=ev.StopReason(run.get("stop", "completed")),
            usage=Usage(**{k: int(v) for k, v in (run.get("usage") or {}).items()}), error=run.get("error"),
            sent=run.get("sent") is not False,
            tool_calls=[ev.ToolCallRecord(c["name"], c.get("arguments") or {}, bool(c.get("ok")),
                                          float(c.get("elapsed", 0))) for c in run.get("tool_calls") or []])
    return ev.TurnResult(str(data.get("reply", "")), str(data.get("session", "")), result, str(data.get("model", "")),
                         refused=bool(data.get("refused")))
