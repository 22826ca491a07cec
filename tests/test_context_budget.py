"""The context budget: measured from the provider's own figure for the last call, sized to the smaller of the
configured window and the model's own, and a request body the SDK sends as built."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config, ProviderConfig
from nanoagent.paths import Paths
from nanoagent.pricing import Window
from nanoagent.providers.anthropic import build_params
from nanoagent.providers.base import ChatRequest, ToolSpec
from nanoagent.providers.registry import build_provider
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from nanoagent.usage import Usage
from tests.conftest import PATIENCE
from tests.llm_server import Reply

SUMMARY_MARK = "condense a stretch of conversation"


def prompt_chars(request: ChatRequest) -> int:
    tools = json.dumps([t.__dict__ for t in request.tools])
    return len(request.system) + len(tools) + len(json.dumps(request.messages))


def reporting(factor: float = 1.0, summaries: list[str] | None = None):
    """A scripted model that reports its prompt as a real provider does: `factor` tokens per 4 characters."""

    def respond(request: ChatRequest) -> ScriptedReply:
        if SUMMARY_MARK in request.system:
            if summaries is not None:
                summaries.append(request.messages[0]["content"])
            return ScriptedReply("- a summary", usage=Usage(input_tokens=100, output_tokens=5))
        return ScriptedReply("reply " * 50, usage=Usage(input_tokens=int(prompt_chars(request) / 4 * factor),
                                                        output_tokens=60))

    return ScriptedProvider(respond=respond)


def small_window(window: int = 8000, max_tokens: int = 200) -> Config:
    config = Config()
    config.agents.defaults.context_window_tokens = window
    config.agents.defaults.max_tokens = max_tokens
    config.memory.auto_recall.enabled = False  # these prompts are measured to the token: nothing recalled into them
    config.tools.browser.enabled = False  # nor a tool offered only where Chromium is installed
    return config


def fixed_of(loop):
    system = loop.context.system_prompt()
    return lambda count: loop.context.fixed_tokens(system, count)


def first_archive_turn(factor: float) -> int:
    loop = build_agent(small_window(), Paths.from_env(), provider=reporting(factor))
    key = f"cli:factor-{factor}"
    for turn in range(12):
        asyncio.run(loop.handle(f"message {turn}: " + "words " * 400, key))
        if loop.session(key).last_consolidated:
            return turn
    return -1


# --- the provider's figure --------------------------------------------------------------------------------


def test_each_turn_call_records_the_stretch_of_messages_it_sent(tmp_path):
    loop = build_agent(Config(), Paths.from_env(), provider=reporting())
    asyncio.run(loop.handle("first", "cli:direct"))
    asyncio.run(loop.handle("second", "cli:direct"))
    lines = [json.loads(line) for line in loop.store.path_for("cli:direct").read_text().splitlines()]
    assert [r["window"] for r in lines if r["type"] == "usage"] == [[0, 1], [0, 3]]
    reloaded = SessionStore(Paths.from_env().sessions_dir).load("cli:direct")
    assert [r.window for r in reloaded.usage] == [(0, 1), (0, 3)]


def test_a_denser_count_from_the_provider_archives_sooner(tmp_path):
    assert 0 <= first_archive_turn(2.0) < first_archive_turn(1.0)


def test_archiving_by_the_providers_figure_goes_down_to_half_the_budget(tmp_path):
    loop = build_agent(small_window(window=16_000), Paths.from_env(), provider=reporting(1.5))
    session = loop.session("cli:direct")
    archived_at = []
    for turn in range(20):
        before = session.last_consolidated
        asyncio.run(loop.handle(f"message {turn}: " + "words " * 400, "cli:direct"))
        if session.last_consolidated != before:
            model = loop.model_for(session)
            archived_at.append(loop.consolidator.prompt_tokens(session, fixed_of(loop), model))
            assert session.messages[session.last_consolidated]["role"] == "user"
    assert archived_at and all(size <= loop.consolidator.budget // 2 for size in archived_at)


def test_a_figure_no_tokenizer_could_give_is_not_believed(tmp_path):
    def respond(request):
        if SUMMARY_MARK in request.system:
            return "- a summary"
        return ScriptedReply("reply " * 50, usage=Usage(input_tokens=1, output_tokens=60))

    loop = build_agent(small_window(), Paths.from_env(), provider=ScriptedProvider(respond=respond))
    for turn in range(12):
        asyncio.run(loop.handle(f"message {turn}: " + "words " * 400, "cli:direct"))
    assert loop.session("cli:direct").last_consolidated > 0  # counted instead, and archived in time


ONE_TURN = """
import asyncio, json, sys
from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.usage import Usage

def respond(request):
    tools = json.dumps([t.__dict__ for t in request.tools])
    size = (len(request.system) + len(tools) + len(json.dumps(request.messages))) // 4
    return ScriptedReply("fine", usage=Usage(input_tokens=size, output_tokens=2))

config = Config()
config.agents.defaults.context_window_tokens = 32_000
loop = build_agent(config, Paths.from_env(), provider=ScriptedProvider(respond=respond))
asyncio.run(loop.handle("one more question", "cli:long"))
print("tiktoken" in sys.modules, loop.session("cli:long").last_consolidated)
"""


def long_session(home: Path, count: int, unarchived: int, figure: int | None) -> None:
    """A session of `count` messages whose last `unarchived` are near a 32k window's budget; `figure`: the prompt
    tokens its last turn call reported (None: a session written before calls recorded what they sent)."""
    store = SessionStore(Paths.from_env().sessions_dir)
    session = store.load("cli:long")
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "words " * 40}
                for i in range(count)]
    store.add_messages(session, messages)
    store.set_consolidated(session, count - unarchived)
    if figure is not None:
        store.append(session, [{"type": "usage", "model": Config().defaults.model, "purpose": "turn",
                                "input_tokens": figure, "output_tokens": 10, "window": [count - unarchived, count - 1]}])


@pytest.mark.process
def test_a_session_near_its_budget_is_measured_from_the_providers_figure_without_the_tokenizer(isolated_home):
    long_session(isolated_home, 3000, 160, figure=14_000)
    out = subprocess.run([sys.executable, "-c", ONE_TURN], capture_output=True, text=True, timeout=PATIENCE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "2840"]  # the tokenizer takes 0.6 s to load; nothing needed archiving


@pytest.mark.process
def test_without_a_figure_the_same_session_is_counted_with_the_tokenizer(isolated_home):
    long_session(isolated_home, 3000, 160, figure=None)
    out = subprocess.run([sys.executable, "-c", ONE_TURN], capture_output=True, text=True, timeout=PATIENCE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True"


# --- the window follows the model ---------------------------------------------------------------------------


def test_the_window_is_the_models_own_when_it_is_smaller_than_the_configured_one(tmp_path):
    loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider(default="ok"))
    consolidator = loop.consolidator
    assert consolidator.window("openai/gpt-4o-mini") == Window(128_000, from_model=True)
    assert consolidator.window("anthropic/claude-sonnet-4-5") == Window(200_000)
    assert consolidator.window("openai/a-model-the-table-does-not-know") == Window(200_000)
    assert consolidator.budget_for("openai/gpt-4o-mini") < 128_000 < consolidator.budget_for("anthropic/claude-sonnet-4-5")
    config = small_window(window=32_000)
    assert build_agent(config, Paths.from_env(), provider=ScriptedProvider()).consolidator.window(
        "openai/gpt-4o-mini") == Window(32_000)


def test_status_says_when_the_models_window_is_the_budget(tmp_path):
    loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider(default="ok"))
    status = asyncio.run(loop.handle("/status", "cli:direct")).reply
    assert "of 200,000 tokens (" in status and "model's window" not in status
    asyncio.run(loop.handle("/model openai/gpt-4o-mini", "cli:direct"))
    status = asyncio.run(loop.handle("/status", "cli:direct")).reply
    context = next(line for line in status.splitlines() if line.startswith("context:"))
    assert re.search(r"of 128,000 tokens \(\d+%; the model's window, smaller than contextWindowTokens\)$", context)


def test_a_switch_to_a_smaller_model_archives_down_to_that_models_budget(tmp_path):
    store = SessionStore(Paths.from_env().sessions_dir)
    session = store.load("cli:direct")
    store.add_messages(session, [{"role": "user" if i % 2 == 0 else "assistant",
                                  "content": f"message {i} " + "words " * 100} for i in range(1000)])
    provider = ScriptedProvider(respond=lambda r: "- a summary" if SUMMARY_MARK in r.system else "ok")
    loop = build_agent(Config(), Paths.from_env(), provider=provider)
    asyncio.run(loop.handle("hello", "cli:direct"))  # about 100,000 tokens fit claude-sonnet-4-5's 200,000
    assert loop.session("cli:direct").last_consolidated == 0
    asyncio.run(loop.handle("/model openai/gpt-4o-mini", "cli:direct"))
    asyncio.run(loop.handle("hello again", "cli:direct"))
    session = loop.session("cli:direct")
    assert session.last_consolidated > 0
    fixed = fixed_of(loop)
    assert loop.consolidator.prompt_tokens(session, fixed, "openai/gpt-4o-mini") <= loop.consolidator.budget_for(
        "openai/gpt-4o-mini")


# --- the request body ---------------------------------------------------------------------------------------


def test_the_anthropic_request_is_sent_as_built_without_the_sdks_per_call_transform(llm):
    config = Config()
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=llm.url)
    messages = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": "reading", "thinking": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
         "tool_calls": [{"id": "toolu_1", "name": "read_file", "arguments": '{"path": "a"}'}]},
        {"role": "tool", "tool_call_id": "toolu_1", "name": "read_file", "content": "alpha", "is_error": True},
        {"role": "user", "content": "and now?"},
    ]
    tools = [ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})]
    request = ChatRequest(model="anthropic/claude-test", system="You are a test.", messages=messages, tools=tools,
                          max_tokens=100, thinking_budget=2000)
    llm.script(Reply(text="done"))
    provider = build_provider(config, "anthropic/claude-test")

    async def go():
        return [e async for e in provider.stream(request)]

    asyncio.run(go())
    assert llm.requests[-1].body == {**build_params(request), "stream": True}
