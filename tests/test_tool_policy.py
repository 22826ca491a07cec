"""Tools by policy: `tools.profile`, `tools.allow`/`tools.deny` and per session-key `tools.policies` decide which tools
a session is offered; a denied tool is not in the request the model gets, and a call to it anyway is refused with the
setting that took it away. Patterns may name capabilities (`write`, `shell`, `memory`, `web`); MCP tools follow exec
unless a rule names them. Sub-agents get at most their parent's tools. (Group chats through each channel:
`tests/test_channel_cases.py`.)"""

from __future__ import annotations

import asyncio
import json

from nanoagent.agent.build import build_agent
from nanoagent.config.loader import load_config
from nanoagent.config.schema import ToolsConfig
from nanoagent.messages import is_tool
from nanoagent.paths import Paths
from nanoagent.providers.base import ChatRequest
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.tools import SchemaTool
from nanoagent.tools.policy import MINIMAL, PROFILES, ToolPolicy
from tests.conftest import anthropic_env, invoke, write_config
from tests.llm_server import Reply

CODING_ORDER = (*MINIMAL, "write_file", "edit_file", "exec")
CODING = set(CODING_ORDER)


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


def test_status_lists_the_tools_of_the_session_and_the_policy_with_mcp_tools_off_where_exec_is(llm, isolated_home):
    write_config(isolated_home, {"tools": {"profile": "coding", "deny": ["shell"]}})
    proc = invoke("agent", "-m", "/status", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    [line] = [line for line in lines if line.startswith("tools:")]
    assert set(line.removeprefix("tools:").replace(",", " ").split()) == CODING - {"exec"}
    assert "no exec here, so no MCP tools" in lines[lines.index(line) + 1]
    [policy] = [line for line in lines if line.startswith("policy:")]
    assert "the owner" in policy and "coding: " in policy and "no exec, so no MCP tools" in policy
    assert "          everywhere: -shell (exec)" in lines
    assert any(line.startswith("          guests' direct chats: minimal: ") for line in lines)
    assert llm.requests == []  # no model call


def test_nanoagent_status_shows_the_owners_guests_and_groups_profiles_capabilities_and_where_mcp_is_off(
        isolated_home):
    write_config(isolated_home, {"tools": {"guestProfile": "coding", "deny": ["shell"], "policies": {
        "cli:ops*": {"allow": ["exec"]}, "telegram:*": {"deny": ["write"]}}}})
    proc = invoke("status")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert ("tools:     the owner (the terminal, the owner's chats, cron, HTTP): full: every tool; "
            "no exec, so no MCP tools") in lines
    assert "           guests' direct chats: coding: " + ", ".join(CODING_ORDER) + "; no exec, so no MCP tools" in lines
    assert "           group chats: minimal: " + ", ".join(MINIMAL) + "; no exec, so no MCP tools" in lines
    assert "           everywhere: -shell (exec)" in lines
    assert "           cli:ops*: +exec" in lines
    assert "           telegram:*: -write (write_file, edit_file)" in lines


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
    assert set(loop.tools_for("cron:ab12:telegram:42").names()) == set(MINIMAL)  # a guest's job: tools.guestProfile
    assert "exec" in loop.tools_for("cron:ab12").names()  # the owner's job


def test_the_owners_private_chat_and_their_cron_jobs_get_the_owners_tools_and_a_guests_the_guest_profile(
        isolated_home):
    config = load_config(write_config(isolated_home, {"channels": {"telegram": {"owner": [42], "allowFrom": [7]}},
                                                      "tools": {"guestProfile": "coding"}}), env={})[0]
    loop = build_agent(config, Paths.from_env(), provider=ScriptedProvider([]))
    loop.note_chat("telegram:42", group=False)
    loop.note_chat("telegram:7", group=False)
    for owners in ("telegram:42", "cron:ab12:telegram:42", "subagent:telegram:42:r1"):
        assert "spawn" in loop.tools_for(owners).names()
    for guests in ("telegram:7", "cron:ab12:telegram:7"):
        assert set(loop.tools_for(guests).names()) == set(PROFILES["coding"])


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


def test_denying_the_shell_and_write_capabilities_takes_away_exec_write_file_and_edit_file(llm, isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["shell", "write"]}})
    llm.script(Reply(tool_calls=[("edit_file", {"path": "AGENTS.md", "old": "a", "new": "b"})]), Reply(text="no"))
    proc = invoke("agent", "-m", "edit it", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    first, second = llm.requests
    assert not {"exec", "write_file", "edit_file"} & offered(first) and {"read_file", "cron"} <= offered(first)
    [result] = tool_results(second)
    assert "`write` in tools.deny denies it" in result
    assert not [line for line in proc.error_lines if "no tool" in line]  # a capability is no unknown name


def test_denying_memory_and_web_takes_away_every_memory_and_web_tool_the_browser_included(isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["memory", "web"]}})
    loop = build_agent(load_config(isolated_home / "config.json", env={})[0], Paths.from_env(),
                       provider=ScriptedProvider([]))

    async def forget(ctx, arguments: dict) -> str:
        return "forgotten"

    loop.context.tools.register(SchemaTool("memory_forget", "Forget a note.", {"type": "object"}, forget))
    names = set(loop.tools_for("cli:direct").names())
    assert not {"memory_search", "memory_get", "memory_forget", "web_fetch", "web_search"} & names
    assert {"read_file", "exec", "write_file"} <= names
    assert not ToolPolicy(ToolsConfig(deny=["web"])).for_session("cli:direct").allows("browser")


def mcp_run(isolated_home, tools: dict) -> tuple[list[ChatRequest], list[str], list[dict]]:
    """A turn in which the model calls MCP tool `mcp__srv__run` (a tool of the registry, as a server's are), with
    `tools` as the settings: the requests, the tool results and the calls that reached the tool."""
    write_config(isolated_home, {"tools": tools})
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("mcp__srv__run", {"command": "id"})]), "done"])
    loop = build_agent(load_config(isolated_home / "config.json", env={})[0], Paths.from_env(), provider=provider)
    called = []

    async def run(ctx, arguments: dict) -> str:
        called.append(arguments)
        return "uid=0(root)"

    loop.context.tools.register(SchemaTool("mcp__srv__run", "Run a command.", {"type": "object"}, run))
    asyncio.run(loop.handle("who am I?"))
    results = [m["content"] for m in loop.session("cli:direct").messages if is_tool(m)]
    return provider.requests, results, called


def test_where_exec_is_denied_an_mcp_tool_is_not_offered_even_in_the_full_profile_and_a_call_is_refused(
        isolated_home):
    requests, [result], called = mcp_run(isolated_home, {"profile": "full", "deny": ["exec"]})
    assert not {"exec", "mcp__srv__run"} & {t.name for t in requests[0].tools}
    assert called == []
    assert "MCP tools follow exec" in result and "`exec` in tools.deny denies it" in result
    assert "`mcp__srv__*`" in result and "tools.allow" in result


def test_a_rule_naming_an_mcp_server_gives_its_tools_back_where_exec_is_denied(isolated_home):
    requests, [result], called = mcp_run(isolated_home, {"deny": ["shell"],
                                                         "policies": {"cli:*": {"allow": ["mcp__srv__*"]}}})
    names = {t.name for t in requests[0].tools}
    assert "mcp__srv__run" in names and "exec" not in names
    assert called == [{"command": "id"}] and "uid=0(root)" in result


def test_guests_direct_chats_get_the_guest_profile_and_group_chats_the_group_profile_guests_or_not(isolated_home):
    write_config(isolated_home, {"tools": {"guestProfile": "coding", "policies": {"slack:*": {"profile": "full"}}}})
    policy = ToolPolicy(load_config(isolated_home / "config.json", env={})[0].tools)
    guest = policy.for_session("telegram:42", guest=True)
    assert (guest.profile, guest.chosen_by) == ("coding", "tools.guestProfile, for guests' direct chats")
    assert policy.for_session("telegram:-100", group=True, guest=True).profile == "minimal"  # the group's
    assert policy.for_session("telegram:7").profile == "full"  # the owner's
    assert policy.for_session("slack:U1", guest=True).profile == "full"  # a rule naming a profile wins
    assert ToolPolicy(ToolsConfig()).for_session("telegram:42", guest=True).profile == "minimal"  # the default
    assert not ToolPolicy(ToolsConfig()).for_session("telegram:42", guest=True).allows("exec")


def test_an_unknown_guest_profile_is_refused_in_one_line_naming_the_choices(isolated_home):
    write_config(isolated_home, {"tools": {"guestProfile": "owner"}})
    proc = invoke("status")
    assert proc.returncode != 0
    assert len(proc.error_lines) == 1 and "tools.guestProfile" in proc.stderr and "minimal, coding, full" in proc.stderr


def test_a_turns_profile_only_narrows_what_the_policy_gives_and_an_unknown_one_leaves_nothing(isolated_home):
    write_config(isolated_home, {"tools": {"deny": ["grep"]}})
    config, _ = load_config(isolated_home / "config.json", env={})
    provider = ScriptedProvider(default="ok")
    loop = build_agent(config, Paths.from_env(), provider=provider)
    for profile in ("coding", "no-such-profile", ""):
        asyncio.run(loop.handle("hi", profile=profile))
    coding, unknown, unnarrowed = ({t.name for t in r.tools} for r in provider.requests)
    assert coding == CODING - {"grep"}  # the deny stays: a profile never gives back what the settings took away
    assert unknown == set()
    assert unnarrowed > coding and "grep" not in unnarrowed
