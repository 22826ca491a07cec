"""The Feishu / Lark channel's own behaviour, beyond the shared cases (test_channel_cases.py): the long connection's
answers only once a message is stored, group mentions, the two hosts, the credentials check, an expired token, what
a card may not carry, and the frame codec against the SDK's own protobuf. The channel's aiohttp client talks to the
stand-in (tests/feishu_server.py) over real sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from nanoagent.channels import registry
from nanoagent.channels.feishu.frames import Frame
from nanoagent.channels.feishu.settings import FeishuConfig
from nanoagent.config.schema import ConfigError
from nanoagent.errors import NanoagentError
from nanoagent.messages import is_user, strip_runtime_context, text_of
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from tests.channel_harness import TIMING, running, settings_of, settled
from tests.conftest import invoke, until, write_config
from tests.feishu_server import APP_ID, APP_SECRET, GROUP, OWNER, StandIn

CHANNEL = registry.get("feishu")


@pytest.fixture
def fs() -> Iterator[StandIn]:
    made = StandIn()
    yield made
    made.close()


def test_a_message_is_answered_on_the_long_connection_only_once_the_engine_has_it(fs: StandIn) -> None:
    async def scenario() -> tuple[list[str], list[str], list[str]]:
        link = CHANNEL.link(settings_of(fs), Paths.from_env(), TIMING)
        await link.connect()
        try:
            fs.write(OWNER, "hello")
            batch = await anext(aiter(link.receive()))
            held = fs.unanswered()  # the engine has not stored it yet
            await link.acknowledge(batch)
            await until(lambda: not fs.unanswered(), "the event to be answered")
        finally:
            await link.close()
        return [item.text for item in batch], [item.id for item in batch], held

    texts, ids, held = asyncio.run(scenario())
    assert texts == ["hello"]
    assert held == ids


def test_a_message_left_unanswered_when_the_gateway_stopped_comes_again_and_is_answered_once(fs: StandIn) -> None:
    provider = ScriptedProvider(["Got it."])

    async def scenario() -> None:
        link = CHANNEL.link(settings_of(fs), Paths.from_env(), TIMING)
        await link.connect()
        fs.write(OWNER, "are you there?")
        await anext(aiter(link.receive()))
        await link.close()  # stopped before the engine stored it: never answered
        async with running(fs, provider) as runner:
            await until(lambda: fs.shown(OWNER) == ["Got it."] and settled(runner), "the answer")
            await until(lambda: not fs.unanswered(), "the event to be answered")

    asyncio.run(scenario())
    assert fs.connections == 2
    assert len(provider.requests) == 1


def test_an_event_the_platform_splits_into_several_frames_is_read_whole(fs: StandIn) -> None:
    provider = ScriptedProvider(["Read it all."])
    fs.parts = 3
    question = "a question long enough to be cut in three: " + "漢字 " * 50

    async def scenario() -> None:
        async with running(fs, provider) as runner:
            fs.write(OWNER, question)
            await until(lambda: fs.shown(OWNER) == ["Read it all."] and settled(runner), "the answer")

    asyncio.run(scenario())
    [request] = provider.requests
    assert strip_runtime_context(text_of([m for m in request.messages if is_user(m)][-1])) == question.strip()


def test_in_a_group_only_a_message_mentioning_the_bot_is_answered_and_the_mention_is_left_out(fs: StandIn) -> None:
    provider = ScriptedProvider(["Yes."])

    async def scenario() -> None:
        async with running(fs, provider) as runner:
            fs.write(OWNER, "talking among ourselves", private=False, mention=False)
            fs.write(OWNER, "are you listening?", private=False)
            await until(lambda: [m.kind for m in fs.bot_messages(GROUP)] == ["interactive"], "the answer")
            await until(lambda: settled(runner) and not runner.hub.running() and not fs.unanswered(), "the turn")

    asyncio.run(scenario())
    [request] = provider.requests
    asked = [strip_runtime_context(text_of(m)) for m in request.messages if is_user(m)]
    assert asked == ["Ann Lee: are you listening?"]  # the sender's name first; the other message not taken


def test_the_host_setting_chooses_feishu_or_lark_and_api_base_overrides_both() -> None:
    assert FeishuConfig().base == "https://open.feishu.cn"
    assert FeishuConfig(host="lark").base == "https://open.larksuite.com"
    assert FeishuConfig(host="lark", api_base="http://127.0.0.1:9/").base == "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="channels.feishu.host.*feishu, lark"):
        FeishuConfig(host="larksuite")


def test_channels_add_checks_the_credentials_with_one_token_call_and_a_wrong_secret_is_one_line(fs: StandIn) -> None:
    assert asyncio.run(CHANNEL.verify(settings_of(fs))) == APP_ID
    assert [(c.method, c.path) for c in fs.script.calls] == [
        ("POST", "/open-apis/auth/v3/tenant_access_token/internal")]
    with pytest.raises(NanoagentError) as refused:
        asyncio.run(CHANNEL.verify(settings_of(fs, appSecret="not-the-secret")))
    message = str(refused.value)
    assert "appSecret" in message and "\n" not in message and "not-the-secret" not in message


def test_a_token_the_platform_calls_expired_is_fetched_again_and_the_reply_arrives(fs: StandIn) -> None:
    provider = ScriptedProvider(["One.", "Two."])

    async def scenario() -> None:
        async with running(fs, provider) as runner:
            fs.write(OWNER, "first")
            await until(lambda: fs.shown(OWNER) == ["One."] and settled(runner), "the first answer")
            fs.expire_token()
            fs.write(OWNER, "second")
            await until(lambda: fs.shown(OWNER) == ["One.", "Two."] and settled(runner), "the second answer")

    asyncio.run(scenario())
    assert len(fs.calls_to("POST", "/open-apis/auth/v3/tenant_access_token/internal")) == 2


def test_a_reply_cannot_notify_everyone_nor_use_the_cards_own_tags() -> None:
    reply = "<at id=all></at> look: <font color='red'>red</font> <link url='javascript:x'>here</link> `<at id=1>`"
    [chunk] = CHANNEL.split(reply)
    assert "<at" not in chunk.body.replace("`<at id=1>`", "") and "<font" not in chunk.body
    assert "<link" not in chunk.body and "`<at id=1>`" in chunk.body  # a code span shows as written


def test_frames_read_and_write_as_the_sdks_own_protobuf_does() -> None:
    from lark_oapi.ws.pb.pbbp2_pb2 import Frame as SdkFrame

    theirs = SdkFrame(SeqID=5, LogID=2**40, service=-3, method=1, payload=b'{"code": 200}', LogIDNew="log")
    theirs.headers.add(key="type", value="event")
    theirs.headers.add(key="message_id", value="om_1")
    ours = Frame.decode(theirs.SerializeToString())
    assert (ours.seq_id, ours.log_id, ours.service, ours.method) == (5, 2**40, -3, 1)
    assert ours.headers == [("type", "event"), ("message_id", "om_1")] and ours.payload == b'{"code": 200}'
    back = SdkFrame()
    back.ParseFromString(ours.encode())
    assert back == theirs
    with pytest.raises(ValueError):
        Frame.decode(b"\x0a\xff")  # a field running past the frame


def test_channels_list_shows_the_nine_channels_nanoagent_ships() -> None:
    listed = invoke("channels", "list")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines() if line.strip()] == [
        "discord", "email", "feishu", "matrix", "mattermost", "signal", "slack", "telegram", "whatsapp"]


def test_channels_add_feishu_asks_the_host_and_the_app_checks_them_and_writes_config(isolated_home, monkeypatch,
                                                                                    fs: StandIn) -> None:
    from nanoagent.cli import channels_cmd

    answers = iter(["lark", APP_ID, APP_SECRET, OWNER, ""])  # the last: "Is ... you?", yes by default
    asked: list[tuple[str, bool]] = []

    def read(prompt: str, secret: bool) -> str:
        asked.append((prompt, secret))
        return next(answers)

    monkeypatch.setattr("nanoagent.cli.oneshot.stdin_is_terminal", lambda: True)
    monkeypatch.setattr(channels_cmd, "read_answer", read)
    write_config(isolated_home, {"channels": {"feishu": {"apiBase": fs.url}}})
    ran = invoke("channels", "add", "feishu")
    assert ran.returncode == 0, ran.stderr
    assert [secret for _, secret in asked] == [False, False, True, False, False]
    written = json.loads((isolated_home / "config.json").read_text())["channels"]["feishu"]
    assert written == {"apiBase": fs.url, "host": "lark", "appId": APP_ID, "appSecret": APP_SECRET,
                       "allowFrom": [OWNER], "owner": [OWNER], "enabled": True}
    assert f"knows these credentials ({APP_ID})" in ran.stdout and APP_SECRET not in ran.stdout + ran.stderr
    assert [(c.method, c.path) for c in fs.script.calls] == [
        ("POST", "/open-apis/auth/v3/tenant_access_token/internal")]
