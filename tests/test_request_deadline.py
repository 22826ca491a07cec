"""One deadline for a model call: every attempt, wait and fallback until the reply begins (requestDeadline)."""

from __future__ import annotations

import asyncio
import time

import pytest

from nanoagent.config.schema import Config, ProviderConfig
from nanoagent.providers import base as pb
from nanoagent.providers.anthropic_batch import build_batch_provider
from nanoagent.providers.base import ChatRequest, ProviderError
from nanoagent.providers.registry import build_provider
from nanoagent.providers.retry import RetryingProvider, RetryPolicy
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from tests.llm_server import Reply


def config_for(server, model: str, deadline: float, idle: float, retries: int = 4) -> Config:
    config = Config()
    d = config.agents.defaults
    d.model, d.request_deadline, d.stream_idle_timeout, d.max_retries, d.retry_base_delay = (
        model, deadline, idle, retries, 0.01)
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=server.url)
    config.providers["openai"] = ProviderConfig(api_key="sk-test", api_base=server.url + "/v1")
    return config


def call(provider, model: str) -> list:
    request = ChatRequest(model=model, system="You are a test.", messages=[{"role": "user", "content": "hi"}],
                          max_tokens=100)

    async def go():
        return [e async for e in provider.stream(request)]

    return asyncio.run(go())


@pytest.mark.parametrize(("model", "silence"), [
    ("anthropic/claude-test", Reply(text="never", stall_after=0)),  # headers, then nothing
    ("openai/gpt-test", Reply(text="never", delay=20)),  # not even headers
])
def test_a_server_that_never_answers_is_given_up_after_the_deadline_not_retries_times_the_idle_timeout(
        llm, model, silence):
    llm.script(*[silence] * 5)
    provider = build_provider(config_for(llm, model, deadline=1.5, idle=1.0))
    provider.prepare()  # the client's import is not part of the call
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        call(provider, model)
    elapsed = time.monotonic() - started
    assert 1.4 < elapsed < 3.5  # five attempts of a 1 s idle timeout would take over 5 s
    message = info.value.message
    assert "\n" not in message
    assert message.startswith(f"{model}: no reply within 1.5 s (agents.defaults.requestDeadline; raise it for "
                              "slow servers) after ")
    assert len(llm.requests) == 1 or message.endswith("after 2 attempts (earlier: no data from the model for 1 s)")


@pytest.mark.parametrize("model", ["anthropic/claude-test", "openai/gpt-test"])
def test_a_reply_that_keeps_streaming_past_the_deadline_is_not_cut(llm, model):
    llm.script(Reply(text="a reply that takes its time to arrive", chunk_delay=0.4))
    provider = build_provider(config_for(llm, model, deadline=1.6, idle=2.0, retries=0))
    provider.prepare()  # making the client (its TLS context: 0.4 s on a busy machine) is not part of the call
    events = call(provider, model)  # eight (six) chunks 0.4 s apart: longer than the deadline
    assert "".join(e.text for e in events if isinstance(e, pb.TextDelta)) == "a reply that takes its time to arrive"
    assert sum(isinstance(e, pb.ReplyStarted) for e in events) == 1


def test_a_retry_that_would_start_after_the_deadline_is_not_waited_for():
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    busy = ScriptedReply(error=ProviderError("429 rate limited", status=429, retryable=True, retry_after=30))
    provider = RetryingProvider([("m", ScriptedProvider([busy, "late"]))], RetryPolicy(deadline=5), sleep=sleep)
    with pytest.raises(ProviderError) as info:
        call(provider, "m")
    assert waits == []
    assert info.value.message == ("m: no reply within 5 s (agents.defaults.requestDeadline; raise it for slow "
                                  "servers) after 1 attempt (earlier: 429 rate limited)")


def test_the_deadline_spans_the_fallback_models_too(llm):
    llm.script(Reply(status=401, error_message="invalid x-api-key"), *[Reply(text="never", delay=20)] * 3)
    config = config_for(llm, "anthropic/claude-test", deadline=1.0, idle=5.0)
    config.agents.defaults.fallback_models = ["openai/gpt-test"]
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        call(build_provider(config), "anthropic/claude-test")
    assert time.monotonic() - started < 3.0  # not the fallback's 5 s idle timeout
    assert info.value.message.startswith(f"anthropic/claude-test: 401 from {llm.url}: invalid x-api-key")
    assert "; openai/gpt-test: no reply within 1 s" in info.value.message


def test_message_batches_wait_for_their_own_timeout_not_the_request_deadline():
    config = Config()
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test")
    provider = build_batch_provider(config, "anthropic/claude-test")
    assert isinstance(provider, RetryingProvider) and provider.policy.deadline is None
    assert build_provider(config, "anthropic/claude-test").policy.deadline == 180
