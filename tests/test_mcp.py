"""MCP servers' tools in turns: real servers written with the `mcp` SDK (tests/mcp_servers.py), over stdio and
streamable HTTP, with the local LLM server and the real provider SDKs."""

import json
import sys

from tests.conftest import ROOT, anthropic_env, invoke, write_config
from tests.llm_server import Reply

SERVERS = str(ROOT / "tests" / "mcp_servers.py")


def stdio(kind: str, **extra) -> dict:
    return {"command": sys.executable, "args": [SERVERS, kind], **extra}


def tool_results(request) -> list[str]:
    """The text of every tool result a request sent."""
    out = []
    for message in request.body["messages"]:
        if isinstance(message.get("content"), list):
            out += [json.dumps(b.get("content")) for b in message["content"] if b.get("type") == "tool_result"]
    return out


def test_a_stdio_servers_tool_is_called_in_a_turn_and_its_result_is_enveloped(llm, isolated_home):
    write_config(isolated_home, {"mcpServers": {"demo": stdio("basic")}})
    llm.script(Reply(tool_calls=[("mcp__demo__echo", {"text": "hi there"})]), Reply(text="done"))
    ran = invoke("agent", "-m", "echo something", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.endswith("done\n")
    names = [t["name"] for t in llm.requests[0].body["tools"]]
    assert "mcp__demo__echo" in names and "mcp__demo__add" in names
    (result,) = tool_results(llm.requests[1])
    assert "echo: hi there" in result and 'untrusted_data source=\\"mcp__demo__echo\\"' in result
