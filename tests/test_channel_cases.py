"""The cases every channel passes, run for each channel's stand-in through the shared engine (channel_harness.py):
the channel's real library against a local stand-in of its API over real sockets, the agent on the ScriptedProvider
(the kill -9 case: `nanoagent gateway` itself against the local LLM server).

A new channel brings its stand-in as `tests/<name>_server.py` (its `StandIn` class follows channel_harness.StandIn):
STAND_INS finds it by the channel's name."""

from __future__ import annotations

import asyncio
import base64
import importlib
import importlib.util
import json
import os
import re
import signal
import time
from dataclasses import replace

import pytest

from nanoagent.agent.loop import CANCELLED
from nanoagent.channels import registry
from nanoagent.channels.state import state_file
from nanoagent.gateway.server import Component
from nanoagent.messages import is_tool, is_user, strip_runtime_context, text_of
from nanoagent.paths import Paths
from nanoagent.providers.base import TextDelta
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from nanoagent.tools.policy import MINIMAL
from tests.channel_harness import TIMING, Slow, StandIn, extra_config, running, settled
from tests.conftest import (
    PATIENCE,
    invoke,
    openai_env,
    start_gateway_process,
    until,
    wait_until,
    write_config,
)
from tests.llm_server import Reply

# channel name -> the module whose StandIn plays its app, found by name: `tests/<name>_server.py` for every channel
STAND_INS = {name: f"tests.{name}_server" for name in registry.names()}

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


@pytest.fixture(params=list(STAND_INS))
def stand_in(request: pytest.FixtureRequest):
    made: StandIn = importlib.import_module(STAND_INS[request.param]).StandIn()
    yield made
    made.close()


def test_every_channel_brings_a_stand_in_of_its_app_named_after_it():
    missing = [name for name, module in STAND_INS.items()
               if importlib.util.find_spec(module) is None or not hasattr(importlib.import_module(module), "StandIn")]
    assert missing == [], "add tests/<name>_server.py with a StandIn (tests/channel_harness.py) for each"


def whole(stand_in: StandIn) -> dict[str, bool]:
    """The settings that send only finished replies (a channel that edits streams them unless told not to)."""
    return {"streaming": False} if registry.get(stand_in.channel).edits else {}


def user_texts(key: str) -> list[str]:
    session = SessionStore(Paths.from_env().sessions_dir).load(key)
    return [strip_runtime_context(text_of(m)) for m in session.messages if is_user(m)]


def dm(stand_in: StandIn, user: str) -> str:
    """The session key of a person's private chat with the bot (a stand-in whose app has no one chat per person, as
    mail's threads, says which with `session`)."""
    if hasattr(stand_in, "session"):
        return str(stand_in.session(user))
    place = registry.get(stand_in.channel).home(user)
    assert place is not None
    return place.key


def test_an_allowed_sender_gets_the_reply_and_a_stranger_no_model_call(stand_in):
    provider = ScriptedProvider(["Hello, owner."])
    channel = registry.get(stand_in.channel)

    async def scenario():
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.stranger, "let me in")
            stand_in.write(stand_in.owner, "hi there")
            await until(lambda: stand_in.shown(stand_in.owner) == ["Hello, owner."], "the owner's reply")
            if channel.pairing:
                await until(lambda: stand_in.shown(stand_in.stranger), "the stranger's pairing code")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert len(provider.requests) == 1
    assert user_texts(dm(stand_in, stand_in.owner)) == ["hi there"]
    stranger = stand_in.shown(stand_in.stranger)
    if channel.pairing:
        assert len(stranger) == 1 and "nanoagent pairing approve" in stranger[0]
    else:
        assert stranger == []


def test_in_a_group_the_owners_mention_is_answered_and_a_stranger_gets_no_code(stand_in):
    provider = ScriptedProvider(["It is noon."])

    async def scenario():
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.stranger, "what time is it?", private=False)
            stand_in.write(stand_in.owner, "what time is it?", private=False)
            await until(lambda: provider.requests and settled(runner) and not runner.hub.running(), "the answer")

    asyncio.run(scenario())
    [request] = provider.requests
    asked = strip_runtime_context(text_of([m for m in request.messages if is_user(m)][-1]))
    assert asked.endswith(": what time is it?")  # the sender's name first: a group has several people
    assert stand_in.shown(stand_in.stranger) == []  # pairing codes only in a private chat


def test_a_group_chat_gets_the_group_profile_the_owners_private_chat_every_tool_and_a_guests_the_guest_profile(
        stand_in):
    provider = ScriptedProvider(["In the group.", "In private.", "Hello, guest."])
    guest = stand_in.stranger  # let in by allowFrom, not named as the owner

    async def scenario():
        async with running(stand_in, provider, allowFrom=[stand_in.owner, guest]) as runner:
            stand_in.write(stand_in.owner, "what can you do here?", private=False)
            await until(lambda: len(provider.requests) == 1 and settled(runner) and not runner.hub.running(),
                        "the group's answer")
            stand_in.write(stand_in.owner, "and here?")
            await until(lambda: stand_in.shown(stand_in.owner)[-1:] == ["In private."], "the private answer")
            stand_in.write(guest, "and for me?")
            await until(lambda: stand_in.shown(guest)[-1:] == ["Hello, guest."], "the guest's answer")

    asyncio.run(scenario())
    group, private, guests = ({t.name for t in request.tools} for request in provider.requests)
    assert group == set(MINIMAL)  # tools.groupProfile: minimal unless configured
    assert {"exec", "write_file", "spawn"} <= private  # the owner's own chat: tools.profile
    assert guests == set(MINIMAL)  # tools.guestProfile: minimal unless configured


def test_a_group_chat_keeps_the_group_profile_after_a_restart_before_its_next_message(stand_in):
    provider = ScriptedProvider(["In the group."])

    async def scenario():
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.owner, "hello all", private=False)
            await until(lambda: provider.requests and settled(runner) and not runner.hub.running(), "the answer")
        [key] = runner.state.read().groups
        async with running(stand_in, provider) as runner:  # a new gateway: no message from the group yet
            await until(lambda: runner.hub.loop.is_group(key), "the group to be known")
            return set(runner.hub.loop.tools_for(key).names())

    assert asyncio.run(scenario()) == set(MINIMAL)


def test_a_stranger_approved_by_pairing_is_answered(stand_in):
    if not registry.get(stand_in.channel).pairing:
        pytest.skip(f"{stand_in.channel} does not pair")
    provider = ScriptedProvider(["Welcome in."])

    async def scenario():
        async with running(stand_in, provider):
            stand_in.write(stand_in.stranger, "hello?")
            await until(lambda: stand_in.shown(stand_in.stranger), "the pairing code")
            code = re.search(r"nanoagent pairing approve (\S+)", stand_in.shown(stand_in.stranger)[0]).group(1)
            ran = await asyncio.to_thread(invoke, "pairing", "approve", code)
            assert ran.returncode == 0, ran.stderr
            stand_in.write(stand_in.stranger, "now?")
            await until(lambda: stand_in.shown(stand_in.stranger)[-1:] == ["Welcome in."], "the agent's reply")

    asyncio.run(scenario())
    assert user_texts(dm(stand_in, stand_in.stranger)) == ["now?"]
    approved = json.loads(state_file(Paths.from_env(), stand_in.channel).path.read_text())["allowed"]
    assert list(approved) == [stand_in.stranger]


def test_a_20000_character_reply_arrives_whole_in_several_messages(stand_in):
    paragraphs = [f"Paragraph {i}: " + " ".join(f"word{j}" for j in range(72)) for i in range(40)]
    reply = "\n\n".join(paragraphs)
    assert len(reply) > 20_000
    channel = registry.get(stand_in.channel)

    async def scenario():
        async with running(stand_in, ScriptedProvider([reply])) as runner:
            stand_in.write(stand_in.owner, "write a lot")
            await until(lambda: settled(runner) and stand_in.shown(stand_in.owner), "the whole reply")

    asyncio.run(scenario())
    shown = stand_in.shown(stand_in.owner)
    assert len(shown) >= len(reply) // channel.limit + 1
    visible = "\n".join(shown)
    assert [visible.count(f"Paragraph {i}: ") for i in range(40)] == [1] * 40  # none lost, none shown twice
    assert " ".join(visible.split()) == " ".join(reply.split())


def test_a_reply_streams_by_editing_where_the_app_edits(stand_in):
    reply = " ".join(f"w{i}" for i in range(60))
    channel = registry.get(stand_in.channel)

    async def scenario():
        async with running(stand_in, Slow(reply, pause=0.01)) as runner:
            stand_in.write(stand_in.owner, "stream please")
            await until(lambda: settled(runner) and stand_in.shown(stand_in.owner) == [reply], "the whole reply")

    asyncio.run(scenario())
    assert (stand_in.edits() > 0) == channel.edits


def test_with_streaming_off_only_the_finished_reply_is_sent(stand_in):
    if not registry.get(stand_in.channel).edits:
        pytest.skip(f"{stand_in.channel} sends only the finished reply anyway")
    reply = " ".join(f"w{i}" for i in range(60))

    async def scenario():
        async with running(stand_in, Slow(reply, pause=0.01), streaming=False) as runner:
            stand_in.write(stand_in.owner, "no streaming please")
            await until(lambda: settled(runner) and stand_in.shown(stand_in.owner) == [reply], "the whole reply")

    asyncio.run(scenario())
    assert stand_in.edits() == 0  # one message, sent once, never edited


class FirstWordThenHold(ScriptedProvider):
    """Streams the first word of its reply, then holds the rest until `hold` is set; `first` is when it gave it."""

    def __init__(self, reply: str, hold: asyncio.Event):
        super().__init__([reply])
        self.hold = hold
        self.first = 0.0

    async def stream(self, request):  # type: ignore[no-untyped-def]
        async for event in super().stream(request):
            yield event
            if isinstance(event, TextDelta) and not self.first:
                self.first = time.monotonic()
                await self.hold.wait()


def test_a_replys_first_message_is_sent_at_the_first_token_not_after_the_edit_interval(stand_in):
    if not registry.get(stand_in.channel).edits:
        pytest.skip(f"{stand_in.channel} sends only the finished reply")
    interval = 600.0  # far past the wait below: a first message held for the interval would never come

    async def scenario():
        provider = FirstWordThenHold("Thinking about it for a while.", asyncio.Event())
        async with running(stand_in, provider, timing=replace(TIMING, interval=interval)):
            stand_in.write(stand_in.owner, "a hard one")
            await until(lambda: stand_in.shown(stand_in.owner), "the reply's first message")
            arrived = time.monotonic() - provider.first
            shown = stand_in.shown(stand_in.owner)
            provider.hold.set()
        return arrived, shown

    arrived, shown = asyncio.run(scenario())
    assert [text.strip() for text in shown] == ["Thinking"]  # the first word alone: the rest was not streamed yet
    assert arrived < 10  # one call to the app, on a busy machine; not the 600 s interval


def test_a_rate_limit_is_waited_out_as_long_as_the_app_says(stand_in):
    wait = 0.5

    async def scenario():
        async with running(stand_in, ScriptedProvider(["after the wait"])) as runner:
            stand_in.rate_limit(1, wait)
            started = time.monotonic()
            stand_in.write(stand_in.owner, "hi")
            await until(lambda: stand_in.shown(stand_in.owner), "the reply")
            arrived = time.monotonic() - started
            await until(lambda: settled(runner), "the inbox to empty")
        return arrived

    arrived = asyncio.run(scenario())
    assert arrived >= wait
    assert stand_in.shown(stand_in.owner) == ["after the wait"]


def test_a_reply_ready_while_the_api_is_down_arrives_once_it_is_back(stand_in):
    async def scenario():
        hold = asyncio.Event()
        provider = Slow("the answer", hold=hold)
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.owner, "a question")
            await until(provider.started.is_set, "the model call")
            stand_in.down(True)
            hold.set()  # the answer is ready while the app is away
            key = dm(stand_in, stand_in.owner)
            await until(lambda: not runner.hub.busy(key), "the turn to end")
            stand_in.down(False)
            await until(lambda: stand_in.shown(stand_in.owner) == ["the answer"], "the answer")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert user_texts(dm(stand_in, stand_in.owner)) == ["a question"]


def test_while_the_api_is_down_health_says_failing_and_why_then_connected_once_it_is_back(stand_in):
    secrets = [v for v in json.dumps(stand_in.settings()).split('"') if len(v) >= 12 and "://" not in v and "@" not in v]

    async def scenario():
        hold = asyncio.Event()
        provider = Slow("the answer", hold=hold)
        async with running(stand_in, provider) as runner:
            component = runner.component = Component(stand_in.channel, runner.run)  # before the run starts
            await until(lambda: component.health.startswith("connected as "), "the link to connect")
            connected = component.health
            stand_in.write(stand_in.owner, "a question")
            await until(provider.started.is_set, "the model call")
            stand_in.down(True)
            hold.set()  # a reply is due while the app is away
            await until(lambda: component.health.startswith("failing: "), "health to say failing")
            failing = component.health
            stand_in.down(False)
            await until(lambda: stand_in.shown(stand_in.owner) == ["the answer"], "the answer")
            await until(lambda: component.health == connected, "health to say connected again")
        return failing

    failing = asyncio.run(scenario())
    assert len(failing.removeprefix("failing: ").strip()) > 5  # a reason, not only the word
    assert not any(secret in failing for secret in secrets)


def test_an_image_reaches_the_model_as_an_image(stand_in):
    provider = ScriptedProvider(["A single pixel."])

    async def scenario():
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.owner, "what is this?", image=PNG)
            await until(lambda: stand_in.shown(stand_in.owner) == ["A single pixel."], "the reply")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    [request] = provider.requests
    last = [m for m in request.messages if is_user(m)][-1]
    images = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "image_data"]
    assert [base64.b64decode(b["data"]) for b in images] == [PNG]
    assert "what is this?" in text_of(last)


def test_a_text_file_reaches_the_model_as_marked_text(stand_in):
    provider = ScriptedProvider(["Two lines."])

    async def scenario():
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.owner, "how long is it?", file=("notes.txt", "text/plain", b"alpha\nbeta\n"))
            await until(lambda: stand_in.shown(stand_in.owner) == ["Two lines."], "the reply")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    [request] = provider.requests
    asked = strip_runtime_context(text_of([m for m in request.messages if is_user(m)][-1]))
    assert asked == ('<attached_file name="notes.txt">\nThe user attached this file.\n\nalpha\nbeta\n</attached_file>'
                     "\n\nhow long is it?")  # as `nanoagent agent -a notes.txt` marks it
    assert not (Paths.from_env().workspace / "media").exists()


def test_an_audio_file_reaches_the_model_as_its_transcript(stand_in, llm):
    from nanoagent.config.schema import Config, ToolsConfig, TranscribeConfig
    from nanoagent.transcribe import transcriber
    from tests.llm_server import Transcript

    voice = b"OggS\x00\x02" + bytes(26) + b"OpusHead" + bytes(100)
    llm.transcriptions.script(Transcript("Remind me to water the plants."))
    ears = transcriber(Config(tools=ToolsConfig(transcribe=TranscribeConfig(model="whisper-local",
                                                                            api_base=llm.url + "/v1"))))
    provider = ScriptedProvider(["Will do."])

    async def scenario():
        async with running(stand_in, provider, transcriber=ears) as runner:
            stand_in.write(stand_in.owner, "note this", file=("memo.ogg", "audio/ogg", voice))
            await until(lambda: stand_in.shown(stand_in.owner) == ["Will do."], "the reply")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    [request] = provider.requests
    asked = strip_runtime_context(text_of([m for m in request.messages if is_user(m)][-1]))
    match = re.search(r'\[(audio|audio file) saved as (media/\S+); its transcript follows\]\n<untrusted_data source='
                      r'"transcript of \1 \2">\nRemind me to water the plants\.\n</untrusted_data>', asked)
    assert match and "note this" in asked, asked
    assert (Paths.from_env().workspace / match.group(2)).read_bytes() == voice
    assert [r.file for r in llm.transcriptions.requests] == [voice]


def test_stop_mid_turn_ends_the_turn(stand_in):
    async def scenario():
        provider = Slow("never said", hold=asyncio.Event())
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.owner, "a long job")
            await until(provider.started.is_set, "the model call")
            stand_in.write(stand_in.owner, "/stop")
            await until(lambda: "Stopped the running turn." in stand_in.shown(stand_in.owner), "/stop")
            await until(lambda: settled(runner) and not runner.hub.running(), "the turn to end")

    asyncio.run(scenario())
    session = SessionStore(Paths.from_env().sessions_dir).load(dm(stand_in, stand_in.owner))
    assert session.messages[-1]["content"] == CANCELLED
    assert "never said" not in "".join(stand_in.shown(stand_in.owner))


@pytest.mark.process
def test_a_gateway_killed_mid_turn_answers_the_message_once_after_a_restart(stand_in, llm, isolated_home):
    write_config(isolated_home, {**extra_config(stand_in), "channels": {stand_in.channel: stand_in.settings()}})
    llm.script(Reply(text="never delivered", delay=2), Reply(text="The answer is 42."))
    env = {**os.environ, **openai_env(llm)}
    state = state_file(Paths.from_env(), stand_in.channel)
    log_path = isolated_home.parent / "gateway.stderr"  # where start_gateway_process logs

    first = start_gateway_process(env)
    try:
        stand_in.write(stand_in.owner, "what is the answer?")
        wait_until(lambda: llm.requests, "the model call")
    finally:
        first.kill()  # SIGKILL, mid-turn
        first.wait()
    key = dm(stand_in, stand_in.owner)
    assert state.read().inbox == [] and state.read().open_turns == [key]

    second = start_gateway_process(env)
    try:
        wait_until(lambda: any("The answer is 42." in t for t in stand_in.shown(stand_in.owner)), "the answer")
        wait_until(lambda: state.read().open_turns == [] and state.read().inbox == [], "the turn to close")
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=PATIENCE) == 0, log_path.read_text()

    assert stand_in.shown(stand_in.owner) == ["The answer is 42."]
    assert len(llm.requests) == 2
    assert user_texts(key).count("what is the answer?") == 1
    logs = log_path.read_text() + "".join(p.read_text() for p in (isolated_home / "logs").iterdir())
    assert "what is the answer" not in logs
    # tokens and passwords; not URLs, nor addresses (a mail channel says which mailbox it is connected as)
    secrets = [v for v in json.dumps(stand_in.settings()).split('"') if len(v) >= 12 and "://" not in v and "@" not in v]
    assert not any(secret in logs for secret in secrets)  # tokens and passwords are never logged


def test_a_file_the_agent_sends_into_the_chat_arrives_an_image_as_one_and_a_text_file_as_a_document(stand_in):
    if not hasattr(stand_in, "files_shown"):
        pytest.skip(f"the {stand_in.channel} stand-in cannot show the files the bot sends yet")
    workspace = Paths.from_env().workspace
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "chart.png").write_bytes(PNG)
    (workspace / "plan.txt").write_bytes(b"alpha\nbeta\n")
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("message", {"text": "Here they are.",
                                                                         "files": ["chart.png", "plan.txt"]})]),
                                 "Sent."])

    async def scenario():
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.owner, "send me the chart and the plan")
            await until(lambda: "Sent." in stand_in.shown(stand_in.owner), "the reply")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert stand_in.files_shown(stand_in.owner) == [("chart.png", PNG, True), ("plan.txt", b"alpha\nbeta\n", False)]
    assert "Here they are." in stand_in.shown(stand_in.owner)
    [result] = [m["content"] for m in provider.requests[-1].messages if is_tool(m)]
    assert f"Sent to {dm(stand_in, stand_in.owner)}." in result  # the chat the turn is in


def test_budget_answers_in_the_chat_without_a_model_call(stand_in):
    provider = ScriptedProvider([])

    async def scenario():
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.owner, "/budget")
            await until(lambda: any("No spending caps are set" in text for text in stand_in.shown(stand_in.owner)),
                        "the answer to /budget")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert provider.requests == []
    assert any("Spent today (" in text for text in stand_in.shown(stand_in.owner))


def test_a_message_whose_handling_keeps_failing_is_parked_the_next_is_answered_and_retry_answers_it(stand_in):
    media = Paths.from_env().workspace / "media"
    media.parent.mkdir(parents=True, exist_ok=True)
    media.write_text("a file where the media folder goes: saving the picture raises")
    provider = ScriptedProvider(["Answered.", "The picture, at last."])

    def answers() -> list[str]:  # the owner's chat, but for the one notice of what was parked
        return [text for text in stand_in.shown(stand_in.owner) if "failed 3 times" not in text]

    async def scenario():
        async with running(stand_in, provider) as runner:
            stand_in.write(stand_in.owner, "look at this", image=PNG)
            await until(lambda: runner.state.read().parked, "the message to be parked")
            stand_in.write(stand_in.owner, "are you there?")
            await until(lambda: answers() == ["Answered."], "the next message's answer")
            listed = await asyncio.to_thread(invoke, "channels", "list")
            media.unlink()
            retried = await asyncio.to_thread(invoke, "channels", "retry", stand_in.channel)
            await until(lambda: answers()[-1:] == ["The picture, at last."], "the retried answer")
            await until(lambda: settled(runner) and not runner.state.read().parked, "the state to empty")
        return listed, retried

    listed, retried = asyncio.run(scenario())
    assert "1 item parked after failing" in listed.stdout and f"channels retry {stand_in.channel}" in listed.stdout
    assert retried.returncode == 0 and "Put back 1 message(s)" in retried.stdout
    assert answers() == ["Answered.", "The picture, at last."]
    told = [text for text in stand_in.shown(stand_in.owner) if "failed 3 times" in text]
    assert len(told) == 1 and f"nanoagent channels retry {stand_in.channel}" in told[0]  # the owner, told once
    assert len(provider.requests) == 2


def test_a_rate_limit_longer_than_the_librarys_own_retries_is_waited_out_and_the_reply_arrives_once(stand_in, caplog):
    async def scenario():
        async with running(stand_in, ScriptedProvider(["after a long wait"]), **whole(stand_in)) as runner:
            stand_in.rate_limit(8, 0.05)  # discord.py tries five times; the others try once
            stand_in.write(stand_in.owner, "hi")
            await until(lambda: stand_in.shown(stand_in.owner), "the reply")
            await until(lambda: settled(runner), "the inbox to empty")
            return runner.state.read().outbox

    assert asyncio.run(scenario()) == []
    assert stand_in.shown(stand_in.owner) == ["after a long wait"]
    assert "reply_queued" not in caplog.text  # waited out by the link, not refused and sent again from the outbox


def test_a_reply_the_app_refuses_waits_in_the_outbox_and_arrives_once_the_app_takes_it(stand_in):
    async def scenario():
        async with running(stand_in, ScriptedProvider(["kept for you"]), **whole(stand_in)) as runner:
            stand_in.refuse(1000)
            stand_in.write(stand_in.owner, "hi")
            await until(lambda: runner.state.read().outbox, "the reply to wait in the outbox")
            await until(lambda: settled(runner), "the turn to close")
            listed = await asyncio.to_thread(invoke, "channels", "list")
            stand_in.refuse(0)
            await until(lambda: stand_in.shown(stand_in.owner), "the reply")
            await until(lambda: not runner.state.read().outbox, "the outbox to empty")
        return listed

    listed = asyncio.run(scenario())
    assert "1 reply waiting in the outbox" in listed.stdout
    assert stand_in.shown(stand_in.owner) == ["kept for you"]


def test_a_send_the_app_answers_late_arrives_once(stand_in):
    # calls time out after 0.3 s, sends after 5 s; the app takes the reply at once but answers 1 s later
    timing = replace(TIMING, timeout=0.3, send_timeout=5.0)

    async def scenario():
        async with running(stand_in, ScriptedProvider(["only once"]), timing=timing, **whole(stand_in)) as runner:
            stand_in.slow(1, 1.0)
            stand_in.write(stand_in.owner, "hi")
            await until(lambda: stand_in.shown(stand_in.owner), "the reply")
            await until(lambda: settled(runner) and not runner.hub.running(), "the send to be answered")

    asyncio.run(scenario())
    assert stand_in.shown(stand_in.owner) == ["only once"]


def test_two_bots_answering_each_other_stop_at_the_reply_limit_with_one_log_line(stand_in, caplog):
    provider = ScriptedProvider([f"reply {i}" for i in range(10)])
    limit = {"replyLimit": {"perThread": 3, "windowSeconds": 3600}}

    async def scenario():
        async with running(stand_in, provider, channels=limit) as runner:
            for turn in range(10):  # the other bot answers each reply it gets, with no header saying it is a bot
                if len(stand_in.shown(stand_in.owner)) < turn:
                    break  # ours did not answer its last: it has nothing to answer
                stand_in.write(stand_in.owner, f"bot message {turn}")
                await until(lambda turn=turn: len(stand_in.shown(stand_in.owner)) > turn or (
                    "reply_limited" in caplog.text and settled(runner)), "a reply, or the limit to hold it")

    asyncio.run(scenario())
    assert stand_in.shown(stand_in.owner) == ["reply 0", "reply 1", "reply 2"]
    assert len(provider.requests) == 3
    assert caplog.text.count("reply_limited") == 1


@pytest.mark.parametrize("name", list(STAND_INS))
def test_only_http_and_mailto_targets_become_links_in_every_channels_format(name):
    channel = registry.get(name)
    reply = ("Ask [Bob](tg://user?id=12345), run [this](javascript:alert(1)), open [the file](file:///etc/passwd); "
             "see [the docs](https://example.com/docs) or [mail us](mailto:team@example.com).")
    body = "".join(chunk.body for chunk in channel.split(reply))
    link = re.search(r'(href="|<|\]\()https://example\.com/docs', body)  # how this format writes a link's target
    assert link and f"{link.group(1)}mailto:team@example.com" in body, body
    for target in ("tg://user?id=12345", "javascript:alert(1)", "file:///etc/passwd"):
        assert f"{link.group(1)}{target}" not in body and target in body, body  # shown as text, not a link
