"""The ACP agent: an editor's sessions as nanoagent sessions of its folder, prompts as turns, updates as they stream.

A session is a thread of the editor's folder (`cli:<folder>-<hash>:acp-<id>`, as `agent -C DIR -s NAME` names one),
so `session/load` finds it again and `nanoagent sessions list` shows it. Its mode is a tool profile the turns are
narrowed to (`policy`: as the settings allow; `coding`; `minimal`, reading only); its model is `/model`'s choice.
Approvals (`tools.exec.approve`) become `session/request_permission`; `session/cancel` cancels the turn as Ctrl-C does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import secrets
import time
from collections.abc import Callable
from typing import Any

import acp
from acp import RequestError
from acp.helpers import update_current_mode
from acp.schema import PermissionOption, ToolCallUpdate

from nanoagent.acp import updates, wire
from nanoagent.acp.turns import EditorFiles, Seat, Turns
from nanoagent.agent import events as ev
from nanoagent.errors import NanoagentError
from nanoagent.paths import Paths

# (mode id, name, description, the tool profile the turns are narrowed to: "" none)
MODES = (("policy", "As configured", "Every tool the settings allow this session", ""),
         ("coding", "Coding", "Files, search, commands and web pages; no other tools", "coding"),
         ("minimal", "Read only", "Reading and searching: no writes, no commands", "minimal"))
STOPS = {ev.StopReason.COMPLETED: "end_turn", ev.StopReason.MAX_TOKENS: "max_tokens",
         ev.StopReason.MAX_ITERATIONS: "max_turn_requests", ev.StopReason.CANCELLED: "cancelled",
         ev.StopReason.ERROR: "end_turn"}
ANSWERS = {"allow": "y", "always": "a", "reject": "n"}
OPTIONS = [PermissionOption(option_id="allow", name="Allow once", kind="allow_once"),
           PermissionOption(option_id="always", name="Allow always in this session", kind="allow_always"),
           PermissionOption(option_id="reject", name="Reject", kind="reject_once")]
MAX_IMAGE_BYTES = 5_000_000
LISTED = 50  # earlier threads `session/list` gives


class NanoagentAgent:
    """The SDK's `Agent`. `turns()` says where a new session's turns run (and whether that is the gateway): the
    gateway when one answers (and --local was not given), else this process. `models(key)` gives a session's model
    and the models offered beside it."""

    def __init__(self, paths: Paths, stdio: wire.Stdio, turns: Callable[[], tuple[Turns, bool]],
                 models: Callable[[str], tuple[str, list[str]]]):
        self.paths = paths
        self.stdio = stdio
        self.turns = turns
        self.models = models  # session key -> (its model now, the models to choose from)
        self.conn: Any = None
        self.seats: dict[str, tuple[Seat, Turns]] = {}
        self.running: dict[str, asyncio.Task[ev.TurnResult]] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    def notify(self, session_id: str, update: Any) -> None:
        """A session update, written at once: updates and the prompt's answer reach the editor in order."""
        note = acp.session_notification(session_id, update)
        self.stdio.post({"jsonrpc": "2.0", "method": "session/update",
                         "params": note.model_dump(mode="json", by_alias=True, exclude_none=True)})

    async def initialize(self, protocol_version: int, **kwargs: Any) -> dict[str, Any]:
        return wire.initialize_result({})  # `wire.Stdio` answers it before this is loaded; here for completeness

    async def authenticate(self, method_id: str, **kwargs: Any) -> dict[str, Any]:
        return {}

    # --- sessions --------------------------------------------------------------------------------------------

    def _folder(self, cwd: str) -> str:
        from nanoagent.tools.fs import working_folder

        if not os.path.isabs(cwd):
            raise RequestError.invalid_params({"cwd": "must be an absolute path"})
        try:
            return str(working_folder(cwd, self.paths.home, self.paths.workspace))
        except ValueError as e:
            raise RequestError.invalid_params({"cwd": str(e)}) from None

    def _seat(self, key: str, folder: str) -> Seat:
        turns, _ = self.turns()
        seat = Seat(key, folder)
        seat.sink = lambda event: self._show(seat, event)
        seat.ask = lambda question: self._ask(seat, question)
        if self.stdio.can("fs.readTextFile") or self.stdio.can("fs.writeTextFile"):
            files = EditorFiles(self.conn, key, asyncio.get_running_loop(), self.stdio.can("fs.readTextFile"),
                                self.stdio.can("fs.writeTextFile"))
            seat.buffers, seat.files = files, files.files
        self.seats[key] = (seat, turns)
        # after the answer that names the session: the SDK writes a handler's answer before the loop runs callbacks
        asyncio.get_running_loop().call_soon(self.notify, key, updates.commands())
        return seat

    def _state(self, seat: Seat) -> dict[str, Any]:
        current, choices = self.models(seat.key)
        mode = next(m[0] for m in MODES if m[3] == seat.profile)
        return {"modes": {"currentModeId": mode, "availableModes": [{"id": i, "name": n, "description": d}
                                                                   for i, n, d, _ in MODES]},
                "configOptions": [{"id": "model", "name": "Model", "category": "model", "type": "select",
                                   "description": "The model this session's turns use (/model)",
                                   "currentValue": current,
                                   "options": [{"value": m, "name": m} for m in dict.fromkeys([current, *choices])]}]}

    async def new_session(self, cwd: str, **kwargs: Any) -> dict[str, Any]:
        from nanoagent.cli.workdir import session_in

        folder = self._folder(cwd)
        key = session_in(folder, f"acp-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}")
        seat = self._seat(key, folder)
        return {"sessionId": key, **self._state(seat)}

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        from nanoagent.cli.workdir import belongs
        from nanoagent.session.store import SessionStore

        folder = self._folder(cwd)
        try:
            exists = belongs(session_id, folder) and self.paths.session_file(session_id).is_file()
        except NanoagentError:
            exists = False
        if not exists:
            raise RequestError.resource_not_found(session_id)
        seat = self._seat(session_id, folder)
        for update in updates.of_messages(folder, SessionStore(self.paths.sessions_dir).load(session_id).messages):
            self.notify(session_id, update)
        return self._state(seat)

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """The editor's earlier threads in folder `cwd`, the most recent first (LISTED of them); none without a
        folder (a session key names its folder only by a hash)."""
        from datetime import UTC, datetime

        from nanoagent.cli.workdir import belongs, folder_key
        from nanoagent.session.store import SessionStore

        if cwd is None:
            return {"sessions": []}
        folder = self._folder(cwd)
        store = SessionStore(self.paths.sessions_dir)
        found = sorted(((store.path_for(key).stat().st_mtime, key) for key in store.keys_with_prefix(folder_key(folder))
                        if belongs(key, folder)), reverse=True)[:LISTED]
        return {"sessions": [{"sessionId": key, "cwd": folder, "title": _title(store.load(key).messages) or key,
                              "updatedAt": datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")}
                             for stamp, key in found]}

    def _find(self, session_id: str) -> tuple[Seat, Turns]:
        found = self.seats.get(session_id)
        if found is None:
            raise RequestError.invalid_params({"sessionId": f"no session {session_id} here; session/new or "
                                                            "session/load it first"})
        return found

    async def set_session_mode(self, mode_id: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        seat, _ = self._find(session_id)
        profile = next((m[3] for m in MODES if m[0] == mode_id), None)
        if profile is None:
            raise RequestError.invalid_params({"modeId": f"one of {', '.join(m[0] for m in MODES)}"})
        seat.profile = profile
        self.notify(session_id, update_current_mode(mode_id))
        return {}

    async def set_config_option(self, config_id: str, session_id: str, value: Any, **kwargs: Any) -> dict[str, Any]:
        seat, turns = self._find(session_id)
        if config_id != "model" or not isinstance(value, str) or not value.strip() or len(value.split()) != 1:
            raise RequestError.invalid_params({"configId": "the one option is \"model\", a model's name"})
        try:
            turn = await turns.run(seat, f"/model {value}", [])
        except NanoagentError as e:
            raise RequestError.invalid_params({"value": str(e)}) from None
        if turn.failed:
            raise RequestError.invalid_params({"value": turn.reply})
        return {"configOptions": self._state(seat)["configOptions"]}

    # --- prompts -----------------------------------------------------------------------------------------------

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> dict[str, Any]:
        seat, turns = self._find(session_id)
        if session_id in self.running:
            raise RequestError.invalid_request({"sessionId": "a turn is running in this session; cancel it first"})
        text, images = self._message(prompt)
        task = asyncio.create_task(turns.run(seat, text, images))
        self.running[session_id] = task
        try:
            turn = await task
        except asyncio.CancelledError:
            if task.cancelled() and not _cancelling():  # session/cancel: the turn ended as Ctrl-C ends one
                return {"stopReason": "cancelled"}
            raise
        except NanoagentError as e:
            self.notify(session_id, acp.update_agent_message_text(f"Error: {e}"))
            return {"stopReason": "end_turn"}
        finally:
            self.running.pop(session_id, None)
        return self._answer(seat, turn)

    def _answer(self, seat: Seat, turn: ev.TurnResult) -> dict[str, Any]:
        result = turn.result
        if result is None or result.error is not None:  # a slash command's answer, or an error: not streamed
            if turn.reply:
                self.notify(seat.key, acp.update_agent_message_text(turn.reply))
            return {"stopReason": "end_turn"}
        return {"stopReason": STOPS.get(result.stop, "end_turn")}

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        task = self.running.get(session_id)
        if task is not None:
            task.cancel()

    def _message(self, blocks: list[Any]) -> tuple[str, list[Any]]:
        """The prompt's text, with embedded files as the person's attachments and linked files named; its images
        stored under the workspace's media/."""
        from nanoagent.attachments import EXTENSIONS, Attached, compose, store_image

        texts: list[str] = []
        attached: list[Attached] = []
        for block in blocks:
            kind = getattr(block, "type", "")
            if kind == "text":
                texts.append(block.text)
            elif kind == "image":
                if block.mime_type not in EXTENSIONS:
                    raise RequestError.invalid_params({"mimeType": f"images are {', '.join(EXTENSIONS)}"})
                data = _decoded(block.data)
                image = store_image(self.paths.workspace, data, block.mime_type, "image from the editor")
                attached.append(Attached("image from the editor", len(data), image=image))
            elif kind == "resource_link":
                texts.append(f"[{block.name}]({_local(block.uri)})")
            elif kind == "resource":
                resource = block.resource
                name = _local(resource.uri)
                if getattr(resource, "text", None) is not None:
                    attached.append(Attached(name, len(resource.text), text=resource.text))
                else:
                    texts.append(f"[{name}]({name}) (a binary file the editor attached; read it from its path)")
            else:
                raise RequestError.invalid_params({"prompt": f"nanoagent takes text, images and resources, not {kind}"})
        text, images = compose("\n\n".join(t for t in texts if t), attached)
        if not text.strip():
            raise RequestError.invalid_params({"prompt": "nothing to send: the prompt holds no text"})
        return text, images

    # --- what a turn shows and asks --------------------------------------------------------------------------

    def _show(self, seat: Seat, event: ev.Event) -> None:
        if isinstance(event, ev.ToolStarted) and event.name == "exec" and not event.agent:
            seat.running_exec = event.call_id
        update = updates.of_event(seat.folder, event)
        if update is not None:
            self.notify(seat.key, update)

    async def _ask(self, seat: Seat, question: str) -> str:
        """An approval question as `session/request_permission` about the command running now; the editor's choice
        as the answer the tool expects (y, a or n). No answer, or a cancelled one, declines."""
        call = ToolCallUpdate(tool_call_id=seat.running_exec or f"ask-{secrets.token_hex(4)}", kind="execute",
                              status="pending", title=question.splitlines()[0] if question else "Run a command?")
        try:
            answer = await self.conn.request_permission(session_id=seat.key, tool_call=call, options=OPTIONS)
        except (RequestError, ConnectionError):
            return "n"
        outcome = answer.outcome
        return ANSWERS.get(getattr(outcome, "option_id", ""), "n") if outcome.outcome == "selected" else "n"

    async def aclose(self) -> None:
        for task in self.running.values():
            task.cancel()
        await asyncio.gather(*self.running.values(), return_exceptions=True)


def _title(messages: list[Any]) -> str:
    """A thread's title: the start of the first thing the person said in it."""
    from nanoagent import messages as msg

    first = next((m for m in messages if msg.is_user(m)), None)
    text = " ".join(msg.strip_runtime_context(first["content"]).split()) if first is not None else ""
    return text if len(text) <= 60 else text[:59] + "…"


def _cancelling() -> bool:
    """Whether the task running this (the prompt's request) is being cancelled itself: the connection is closing."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


def _decoded(data: str) -> bytes:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError.invalid_params({"data": "an image's data must be base64"}) from None
    if len(raw) > MAX_IMAGE_BYTES:
        raise RequestError.invalid_params({"data": f"an image may be at most {MAX_IMAGE_BYTES:,} bytes"})
    return raw


def _local(uri: str) -> str:
    """A file URI as its path (what the file tools take); any other URI as it is."""
    if uri.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(uri).path)
    return uri


__all__ = ["MODES", "NanoagentAgent"]
