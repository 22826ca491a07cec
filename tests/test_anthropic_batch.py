"""The batch provider: the real anthropic SDK sending Message Batches to the local LLM server."""

import asyncio
import json

import pytest

from nanoagent.config.schema import Config, ProviderConfig
from nanoagent.errors import ConfigError
from nanoagent.providers import base as pb
from nanoagent.providers.anthropic import build_params
from nanoagent.providers.anthropic_batch import CUSTOM_ID, AnthropicBatchProvider, build_batch_provider
from nanoagent.providers.base import ChatRequest, ProviderError, ToolSpec
from tests.llm_server import Reply

MODEL = "anthropic/claude-test"
TOOLS = [ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}},
                                                "required": ["path"]})]
FAST = {"poll_interval": 0.01, "max_poll_interval": 0.02}
BATCHES = "/v1/messages/batches"


def config_for(server, max_retries: int = 2) -> Config:
    config = Config()
    config.agents.defaults.model = MODEL
    config.agents.defaults.retry_base_delay = 0.01
    config.agents.defaults.max_retries = max_retries
    config.agents.defaults.stream_idle_timeout = 5
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=server.url)
    return config


def request_for(tools=(), thinking_budget: int = 0, messages=None) -> ChatRequest:
    return ChatRequest(model=MODEL, system="You are a test.", tools=list(tools), max_tokens=100,
                       messages=messages or [{"role": "user", "content": "hi"}], thinking_budget=thinking_budget)


def collect(provider, request: ChatRequest) -> list:
    async def go():
        return [e async for e in provider.stream(request)]

    return asyncio.run(go())


def run_batch(server, request: ChatRequest | None = None, max_retries: int = 2, **options) -> list:
    provider = build_batch_provider(config_for(server, max_retries), MODEL, **{**FAST, **options})
    return collect(provider, request or request_for())


def direct(server, **options) -> AnthropicBatchProvider:
    return AnthropicBatchProvider("sk-ant-test", server.url, 5, **{**FAST, **options})


def creations(server) -> list:
    return [r for r in server.requests if r.path == BATCHES]


def test_a_text_reply_comes_back_through_a_batch_as_the_streaming_events(llm):
    llm.script(Reply(text="Hello from the batch", output_tokens=5))
    events = run_batch(llm)
    assert [type(e) for e in events] == [pb.TextDelta, pb.UsageReport, pb.StreamEnd]
    assert events[0].text == "Hello from the batch"
    assert events[1].usage.output_tokens == 5 and events[1].usage.input_tokens > 0
    assert events[1].model == MODEL
    assert events[2].stop_reason == "end_turn"


def test_a_tool_call_comes_back_through_a_batch_with_its_json_arguments(llm):
    llm.script(Reply(text="Let me look.", tool_calls=[("read_file", {"path": "notes.md"})]))
    events = run_batch(llm, request_for(tools=TOOLS))
    (call,) = [e.call for e in events if isinstance(e, pb.ToolCallReady)]
    assert call.name == "read_file" and call.id.startswith("toolu_")
    assert json.loads(call.arguments) == {"path": "notes.md"}
    assert [e.text for e in events if isinstance(e, pb.TextDelta)] == ["Let me look."]
    assert events[-1] == pb.StreamEnd("tool_use")


def test_a_thinking_block_comes_back_whole_with_its_signature(llm):
    llm.script(Reply(thinking="Consider the notes.", text="Done."))
    events = run_batch(llm, request_for(thinking_budget=2000))
    (block,) = [e.block for e in events if isinstance(e, pb.ThinkingBlock)]
    assert block["type"] == "thinking" and block["thinking"] == "Consider the notes."
    assert block["signature"].startswith("sig-")
    assert [e.text for e in events if isinstance(e, pb.ThinkingDelta)] == ["Consider the notes."]


def test_the_provider_polls_until_the_batch_has_ended(llm):
    llm.script(Reply(text="late", batch_polls=3))
    events = run_batch(llm)
    assert events[0] == pb.TextDelta("late")
    batch = f"{BATCHES}/msgbatch_test0"
    # three polls see "in_progress", the fourth "ended"; the SDK's results() retrieves once more itself
    assert [r.path for r in llm.requests] == [BATCHES, *[batch] * 4, batch, f"{batch}/results"]


def test_the_batch_request_body_is_what_build_params_produces_with_prompt_caching(llm):
    messages = [{"role": "user", "content": "read it"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "toolu_1", "name": "read_file", "arguments": '{"path": "a.md"}'}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "alpha"}]
    request = request_for(tools=TOOLS, messages=messages)
    run_batch(llm, request)
    (create,) = creations(llm)
    assert create.body == {"requests": [{"custom_id": CUSTOM_ID, "params": build_params(request)}]}
    params = create.body["requests"][0]["params"]
    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert params["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert params["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_an_invalid_request_result_is_a_provider_error_that_is_not_retried(llm):
    llm.script(Reply(batch_result="errored", status=400, error_message="max_tokens is too large"))
    with pytest.raises(ProviderError) as caught:
        run_batch(llm)
    assert "max_tokens is too large" in caught.value.message
    assert "invalid_request_error" in caught.value.message
    assert len(creations(llm)) == 1


def test_an_overloaded_result_is_retried_by_the_retry_layer_as_a_new_batch(llm):
    llm.script(Reply(batch_result="errored", status=529), Reply(text="second batch"))
    events = run_batch(llm)
    (notice,) = [e for e in events if isinstance(e, pb.RetryNotice)]
    assert "overloaded_error" in notice.reason
    assert [e.text for e in events if isinstance(e, pb.TextDelta)] == ["second batch"]
    assert len(creations(llm)) == 2


def test_an_errored_result_is_classified_like_the_same_http_error(llm):
    llm.script(Reply(batch_result="errored", status=429, error_message="Number of requests exceeded"),
               Reply(batch_result="errored", status=401))
    with pytest.raises(ProviderError) as rate_limited:
        collect(direct(llm), request_for())
    with pytest.raises(ProviderError) as unauthorized:
        collect(direct(llm), request_for())
    assert (rate_limited.value.status, rate_limited.value.retryable) == (429, True)
    assert (unauthorized.value.status, unauthorized.value.retryable) == (401, False)


def test_an_expired_batch_is_a_retryable_error_that_says_it_expired(llm):
    llm.script(Reply(batch_result="expired"))
    with pytest.raises(ProviderError) as caught:
        collect(direct(llm), request_for())
    assert caught.value.retryable
    assert caught.value.message == "batch msgbatch_test0 expired before Anthropic processed its request " \
                                   "(a batch has 24 hours)"


def test_an_expired_batch_that_keeps_expiring_names_the_model_and_the_attempts(llm):
    llm.script(Reply(batch_result="expired"), Reply(batch_result="expired"))
    with pytest.raises(ProviderError) as caught:
        run_batch(llm, max_retries=1)
    assert caught.value.message == ("anthropic/claude-test: batch msgbatch_test1 expired before Anthropic "
                                    "processed its request (a batch has 24 hours) (after 2 attempts)")


def test_a_batch_canceled_elsewhere_is_a_retryable_error_that_says_so(llm):
    llm.script(Reply(batch_result="canceled"))
    with pytest.raises(ProviderError) as caught:
        collect(direct(llm), request_for())
    assert caught.value.retryable and "was canceled" in caught.value.message


def test_a_batch_that_does_not_finish_in_time_is_canceled_with_a_clear_error(llm):
    llm.script(Reply(text="too late", batch_polls=10_000))
    with pytest.raises(ProviderError) as caught:
        run_batch(llm, timeout=0.2)
    assert caught.value.message.startswith("anthropic/claude-test: batch msgbatch_test0 did not finish within 0.2 s")
    assert "run without --batch" in caught.value.message
    assert [r.path for r in llm.requests if r.path.endswith("/cancel")] == [f"{BATCHES}/msgbatch_test0/cancel"]
    assert len(creations(llm)) == 1  # the timeout is the budget for the whole call: no second batch


def test_cancelling_the_task_cancels_the_batch_and_propagates(llm):
    llm.script(Reply(text="never read", batch_polls=10_000))

    async def go():
        task = asyncio.create_task(collect_async(direct(llm), request_for()))
        while not creations(llm):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert [r.path for r in llm.requests if r.path.endswith("/cancel")] == [f"{BATCHES}/msgbatch_test0/cancel"]


async def collect_async(provider, request: ChatRequest) -> list:
    return [e async for e in provider.stream(request)]


def test_a_failed_batch_creation_is_retried_like_any_http_error(llm):
    llm.script(Reply(status=429, headers={"retry-after": "0"}), Reply(text="created on the second try"))
    events = run_batch(llm)
    assert [e.text for e in events if isinstance(e, pb.TextDelta)] == ["created on the second try"]
    assert len(creations(llm)) == 2


@pytest.mark.parametrize("model", ["openai/gpt-test", "gpt-4.1", "litellm/anthropic/claude-test", "groq/llama"])
def test_build_batch_provider_returns_none_for_models_the_native_anthropic_provider_does_not_serve(llm, model):
    assert build_batch_provider(config_for(llm), model) is None


@pytest.mark.parametrize("model", ["anthropic/claude-test", "claude-sonnet-4-5"])
def test_build_batch_provider_wraps_anthropic_models_in_the_retry_layer(llm, model):
    provider = build_batch_provider(config_for(llm), model)
    assert provider is not None and provider.name == "retry"
    assert [(m, p.name) for m, p in provider.chain] == [(model, "anthropic-batch")]


def test_build_batch_provider_uses_the_configured_model_by_default(llm):
    config = config_for(llm)
    config.agents.defaults.model = "openai/gpt-test"
    assert build_batch_provider(config) is None


def test_build_batch_provider_without_a_key_says_how_to_set_one():
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        build_batch_provider(Config(), MODEL)
