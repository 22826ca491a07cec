"""`nanoagent acp` as an editor runs it: a real process on stdio, driven by the ACP SDK's client side, answering from
the local LLM server; and a raw JSON-RPC client for what an editor should never send."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

acp = pytest.importorskip("acp")

from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse  # noqa: E402

from tests.conftest import PATIENCE, ROOT, anthropic_env, start_gateway_process, until, write_config  # noqa: E402
from tests.llm_server import Reply  # noqa: E402

pytestmark = pytest.mark.process
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


class Editor:
    """The SDK's `Client`: keeps every update, answers permission questions with `answer`, and, given `buffers`,
    offers its own files (path -> text) for reading and takes writes into them."""

    def __init__(self, answer: str = "allow", buffers: dict[str, str] | None = None):
        self.updates: list[Any] = []
        self.asked: list[Any] = []
        self.answer = answer
        self.buffers = buffers
        self.changed = asyncio.Event()

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self.changed.set()

    async def request_permission(self, options: Any, session_id: str, tool_call: Any, **kwargs: Any) -> Any:
        self.asked.append(tool_call)
        if self.answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answer))

    async def read_text_file(self, path: str, session_id: str, **kwargs: Any) -> Any:
        assert self.buffers is not None
        return acp.ReadTextFileResponse(content=self.buffers[path])

    async def write_text_file(self, content: str, path: str, session_id: str, **kwargs: Any) -> Any:
        assert self.buffers is not None
        self.buffers[path] = content
        return acp.WriteTextFileResponse()

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.updates if u.session_update == kind)

    async def until(self, check: Any, what: str) -> None:
        async def wait() -> None:
            while not check():
                self.changed.clear()
                await self.changed.wait()

        try:
            await asyncio.wait_for(wait(), PATIENCE)
        except TimeoutError:
            pytest.fail(f"no {what}; updates: {self.kinds()}")


@pytest.fixture
def home(isolated_home: Path, llm) -> Path:
    write_config(isolated_home, {"tools": {"exec": {"sandbox": "none", "approve": "always"}}})
    return isolated_home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "notes.txt").write_text("apples\n")
    return folder


def env_for(home: Path, llm: Any) -> dict[str, str]:
    return {**os.environ, **anthropic_env(llm), "NANOAGENT_HOME": str(home), "PYTHONPATH": str(ROOT)}


async def session(editor: Editor, home: Path, llm: Any, project: Path, run: Any, *args: str,
                  capabilities: dict | None = None) -> Any:
    """Start `nanoagent acp`, initialize it, open a session in `project`, and run `run(conn, session_id)`. Every
    line it writes on stdout must be protocol (the SDK's reader logs any other line and goes on)."""
    stray = Stray()
    logging.getLogger().addHandler(stray)
    try:
        async with acp.spawn_agent_process(editor, sys.executable, "-m", "nanoagent", "acp", *args,
                                           env=env_for(home, llm), cwd=ROOT) as (conn, process):
            hello = await asyncio.wait_for(conn.initialize(protocol_version=1, client_capabilities=capabilities),
                                           PATIENCE)
            assert hello.agent_capabilities.load_session is True
            new = await conn.new_session(cwd=str(project), mcp_servers=[])
            result = await run(conn, new.session_id)
    finally:
        logging.getLogger().removeHandler(stray)
    assert stray.lines == []
    return result


class Stray(logging.Handler):
    """What the SDK's reader says of a line on stdout that is not JSON-RPC."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "parsing JSON-RPC" in record.getMessage():
            self.lines.append(record.getMessage())


def prompt(conn: Any, session_id: str, *blocks: Any) -> Any:
    return asyncio.wait_for(conn.prompt(session_id=session_id, prompt=list(blocks)), PATIENCE)


def test_a_prompt_streams_its_reply_and_thinking_back_as_session_updates(home, llm, project):
    llm.script(Reply(text="Hello from nanoagent", thinking="Let me think."))
    editor = Editor()

    async def run(conn: Any, session_id: str) -> Any:
        return await prompt(conn, session_id, acp.text_block("hi"))

    answer = asyncio.run(session(editor, home, llm, project, run))
    assert answer.stop_reason == "end_turn"
    assert editor.text() == "Hello from nanoagent"
    assert editor.kinds()[0] == "available_commands_update"
    assert {"status", "model", "new"} <= {c.name for c in editor.updates[0].available_commands}
    assert "Let me think." in editor.text("agent_thought_chunk")


def test_an_edit_shows_as_a_tool_call_with_its_diff_and_changes_the_file_in_the_editors_folder(home, llm, project):
    llm.script(Reply(tool_calls=[("edit_file", {"path": "notes.txt", "old_text": "apples", "new_text": "pears"})]),
               Reply(text="Done."))
    editor = Editor()

    async def run(conn: Any, session_id: str) -> Any:
        return await prompt(conn, session_id, acp.text_block("change apples to pears"))

    asyncio.run(session(editor, home, llm, project, run))
    started = next(u for u in editor.updates if u.session_update == "tool_call")
    assert started.kind == "edit" and started.status == "in_progress"
    diff = started.content[0]
    assert (diff.type, diff.path, diff.old_text, diff.new_text) == ("diff", str(project / "notes.txt"), "apples",
                                                                    "pears")
    finished = next(u for u in editor.updates if u.session_update == "tool_call_update")
    assert finished.status == "completed" and finished.tool_call_id == started.tool_call_id
    assert (project / "notes.txt").read_text() == "pears\n"


@pytest.mark.parametrize(("answer", "ran"), [("allow", True), ("reject", False)])
def test_a_command_needing_approval_asks_the_editor_and_runs_only_when_allowed(home, llm, project, answer, ran):
    llm.script(Reply(tool_calls=[("exec", {"command": "echo ran > proof.txt"})]), Reply(text="ok"))
    editor = Editor(answer=answer)

    async def run(conn: Any, session_id: str) -> Any:
        return await prompt(conn, session_id, acp.text_block("make the proof"))

    asyncio.run(session(editor, home, llm, project, run))
    assert len(editor.asked) == 1
    asked = editor.asked[0]
    started = next(u for u in editor.updates if u.session_update == "tool_call")
    assert started.kind == "execute" and asked.tool_call_id == started.tool_call_id
    assert "echo ran > proof.txt" in asked.title
    assert (project / "proof.txt").exists() is ran
    finished = next(u for u in editor.updates if u.session_update == "tool_call_update")
    assert finished.status == ("completed" if ran else "failed")


@pytest.mark.parametrize("through_gateway", [False, True], ids=["here", "gateway"])
def test_cancel_ends_a_turn_mid_command_and_the_session_records_it(home, llm, project, through_gateway):
    llm.script(Reply(tool_calls=[("exec", {"command": "sleep 60"})]))
    editor = Editor(answer="allow")

    async def run(conn: Any, session_id: str) -> Any:
        turn = asyncio.ensure_future(prompt(conn, session_id, acp.text_block("wait a minute")))
        await editor.until(lambda: editor.asked and "tool_call" in editor.kinds(), "command started")
        await conn.cancel(session_id=session_id)
        return await turn, session_id

    with gateway_running(home, llm, through_gateway):
        answer, session_id = asyncio.run(session(editor, home, llm, project, run))
    assert answer.stop_reason == "cancelled"
    saved = "".join(p.read_text() for p in home.rglob("*.jsonl") if "sessions" in p.parts)
    assert "cancelled this turn" in saved


def test_an_earlier_session_of_the_folder_is_listed_and_loads_with_its_messages_replayed(home, llm, project):
    llm.script(Reply(text="First answer"))

    async def first(conn: Any, session_id: str) -> str:
        await prompt(conn, session_id, acp.text_block("first question"))
        return session_id

    earlier = asyncio.run(session(Editor(), home, llm, project, first))
    editor = Editor()

    async def load(conn: Any, session_id: str) -> Any:
        return await conn.load_session(cwd=str(project), session_id=earlier, mcp_servers=[])

    async def listed(conn: Any, session_id: str) -> Any:
        return await conn.list_sessions(cwd=str(project))

    assert [(s.session_id, s.title) for s in asyncio.run(session(Editor(), home, llm, project, listed)).sessions] == [
        (earlier, "first question")]
    asyncio.run(session(editor, home, llm, project, load))
    assert editor.text("user_message_chunk") == "first question"
    assert editor.text() == "First answer"


def test_a_session_of_another_folder_is_not_loaded(home, llm, project, tmp_path):
    llm.script(Reply(text="First answer"))

    async def first(conn: Any, session_id: str) -> str:
        await prompt(conn, session_id, acp.text_block("first question"))
        return session_id

    earlier = asyncio.run(session(Editor(), home, llm, project, first))
    other = tmp_path / "other"
    other.mkdir()

    async def load(conn: Any, session_id: str) -> Any:
        with pytest.raises(acp.RequestError):
            await conn.load_session(cwd=str(other), session_id=earlier, mcp_servers=[])

    asyncio.run(session(Editor(), home, llm, project, load))


@pytest.mark.parametrize("through_gateway", [False, True], ids=["here", "gateway"])
def test_an_image_in_the_prompt_reaches_the_model(home, llm, project, through_gateway):
    llm.script(Reply(text="A red pixel."))
    editor = Editor()

    async def run(conn: Any, session_id: str) -> Any:
        return await prompt(conn, session_id, acp.text_block("what is this?"),
                            acp.image_block(base64.b64encode(PNG).decode(), "image/png"))

    with gateway_running(home, llm, through_gateway):
        asyncio.run(session(editor, home, llm, project, run))
    sent = json.dumps(llm.requests[-1].body)
    assert base64.b64encode(PNG).decode() in sent and "what is this?" in sent
    assert editor.text() == "A red pixel."


def test_an_embedded_file_goes_to_the_model_as_the_persons_attachment(home, llm, project):
    llm.script(Reply(text="Seen."))

    async def run(conn: Any, session_id: str) -> Any:
        resource = acp.embedded_text_resource(f"file://{project}/draft.md", "unsaved draft text")
        return await prompt(conn, session_id, acp.text_block("review this"), acp.resource_block(resource))

    asyncio.run(session(Editor(), home, llm, project, run))
    sent = json.dumps(llm.requests[-1].body)
    assert "unsaved draft text" in sent and "attached_file" in sent


@pytest.mark.parametrize("through_gateway", [False, True], ids=["here", "gateway"])
def test_where_the_editor_offers_its_files_the_tools_read_its_unsaved_buffer_and_write_through_it(
        home, llm, project, through_gateway):
    path = str(project / "notes.txt")
    llm.script(Reply(tool_calls=[("edit_file", {"path": "notes.txt", "old_text": "unsaved", "new_text": "kept"})]),
               Reply(text="Done."))
    editor = Editor(buffers={path: "unsaved plums\n"})

    async def run(conn: Any, session_id: str) -> Any:
        return await prompt(conn, session_id, acp.text_block("edit it"))

    with gateway_running(home, llm, through_gateway):
        asyncio.run(session(editor, home, llm, project, run,
                            capabilities={"fs": {"readTextFile": True, "writeTextFile": True}}))
    assert editor.buffers == {path: "kept plums\n"}
    assert (project / "notes.txt").read_text() == "apples\n"  # the editor saves it when the person says so
    finished = next(u for u in editor.updates if u.session_update == "tool_call_update")
    assert finished.status == "completed"


def test_through_a_running_gateway_a_commands_approval_is_asked_in_the_editor(home, llm, project):
    llm.script(Reply(tool_calls=[("exec", {"command": "echo ran > proof.txt"})]), Reply(text="ok"))
    editor = Editor(answer="always")

    async def run(conn: Any, session_id: str) -> Any:
        return await prompt(conn, session_id, acp.text_block("make the proof"))

    with gateway_running(home, llm, True):
        asyncio.run(session(editor, home, llm, project, run))
    started = next(u for u in editor.updates if u.session_update == "tool_call")
    assert [a.tool_call_id for a in editor.asked] == [started.tool_call_id]
    assert (project / "proof.txt").read_text() == "ran\n"


@contextlib.contextmanager
def gateway_running(home: Path, llm: Any, wanted: bool = True) -> Iterator[None]:
    gateway = start_gateway_process(env_for(home, llm)) if wanted else None
    try:
        yield
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(PATIENCE)


@pytest.mark.parametrize("through_gateway", [False, True], ids=["here", "gateway"])
def test_a_read_only_mode_takes_the_writing_tools_away_for_the_session(home, llm, project, through_gateway):
    llm.script(Reply(tool_calls=[("write_file", {"path": "new.txt", "content": "x"})]), Reply(text="ok"))
    editor = Editor()

    async def run(conn: Any, session_id: str) -> Any:
        await conn.set_session_mode(session_id=session_id, mode_id="minimal")
        return await prompt(conn, session_id, acp.text_block("write it"))

    with gateway_running(home, llm, through_gateway):
        asyncio.run(session(editor, home, llm, project, run))
    assert not (project / "new.txt").exists()
    tools = [t["name"] for t in llm.requests[0].body["tools"]]
    assert "write_file" not in tools and "exec" not in tools and "read_file" in tools
    finished = next(u for u in editor.updates if u.session_update == "tool_call_update")
    assert finished.status == "failed"


def test_choosing_a_model_in_the_editor_switches_the_sessions_model(home, llm, project):
    llm.script(Reply(text="ok"))

    async def run(conn: Any, session_id: str) -> Any:
        changed = await conn.set_config_option(config_id="model", session_id=session_id,
                                               value="anthropic/claude-other")
        await prompt(conn, session_id, acp.text_block("hi"))
        return changed

    changed = asyncio.run(session(Editor(), home, llm, project, run))
    assert changed.config_options[0].current_value == "anthropic/claude-other"
    assert llm.requests[-1].body["model"] == "claude-other"


def test_a_folder_inside_nanoagents_home_is_refused(home, llm, project):
    async def run(conn: Any, session_id: str) -> Any:
        with pytest.raises(acp.RequestError) as refused:
            await conn.new_session(cwd=str(home), mcp_servers=[])
        return refused.value

    refused = asyncio.run(session(Editor(), home, llm, project, run))
    assert "home" in json.dumps(refused.data)


def test_through_a_running_gateway_the_turn_runs_there_and_streams_back(home, llm, project):
    release = threading.Event()
    llm.script(Reply(text="From the gateway", release=release))
    editor = Editor()

    async def run(conn: Any, session_id: str) -> Any:
        turn = asyncio.ensure_future(prompt(conn, session_id, acp.text_block("hi")))
        await until(lambda: session_id in gateway_status(home)["running"], "the turn running in the gateway")
        release.set()
        return await turn

    with gateway_running(home, llm):
        asyncio.run(session(editor, home, llm, project, run))
    assert editor.text() == "From the gateway"


def gateway_status(home: Path) -> dict:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(home / "run" / "gateway.sock"))
        conn.sendall(b'{"type":"status"}\n')
        return json.loads(conn.makefile().readline())


def test_bad_lines_and_unknown_methods_get_json_rpc_errors_and_stdout_carries_only_protocol(home, llm):
    lines = ['{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}', "not json", "[1, 2]",
             '{"jsonrpc":"2.0","id":2,"method":"no/such/method","params":{}}',
             '{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"nope","prompt":[]}}',
             '{"jsonrpc":"2.0","id":4,"method":"session/new","params":{"cwd":"relative"}}']
    done = subprocess.run([sys.executable, "-m", "nanoagent", "acp"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, env=env_for(home, llm), cwd=ROOT, timeout=PATIENCE)
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(a["jsonrpc"] == "2.0" for a in answers)
    by_id = {a.get("id"): a for a in answers}
    assert by_id[1]["result"]["protocolVersion"] == 1
    assert [a["error"]["code"] for a in answers if a.get("id") is None] == [-32700, -32600]
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[3]["error"]["code"] == -32602
    assert by_id[4]["error"]["code"] == -32602
    assert "Traceback" not in done.stdout + done.stderr
