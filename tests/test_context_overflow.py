"""A provider's "prompt is too long": older turns are archived and the call is sent once more."""

from __future__ import annotations

import asyncio
import json

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config, ProviderConfig
from nanoagent.paths import Paths
from nanoagent.providers.base import ChatRequest, ProviderError
from nanoagent.providers.registry import build_provider
from nanoagent.providers.retry import RetryingProvider, RetryPolicy
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from tests.llm_server import Reply

ANTHROPIC_OVERFLOW = Reply(status=400, error_type="invalid_request_error",
                           error_message="prompt is too long: 210000 tokens > 200000 maximum")
OPENAI_OVERFLOW = Reply(status=400, error_type="invalid_request_error",
                        error_message="This model's maximum context length is 128000 tokens. However, your messages "
                                      "resulted in 130412 tokens. Please reduce the length of the messages.")
OVERFLOWS = {"anthropic/claude-test": ANTHROPIC_OVERFLOW, "openai/gpt-test": OPENAI_OVERFLOW,
             "litellm/openai/gpt-test": OPENAI_OVERFLOW}
SUMMARY_MARK = "condense a stretch of conversation"
FLUSH = Reply(text="DONE")  # the memory flush before the archive, which writes nothing here


def server_config(server, model: str) -> Config:
    config = Config()
    d = config.agents.defaults
    d.model, d.context_window_tokens, d.max_tokens, d.retry_base_delay, d.stream_idle_timeout = (
        model, 16_000, 200, 0.01, 5)
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=server.url)
    config.providers["openai"] = ProviderConfig(api_key="sk-test", api_base=server.url + "/v1")
    return config


def with_history(key: str = "cli:direct", turns: int = 10) -> None:
    """Earlier turns that fit the configured budget by every count nanoagent makes."""
    store = SessionStore(Paths.from_env().sessions_dir)
    session = store.load(key)
    for i in range(turns):
        store.add_messages(session, [{"role": "user", "content": f"question {i} about the garden " + "words " * 60},
                                     {"role": "assistant", "content": f"answer {i} " + "words " * 40}])


def history_entries() -> list[dict]:
    path = Paths.from_env().memory_dir / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def turn_requests(server) -> list:
    return [r for r in server.requests if SUMMARY_MARK not in json.dumps(r.body)
            and "This is a memory flush" not in json.dumps(r.body)]


# --- the providers say so ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", list(OVERFLOWS))
def test_the_providers_mark_a_context_overflow_on_their_error(llm, model):
    llm.script(OVERFLOWS[model], Reply(text="not reached"))
    provider = build_provider(server_config(llm, model))
    request = ChatRequest(model=model, system="s", messages=[{"role": "user", "content": "hi"}], max_tokens=100)

    async def go():
        return [e async for e in provider.stream(request)]

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert info.value.overflow and info.value.status in (400, None)
    assert len(llm.requests) == 1  # not retried: the same prompt would be refused again


def test_anthropics_input_plus_max_tokens_overflow_counts_too(llm):
    llm.script(Reply(status=400, error_type="invalid_request_error",
                     error_message="input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
                                   "decrease input length or `max_tokens` and try again"))
    request = ChatRequest(model="anthropic/claude-test", system="s", messages=[{"role": "user", "content": "hi"}])

    async def go():
        return [e async for e in build_provider(server_config(llm, "anthropic/claude-test")).stream(request)]

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert info.value.overflow


def test_a_bad_request_about_something_else_is_not_an_overflow(llm):
    llm.script(Reply(status=400, error_type="invalid_request_error",
                     error_message="max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens"))
    request = ChatRequest(model="anthropic/claude-test", system="s", messages=[{"role": "user", "content": "hi"}])

    async def go():
        return [e async for e in build_provider(server_config(llm, "anthropic/claude-test")).stream(request)]

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert not info.value.overflow


def test_an_overflow_is_not_handed_to_a_fallback_model():
    too_long = ScriptedReply(error=ProviderError("400 prompt is too long", status=400, overflow=True))
    fallback = ScriptedProvider(["from the fallback"])
    provider = RetryingProvider([("a", ScriptedProvider([too_long])), ("b", fallback)], RetryPolicy())

    async def go():
        return [e async for e in provider.stream(ChatRequest(model="a", system="", messages=[]))]

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert info.value.overflow and info.value.message == "a: 400 prompt is too long"
    assert fallback.requests == []


# --- the loop makes room -------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["anthropic/claude-test", "openai/gpt-test"])
def test_an_overflow_archives_older_turns_and_the_call_is_sent_again(llm, model):
    with_history()
    llm.script(OVERFLOWS[model], FLUSH, Reply(text="- the user asked about the garden"), Reply(text="fits now"))
    loop = build_agent(server_config(llm, model), Paths.from_env())
    notices = []
    turn = asyncio.run(loop.handle("and the roses?", "cli:direct", sink=notices.append))
    assert turn.result is not None and turn.result.error is None
    assert turn.reply == "fits now"
    assert [e["content"] for e in history_entries()] == ["- the user asked about the garden"]
    session = loop.session("cli:direct")
    assert session.last_consolidated == 20 and session.messages[20]["content"].endswith("and the roses?")
    first, again = turn_requests(llm)
    assert len(again.body["messages"]) < len(first.body["messages"])
    assert any("older turns were archived to memory" in getattr(e, "text", "") for e in notices)
    assert session.failed_turns == []


def test_a_second_overflow_ends_the_turn_with_one_clear_line(llm):
    with_history()
    llm.script(ANTHROPIC_OVERFLOW, FLUSH, Reply(text="- the user asked about the garden"), ANTHROPIC_OVERFLOW)
    loop = build_agent(server_config(llm, "anthropic/claude-test"), Paths.from_env())
    turn = asyncio.run(loop.handle("and the roses?", "cli:direct"))
    assert "\n" not in turn.reply
    assert turn.reply.startswith("Error: anthropic/claude-test: 400 prompt is too long: 210000 tokens > 200000 "
                                 "maximum (still too long after archiving older turns to memory: shorten the "
                                 "message, or start afresh with /new).")
    assert len(turn_requests(llm)) == 2  # sent once more, not again and again
    assert len(history_entries()) == 1
    assert loop.session("cli:direct").failed_turns  # the turn is marked failed like any other


def test_an_overflow_with_nothing_older_to_archive_says_so(tmp_path):
    too_long = ScriptedReply(error=ProviderError("m: 400 prompt is too long", status=400, overflow=True))
    loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider([too_long, "not reached"]))
    turn = asyncio.run(loop.handle("a very long paste", "cli:direct"))
    assert turn.reply.startswith("Error: m: 400 prompt is too long (no older turns are left to archive: shorten the "
                                 "message, or start afresh with /new).")
    assert history_entries() == []


def test_an_overflow_after_a_tool_call_keeps_the_turns_progress(tmp_path):
    with_history()
    too_long = ScriptedReply(error=ProviderError("m: 400 prompt is too long", status=400, overflow=True))
    replies = [ScriptedReply(tool_calls=[("list_dir", {"path": "."})]), too_long, "done after the tool"]

    def respond(request):
        if "This is a memory flush" in request.system:
            return "DONE"
        return "- earlier turns about the garden" if SUMMARY_MARK in request.system else None

    provider = ScriptedProvider(replies, respond=respond)
    loop = build_agent(Config(), Paths.from_env(), provider=provider)
    turn = asyncio.run(loop.handle("look around", "cli:direct"))
    assert turn.reply == "done after the tool" and turn.result is not None
    assert [c.name for c in turn.result.tool_calls] == ["list_dir"]  # the tool ran once, not again
    retry = [r for r in provider.requests if SUMMARY_MARK not in r.system and "memory flush" not in r.system][-1]
    assert retry.messages[0]["content"].endswith("look around") and retry.messages[-1]["role"] == "tool"
    assert loop.session("cli:direct").last_consolidated == 20
