"""The providers talking to the local LLM server over HTTP: the Anthropic Messages API and the OpenAI-compatible
API over httpx, and litellm."""

import asyncio
import os
import subprocess
import sys

import pytest

from nanoagent.config.schema import Config, ProviderConfig
from nanoagent.providers import base as pb
from nanoagent.providers.base import ChatRequest, ProviderError, ToolSpec
from nanoagent.providers.registry import build_provider
from tests.conftest import PATIENCE, free_port
from tests.llm_server import Reply

TOOLS = [ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}},
                                                "required": ["path"]})]


def config_for(server, model, **defaults):
    config = Config()
    config.agents.defaults.model = model
    config.agents.defaults.retry_base_delay = 0.01
    config.agents.defaults.stream_idle_timeout = defaults.pop("timeout", 5)
    for key, value in defaults.items():
        setattr(config.agents.defaults, key, value)
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=server.url)
    config.providers["openai"] = ProviderConfig(api_key="sk-test", api_base=server.url + "/v1")
    return config


def stream(server, model, messages=None, tools=(), **defaults):
    config = config_for(server, model, **defaults)
    provider = build_provider(config)
    request = ChatRequest(model=model, system="You are a test.", tools=list(tools),
                          messages=messages or [{"role": "user", "content": "hi"}], max_tokens=100,
                          thinking_budget=config.defaults.thinking_budget)

    async def go():
        return [e async for e in provider.stream(request)]

    return asyncio.run(go())


def text_of(events):
    return "".join(e.text for e in events if isinstance(e, pb.TextDelta))


def calls_of(events):
    return [e.call for e in events if isinstance(e, pb.ToolCallReady)]


MODELS = ["anthropic/claude-test", "openai/gpt-test", "litellm/openai/gpt-test"]


@pytest.mark.parametrize("model", MODELS)
def test_streams_text_and_reports_usage(llm, model):
    llm.script(Reply(text="Hello from the server", output_tokens=5))
    events = stream(llm, model)
    assert text_of(events) == "Hello from the server"
    usage = [e for e in events if isinstance(e, pb.UsageReport)][-1]
    assert usage.usage.output_tokens == 5 and usage.usage.input_tokens > 0
    assert isinstance(events[-1], pb.StreamEnd) and events[-1].stop_reason == "end_turn"


@pytest.mark.parametrize("model", MODELS)
def test_streams_tool_calls(llm, model):
    llm.script(Reply(text="Let me look.", tool_calls=[("read_file", {"path": "notes.md"})]))
    events = stream(llm, model, tools=TOOLS)
    (call,) = calls_of(events)
    assert call.name == "read_file" and call.id
    import json

    assert json.loads(call.arguments) == {"path": "notes.md"}
    assert events[-1].stop_reason == "tool_use"
    body = llm.requests[-1].body
    assert "tools" in body


@pytest.mark.parametrize("model", MODELS)
def test_429_with_retry_after_then_success(llm, model):
    llm.script(Reply(status=429, headers={"retry-after": "0"}), Reply(text="after retry"))
    events = stream(llm, model)
    assert text_of(events) == "after retry"
    assert len(llm.requests) == 2
    assert any(isinstance(e, pb.RetryNotice) for e in events)


@pytest.mark.parametrize("model", MODELS)
def test_5xx_beyond_retries_fails_with_the_status(llm, model):
    llm.script(*[Reply(status=503)] * 5)
    with pytest.raises(ProviderError) as info:
        stream(llm, model, max_retries=2)
    assert len(llm.requests) == 3
    assert "503" in info.value.message and "3 attempts" in info.value.message


@pytest.mark.parametrize("model", MODELS[:2])
def test_quota_exhausted_429_and_401_are_final(llm, model):
    llm.script(Reply(status=429, error_message="Your credit balance is too low"))
    with pytest.raises(ProviderError) as info:
        stream(llm, model)
    assert len(llm.requests) == 1 and "credit balance" in info.value.message
    llm.reset()
    llm.script(Reply(status=401, error_message="invalid x-api-key"))
    with pytest.raises(ProviderError):
        stream(llm, model)
    assert len(llm.requests) == 1


@pytest.mark.parametrize("model", MODELS[:2])
def test_a_stream_cut_mid_response_is_an_error_not_a_partial_answer(llm, model):
    llm.script(*[Reply(text="this reply will be cut off " * 5, cut_after=4)] * 3)
    with pytest.raises(ProviderError) as info:
        stream(llm, model)
    assert "cut off mid-stream" in info.value.message
    assert len(llm.requests) == 1  # output had streamed: never retried


@pytest.mark.parametrize("model", MODELS[:2])
def test_a_stalled_stream_times_out(llm, model):
    llm.script(*[Reply(text="stall", stall_after=1)] * 3)
    with pytest.raises(ProviderError) as info:
        stream(llm, model, timeout=0.5, max_retries=0)
    assert "no data" in info.value.message or "cut off" in info.value.message


@pytest.mark.parametrize("model", MODELS)
def test_connection_refused_is_final_and_names_the_url(model):
    class Dead:
        url = f"http://127.0.0.1:{free_port()}"

    events = []

    async def go():
        async for event in build_provider(config_for(Dead, model)).stream(
                ChatRequest(model=model, system="", messages=[{"role": "user", "content": "hi"}])):
            events.append(event)

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert f"cannot connect to {Dead.url}" in info.value.message and "(connection refused)" in info.value.message
    assert not [e for e in events if isinstance(e, pb.RetryNotice)]


def test_fallback_model_answers_when_the_primary_fails(llm):
    llm.script(*[Reply(status=529)] * 2, Reply(text="fallback here"))
    events = stream(llm, "anthropic/claude-test", max_retries=1, fallback_models=["openai/gpt-test"])
    assert text_of(events) == "fallback here"
    assert llm.requests[-1].api == "openai"
    assert [e for e in events if isinstance(e, pb.UsageReport)][-1].model == "openai/gpt-test"


def test_anthropic_requests_carry_cache_breakpoints_and_read_the_prefix_from_cache(llm):
    history = [{"role": "user", "content": "first question"}]
    llm.script(Reply(text="first answer"), Reply(text="second answer"))
    first = stream(llm, "anthropic/claude-test", messages=history, tools=TOOLS)
    history += [{"role": "assistant", "content": "first answer"}, {"role": "user", "content": "second question"}]
    second = stream(llm, "anthropic/claude-test", messages=history, tools=TOOLS)
    body = llm.requests[-1].body
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    usage1 = [e for e in first if isinstance(e, pb.UsageReport)][-1].usage
    usage2 = [e for e in second if isinstance(e, pb.UsageReport)][-1].usage
    assert usage1.cache_write_tokens > 0 and usage1.cache_read_tokens == 0
    assert usage2.cache_read_tokens >= usage1.cache_write_tokens


def test_extended_thinking_is_requested_and_its_block_kept(llm):
    llm.script(Reply(thinking="let me think", text="answer"))
    events = stream(llm, "anthropic/claude-test", thinking_budget=2048)
    body = llm.requests[-1].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] > 2048 and "temperature" not in body
    blocks = [e.block for e in events if isinstance(e, pb.ThinkingBlock)]
    assert blocks and blocks[0]["thinking"] == "let me think" and blocks[0]["signature"]


def test_anthropic_requests_carry_the_key_and_api_version_under_the_base_urls_path(llm):
    config = config_for(llm, "anthropic/claude-test")
    config.providers["anthropic"].api_base = llm.url + "/proxy/"  # a gateway that serves the API under a prefix
    request = ChatRequest(model="anthropic/claude-test", system="", messages=[{"role": "user", "content": "hi"}])

    async def go():
        return [e async for e in build_provider(config).stream(request)]

    assert text_of(asyncio.run(go())) == "ok"
    sent = llm.requests[-1]
    assert sent.path == "/proxy/v1/messages"
    assert (sent.headers["x-api-key"], sent.headers["anthropic-version"]) == ("sk-ant-test", "2023-06-01")


def test_an_overload_inside_an_anthropic_stream_is_retried_as_a_529(llm):
    llm.script(Reply(stream_error="overloaded_error"), Reply(text="after the overload"))
    events = stream(llm, "anthropic/claude-test")
    assert text_of(events) == "after the overload"
    assert len(llm.requests) == 2
    (notice,) = [e for e in events if isinstance(e, pb.RetryNotice)]
    assert notice.reason == "529 overloaded error"


def test_a_refused_request_inside_an_anthropic_stream_is_final(llm):
    llm.script(*[Reply(stream_error="invalid_request_error", error_message="messages.0: bad block")] * 3)
    with pytest.raises(ProviderError) as info:
        stream(llm, "anthropic/claude-test")
    assert len(llm.requests) == 1
    assert info.value.message == "anthropic/claude-test: 400 messages.0: bad block"


@pytest.mark.process
def test_an_anthropic_one_shot_answers_without_importing_the_anthropic_sdk(llm):
    """The SDK took 1.0-1.3 s of a 2.4 s one-shot to import; only `dream --batch` loads it now."""
    from tests.conftest import ROOT, anthropic_env

    llm.script(Reply(text="hello without the SDK"))
    ran = subprocess.run([sys.executable, "-X", "importtime", "-m", "nanoagent", "agent", "-m", "hi"], cwd=ROOT,
                         env={**os.environ, **anthropic_env(llm)}, capture_output=True, text=True, timeout=PATIENCE)
    assert (ran.returncode, ran.stdout) == (0, "hello without the SDK\n"), ran.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in ran.stderr.splitlines() if "import time:" in line}
    assert "anthropic" not in imported and "httpx" in imported


def test_anthropic_sdk_retries_are_off_so_one_layer_counts(llm):
    llm.script(*[Reply(status=500)] * 10)
    with pytest.raises(ProviderError):
        stream(llm, "anthropic/claude-test", max_retries=0)
    assert len(llm.requests) == 1


LITELLM = MODELS[2]


def test_litellm_quota_exhausted_429_is_final_not_retried(llm):
    llm.script(*[Reply(status=429, error_message="Your credit balance is too low")] * 3)
    with pytest.raises(ProviderError) as info:
        stream(llm, LITELLM)
    assert len(llm.requests) == 1 and "credit balance" in info.value.message
    llm.reset()
    llm.script(*[Reply(status=401, error_message="invalid x-api-key")] * 3)
    with pytest.raises(ProviderError):
        stream(llm, LITELLM)
    assert len(llm.requests) == 1  # a bad key is final too


def test_the_local_server_answers_non_streaming_calls_from_both_sdks(llm):
    import anthropic
    import httpx

    llm.script(Reply(text="plain anthropic"), Reply(text="plain openai"))
    client = anthropic.Anthropic(api_key="k", base_url=llm.url, max_retries=0)
    message = client.messages.create(model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].text == "plain anthropic"
    reply = httpx.post(f"{llm.url}/v1/chat/completions", headers={"Authorization": "Bearer k"}, timeout=PATIENCE,
                       json={"model": "gpt-test", "stream": False, "messages": [{"role": "user", "content": "hi"}]})
    assert reply.json()["choices"][0]["message"]["content"] == "plain openai"


def test_litellm_stream_cut_mid_response_is_an_error_not_a_partial_answer(llm):
    # litellm ends a stream whose connection closed early with a made-up "stop": it must not pass for a full reply
    llm.script(*[Reply(text="this reply will be cut off " * 5, cut_after=4)] * 3)
    with pytest.raises(ProviderError) as info:
        stream(llm, LITELLM)
    assert "cut off mid-stream" in info.value.message
    assert len(llm.requests) == 1  # output had streamed: never retried


def test_litellm_stalled_stream_times_out_and_says_so(llm):
    llm.script(*[Reply(text="stall", stall_after=1)] * 3)
    with pytest.raises(ProviderError) as info:
        stream(llm, LITELLM, timeout=0.5, max_retries=0)
    assert "no data from the model" in info.value.message
    assert "500" not in info.value.message  # the server never answered with an error status
    assert len(llm.requests) == 1


@pytest.mark.parametrize("model", MODELS)
def test_a_stream_cut_inside_a_line_is_the_cut_stream_error_not_a_json_error(llm, model):
    llm.script(*[Reply(text="this reply will be cut off " * 5, cut_after=3, cut_inside=True)] * 3)
    with pytest.raises(ProviderError) as info:
        stream(llm, model)
    assert "cut off mid-stream" in info.value.message
    assert "JSON" not in info.value.message and "Expecting" not in info.value.message
    assert len(llm.requests) == 1


def test_a_stream_cut_inside_its_first_line_is_retried_like_any_cut_connection(llm):
    llm.script(Reply(text="never seen", cut_after=0, cut_inside=True), Reply(text="whole"))
    events = stream(llm, "openai/gpt-test")
    assert text_of(events) == "whole"
    assert len(llm.requests) == 2


def test_a_line_that_is_not_json_in_the_middle_of_a_stream_is_named():
    from nanoagent.providers.openai_compat import _parse_stream

    async def lines():
        for line in ['data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}', "", "data: {oops", "",
                     'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}', "data: [DONE]"]:
            yield line

    async def go():
        return [e async for e in _parse_stream(lines())]

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert info.value.message == "the server sent a stream line that is not JSON: '{oops'"


def test_a_cut_openai_compatible_stream_is_one_line_from_the_cli(llm, isolated_home):
    from tests.conftest import invoke, openai_env

    llm.script(Reply(text="this reply will be cut off " * 5, cut_after=3, cut_inside=True))
    ran = invoke("agent", "-m", "hi", env=openai_env(llm))
    assert ran.returncode == 1
    assert ran.error_lines[-1] == ("Error: openai/gpt-test: the stream ended before the reply was complete "
                                   "(the reply was cut off mid-stream).")  # no /retry hint in a one-shot
    assert "Traceback" not in ran.stderr and "JSONDecodeError" not in ran.stderr
