"""`nanoagent mcp serve` (issue 39): the agent as an MCP server, driven by the `mcp` SDK's own client over stdio (a real
`nanoagent mcp serve` process) and over streamable HTTP (a real gateway's listener at /mcp), and by nanoagent itself
as the MCP client of another home's server. The local LLM server or the ScriptedProvider answers the turns; the
Telegram stand-in takes the messages."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from nanoagent.config.schema import Config
from nanoagent.providers.scripted import ScriptedProvider
from tests.conftest import (
    PATIENCE,
    ROOT,
    free_port,
    invoke,
    openai_env,
    start_gateway_process,
    wait_until,
    write_config,
)
from tests.llm_server import Reply
from tests.test_gateway_http import gateway

TOOLS = ["send_message", "ask", "memory_search", "memory_get", "sessions_list", "session_read", "cron_list", "cron_add"]
OWNER, GUEST = 42, 99


@asynccontextmanager
async def over_stdio(env: dict[str, str]) -> AsyncIterator[Any]:
    """A `nanoagent mcp serve` process and the SDK's client session with it, initialized."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "nanoagent", "mcp", "serve"],
                                   env={**os.environ, **env}, cwd=str(ROOT))
    # the server's stderr to a file of its own: the SDK's default is the sys.stderr of when it was first imported,
    # which may be a test's captured stream, gone or without a descriptor by now
    with tempfile.TemporaryFile("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await asyncio.wait_for(session.initialize(), PATIENCE)
            yield session


@asynccontextmanager
async def over_http(url: str, token: str) -> AsyncIterator[Any]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=PATIENCE) as http, \
            streamable_http_client(url, http_client=http) as streams, ClientSession(streams[0], streams[1]) as session:
        await asyncio.wait_for(session.initialize(), PATIENCE)
        yield session


async def text_of(client: Any, tool: str, /, **arguments: Any) -> tuple[bool, str]:
    """(whether the call was an error, its text)."""
    result = await asyncio.wait_for(client.call_tool(tool, arguments), PATIENCE)
    return bool(result.is_error), "".join(block.text for block in result.content)


def telegram(api: Any) -> dict:
    """The owner (42) and a guest let in (99) on the Telegram stand-in."""
    return {"telegram": {"token": api.token, "apiBase": api.url, "owner": [str(OWNER)],
                         "allowFrom": [str(OWNER), str(GUEST)]}}


async def _notice(reader: asyncio.StreamReader) -> str:
    """The text of the first notice the gateway shows a watching terminal."""
    while line := await reader.readline():
        event = json.loads(line).get("event") or {}
        if event.get("kind") == "Notice":
            return str(event.get("text"))
    return ""


def ledger(home: Path) -> list[dict]:
    path = home / "spend" / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def remember(home: Path, text: str) -> None:
    (home / "workspace" / "memory").mkdir(parents=True, exist_ok=True)
    (home / "workspace" / "memory" / "MEMORY.md").write_text(text)


@pytest.mark.process
def test_over_stdio_a_client_lists_the_eight_tools_each_described_with_a_schema(isolated_home):
    async def go() -> list[Any]:
        async with over_stdio({}) as session:
            return (await session.list_tools()).tools

    tools = asyncio.run(go())
    assert [t.name for t in tools] == TOOLS
    assert all(t.description and t.input_schema["type"] == "object" for t in tools)
    assert {t.name for t in tools if t.annotations.read_only_hint} == {"memory_search", "memory_get", "sessions_list",
                                                                        "session_read", "cron_list"}
    assert set(next(t for t in tools if t.name == "send_message").input_schema["required"]) == {"to", "text"}


@pytest.mark.process
def test_over_stdio_each_tool_answers_and_a_question_goes_through_the_running_gateway_counted_as_mcp(
        llm, api, isolated_home):
    write_config(isolated_home, {"channels": telegram(api)})
    remember(isolated_home, "# Notes\n- The zebra crossing on Elm Street is being repainted.\n")
    env = openai_env(llm)
    gateway = start_gateway_process({**os.environ, **env})
    llm.script(Reply(text="Forty-two, as always."))

    async def go() -> dict[str, tuple[bool, str]]:
        reader, writer = await asyncio.open_unix_connection(str(isolated_home / "run" / "gateway.sock"))
        writer.write(json.dumps({"type": "hello", "v": 1, "session": "cli:direct"}).encode() + b"\n")
        async with over_stdio(env) as session:
            said = {"ask": await text_of(session, "ask", question="What is the answer?", session="work")}
            said["send_message"] = await text_of(session, "send_message", to="telegram", text="The build is green.")
            said["to a terminal"] = await text_of(session, "send_message", to="cli:direct", text="Lunch is ready.")
            said["shown live"] = (False, await asyncio.wait_for(_notice(reader), PATIENCE))
            writer.close()
            said["memory_search"] = await text_of(session, "memory_search", query="zebra")
            said["memory_get"] = await text_of(session, "memory_get", source="memory/MEMORY.md:2")
            said["sessions_list"] = await text_of(session, "sessions_list")
            said["session_read"] = await text_of(session, "session_read", session="work")
            said["cron_add"] = await text_of(session, "cron_add", message="Water the plants.", every="1d",
                                             to=f"telegram:{OWNER}", name="plants")
            said["cron_list"] = await text_of(session, "cron_list")
            return said

    try:
        said = asyncio.run(go())
    finally:
        gateway.terminate()
        gateway.wait(PATIENCE)
    assert not any(error for error, _ in said.values()), said
    assert said["ask"][1] == "Forty-two, as always."
    assert said["send_message"][1] == f"Sent to telegram:{OWNER}." and api.texts(OWNER) == ["The build is green."]
    assert "Lunch is ready." in said["shown live"][1]  # the gateway delivered it, and showed it to its terminal
    assert "memory/MEMORY.md" in said["memory_search"][1] and "zebra" in said["memory_search"][1]
    assert "zebra crossing" in said["memory_get"][1]
    assert "- cli:work: 2 messages" in said["sessions_list"][1]
    assert "user: What is the answer?" in said["session_read"][1]
    assert "assistant: Forty-two, as always." in said["session_read"][1]
    assert "«plants»" in said["cron_add"][1] and f"telegram:{OWNER}" in said["cron_list"][1]
    turn = [line for line in ledger(isolated_home) if line["op"] == "reserve"]
    assert [(line["kind"], line["session"]) for line in turn] == [("mcp", "cli:work")]
    by_source = json.loads(invoke("usage", "--by", "source", "--json").stdout)
    assert [row["source"] for row in by_source["rows"]] == ["mcp"]


@pytest.mark.process
def test_with_no_gateway_running_a_question_is_answered_in_the_serving_process_as_agent_does(llm, isolated_home):
    llm.script(Reply(text="Answered here."))

    async def go() -> tuple[bool, str]:
        async with over_stdio(openai_env(llm)) as session:
            return await text_of(session, "ask", question="Anyone home?")

    assert asyncio.run(go()) == (False, "Answered here.")
    assert [(line["kind"], line["session"]) for line in ledger(isolated_home) if line["op"] == "reserve"] == [
        ("mcp", "cli:mcp")]


@pytest.mark.process
def test_a_target_outside_mcp_serve_targets_or_the_channels_settings_is_refused_with_its_reason(api, isolated_home):
    write_config(isolated_home, {"channels": telegram(api)})

    async def go() -> list[tuple[bool, str]]:
        async with over_stdio({}) as session:
            return [await text_of(session, "send_message", to=f"telegram:{GUEST}", text="hi"),
                    await text_of(session, "send_message", to="telegram:7", text="hi"),
                    await text_of(session, "cron_add", message="nag", every="1h", to=f"telegram:{GUEST}"),
                    await text_of(session, "send_message", to="telegram:7")]

    guest, stranger, job, missing = asyncio.run(go())
    assert guest[0] and "mcp.serve.targets" in guest[1] and f"telegram:{GUEST}" in guest[1]
    assert stranger[0] and "is not one of the user's own chats" in stranger[1]
    assert job[0] and "mcp.serve.targets" in job[1]
    assert missing[0] and missing[1].startswith("Invalid arguments for send_message: text: required but missing")
    assert all("\n" not in text for _, text in (guest, stranger, job, missing))
    assert api.texts(GUEST) == [] and not (isolated_home / "cron" / "jobs.json").exists()


@pytest.mark.process
def test_a_pattern_in_mcp_serve_targets_lets_a_client_reach_a_guest_the_channel_lets_in(api, isolated_home):
    write_config(isolated_home, {"channels": telegram(api), "mcp": {"serve": {"targets": ["owner", "telegram:*"]}}})

    async def go() -> tuple[bool, str]:
        async with over_stdio({}) as session:
            return await text_of(session, "send_message", to=f"telegram:{GUEST}", text="Your parcel is here.")

    assert asyncio.run(go()) == (False, f"Sent to telegram:{GUEST}.")
    assert api.texts(GUEST) == ["Your parcel is here."]


@pytest.mark.process
def test_over_http_the_gateway_serves_the_tools_at_mcp_behind_its_token_and_counts_a_question_as_mcp(
        llm, isolated_home):
    port = free_port()
    write_config(isolated_home, {"gateway": {"http": {"enabled": True, "port": port}}})
    env = openai_env(llm)
    gateway = start_gateway_process({**os.environ, **env})
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(f"{url}/health"), "the gateway's listener")
    token = (isolated_home / "run" / "http-token").read_text().strip()
    llm.script(Reply(text="Tea at four."))

    async def go() -> tuple[list[str], tuple[bool, str], int, int]:
        async with over_http(f"{url}/mcp", token) as session:
            names = [t.name for t in (await session.list_tools()).tools]
            answer = await text_of(session, "ask", question="When is tea?")
        async with httpx.AsyncClient(base_url=url, timeout=PATIENCE) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            wrong = await http.post("/mcp", json=body, headers={"Authorization": "Bearer wrong"})
            missing = await http.post("/mcp", json=body)
        return names, answer, wrong.status_code, missing.status_code

    try:
        names, answer, wrong, missing = asyncio.run(go())
    finally:
        gateway.terminate()
        gateway.wait(PATIENCE)
    assert names == TOOLS and answer == (False, "Tea at four.")
    assert wrong == missing == 401
    assert [(line["kind"], line["session"]) for line in ledger(isolated_home) if line["op"] == "reserve"] == [
        ("mcp", "cli:mcp")]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_over_http_a_message_to_a_terminal_session_is_noted_there_and_shown_to_its_watchers(isolated_home):
    seen: list[Any] = []

    async def go() -> tuple[bool, str]:
        async with gateway(ScriptedProvider([]), Config()) as live:
            live.hub.watch("cli:direct", seen.append)
            async with over_http(f"{live.url}/mcp", live.token) as session:
                return await text_of(session, "send_message", to="cli:direct", text="Deploy finished.")

    assert asyncio.run(go()) == (False, "Sent to cli:direct.")
    text = (isolated_home / "sessions").glob("cli*direct*.jsonl")
    assert any("Deploy finished." in path.read_text() for path in text)
    assert any("Deploy finished." in getattr(event, "text", "") for event in seen)


@pytest.mark.process
def test_one_home_uses_another_homes_mcp_serve_as_its_own_mcp_server(llm, isolated_home, tmp_path):
    other = tmp_path / "other"
    remember(other, "# Notes\n- The spare key is under the blue flowerpot.\n")
    write_config(isolated_home, {"mcpServers": {"other": {
        "command": sys.executable, "args": ["-m", "nanoagent", "mcp", "serve"], "cwd": str(ROOT),
        "env": {"NANOAGENT_HOME": str(other)}}}})
    llm.script(Reply(tool_calls=[("mcp__other__memory_search", {"query": "spare key"})]),
               Reply(text="Under the blue flowerpot."))
    ran = invoke("agent", "-m", "Where is the spare key?", env=openai_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert "Under the blue flowerpot." in ran.stdout
    result = json.dumps(llm.requests[-1].body)
    assert "blue flowerpot" in result and "memory/MEMORY.md" in result


def test_nanoagents_own_mcp_client_reaches_a_gateways_mcp_with_its_token_and_is_told_why_without(isolated_home):
    from nanoagent.config.schema import McpServerConfig
    from nanoagent.mcp.cache import ToolCache
    from nanoagent.mcp.servers import McpServers, check
    from nanoagent.tools import ToolRegistry

    async def go() -> dict[str, Any]:
        async with gateway(ScriptedProvider([]), Config()) as live:
            configs = {name: McpServerConfig(url=f"{live.url}/mcp", headers={"Authorization": f"Bearer {token}"})
                       for name, token in (("home", live.token), ("stranger", "not-the-token"))}
            servers = McpServers.from_config(configs, ToolRegistry(), ToolCache(live.paths.mcp_cache_dir),
                                             live.paths.logs_dir)
            return await check(servers, PATIENCE)

    found = asyncio.run(go())
    assert found["home"] == TOOLS
    assert isinstance(found["stranger"], str) and "401" in found["stranger"]
