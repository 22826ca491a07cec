"""Tools by policy: `tools.profile`, `tools.allow`/`tools.deny` and per session-key `tools.policies` decide which tools
a session is offered; a denied tool is not in the request the model gets, and a call to it anyway is refused with the
setting that took it away. Sub-agents get at most their parent's tools. (Group chats through each channel:
`tests/test_channel_cases.py`.)"""

from __future__ import annotations

import asyncio
import json

from nanoagent.agent.build import build_agent
from nanoagent.config.loader import load_config
from nanoagent.messages import is_tool
from nanoagent.paths import Paths
from nanoagent.providers.base import ChatRequest
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.tools import SchemaTool
from nanoagent.tools.policy import MINIMAL
from tests.conftest import anthropic_env, invoke, write_config
from tests.llm_server import Reply

CODING = {*MINIMAL, "write_file", "edit_file", "exec"}


def offered(request) -> set[str]:
    """The tool names a request to the local LLM server offered."""
    return {tool["name"] for tool in request.body.get("tools", [])}


def tool_results(request) -> list[str]:
    """The tool results a request to the local LLM server carried, as text."""
    return [block.get("content") if isinstance(block.get("content"), str) else json.dumps(block.get("content"))
            for message in request.body["messages"] if isinstance(message["content"], list)
            for block in message["content"] if block.get("type") == "tool_result"]


def test_a_denied_tool_is_not_offered_to_the_model_and_a_forced_call_is_refused_with_the_reason(llm, isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["exec"]}})
    llm.script(Reply(tool_calls=[("exec", {"command": "touch made-by-exec"})]), Reply(text="I could not."))
    proc = invoke("agent", "-m", "make a file", "--json", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    first, second = llm.requests
    assert "exec" not in offered(first) and "read_file" in offered(first)
    [result] = tool_results(second)
    assert "not allowed in this session" in result and "tools.deny" in result
    assert json.loads(proc.stdout)["tool_calls"][0]["ok"] is False
    assert not (isolated_home / "workspace" / "made-by-exec").exists()


def test_profiles_offer_their_tools_minimal_coding_and_full(llm, isolated_home):
    seen = {}
    for profile in ("minimal", "coding", "full"):
        write_config(isolated_home, {"tools": {"profile": profile}})
        llm.script(Reply(text="ok"))
        assert invoke("agent", "-m", "hi", env=anthropic_env(llm)).returncode == 0
        seen[profile] = offered(llm.requests[-1])
    assert seen["minimal"] == set(MINIMAL)
    assert seen["coding"] == CODING
    assert seen["full"] > CODING and {"cron", "spawn", "web_search"} <= seen["full"]


def test_allow_adds_to_the_profile_and_deny_takes_away_even_what_allow_named(llm, isolated_home):
    write_config(isolated_home, {"tools": {"profile": "minimal", "allow": ["cron", "web_*"], "deny": ["web_fetch"]}})
    llm.script(Reply(text="ok"))
    assert invoke("agent", "-m", "hi", env=anthropic_env(llm)).returncode == 0
    assert offered(llm.requests[0]) == (set(MINIMAL) - {"web_fetch"}) | {"cron", "web_search"}


def test_per_session_rules_apply_after_the_global_ones_and_the_more_specific_pattern_wins(llm, isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["cron"], "policies": {
        "cli:*": {"profile": "coding", "deny": ["exec"]},
        "cli:ops*": {"allow": ["exec", "cron"], "deny": ["write_file"]},
        "cli:ops-readonly": {"profile": "minimal"},
    }}})
    for key in ("cli:notes", "cli:ops-1", "cli:ops-readonly", "cli:direct"):
        llm.script(Reply(text="ok"))
        assert invoke("agent", "-m", "hi", "-s", key, env=anthropic_env(llm)).returncode == 0
    notes, ops, readonly, direct = (offered(r) for r in llm.requests)
    assert notes == CODING - {"exec"}
    assert ops == (CODING - {"write_file"}) | {"cron"}  # the more specific rule gives back what the broader took
    assert readonly == set(MINIMAL) | {"exec", "cron"}  # its profile, then the rules of every pattern that matches
    assert direct == CODING - {"exec"}


def test_a_pattern_denies_every_tool_it_names_mcp_servers_tools_included(isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["mcp__*", "memory_*"]}})
    config, _ = load_config(isolated_home / "config.json", env={})
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("mcp__files__delete", {"path": "x"})]), "done"])
    loop = build_agent(config, Paths.from_env(), provider=provider)
    called = []

    async def delete(ctx, arguments: dict) -> str:
        called.append(arguments)
        return "deleted"

    loop.context.tools.register(SchemaTool("mcp__files__delete", "Delete a file.", {"type": "object"}, delete))
    asyncio.run(loop.handle("tidy up"))
    names = {t.name for t in provider.requests[0].tools}
    assert "mcp__files__delete" not in names and not {"memory_search", "memory_get"} & names
    assert "read_file" in names and called == []
    [result] = [m for m in loop.session("cli:direct").messages if is_tool(m)]
    assert "`mcp__*` in tools.deny" in result["content"]


def test_status_lists_the_tools_of_the_session(llm, isolated_home):
    write_config(isolated_home, {"tools": {"profile": "coding", "deny": ["exec"]}})
    proc = invoke("agent", "-m", "/status", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("tools:")]
    assert set(line.removeprefix("tools:").replace(",", " ").split()) == CODING - {"exec"}
    assert llm.requests == []  # no model call


def test_nanoagent_status_says_which_tools_direct_and_group_chats_get(isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["exec"], "policies": {"cli:ops*": {"allow": ["exec"]}}}})
    proc = invoke("status")
    assert proc.returncode == 0, proc.stderr
    assert "tools:     full: every tool" in proc.stdout
    assert "group chats: minimal: " + ", ".join(MINIMAL) in proc.stdout
    assert "everywhere: -exec" in proc.stdout and "cli:ops*: +exec" in proc.stdout


def test_an_unknown_profile_is_refused_in_one_line_naming_the_choices(isolated_home):
    write_config(isolated_home, {"tools": {"policies": {"cli:*": {"profile": "everything"}}}})
    proc = invoke("status")
    assert proc.returncode != 0
    assert proc.error_lines == [proc.error_lines[0]] and "minimal, coding, full" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_sub_agent_gets_its_parents_tools_at_most_and_cannot_ask_for_more(isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["exec"]}})
    config, _ = load_config(isolated_home / "config.json", env={})

    def child(request: ChatRequest) -> ScriptedReply | None:
        if "## You are a sub-agent" not in request.system:
            return None
        last = request.messages[-1]
        if is_tool(last):
            return ScriptedReply(f"exec said: {last['content']}")
        return ScriptedReply(tool_calls=[("exec", {"command": "touch made-by-child"})])

    provider = ScriptedProvider([
        ScriptedReply(tool_calls=[("spawn", {"task": "run it", "tools": ["exec", "read_file"]})]),
        ScriptedReply(tool_calls=[("spawn", {"task": "run it"})]),
        "Neither could.",
    ], respond=child)
    loop = build_agent(config, Paths.from_env(), provider=provider)
    asyncio.run(loop.handle("run a command"))
    widened, inherited = [m["content"] for m in loop.session("cli:direct").messages if is_tool(m)]
    assert "exec" in widened and "only tools you have" in widened and "tools.deny" in widened
    assert "exec said:" in inherited and "tools.deny" in inherited
    children = [r for r in provider.requests if "## You are a sub-agent" in r.system]
    assert children and all("exec" not in {t.name for t in r.tools} for r in children)
    assert not (isolated_home / "workspace" / "made-by-child").exists()


def test_a_cron_job_a_group_made_runs_with_the_groups_tools(isolated_home):
    loop = build_agent(load_config(write_config(isolated_home, {}), env={})[0], Paths.from_env(),
                       provider=ScriptedProvider([]))
    loop.note_chat("telegram:-100123", group=True)
    loop.note_chat("telegram:42", group=False)
    assert set(loop.tools_for("cron:ab12:telegram:-100123").names()) == set(MINIMAL)
    assert "exec" in loop.tools_for("cron:ab12:telegram:42").names()
    assert "exec" in loop.tools_for("cron:ab12").names()  # the owner's job


def test_an_mcp_tool_that_appears_while_the_process_runs_is_offered_where_a_pattern_allows_it(isolated_home):
    write_config(isolated_home, {"tools": {"profile": "minimal", "allow": ["mcp__*"]}})
    config, _ = load_config(isolated_home / "config.json", env={})
    provider = ScriptedProvider(["before", ScriptedReply(tool_calls=[("mcp__notes__add", {"text": "tea"})]), "added"])
    loop = build_agent(config, Paths.from_env(), provider=provider)
    asyncio.run(loop.handle("hi"))

    async def add(ctx, arguments: dict) -> str:
        return f"added {arguments['text']}"

    loop.context.tools.register(SchemaTool("mcp__notes__add", "Add a note.", {"type": "object"}, add))
    asyncio.run(loop.handle("note tea"))
    before, after, _ = ({t.name for t in r.tools} for r in provider.requests)
    assert before == set(MINIMAL) and after == set(MINIMAL) | {"mcp__notes__add"}
    assert [m["content"] for m in loop.session("cli:direct").messages if is_tool(m)][-1].count("added tea") == 1


def test_a_deny_that_names_no_tool_is_warned_about_at_every_start(llm, isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["exce", "mcp__later__*"],
                                           "policies": {"cli:*": {"allow": ["web_*"]}}}})
    llm.script(Reply(text="ok"))
    proc = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    [warning] = [line for line in proc.error_lines if "no tool" in line]
    assert "tools.deny names `exce`" in warning and "exec" in warning
