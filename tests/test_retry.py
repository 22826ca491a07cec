import asyncio

import pytest

from nanoagent.providers.base import ChatRequest, ProviderError, RetryNotice, TextDelta, UsageReport
from nanoagent.providers.retry import RetryingProvider, RetryPolicy
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply


class Sleeps:
    def __init__(self):
        self.waits = []

    async def __call__(self, seconds):
        self.waits.append(seconds)


def collect(provider, request=None):
    async def go():
        return [e async for e in provider.stream(request or ChatRequest(model="m", system="", messages=[]))]

    return asyncio.run(go())


def err(status, retry_after=None, retryable=True, message="busy"):
    return ScriptedReply(error=ProviderError(f"{status} {message}", status=status, retryable=retryable,
                                             retry_after=retry_after))


def test_retries_honour_retry_after_then_succeed():
    sleeps = Sleeps()
    primary = ScriptedProvider([err(429, retry_after=3), "hello"])
    events = collect(RetryingProvider([("m", primary)], RetryPolicy(), sleep=sleeps))
    assert sleeps.waits == [3]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hello"
    assert any(isinstance(e, RetryNotice) for e in events)


def test_backoff_grows_exponentially_with_jitter():
    sleeps = Sleeps()
    primary = ScriptedProvider([err(500), err(502), err(503), "ok"])
    collect(RetryingProvider([("m", primary)], RetryPolicy(base_delay=1.0), sleep=sleeps))
    assert len(sleeps.waits) == 3
    for attempt, wait in enumerate(sleeps.waits):
        assert 0.5 * 2**attempt <= wait <= 2**attempt


def test_gives_up_after_max_retries_naming_the_model():
    sleeps = Sleeps()
    primary = ScriptedProvider([err(529)] * 10)
    with pytest.raises(ProviderError) as info:
        collect(RetryingProvider([("claude-x", primary)], RetryPolicy(max_retries=2), sleep=sleeps))
    assert len(primary.requests) == 3
    assert "claude-x" in info.value.message and "after 3 attempts" in info.value.message


def test_final_errors_are_not_retried_but_fall_back():
    sleeps = Sleeps()
    primary = ScriptedProvider([err(401, retryable=False, message="invalid x-api-key")])
    fallback = ScriptedProvider(["from fallback"])
    events = collect(RetryingProvider([("a", primary), ("b", fallback)], RetryPolicy(), sleep=sleeps))
    assert sleeps.waits == [] and len(primary.requests) == 1
    usage = [e for e in events if isinstance(e, UsageReport)]
    assert usage[0].model == "b"


def test_a_long_retry_after_moves_on_to_the_fallback_without_waiting():
    sleeps = Sleeps()
    primary = ScriptedProvider([err(429, retry_after=3600)])
    fallback = ScriptedProvider(["ok"])
    events = collect(RetryingProvider([("a", primary), ("b", fallback)], RetryPolicy(max_retry_wait=60),
                                      sleep=sleeps))
    assert sleeps.waits == []
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "ok"


def test_a_long_retry_after_without_fallback_fails_naming_the_wait():
    primary = ScriptedProvider([err(429, retry_after=3600)])
    with pytest.raises(ProviderError) as info:
        collect(RetryingProvider([("a", primary)], RetryPolicy(max_retry_wait=60), sleep=Sleeps()))
    assert "3600 s" in info.value.message


class FailsAfterText:
    name = "partial"

    def __init__(self):
        self.calls = 0

    async def stream(self, request):
        self.calls += 1
        yield TextDelta("half a rep")
        raise ProviderError("connection reset", retryable=True)


def test_no_retry_once_output_has_streamed():
    provider = FailsAfterText()
    with pytest.raises(ProviderError) as info:
        collect(RetryingProvider([("m", provider)], RetryPolicy(), sleep=Sleeps()))
    assert provider.calls == 1
    assert "cut off mid-stream" in info.value.message
