"""The gateway's OpenAI-compatible endpoint: a real Gateway on a free port, the real openai SDK (and httpx or a raw
socket where the SDK would hide what is on the wire) as clients, the ScriptedProvider behind the agent."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from nanoagent.agent.build import build_agent
from nanoagent.config.loader import load_config
from nanoagent.config.schema import Config, HttpConfig
from nanoagent.errors import ConfigError, NanoagentError
from nanoagent.gateway.http import http_component, is_loopback
from nanoagent.gateway.hub import Hub
from nanoagent.gateway.server import Gateway
from nanoagent.paths import Paths
from nanoagent.providers.base import ProviderError
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.usage import Usage
from nanoagent.web.auth import WebAuth
from nanoagent.web.context import WebContext
from tests.conftest import (
    PATIENCE,
    anthropic_env,
    invoke,
    run_cli,
    start_gateway_process,
    wait_until,
    write_config,
)


@dataclass
class Live:
    port: int
    token: str
    paths: Paths
    hub: Hub

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def sdk(self, api_key: str | None = None, max_retries: int = 0, **options: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=api_key or self.token, max_retries=max_retries,
                                  timeout=PATIENCE, **options)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=PATIENCE)

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def session_text(self, key: str) -> str:
        path = self.paths.session_file(key)
        return path.read_text() if path.exists() else ""


@asynccontextmanager
async def gateway(provider: ScriptedProvider, config: Config | None = None) -> AsyncIterator[Live]:
    """A real Gateway with the endpoint on a free loopback port, stopped (and drained) on exit."""
    paths = Paths.from_env()
    hub = Hub(build_agent(config or Config(), paths, provider=provider))
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def listening(host: str, port: int) -> None:
        if not bound.done():
            bound.set_result(port)

    def web_context() -> WebContext:  # the app and the channels' routes read this config, as in `nanoagent gateway`
        return WebContext(hub, paths, config or Config(), WebAuth())

    component = http_component(hub, paths, HttpConfig(enabled=True, port=0), listening=listening,
                               web_context=web_context)
    server = Gateway(hub, paths, components=[component], grace=5)
    serving = asyncio.create_task(server.serve())
    await asyncio.wait({bound, serving}, timeout=PATIENCE, return_when=asyncio.FIRST_COMPLETED)
    if serving.done():
        serving.result()
    token = (paths.run_dir / "http-token").read_text().strip()
    try:
        yield Live(bound.result(), token, paths, hub)
    finally:
        server.stop()
        await asyncio.wait_for(serving, PATIENCE)


def scenario(provider: ScriptedProvider, body: Callable[[Live], Awaitable[Any]], config: Config | None = None) -> Any:
    async def go() -> Any:
        async with gateway(provider, config) as live:
            return await body(live)

    return asyncio.run(go())


async def until(condition: Callable[[], bool], timeout: float = PATIENCE) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


class Gated(ScriptedProvider):
    """Replies only once `gate` is set; `started` is set when a model call begins."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.gate = asyncio.Event()
        self.started = asyncio.Event()

    async def stream(self, request):  # type: ignore[override]
        self.started.set()
        await self.gate.wait()
        async for event in super().stream(request):
            yield event


async def raw(port: int, data: bytes) -> bytes:
    """Send bytes on a fresh connection; everything the gateway answers until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), PATIENCE)
    finally:
        writer.close()


# --- completions ------------------------------------------------------------------------------------------


def test_a_streamed_completion_comes_as_chunks_of_the_reply_with_usage_in_the_last():
    provider = ScriptedProvider([ScriptedReply("Hello there from the agent.", usage=Usage(20, 6))])

    async def body(live: Live) -> list[Any]:
        stream = await live.sdk().chat.completions.create(
            model="nanoagent", messages=[{"role": "user", "content": "hi"}], stream=True)
        return [chunk async for chunk in stream]

    chunks = scenario(provider, body)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello there from the agent."
    assert len(chunks) > 3  # word by word, as the model streamed it
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens, chunks[-1].usage.total_tokens) == (
        20, 6, 26)
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1


def test_the_stream_on_the_wire_is_server_sent_events_ending_with_done():
    async def body(live: Live) -> tuple[str, str]:
        async with live.http() as client:
            response = await client.post("/v1/chat/completions", headers=live.auth(), json={
                "model": "nanoagent", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
            return response.headers["content-type"], response.text

    kind, text = scenario(ScriptedProvider(["fine"]), body)
    assert kind.startswith("text/event-stream")
    events = [block for block in text.split("\n\n") if block]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    assert json.loads(events[0].removeprefix("data: "))["object"] == "chat.completion.chunk"


def test_a_completion_without_streaming_is_one_reply_with_the_turns_usage():
    provider = ScriptedProvider([ScriptedReply("All done.", usage=Usage(11, 7, cache_read_tokens=3))])

    async def body(live: Live) -> Any:
        return await live.sdk().chat.completions.create(model="nanoagent",
                                                        messages=[{"role": "user", "content": "do it"}])

    reply = scenario(provider, body)
    assert reply.object == "chat.completion"
    assert (reply.choices[0].message.role, reply.choices[0].message.content) == ("assistant", "All done.")
    assert reply.choices[0].finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (14, 7, 21)
    assert reply.usage.prompt_tokens_details.cached_tokens == 3


def test_a_slash_command_answers_as_the_reply_in_a_stream_too():
    async def body(live: Live) -> str:
        stream = await live.sdk().chat.completions.create(
            model="nanoagent", messages=[{"role": "user", "content": "/status"}], stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream])

    assert scenario(ScriptedProvider(), body).startswith("model:")


def test_models_lists_nanoagent_and_the_configured_model():
    config = Config()
    config.agents.defaults.model = "anthropic/claude-test"

    async def body(live: Live) -> tuple[list[str], str]:
        client = live.sdk()
        return [m.id async for m in client.models.list()], (await client.models.retrieve("nanoagent")).id

    ids, one = scenario(ScriptedProvider(), body, config)
    assert (ids, one) == (["nanoagent", "anthropic/claude-test"], "nanoagent")


# --- sessions ---------------------------------------------------------------------------------------------


def test_each_user_has_its_own_session_and_only_the_last_user_message_is_sent():
    provider = ScriptedProvider(respond=lambda request: "noted")

    async def body(live: Live) -> Live:
        client = live.sdk()
        for user, said in (("alice", "my boat is Gull"), ("bob", "my cat is Tom"), ("alice", "and my car is Zed")):
            history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "EARLIER TEXT"},
                       {"role": "assistant", "content": "ok"}, {"role": "user", "content": said}]
            await client.chat.completions.create(model="nanoagent", messages=history, user=user)
        return live

    config = Config()
    config.memory.auto_recall.enabled = False  # the owner's programs share memory; this is about their sessions
    live = scenario(provider, body, config)
    alice, bob = live.session_text("http:alice"), live.session_text("http:bob")
    assert "my boat is Gull" in alice and "my car is Zed" in alice and "my cat is Tom" not in alice
    assert "my cat is Tom" in bob and "Gull" not in bob
    assert "EARLIER TEXT" not in alice + bob
    last = json.dumps(provider.requests[-1].messages)
    assert "my boat is Gull" in last and "my cat is Tom" not in last  # alice's own history, kept by the agent


def test_the_session_header_names_the_session_and_no_name_means_http_default():
    async def body(live: Live) -> Live:
        client = live.sdk()
        await client.chat.completions.create(model="nanoagent", messages=[{"role": "user", "content": "for work"}],
                                             user="alice", extra_headers={"X-Nanoagent-Session": "work"})
        await client.chat.completions.create(model="nanoagent", messages=[{"role": "user", "content": "plain"}])
        return live

    live = scenario(ScriptedProvider(default="ok"), body)
    assert "for work" in live.session_text("http:work") and not live.session_text("http:alice")
    assert "plain" in live.session_text("http:default")


def test_a_message_for_a_session_whose_turn_is_running_joins_it_and_gets_a_note():
    provider = Gated(default="answered both")

    async def body(live: Live) -> tuple[str, str]:
        client = live.sdk()
        first = asyncio.create_task(client.chat.completions.create(
            model="nanoagent", messages=[{"role": "user", "content": "start"}], user="u"))
        await asyncio.wait_for(provider.started.wait(), PATIENCE)
        second = await client.chat.completions.create(
            model="nanoagent", messages=[{"role": "user", "content": "and also this"}], user="u")
        provider.gate.set()
        return (await first).choices[0].message.content, second.choices[0].message.content

    first, second = scenario(provider, body)
    assert first == "answered both\n\nanswered both"  # the answer before the joined message and the one after
    assert second.startswith("Your message joined the turn already running in session http:u")


def test_a_client_that_goes_away_cancels_the_turn_it_started():
    provider = Gated(default="too late")

    async def body(live: Live) -> Live:
        async with live.http() as client:
            async with client.stream("POST", "/v1/chat/completions", headers=live.auth(), json={
                    "stream": True, "user": "leaver", "messages": [{"role": "user", "content": "long job"}]}):
                await asyncio.wait_for(provider.started.wait(), PATIENCE)
        await until(lambda: not live.hub.busy("http:leaver"))
        return live

    live = scenario(provider, body)
    assert "cancelled this turn" in live.session_text("http:leaver") and "too late" not in live.session_text(
        "http:leaver")


# --- failures and refusals --------------------------------------------------------------------------------


def test_a_failed_turn_is_an_openai_error_with_status_502_that_the_sdk_does_not_retry():
    provider = ScriptedProvider([ScriptedReply(error=ProviderError("the model refused the request", status=400)),
                                 ScriptedReply(error=ProviderError("the model refused again", status=400))])

    async def body(live: Live) -> tuple[Any, Any]:
        client = live.sdk(max_retries=2)  # the SDK retries 5xx unless told not to
        with pytest.raises(openai.APIStatusError) as whole:
            await client.chat.completions.create(model="nanoagent", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.APIError) as streamed:
            stream = await client.chat.completions.create(model="nanoagent", stream=True,
                                                          messages=[{"role": "user", "content": "y"}])
            async for _ in stream:
                pass
        return whole.value, streamed.value

    whole, streamed = scenario(provider, body)
    assert whole.status_code == 502 and "the model refused the request" in whole.message
    assert whole.body["code"] == "turn_failed" and "/retry" not in whole.message  # the terminal's hint, not a program's
    assert "the model refused again" in streamed.message
    assert len(provider.requests) == 2  # one model call per request: nothing was sent twice


def test_a_command_needing_approval_is_refused_over_http_and_tool_activity_is_only_a_comment():
    config = Config()
    config.tools.exec.sandbox, config.tools.exec.approve = "none", "always"
    provider = ScriptedProvider([ScriptedReply("Let me look.", tool_calls=[("exec", {"command": "echo SECRET-OUT"})]),
                                 "It was not allowed."])

    async def body(live: Live) -> tuple[str, Live]:
        async with live.http() as client:
            response = await client.post("/v1/chat/completions", headers=live.auth(), json={
                "stream": True, "messages": [{"role": "user", "content": "run it"}]})
            return response.text, live

    text, live = scenario(provider, body, config)
    assert ": tool exec" in text.split("\n")
    content = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                      for line in text.split("\n") if line.startswith("data: {"))
    assert content == "Let me look.\n\nIt was not allowed."
    assert "needs a person's approval" in live.session_text("http:default")
    assert "SECRET-OUT\\n" not in live.session_text("http:default")  # never run


def test_health_answers_without_a_token_and_says_nothing_more():
    async def body(live: Live) -> httpx.Response:
        async with live.http() as client:
            return await client.get("/health")

    response = scenario(ScriptedProvider(), body)
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_a_missing_or_wrong_token_is_refused_with_401():
    async def body(live: Live) -> tuple[httpx.Response, Any, httpx.Response]:
        async with live.http() as client:
            missing = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
            other_scheme = await client.get("/v1/models", headers={"Authorization": f"Basic {live.token}"})
        with pytest.raises(openai.AuthenticationError) as wrong:
            await live.sdk(api_key="not-the-token").models.list()
        return missing, wrong.value, other_scheme

    missing, wrong, other_scheme = scenario(ScriptedProvider(), body)
    assert missing.status_code == 401 and "Authorization: Bearer" in missing.json()["error"]["message"]
    assert missing.headers["www-authenticate"] == "Bearer"
    assert wrong.status_code == 401 and wrong.body["code"] == "invalid_token"
    assert other_scheme.status_code == 401


def test_a_token_in_the_query_string_is_refused_even_when_it_is_right():
    async def body(live: Live) -> list[httpx.Response]:
        async with live.http() as client:
            return [await client.get("/v1/models", params={"api_key": live.token}),
                    await client.get("/v1/models", params={"whatever": live.token}),
                    await client.get("/v1/models", params={"token": "x"}, headers=live.auth())]

    for response in scenario(ScriptedProvider(), body):
        assert response.status_code == 401
        assert "Authorization header" in response.json()["error"]["message"]


def test_the_token_file_is_private_made_once_and_kept_across_starts(isolated_home):
    async def token(live: Live) -> str:
        return live.token

    first = scenario(ScriptedProvider(), token)
    second = scenario(ScriptedProvider(), token)
    path = isolated_home / "run" / "http-token"
    assert first == second and len(first) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_token_file_others_could_read_is_made_private_again(isolated_home):
    path = isolated_home / "run" / "http-token"
    path.parent.mkdir(parents=True)
    path.write_text("a-token-the-user-chose-themselves\n")
    os.chmod(path, 0o644)

    async def body(live: Live) -> int:
        return (await live.sdk(api_key="a-token-the-user-chose-themselves").models.list()).data.__len__()

    assert scenario(ScriptedProvider(), body) >= 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_binding_beyond_loopback_without_a_token_is_refused_at_start_with_one_line(isolated_home):
    (isolated_home / "run" / "http-token").mkdir(parents=True)  # a token file that cannot be read or made
    hub = Hub(build_agent(Config(), Paths.from_env(), provider=ScriptedProvider()))
    with pytest.raises(NanoagentError) as beyond:
        http_component(hub, Paths.from_env(), HttpConfig(enabled=True, host="0.0.0.0"))
    with pytest.raises(NanoagentError) as loopback:
        http_component(hub, Paths.from_env(), HttpConfig(enabled=True, host="127.0.0.1"))
    assert "\n" not in str(beyond.value) and "not loopback" in str(beyond.value)
    assert "http-token" in str(beyond.value) and "gateway.http.host" in str(beyond.value)
    assert "\n" not in str(loopback.value) and "gateway.http.enabled" in str(loopback.value)


def test_the_gateway_command_stops_at_start_with_that_one_line(isolated_home, llm):
    write_config(isolated_home, {"gateway": {"http": {"enabled": True, "host": "0.0.0.0"}}})
    (isolated_home / "run" / "http-token").mkdir(parents=True)
    ran = invoke("gateway", env=anthropic_env(llm))
    assert ran.returncode == 1
    assert ran.stderr.strip().count("\n") == 0 and "not loopback" in ran.stderr, ran.stderr


def test_only_loopback_addresses_count_as_loopback():
    assert [is_loopback(h) for h in ("127.0.0.1", "127.8.9.10", "::1", "localhost", "LOCALHOST")] == [True] * 5
    assert [is_loopback(h) for h in ("0.0.0.0", "", "::", "192.168.1.5", "example.com", "localhost.evil")] == [False] * 6


def test_malformed_oversized_slow_and_chunked_requests_get_a_status_and_a_closed_connection(monkeypatch):
    from nanoagent.gateway import http

    monkeypatch.setattr(http, "AUTH_DEADLINE", 1.0)  # a slow client, quickly

    async def body(live: Live) -> list[bytes]:
        auth = f"Host: localhost\r\nAuthorization: Bearer {live.token}\r\n".encode()
        close = b"Connection: close\r\n"
        requests = [
            b"GARBAGE\r\n\r\n",
            b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\n" + auth + b"Content-Length: 20000000\r\n\r\n{",
            b"POST /v1/chat/completions HTTP/1.1\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET /health HTTP/2.0\r\nHost: localhost\r\n\r\n",
            b"GET /health HTTP/1.1\r\nHost: localhost\r\n",  # and then nothing more
            b"POST /v1/chat/completions HTTP/1.1\r\n" + auth + close + b"Content-Length: 3\r\n\r\n{x}",
            b"DELETE /v1/models HTTP/1.1\r\n" + auth + close + b"\r\n",
            b"GET /v1/nothing/here HTTP/1.1\r\n" + auth + close + b"\r\n",
        ]
        return [await raw(live.port, r) for r in requests]

    answers = scenario(ScriptedProvider(), body)
    assert [a.split(b" ", 2)[1] for a in answers] == [b"400", b"400", b"413", b"501", b"505", b"408", b"400",
                                                      b"405", b"404"]
    assert b"Got more than 8190 bytes" in answers[1]  # what cannot be parsed is aiohttp's plain-text 400
    assert all(b'"error":{"message":' in a for a in answers[2:])
    head, _, timed_out = answers[5].partition(b"\r\n\r\n")
    assert b"Content-Length: %d\r\n" % len(timed_out) in head + b"\r\n"


def test_the_http_settings_are_read_from_config_json_with_their_range(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"gateway": {"http": {"enabled": True, "host": "0.0.0.0", "port": 9000}}}))
    config, warnings = load_config(path, env={})
    assert (config.gateway.http.enabled, config.gateway.http.host, config.gateway.http.port) == (True, "0.0.0.0", 9000)
    assert warnings == [] and Config().gateway.http == HttpConfig(enabled=False, host="127.0.0.1", port=8765)
    path.write_text(json.dumps({"gateway": {"http": {"port": 70000}}}))
    with pytest.raises(ConfigError, match="gateway.http.port"):
        load_config(path, env={})


def test_an_http_1_0_client_gets_its_stream_ended_by_the_connection_closing():
    async def body(live: Live) -> bytes:
        payload = json.dumps({"stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
        return await raw(live.port, b"POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer "
                         + live.token.encode() + b"\r\nContent-Length: " + str(len(payload)).encode()
                         + b"\r\n\r\n" + payload)

    answer = scenario(ScriptedProvider(["plain stream"]), body)
    head, _, stream = answer.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head and b"Connection: close" in head
    assert stream.startswith(b"data: {") and stream.endswith(b"data: [DONE]\n\n")


def test_one_connection_carries_one_request_after_another():
    async def body(live: Live) -> list[bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        answers = []
        for _ in range(2):
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + live.token.encode() + b"\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PATIENCE)
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            answers.append(head.split(b"\r\n")[0] + b" " + await reader.readexactly(length))
        writer.close()
        return answers

    first, second = scenario(ScriptedProvider(), body)
    assert first.startswith(b"HTTP/1.1 200 OK") and first == second


# --- the doors: connections without the token, short tokens ---------------------------------------------------


async def silent(port: int, count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """`count` connections that send nothing."""
    return [await asyncio.open_connection("127.0.0.1", port) for _ in range(count)]


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = 20) -> bool:
    """Whether the gateway closes the connection (reading to its end) within `timeout`."""
    try:
        await asyncio.wait_for(reader.read(), timeout)
    except ConnectionError:
        pass
    return True


def test_hundreds_of_silent_connections_do_not_keep_out_a_client_with_the_token(monkeypatch):
    from nanoagent.gateway import http

    monkeypatch.setattr(http, "AUTH_DEADLINE", 120.0)  # no deadline frees a slot during this test

    async def body(live: Live) -> tuple[str, bool, bool]:
        quiet = await silent(live.port, http.MAX_UNAUTHENTICATED + 44)
        try:
            reply = await live.sdk().chat.completions.create(model="nanoagent",
                                                             messages=[{"role": "user", "content": "hi"}])
            oldest_dropped = await closed_by_peer(quiet[0][0])
            quiet[-1][1].write(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")  # the newest silent one is still served
            newest = await asyncio.wait_for(quiet[-1][0].readuntil(b"\r\n\r\n"), PATIENCE)
            return reply.choices[0].message.content or "", oldest_dropped, newest.startswith(b"HTTP/1.1 200")
        finally:
            for _, writer in quiet:
                writer.close()

    assert scenario(ScriptedProvider(["answered"]), body) == ("answered", True, True)


def test_a_connection_that_sends_no_authenticated_request_in_time_is_closed(monkeypatch):
    from nanoagent.gateway import http

    monkeypatch.setattr(http, "AUTH_DEADLINE", 0.5)

    async def body(live: Live) -> tuple[bool, bool, bytes]:
        (quiet_reader, quiet), (tokenless_reader, tokenless) = await silent(live.port, 2)
        tokenless.write(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")  # refused, and then it keeps the connection open
        first = await asyncio.wait_for(tokenless_reader.readuntil(b"\r\n\r\n"), PATIENCE)
        closed = await closed_by_peer(quiet_reader), await closed_by_peer(tokenless_reader)
        quiet.close()
        tokenless.close()
        return *closed, first

    quiet_closed, tokenless_closed, first = scenario(ScriptedProvider(), body)
    assert quiet_closed and tokenless_closed and first.startswith(b"HTTP/1.1 401")


def test_clients_with_the_token_hold_at_most_64_connections_and_the_next_is_told_503():
    from nanoagent.gateway import http

    async def body(live: Live) -> bytes:
        held = await silent(live.port, http.MAX_CONNECTIONS + 1)
        request = b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + live.token.encode() + b"\r\n\r\n"
        heads = []
        try:
            for reader, writer in held:
                writer.write(request)
                heads.append(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PATIENCE))
        finally:
            for _, writer in held:
                writer.close()
        assert all(head.startswith(b"HTTP/1.1 200") for head in heads[:-1])
        return heads[-1]

    last = scenario(ScriptedProvider(), body)
    assert last.startswith(b"HTTP/1.1 503") and b"Connection: close" in last


@pytest.mark.process
def test_a_short_token_is_refused_beyond_loopback_and_only_logged_on_loopback(isolated_home, llm):
    path = isolated_home / "run" / "http-token"
    path.parent.mkdir(parents=True)
    path.write_text("x\n")
    os.chmod(path, 0o600)
    hub = Hub(build_agent(Config(), Paths.from_env(), provider=ScriptedProvider()))
    with pytest.raises(NanoagentError, match="1-character token"):
        http_component(hub, Paths.from_env(), HttpConfig(enabled=True, host="0.0.0.0"))
    http_component(hub, Paths.from_env(), HttpConfig(enabled=True, host="127.0.0.1"))  # allowed, with a log line
    write_config(isolated_home, {"gateway": {"http": {"enabled": True, "host": "0.0.0.0"}}})
    ran = run_cli("gateway", env=anthropic_env(llm), timeout=PATIENCE)
    assert ran.returncode == 1
    assert ran.stderr.strip().count("\n") == 0 and "at least 32" in ran.stderr, ran.stderr


# --- what a request carries: images, tools, system messages; the same reply both ways ---------------------


def test_an_image_sent_as_a_data_url_reaches_the_model_and_other_image_forms_get_400():
    from tests.mcp_servers import PNG

    provider = ScriptedProvider(default="a red dot")
    data_url = "data:image/png;base64," + base64.b64encode(PNG).decode()

    def ask(image_url: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": image_url}}]}]}

    async def body(live: Live) -> tuple[Any, list[httpx.Response]]:
        reply = await live.sdk().chat.completions.create(model="nanoagent", **ask(data_url))
        async with live.http() as client:
            refused = [await client.post("/v1/chat/completions", headers=live.auth(), json=ask(url)) for url in (
                "https://example.com/cat.png", "data:image/png;base64,@@@",
                "data:image/png;base64," + base64.b64encode(b"not an image").decode())]
        return reply, refused

    reply, refused = scenario(provider, body)
    assert reply.choices[0].message.content == "a red dot"
    sent = provider.requests[-1].messages[-1]["content"]
    assert [block["type"] for block in sent if block["type"] != "text"] == ["image_data"], sent
    assert [(r.status_code, r.json()["error"]["code"]) for r in refused] == [(400, "invalid_image")] * 3
    assert "data: URL" in refused[0].json()["error"]["message"]
    assert len(provider.requests) == 1


def test_tools_in_a_request_get_400_and_system_messages_are_named_as_ignored_in_a_header():
    async def body(live: Live) -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with live.http() as client:
            tools = await client.post("/v1/chat/completions", headers=live.auth(), json={
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})
            system = [{"role": "system", "content": "talk like a pirate"}, {"role": "user", "content": "hi"}]
            whole = await client.post("/v1/chat/completions", headers=live.auth(), json={"messages": system})
            streamed = await client.post("/v1/chat/completions", headers=live.auth(),
                                         json={"messages": system, "stream": True})
        return tools, whole, streamed

    provider = ScriptedProvider(default="hello")
    tools, whole, streamed = scenario(provider, body)
    assert tools.status_code == 400 and tools.json()["error"]["code"] == "unsupported_tools"
    assert whole.status_code == streamed.status_code == 200
    assert whole.headers["x-nanoagent-ignored"] == streamed.headers["x-nanoagent-ignored"] == "system"
    assert "pirate" not in json.dumps(provider.requests[-1].messages)


def test_a_reply_with_text_before_a_tool_call_is_the_same_streamed_or_not():
    provider = ScriptedProvider([ScriptedReply("Let me look.", tool_calls=[("list_dir", {"path": "."})]),
                                 "Nothing there.",
                                 ScriptedReply("Let me look.", tool_calls=[("list_dir", {"path": "."})]),
                                 "Nothing there."])

    async def body(live: Live) -> tuple[str, str]:
        client = live.sdk()
        whole = await client.chat.completions.create(model="nanoagent", messages=[{"role": "user", "content": "a"}])
        stream = await client.chat.completions.create(model="nanoagent", messages=[{"role": "user", "content": "b"}],
                                                      stream=True)
        return whole.choices[0].message.content or "", "".join([c.choices[0].delta.content or "" async for c in stream])

    whole, streamed = scenario(provider, body)
    assert whole == streamed == "Let me look.\n\nNothing there."


@pytest.mark.process
def test_the_gateway_in_a_terminal_says_in_one_human_line_what_listens_where_and_status_gives_the_web_address(
        isolated_home, llm):
    write_config(isolated_home, {"gateway": {"http": {"enabled": True, "port": 47123}}})
    proc = start_gateway_process({**os.environ, **anthropic_env(llm)})
    wait_until(lambda: "web: http://127.0.0.1:47123/\n" in run_cli("gateway", "status").stdout,
               "the web app's address in `gateway status`")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=PATIENCE)
    log = (isolated_home.parent / "gateway.stderr").read_text()
    start = [line for line in log.splitlines() if line.startswith("nanoagent gateway: listening on ")]
    assert len(start) == 1, log
    assert f"{isolated_home}/run/gateway.sock and http://127.0.0.1:47123/ (the web app" in start[0]
    assert "channels: none" in start[0] and f"pid {proc.pid}" in start[0]
    assert not [line for line in log.splitlines() if "{" in line], log  # no JSON record on the terminal
    records = [json.loads(line) for line in (isolated_home / "logs" / "gateway.log").read_text().splitlines()]
    assert [r["event"] for r in records if r["event"].startswith("gateway_")] == ["gateway_started",
                                                                                  "gateway_stopped"]
    assert records[0]["pid"] == proc.pid and records[0]["level"] == "info" and records[0]["time"].endswith("Z")
