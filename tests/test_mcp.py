"""MCP servers' tools in turns, with the local LLM server and the real provider SDKs: over stdio a plain-Python
server speaking the protocol (tests/mcp_stdio_server.py, no SDK to import at each start), and servers written with
the `mcp` SDK (tests/mcp_servers.py) over streamable HTTP and in the tests marked `sdk=True`."""

import asyncio
import base64
import functools
import hashlib
import json
import socket
import subprocess
import sys
import time

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.config import load_config
from nanoagent.paths import Paths
from tests.conftest import PATIENCE, ROOT, anthropic_env, free_port, invoke, openai_env, write_config
from tests.llm_server import Reply
from tests.mcp_servers import PNG

SERVERS = str(ROOT / "tests" / "mcp_servers.py")  # the SDK's servers
PLAIN = str(ROOT / "tests" / "mcp_stdio_server.py")  # the same kinds over stdio, without the SDK


@pytest.fixture(autouse=True)
def servers_have_time_to_start(monkeypatch):
    """A turn waits STARTUP_WAIT (10 s) for servers whose tools are not cached yet, then goes on without them: a
    busy machine can take longer to start a Python server, and these tests are about the tools being there."""
    monkeypatch.setattr("nanoagent.mcp.servers.STARTUP_WAIT", PATIENCE)


def stdio(kind: str, *, sdk: bool = False, **extra) -> dict:
    """A stdio server of `kind`: the plain one, or the SDK's with `sdk`."""
    return {"command": sys.executable, "args": [SERVERS if sdk else PLAIN, kind], **extra}


def tool_results(request) -> list[str]:
    """The text of every tool result an Anthropic request sent, in order."""
    out = []
    for message in request.body["messages"]:
        if isinstance(message.get("content"), list):
            out += [json.dumps(b.get("content")) for b in message["content"] if b.get("type") == "tool_result"]
    return out


def tool_names(request) -> list[str]:
    return [t["name"] for t in request.body["tools"]]


def start_http(port: int, kind: str = "basic", token: str | None = None) -> subprocess.Popen:
    """The server on streamable HTTP at 127.0.0.1:PORT/mcp, once it accepts connections."""
    args = [sys.executable, SERVERS, kind, "--http", str(port)] + (["--token", token] if token else [])
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the MCP HTTP server did not start")


@pytest.fixture
def http_server():
    started = []

    def start(kind: str = "basic", token: str | None = None, port: int | None = None):
        port = port or free_port()
        proc = start_http(port, kind, token)
        started.append(proc)
        return proc, f"http://127.0.0.1:{port}/mcp"

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def run_turn(llm, *replies: Reply, message: str = "go", env_for=anthropic_env):
    llm.script(*replies)
    return invoke("agent", "-m", message, env=env_for(llm))


@pytest.mark.process
def test_a_stdio_servers_tool_is_called_in_a_turn_and_its_result_is_enveloped(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic", sdk=True)}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__echo", {"text": "hi there"})]), Reply(text="done"))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.endswith("done\n")
    assert {"mcp__demo__echo", "mcp__demo__add", "mcp__demo__weird"} <= set(tool_names(llm.requests[0]))
    (result,) = tool_results(llm.requests[1])
    assert "echo: hi there" in result and 'untrusted_data source=\\"mcp__demo__echo\\"' in result


@pytest.mark.process
def test_the_tool_list_is_cached_so_the_next_run_starts_no_server_until_a_tool_is_called(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    assert run_turn(llm, Reply(text="first")).returncode == 0  # no cache yet: the server starts to list its tools
    cached = json.loads((isolated_home / "cache" / "mcp" / "demo.json").read_text())
    assert "echo" in [t["name"] for t in cached["tools"]]
    log = isolated_home / "logs" / "mcp-demo.log"
    log.unlink()
    assert run_turn(llm, Reply(text="second")).returncode == 0
    assert "mcp__demo__echo" in tool_names(llm.requests[-1])
    assert not log.exists()  # the server was never started: its tools came from the cache
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__add", {"a": 2, "b": 3})]), Reply(text="five"))
    assert ran.returncode == 0 and '\\n5\\n' in tool_results(llm.requests[-1])[0]


@pytest.mark.process
def test_a_changed_server_config_does_not_use_the_old_cached_list(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    assert run_turn(llm, Reply(text="first")).returncode == 0
    write_config(isolated_home, {"mcpServers": {"demo": stdio("other")}})
    assert run_turn(llm, Reply(text="second")).returncode == 0
    assert [n for n in tool_names(llm.requests[-1]) if n.startswith("mcp__")] == ["mcp__demo__echo"]


@pytest.mark.process
def test_a_streamable_http_servers_tool_is_called_with_the_configured_headers(llm, isolated_home, http_server):
    _, url = http_server(token="s3cret")
    write_config(isolated_home, {"mcpServers": {"remote": {"url": url, "headers": {"Authorization": "Bearer s3cret"}}}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__remote__echo", {"text": "over http"})]), Reply(text="ok"))
    assert ran.returncode == 0, ran.stderr
    assert "echo: over http" in tool_results(llm.requests[1])[0]


@pytest.mark.process
def test_an_http_server_answering_401_is_one_clear_line_and_the_turn_goes_on(llm, isolated_home, http_server):
    _, url = http_server(token="s3cret")
    write_config(isolated_home, {"mcpServers": {"remote": {"url": url, "headers": {"Authorization": "Bearer wrong"}}}})
    ran = run_turn(llm, Reply(text="answered without it"))
    assert ran.returncode == 0 and ran.stdout.endswith("answered without it\n")
    lines = [line for line in ran.stderr.splitlines() if "remote" in line]
    assert len(lines) == 1 and "HTTP 401" in lines[0] and "mcpServers.remote.headers" in lines[0]
    assert not [n for n in tool_names(llm.requests[0]) if n.startswith("mcp__")]


@pytest.mark.process
def test_an_http_server_that_goes_away_and_comes_back_is_reconnected(llm, isolated_home, http_server):
    proc, url = http_server()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    write_config(isolated_home, {"mcpServers": {"remote": {"url": url}}})
    call = ("mcp__remote__echo", {"text": "again"})

    async def scenario():
        loop = build_agent(load_config(isolated_home / "config.json", env=anthropic_env(llm))[0], Paths.from_env())
        try:
            llm.script(Reply(tool_calls=[call]), Reply(text="1"))
            await loop.handle("one")
            proc.kill()
            proc.wait()
            llm.script(Reply(tool_calls=[call]), Reply(text="2"))
            await loop.handle("two")
            down = tool_results(llm.requests[-1])[-1]
            http_server(port=port)
            llm.script(Reply(tool_calls=[call]), Reply(text="3"))
            await loop.handle("three")
            back = tool_results(llm.requests[-1])[-1]
        finally:
            await loop.aclose()
        return down, back

    down, back = asyncio.run(scenario())
    assert "Error" in down and "cannot reach" in down
    assert "echo: again" in back


@pytest.mark.process
def test_a_command_that_does_not_exist_is_reported_once_and_its_tools_left_out(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"ghost": {"command": "no-such-mcp-server-xyz"},
                                                "demo": stdio("other")}})
    ran = run_turn(llm, Reply(text="fine"))
    assert ran.returncode == 0 and ran.stdout.endswith("fine\n")
    lines = [line for line in ran.stderr.splitlines() if "ghost" in line]
    assert len(lines) == 1 and "'no-such-mcp-server-xyz' was not found" in lines[0] and "mcp remove ghost" in lines[0]
    assert [n for n in tool_names(llm.requests[0]) if n.startswith("mcp__")] == ["mcp__demo__echo"]


@pytest.mark.process
def test_a_server_that_crashes_on_start_is_explained_by_its_last_error_line(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"broken": stdio("dies")}})
    ran = run_turn(llm, Reply(text="fine"))
    assert ran.returncode == 0
    (line,) = [line for line in ran.stderr.splitlines() if "broken" in line]
    assert "exited with code 2" in line and "/nope/server.toml not found" in line and "mcp-broken.log" in line


@pytest.mark.process
def test_a_cached_server_that_fails_at_its_first_call_gives_an_error_result_and_is_left_out(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    assert run_turn(llm, Reply(text="cache it")).returncode == 0
    write_config(isolated_home, {"mcpServers": {"demo": {**stdio("basic"), "command": "/nonexistent/python"}}})
    cache = isolated_home / "cache" / "mcp" / "demo.json"
    data = json.loads(cache.read_text())
    from nanoagent.config import load_config
    from nanoagent.mcp.cache import config_key

    data["key"] = config_key(load_config(isolated_home / "config.json")[0].mcp_servers["demo"])
    cache.write_text(json.dumps(data))  # a cached list for a server that now fails to start
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__echo", {"text": "x"})]),
                   Reply(tool_calls=[("mcp__demo__echo", {"text": "y"})]), Reply(text="gave up"))
    assert ran.returncode == 0 and ran.stdout.endswith("gave up\n")
    first = tool_results(llm.requests[-2])[0]
    assert "Error" in first and "was not found" in first
    assert "mcp__demo__echo" not in tool_names(llm.requests[-2])  # left out from the next call on
    assert len([line for line in ran.stderr.splitlines() if line.startswith("MCP server 'demo'")]) == 1


@pytest.mark.process
def test_a_server_that_crashes_mid_call_gives_an_error_result_and_starts_again_at_the_next_call(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__crash", {})]),
                   Reply(tool_calls=[("mcp__demo__echo", {"text": "still here"})]), Reply(text="ok"))
    assert ran.returncode == 0, ran.stderr
    crashed, echoed = tool_results(llm.requests[2])
    assert "stopped during the call" in crashed and "exited with code 3" in crashed
    assert "echo: still here" in echoed


@pytest.mark.process
def test_a_server_that_prints_garbage_on_stdout_still_works(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"chatty": stdio("garbage")}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__chatty__echo", {"text": "through the noise"})]), Reply(text="ok"))
    assert ran.returncode == 0, ran.stderr
    assert "echo: through the noise" in tool_results(llm.requests[1])[0]


@pytest.mark.process
def test_a_tool_call_that_hangs_times_out_as_an_error_result_and_the_turn_goes_on(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic", timeout=1)}})
    started = time.monotonic()
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__slow", {"seconds": 60})]), Reply(text="moved on"))
    assert ran.returncode == 0 and ran.stdout.endswith("moved on\n")
    (result,) = tool_results(llm.requests[1])
    assert "did not finish within 1 s" in result and "mcpServers.demo.timeout" in result
    assert time.monotonic() - started < 30


@pytest.mark.process
def test_an_error_result_becomes_a_tool_error_and_an_image_a_note(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__broken", {}), ("mcp__demo__picture", {})]), Reply(text="ok"))
    assert ran.returncode == 0
    blocks = [b for m in llm.requests[1].body["messages"] if isinstance(m["content"], list)
              for b in m["content"] if b.get("type") == "tool_result"]
    assert blocks[0].get("is_error") is True and "the disk is on fire" in json.dumps(blocks[0])
    assert f"[image result: {len(PNG)} bytes, image/png]" in json.dumps(blocks[1])


@pytest.mark.parametrize("env_for", [anthropic_env, openai_env], ids=["anthropic", "openai"])
@pytest.mark.process
def test_a_schema_providers_reject_is_cleaned_in_the_request(llm, isolated_home, env_for):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__weird", {"where": {"x": 1, "y": 2}})]), Reply(text="ok"),
                   env_for=env_for)
    assert ran.returncode == 0, ran.stderr
    tools = llm.requests[0].body["tools"]
    if env_for is anthropic_env:
        schema = next(t["input_schema"] for t in tools if t["name"] == "mcp__demo__weird")
    else:
        schema = next(t["function"]["parameters"] for t in tools if t["function"]["name"] == "mcp__demo__weird")
    text = json.dumps(schema)
    for keyword in ("$schema", "$id", "$defs", "$ref", '"default"', '"title"'):
        assert keyword not in text
    assert schema["type"] == "object" and schema["required"] == ["where"]
    assert schema["properties"]["where"]["properties"]["x"] == {"type": "number"}  # the $ref, inlined
    assert schema["properties"]["when"]["format"] == "date-time"
    assert "weird ok: x=1.0" in json.dumps(llm.requests[1].body)


@pytest.mark.process
def test_two_servers_with_the_same_tool_name_stay_distinct(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"one": stdio("basic"), "two": stdio("other")}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__one__echo", {"text": "a"}), ("mcp__two__echo", {"text": "b"})]),
                   Reply(text="ok"))
    assert ran.returncode == 0, ran.stderr
    first, second = tool_results(llm.requests[1])
    assert "echo: a" in first and "other echo: b" in second


@pytest.mark.process
def test_a_changed_tool_list_is_picked_up_without_a_restart_and_cached(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic", sdk=True)}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__grow", {})]),
                   Reply(tool_calls=[("mcp__demo__fresh", {})]), Reply(text="ok"))
    assert ran.returncode == 0, ran.stderr
    assert "mcp__demo__fresh" not in tool_names(llm.requests[0])
    assert "mcp__demo__fresh" in tool_names(llm.requests[1])
    assert "fresh tool ran" in tool_results(llm.requests[2])[-1]
    cached = json.loads((isolated_home / "cache" / "mcp" / "demo.json").read_text())
    assert "fresh" in [t["name"] for t in cached["tools"]]


# --- image results ------------------------------------------------------------------------------------------


def sent_tool_results(request) -> list[dict]:
    return [b for m in request.body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


def stored_tool_messages(home) -> list[dict]:
    from nanoagent.session.store import SessionStore

    return [m for m in SessionStore(home / "sessions").load("cli:direct").messages if m["role"] == "tool"]


@pytest.mark.process
def test_an_image_result_reaches_claude_as_an_image_and_the_session_keeps_only_a_reference(llm, isolated_home):
    data = base64.b64encode(PNG).decode()
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic", sdk=True)}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__picture", {})]), Reply(text="a dot"))
    assert ran.returncode == 0, ran.stderr
    (result,) = sent_tool_results(llm.requests[1])
    text, image = result["content"]
    assert text["type"] == "text" and f"[image result: {len(PNG)} bytes, image/png]" in text["text"]
    assert image == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}

    (stored,) = stored_tool_messages(isolated_home)
    digest = hashlib.sha256(PNG).hexdigest()
    assert stored["images"] == [{"type": "image", "path": f"media/image-{digest[:16]}.png", "sha256": digest,
                                 "media_type": "image/png"}]
    kept = isolated_home / "workspace" / stored["images"][0]["path"]
    assert kept.read_bytes() == PNG
    session_text = next((isolated_home / "sessions").glob("*.jsonl")).read_text()
    assert data not in session_text

    # the next run reads the session again: the image goes again, from media/
    assert run_turn(llm, Reply(text="still a dot"), message="and now?").returncode == 0
    assert sent_tool_results(llm.requests[-1])[0]["content"][1]["source"]["data"] == data
    kept.unlink()  # gone: the turn still goes, with a note in its place
    assert run_turn(llm, Reply(text="ok"), message="once more").returncode == 0
    content = sent_tool_results(llm.requests[-1])[0]["content"]
    assert [b["type"] for b in content] == ["text", "text"]
    assert content[1]["text"] == f"[image image-{digest[:16]}.png no longer available]"


@pytest.mark.process
def test_an_openai_compatible_model_gets_the_tool_messages_then_the_images_in_a_labelled_user_message(
        llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__picture", {}), ("mcp__demo__echo", {"text": "hi"})]),
                   Reply(text="a dot"), env_for=openai_env)
    assert ran.returncode == 0, ran.stderr
    *_, call, picture, echo, images = llm.requests[1].body["messages"]
    assert call["role"] == "assistant" and [picture["role"], echo["role"]] == ["tool", "tool"]
    assert f"[image result: {len(PNG)} bytes, image/png]" in picture["content"] and "echo: hi" in echo["content"]
    label, image = images["content"]
    assert images["role"] == "user"
    assert label["type"] == "text" and label["text"].startswith("[images returned by tool mcp__demo__picture")
    assert picture["tool_call_id"] in label["text"]
    assert image == {"type": "image_url",
                     "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}


@pytest.mark.process
def test_a_model_that_takes_no_images_gets_the_note_in_the_tool_message(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__picture", {})]), Reply(text="ok"),
                   env_for=lambda s: {**openai_env(s), "NANOAGENT_MODEL": "openai/gpt-3.5-turbo"})
    assert ran.returncode == 0, ran.stderr
    last = llm.requests[1].body["messages"][-1]
    assert last["role"] == "tool"  # no user message of images follows
    assert "not sent: openai/gpt-3.5-turbo does not take images]" in last["content"]
    assert "base64" not in json.dumps(llm.requests[1].body)


@pytest.mark.process
def test_an_image_result_over_the_size_limit_stays_a_note_and_its_caption_still_goes(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")},
                                 "tools": {"attachments": {"maxImageBytes": 1000}}})
    ran = run_turn(llm, Reply(tool_calls=[("mcp__demo__poster", {"pad": 0}), ("mcp__demo__poster", {"pad": 2000})]),
                   Reply(text="ok"))
    assert ran.returncode == 0, ran.stderr
    small, big = sent_tool_results(llm.requests[1])
    assert [b["type"] for b in small["content"]] == ["text", "image"]
    assert "poster padded by 0" in small["content"][0]["text"]
    assert isinstance(big["content"], str) and "poster padded by 2000" in big["content"]
    assert "not sent: over the 1,000-byte limit (tools.attachments.maxImageBytes)" in big["content"]
    assert len(list((isolated_home / "workspace" / "media").iterdir())) == 1


def test_an_image_result_whose_bytes_are_no_image_or_no_base64_stays_a_note(tmp_path):
    from nanoagent.attachments import store_image
    from nanoagent.mcp.servers import image_result

    keep = functools.partial(store_image, tmp_path)
    note, block = image_result(base64.b64encode(b"not a picture").decode(), "image/png", keep, 5_000_000)
    assert block is None and note == "[image result: 13 bytes, image/png; not sent: not a PNG, JPEG, GIF or WebP image]"
    note, block = image_result("%%% not base64", "image/png", keep, 5_000_000)
    assert block is None and note == "[image result: not valid base64, image/png]"
    assert not (tmp_path / "media").exists()


def test_an_image_result_that_cannot_be_saved_under_media_stays_a_note(tmp_path):
    from nanoagent.attachments import store_image
    from nanoagent.mcp.servers import image_result

    (tmp_path / "media").write_text("a file where the folder should be")
    note, block = image_result(base64.b64encode(PNG).decode(), "image/png", functools.partial(store_image, tmp_path),
                               5_000_000)
    assert block is None and note.startswith(f"[image result: {len(PNG)} bytes, image/png; not sent: it could not be "
                                             "saved under media/")
