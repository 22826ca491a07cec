"""The Signal channel: its link against the stand-in of signal-cli's daemon over real HTTP (signal_server.py), and
its format. The cases every channel passes are in test_channel_cases.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from nanoagent.channels.signal import CHANNEL
from nanoagent.channels.signal.format import split, styled
from nanoagent.errors import NanoagentError
from nanoagent.messages import is_user, strip_runtime_context, text_of
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.session.store import SessionStore
from tests.channel_harness import running, settings_of, settled
from tests.conftest import until
from tests.signal_server import BOT, GROUP_ID, PEOPLE, StandIn

OWNER, GUEST = PEOPLE


@pytest.fixture
def signal_app():
    made = StandIn()
    yield made
    made.close()


def test_markdown_becomes_signal_text_with_styles_counted_in_utf16_units():
    [chunk] = split("# Plan\n\n😀 **bold** and *it*, `x = 1` and ~~old~~; see [docs](https://example.com/d)")
    text, styles = styled(chunk.body)
    assert text == "Plan\n\n😀 bold and it, x = 1 and old; see docs (https://example.com/d)"
    assert styles == ["0:4:BOLD", "9:4:BOLD", "18:2:ITALIC", "22:5:MONOSPACE", "32:3:STRIKETHROUGH"]


def test_a_code_block_is_monospace_without_its_fences():
    [chunk] = split("Run:\n\n```sh\nls -l\n```")
    assert styled(chunk.body) == ("Run:\n\nls -l", ["6:5:MONOSPACE"])


def test_a_sender_named_by_uuid_is_known_by_it_and_anyone_else_by_their_number(signal_app):
    provider = ScriptedProvider(["Hi by UUID."])

    async def scenario():
        async with running(signal_app, provider, allowFrom=[OWNER.uuid.upper()], owner=[OWNER.uuid]) as runner:
            signal_app.write(OWNER.number or "", "who am I?")
            await until(lambda: signal_app.shown(OWNER.uuid) == ["Hi by UUID."], "the reply")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert [s.to for s in signal_app.daemon.sent] == [OWNER]
    session = SessionStore(Paths.from_env().sessions_dir).load(f"signal:{OWNER.uuid}")  # the chat's id: the UUID
    assert [strip_runtime_context(text_of(m)) for m in session.messages if is_user(m)] == ["who am I?"]


def test_a_group_is_one_chat_answered_in_the_group_with_the_mention_taken_out(signal_app):
    provider = ScriptedProvider(["Noon."])

    async def scenario():
        async with running(signal_app, provider) as runner:
            signal_app.write(OWNER.number or "", "what time is it?", private=False)
            await until(lambda: settled(runner) and provider.requests and not runner.hub.running(), "the answer")
            return runner.state.read().groups

    groups = asyncio.run(scenario())
    assert groups == ["signal:group." + GROUP_ID.replace("+", "-").replace("/", "_")]
    [sent] = signal_app.daemon.sent
    assert (sent.group, sent.to, sent.text) == (GROUP_ID, None, "Noon.")
    asked = strip_runtime_context(text_of([m for m in provider.requests[0].messages if is_user(m)][-1]))
    assert asked.endswith("Ann: what time is it?")


def test_messages_written_while_the_gateway_was_stopped_are_answered_after_it_starts_and_none_twice(signal_app):
    provider = ScriptedProvider(["first answer", "second answer"])

    async def scenario():
        async with running(signal_app, provider) as runner:
            signal_app.write(OWNER.number or "", "one")
            await until(lambda: signal_app.shown(OWNER.number or "") == ["first answer"], "the first answer")
            await until(lambda: settled(runner), "the inbox to empty")
        signal_app.write(OWNER.number or "", "two")  # kept by the daemon while no one listens
        async with running(signal_app, provider) as runner:
            await until(lambda: len(signal_app.shown(OWNER.number or "")) == 2, "the second answer")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert signal_app.shown(OWNER.number or "") == ["first answer", "second answer"]
    assert len(provider.requests) == 2


def test_a_first_start_takes_the_kept_messages_of_the_last_minutes_not_older_ones(signal_app):
    provider = ScriptedProvider(["recent one answered"])
    an_hour_ago = int((time.time() - 3600) * 1000)  # before nanoagent ever ran
    signal_app.daemon.push({"sourceNumber": OWNER.number, "sourceUuid": OWNER.uuid, "timestamp": an_hour_ago,
                            "dataMessage": {"timestamp": an_hour_ago, "message": "an old test message"}})
    signal_app.write(OWNER.number or "", "just now")

    async def scenario():
        async with running(signal_app, provider) as runner:
            await until(lambda: signal_app.shown(OWNER.number or ""), "the reply")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    [request] = provider.requests
    asked = [strip_runtime_context(text_of(m)) for m in request.messages if is_user(m)]
    assert asked == ["just now"]


def test_a_message_from_the_accounts_own_number_is_not_answered(signal_app):
    provider = ScriptedProvider(["Hello."])

    async def scenario():
        async with running(signal_app, provider, allowFrom=[OWNER.number, BOT]) as runner:  # even when let in
            signal_app.daemon.push({"sourceNumber": BOT, "sourceUuid": "99999999-0000-4000-8000-000000000999",
                                    "timestamp": signal_app.daemon.timestamp(),
                                    "dataMessage": {"timestamp": 1, "message": "from my phone"}})
            signal_app.write(OWNER.number or "", "hi")
            await until(lambda: signal_app.shown(OWNER.number or ""), "the reply")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert signal_app.shown(OWNER.number or "") == ["Hello."]
    [request] = provider.requests
    assert [strip_runtime_context(text_of(m)) for m in request.messages if is_user(m)] == ["hi"]


def test_verify_names_the_account_masked_and_says_how_to_fix_a_daemon_that_is_not_running(signal_app):
    settings = settings_of(signal_app)
    assert asyncio.run(CHANNEL.verify(settings)) == "+15…0999"
    signal_app.down(True)
    with pytest.raises(NanoagentError, match=r"Cannot reach signal-cli at http://127\.0\.0\.1:\d+ .*daemon --http"):
        asyncio.run(CHANNEL.verify(settings))


def test_an_allow_from_entry_that_is_no_number_or_uuid_is_a_problem_with_its_fix(signal_app):
    problem = CHANNEL.problem(settings_of(signal_app, allowFrom=["0155 5123"]))
    assert problem is not None and "'0155 5123'" in problem and "+15551234567" in problem
