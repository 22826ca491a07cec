"""Sub-agents: `spawn` in the foreground and the background, its limits, cancellation, /tasks and read_task_output.

The scripted model answers a sub-agent by its task: "say X" answers X; "wait S s say X" answers X after S seconds;
"hang" never answers; "deeper TASK" spawns a sub-agent of its own with TASK and reports what it got back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from nanoagent.agent import events as ev
from nanoagent.agent.build import build_agent
from nanoagent.agent.loop import AgentLoop
from nanoagent.config.schema import Config, SubagentsConfig
from nanoagent.gateway import protocol
from nanoagent.gateway.hub import Hub
from nanoagent.messages import is_assistant, is_tool, is_user, strip_runtime_context, unanswered_tool_calls
from nanoagent.paths import Paths
from nanoagent.providers.base import ChatRequest, ProviderEvent
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from nanoagent.usage import Usage
from tests.conftest import PATIENCE, invoke

KEY = "cli:direct"
SUB = "## You are a sub-agent"
SUMMARY = "You brief a helper agent"


def is_child(request: ChatRequest) -> bool:
    return SUB in request.system


def task_of(request: ChatRequest) -> str:
    return request.messages[0]["content"].rpartition("Your task:\n\n")[2]


def tool_names(request: ChatRequest) -> list[str]:
    return [t.name for t in request.tools]


def child_reply(request: ChatRequest) -> ScriptedReply | None:
    if SUMMARY in request.system:
        return ScriptedReply("- The user is called Ada and wants the report in French.")
    if not is_child(request):
        return None  # the parent's replies come from the script, in order
    words = task_of(request).split()
    last = request.messages[-1]
    if words[0] == "say":
        return ScriptedReply(" ".join(words[1:]), usage=Usage(input_tokens=1000, output_tokens=10))
    if words[0] == "wait":
        return ScriptedReply(" ".join(words[4:]), delay=float(words[1]))
    if words[0] == "hang":
        return ScriptedReply("never", delay=3600)
    if words[0] == "deeper":
        if is_tool(last):
            return ScriptedReply(f"deeper got: {last['content']}")
        return ScriptedReply(tool_calls=[("spawn", {"task": " ".join(words[1:])})])
    return ScriptedReply(f"unknown task {words}")


def spawn(task: str, **extra) -> tuple[str, dict]:
    return ("spawn", {"task": task, **extra})


class Counting:
    """A provider that passes everything to the scripted one and counts sub-agent calls in flight."""

    name = "scripted"

    def __init__(self, inner: ScriptedProvider):
        self.inner = inner
        self.active = 0
        self.peak = 0

    def prepare(self) -> None:
        pass

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        child = is_child(request)
        self.active += child
        self.peak = max(self.peak, self.active)
        try:
            async for event in self.inner.stream(request):
                yield event
        finally:
            self.active -= child


def agent(*replies: ScriptedReply | str, config: Config | None = None) -> tuple[AgentLoop, ScriptedProvider]:
    provider = ScriptedProvider(replies, respond=child_reply)
    return build_agent(config or Config(), Paths.from_env(), provider=provider), provider


def with_subagents(**settings) -> Config:
    config = Config()
    config.agents.defaults.subagents = SubagentsConfig(**settings)
    return config


def tool_results(loop: AgentLoop, key: str = KEY) -> list[dict]:
    return [m for m in loop.session(key).messages if is_tool(m)]


def child_requests(provider: ScriptedProvider) -> list[ChatRequest]:
    return [r for r in provider.requests if is_child(r)]


async def until(condition, timeout: float = PATIENCE) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.005)


def test_a_foreground_spawn_returns_the_answer_as_its_tool_result_and_the_run_has_its_own_session():
    loop, provider = agent(ScriptedReply(tool_calls=[spawn("say forty-two")]), "It says forty-two.")
    events: list[ev.Event] = []

    turn = asyncio.run(loop.handle("ask a helper", KEY, sink=events.append))

    assert turn.reply == "It says forty-two."
    [result] = tool_results(loop)
    assert "Its answer:\n\nforty-two" in result["content"] and not result.get("is_error")
    [run] = loop.subagents.runs(KEY)
    assert run.status is ev.RunStatus.DONE and run.key == f"subagent:{KEY}:{run.id}"
    child = SessionStore(Paths.from_env().sessions_dir).load(run.key)
    assert strip_runtime_context(child.messages[0]["content"]) == "Your task:\n\nsay forty-two"
    assert child.messages[-1] == {"role": "assistant", "content": "forty-two"}
    assert not any("forty-two" == m["content"] for m in loop.session(KEY).messages if is_assistant(m))
    ended = [e for e in events if isinstance(e, ev.SubagentEnded)]
    assert [(e.agent, e.session, e.status, e.background) for e in ended] == [(run.id, KEY, ev.RunStatus.DONE, False)]
    assert not [e for e in events if e.agent and isinstance(e, ev.TextDelta | ev.MessageAdded)]  # its text is its own


def test_a_background_result_arrives_as_a_notice_in_the_parent_session_not_as_the_users_words():
    loop, provider = agent(ScriptedReply(tool_calls=[spawn("wait 0.05 s say found three files", background=True)]),
                           "Started a helper.", "It found three files.")
    events: list[ev.Event] = []

    async def scenario() -> None:
        await loop.handle("look around", KEY, sink=events.append)
        assert "in the background" in tool_results(loop)[0]["content"]
        count = len(loop.session(KEY).messages)
        await loop.subagents.wait(KEY)
        assert len(loop.session(KEY).messages) == count  # a notice, not a message
        await loop.handle("what did it find?", KEY)

    asyncio.run(scenario())
    [ended] = [e for e in events if isinstance(e, ev.SubagentEnded)]
    assert ended.background and ended.result == "found three files"
    assert "found three files" in ended.as_message()
    opening = provider.requests[-1].messages[-1]["content"]
    assert "found three files" in opening and "Background sub-agent" in opening
    assert strip_runtime_context(opening) == "what did it find?"  # the user's words stay theirs
    stored = SessionStore(Paths.from_env().sessions_dir).load(KEY)
    assert len(stored.notices) == 1 and stored.pending_notices() == []
    assert not any("found three files" in strip_runtime_context(m["content"]) for m in stored.messages if is_user(m))


def test_a_foreground_run_that_outlasts_its_timeout_goes_on_in_the_background():
    loop, _ = agent(ScriptedReply(tool_calls=[spawn("wait 0.3 s say late but here", timeout=0.05)]), "It is slow.")

    async def scenario() -> None:
        await loop.handle("go", KEY)
        [run] = loop.subagents.runs(KEY)
        result = tool_results(loop)[0]["content"]
        assert f"Sub-agent {run.id} is still running after 0.05 s; it goes on in the background" in result
        assert not run.finished and run.background
        await loop.subagents.wait(KEY)

    asyncio.run(scenario())
    [notice] = loop.session(KEY).notices
    assert "late but here" in notice.text


def test_spawn_is_not_offered_at_the_depth_limit_and_a_call_there_is_refused():
    loop, provider = agent(ScriptedReply(tool_calls=[spawn("deeper deeper say hi")]), "done")

    asyncio.run(loop.handle("go deep", KEY))

    by_task = {task_of(r): r for r in child_requests(provider)}
    assert "spawn" in tool_names(by_task["deeper deeper say hi"])  # depth 1 of 2
    assert "spawn" not in tool_names(by_task["deeper say hi"])  # depth 2: the limit
    assert "read_file" in tool_names(by_task["deeper say hi"])
    answer = tool_results(loop)[0]["content"]
    assert "Unknown tool 'spawn'" in answer  # the depth-2 run's try came back to it as an error
    assert {r.depth for r in loop.subagents.runs(KEY)} == {1, 2}


def test_twenty_spawns_in_one_reply_run_at_most_four_at_once_and_all_finish():
    calls = [spawn(f"wait 0.02 s say answer-{i}") for i in range(20)]
    provider = Counting(ScriptedProvider([ScriptedReply(tool_calls=calls), "All twenty are back."],
                                         respond=child_reply))
    loop = build_agent(Config(), Paths.from_env(), provider=provider)

    turn = asyncio.run(loop.handle("split it twenty ways", KEY))

    assert turn.reply == "All twenty are back."
    results = tool_results(loop)
    assert len(results) == 20 and not any(r.get("is_error") for r in results)
    assert all(f"answer-{i}" in r["content"] for i, r in enumerate(results))
    assert provider.peak == 4  # agents.defaults.subagents.maxConcurrent


def test_a_sub_agent_that_never_finishes_moves_to_the_background_and_tasks_cancel_stops_it():
    loop, _ = agent(ScriptedReply(tool_calls=[spawn("hang", timeout=0.05)]), "Still waiting on it.")
    events: list[ev.Event] = []

    async def scenario() -> tuple[str, str, str, str]:
        await loop.handle("go", KEY, sink=events.append)
        [run] = loop.subagents.runs(KEY)
        listed = (await loop.handle("/tasks", KEY)).reply
        cancelled = (await loop.handle(f"/tasks cancel {run.id}", KEY)).reply
        again = (await loop.handle(f"/tasks cancel {run.id}", KEY)).reply
        return run.id, listed, cancelled, again

    run_id, listed, cancelled, again = asyncio.run(scenario())
    assert f"{run_id}  running" in listed and "background  hang" in listed
    assert cancelled.startswith(f"Cancelled sub-agent {run_id}")
    assert again == f"Sub-agent {run_id} already ended (cancelled)."
    child = SessionStore(Paths.from_env().sessions_dir).load(f"subagent:{KEY}:{run_id}")
    assert child.messages[-1] == {"role": "assistant", "content": "(cancelled)"}
    [notice] = loop.session(KEY).notices
    assert f"Background sub-agent {run_id} cancelled" in notice.text
    assert [e.status for e in events if isinstance(e, ev.SubagentEnded)] == [ev.RunStatus.CANCELLED]


def test_tasks_answers_for_an_unknown_run_and_without_runs():
    loop, _ = agent()

    async def scenario() -> list[str]:
        return [(await loop.handle(text, KEY)).reply for text in ("/tasks", "/tasks cancel nope", "/tasks frob")]

    assert asyncio.run(scenario()) == [
        "No sub-agent runs in this session since nanoagent started.",
        "No sub-agent run 'nope' in this session; /tasks lists them.",
        "Use /tasks to list the runs, or /tasks cancel ID to stop one.",
    ]


def test_cancelling_the_parent_turn_cancels_its_foreground_children_and_leaves_every_session_consistent():
    loop, provider = agent(ScriptedReply(tool_calls=[spawn("hang"), spawn("hang")]))
    events: list[ev.Event] = []

    async def scenario() -> None:
        turn = asyncio.create_task(loop.handle("go", KEY, sink=events.append))
        await until(lambda: sum(isinstance(e, ev.SubagentStarted) for e in events) == 2)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        provider.replies.append(ScriptedReply("Fine, stopped."))
        assert (await loop.handle("never mind", KEY)).reply == "Fine, stopped."

    asyncio.run(scenario())
    runs = loop.subagents.runs(KEY)
    assert [r.status for r in runs] == [ev.RunStatus.CANCELLED] * 2
    store = SessionStore(Paths.from_env().sessions_dir)
    for run in runs:
        child = store.load(run.key)
        assert child.messages[-1]["content"] == "(cancelled)" and not unanswered_tool_calls(child.messages)
    parent = store.load(KEY)
    assert not unanswered_tool_calls(parent.messages)
    assert parent.notices == []  # foreground runs report to the turn that waited, which is gone


def test_a_background_result_after_new_reaches_the_fresh_conversation_with_its_task():
    loop, provider = agent(ScriptedReply(tool_calls=[spawn("wait 0.1 s say the old answer", background=True)]),
                           "Started.", "- the user started a helper", "Here is what the helper found.")

    async def scenario() -> str:
        await loop.handle("start a helper", KEY)
        fresh = (await loop.handle("/new", KEY)).reply
        await loop.subagents.wait(KEY)
        await loop.handle("hello again", KEY)
        return fresh

    assert asyncio.run(scenario()).startswith("Started a fresh conversation")
    sent = provider.requests[-1].messages
    assert len(sent) == 1 and is_user(sent[0])  # only the fresh conversation
    assert "the old answer" in sent[0]["content"] and "wait 0.1 s say the old answer" in sent[0]["content"]
    assert strip_runtime_context(sent[0]["content"]) == "hello again"


def test_sub_agent_usage_counts_under_the_parent_session():
    loop, _ = agent(ScriptedReply(tool_calls=[spawn("say one"), spawn("say two")]), "Both answered.")

    async def scenario() -> tuple[str, str]:
        await loop.handle("ask two helpers", KEY)
        return (await loop.handle("/status", KEY)).reply, (await loop.handle("/usage", KEY)).reply

    status, usage = asyncio.run(scenario())
    assert "over 4 model calls (2 by sub-agents)" in status
    assert "2,000 in" in status.replace("\n", " ")  # the helpers' 1,000 input tokens each
    assert usage.startswith("anthropic/claude-sonnet-4-5: 4 calls, 2,000 in")

    for args in (["usage"], ["usage", "-s", KEY]):  # every session, and this one alone
        listed = invoke(*args, env={"COLUMNS": "200"})
        assert listed.returncode == 0, listed.stderr
        [row] = [[cell.strip() for cell in line.split("│")] for line in listed.stdout.splitlines() if KEY in line]
        assert row[2:6] == [KEY, "anthropic/claude-sonnet-4-5", "4", "2,000"] and "subagent:" not in listed.stdout


def test_read_task_output_gives_a_running_runs_status_then_its_answer():
    loop, provider = agent(ScriptedReply(tool_calls=[spawn("wait 0.2 s say the slow answer", background=True)]),
                           "Started.")

    async def scenario() -> list[dict]:
        await loop.handle("start", KEY)
        [run] = loop.subagents.runs(KEY)
        provider.replies += [ScriptedReply(tool_calls=[("read_task_output", {"run_id": run.id})]),
                             ScriptedReply(tool_calls=[("read_task_output", {"run_id": run.id, "wait": 5})]),
                             ScriptedReply(tool_calls=[("read_task_output", {"run_id": "nope"})]),
                             ScriptedReply("Got it.")]
        await loop.handle("is it done?", KEY)
        return tool_results(loop)[-3:]

    still, done, unknown = asyncio.run(scenario())
    assert "is still running" in still["content"] and "wait 0.2 s say the slow answer" in still["content"]
    assert "Its answer:\n\nthe slow answer" in done["content"]
    assert unknown.get("is_error") and "No sub-agent run 'nope' in this session" in unknown["content"]


def test_a_sub_agent_gets_only_the_tools_named_and_an_unknown_name_is_a_tool_error():
    loop, provider = agent(ScriptedReply(tool_calls=[spawn("say ok", tools=["read_file", "grep"]),
                                                     spawn("say ok", tools=["read_file", "teleport"])]), "done")

    asyncio.run(loop.handle("go", KEY))

    [request] = child_requests(provider)
    assert tool_names(request) == ["read_file", "grep"]
    bad = tool_results(loop)[1]
    assert bad.get("is_error") and "Unknown tool(s) for the sub-agent: teleport" in bad["content"]


def test_context_full_passes_the_conversation_and_summary_a_cheap_summary_of_it():
    config = with_subagents(summary_model="scripted/cheap")
    loop, provider = agent("Nice to meet you, Ada.",
                           ScriptedReply(tool_calls=[spawn("say ok", context="full"),
                                                     spawn("say fine", context="summary")]), "done", config=config)

    async def scenario() -> None:
        await loop.handle("I am Ada; reports in French please", KEY)
        await loop.handle("delegate", KEY)

    asyncio.run(scenario())
    by_task = {task_of(r): r for r in child_requests(provider)}
    full = by_task["say ok"].messages[0]["content"]
    assert "<conversation>" in full and "[user] I am Ada; reports in French please" in full
    assert "[assistant] Nice to meet you, Ada." in full
    summarised = by_task["say fine"].messages[0]["content"]
    assert "The user is called Ada" in summarised and "<conversation>" not in summarised
    [summary_call] = [r for r in provider.requests if SUMMARY in r.system]
    assert summary_call.model == "scripted/cheap" and "I am Ada" in summary_call.messages[0]["content"]


def test_spawn_is_not_offered_when_max_depth_is_zero():
    loop, provider = agent("hi", config=with_subagents(max_depth=0))

    asyncio.run(loop.handle("hello", KEY))

    assert "spawn" not in tool_names(provider.requests[0]) and loop.subagents is None


def test_hub_watchers_of_the_session_see_a_background_result_even_when_they_attached_after_the_turn():
    loop, _ = agent(ScriptedReply(tool_calls=[spawn("wait 0.05 s say from the background", background=True)]),
                    "Started.")
    late: list[ev.Event] = []

    async def scenario() -> None:
        hub = Hub(loop)
        await hub.send(KEY, "start one")
        hub.watch(KEY, late.append)  # a terminal or a chat that attached after the turn ended
        await loop.subagents.wait(KEY)
        await hub.drain(1)

    asyncio.run(scenario())
    [ended] = [e for e in late if isinstance(e, ev.SubagentEnded)]
    assert ended.background and ended.result == "from the background"
    wire = json.loads(protocol.encode(protocol.event_to_wire(ended)))
    assert protocol.event_from_wire(wire) == ended  # attached terminals get it through the socket


def test_one_shot_waits_for_its_background_runs_and_prints_their_answers_after_the_reply(llm):
    from tests.conftest import anthropic_env
    from tests.llm_server import Reply

    llm.script(Reply(tool_calls=[("spawn", {"task": "count the files", "background": True}),
                                 ("spawn", {"task": "read the notes", "background": True})]))
    llm.default_reply = Reply(echo=True, delay=0.1)  # each sub-agent answers with its own opening message

    ran = invoke("agent", "-m", "start two helpers", env=anthropic_env(llm))

    assert ran.returncode == 0, ran.stderr
    head, _, answers = ran.stdout.partition("\n[sub-agent ")
    assert "Your task:" not in head  # the reply comes first
    assert "count the files" in answers and "read the notes" in answers and answers.count("done: ") == 2
    assert ran.stderr.count("⇢ sub-agent") == 2 and ran.stderr.count("✓ sub-agent") == 2


def test_a_sub_agent_waiting_for_its_own_sub_agent_gives_up_its_slot_meanwhile():
    loop, _ = agent(ScriptedReply(tool_calls=[spawn("deeper say hi")]), "done", config=with_subagents(max_concurrent=1))

    asyncio.run(asyncio.wait_for(loop.handle("go", KEY), PATIENCE))

    assert "deeper got: " in tool_results(loop)[0]["content"] and "Its answer:\n\nhi" in tool_results(loop)[0]["content"]


def test_the_terminal_folds_a_sub_agents_events_into_a_line_as_it_starts_and_ends(capsys):
    from nanoagent.cli.interactive import TerminalUI

    ui = TerminalUI(100, plain=True)
    ui.start_turn()
    for event in (ev.SubagentStarted("count the files", False, session=KEY, agent="a1b2c3"),
                  ev.ToolStarted("c1", "glob", {"pattern": "*"}, session=KEY, agent="a1b2c3"),
                  ev.TextDelta("its own words", session=KEY, agent="a1b2c3"),
                  ev.ToolFinished("c1", "glob", "x", 0.01, session=KEY, agent="a1b2c3"),
                  ev.SubagentEnded("count the files", ev.RunStatus.DONE, "12 files", 0.5, 1, False, session=KEY,
                                   agent="a1b2c3"),
                  ev.SubagentEnded("read the notes", ev.RunStatus.DONE, "They say **hi**.", 2.0, 3, True,
                                   session=KEY, agent="d4e5f6")):
        ui(event)
    ui.stream.flush()

    shown = capsys.readouterr().out
    assert "⇢ sub-agent a1b2c3: count the files" in shown and "✓ sub-agent a1b2c3 done 0.5s, 1 tool call" in shown
    assert "its own words" not in shown and "glob" not in shown and "12 files" not in shown  # in its session only
    assert "[sub-agent d4e5f6 done: read the notes]" in shown and "They say" in shown  # a background answer
    assert ui.activity == "thinking"  # the parent's turn is still what the status line shows
