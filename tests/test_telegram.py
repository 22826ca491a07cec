"""The Telegram channel: the real python-telegram-bot against a Bot API stand-in over real HTTP (telegram_server.py),
the agent on the ScriptedProvider, and `nanoagent gateway` itself for a kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.agent.loop import CANCELLED
from nanoagent.channels.base import DeliveryError
from nanoagent.channels.state import state_file
from nanoagent.channels.telegram import CHANNEL
from nanoagent.channels.telegram.format import markdown_to_html, split_markdown, units
from nanoagent.channels.telegram.link import TelegramUnauthorized
from nanoagent.channels.telegram.settings import TelegramConfig
from nanoagent.config.loader import load_config
from nanoagent.config.schema import Config
from nanoagent.errors import NanoagentError
from nanoagent.gateway.channels.engine import ChannelRunner, Timing, channel_component
from nanoagent.gateway.channels.media import media_name
from nanoagent.gateway.hub import Hub
from nanoagent.keys import Place
from nanoagent.messages import is_user, strip_runtime_context
from nanoagent.paths import Paths
from nanoagent.providers.base import TextDelta
from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.session.store import SessionStore
from nanoagent.transcribe import HINT
from tests import channel_harness as harness
from tests.conftest import (
    PATIENCE,
    ROOT,
    invoke,
    openai_env,
    start_gateway_process,
    until,
    wait_until,
    write_config,
)
from tests.llm_server import Reply
from tests.telegram_server import BOT, BotAPI, StandIn, check_text

TIMING = Timing(interval=0.1, typing=0.3, poll=1, backoff=(0.05, 0.1, 0.2))
ANN = 42


@pytest.fixture
def channel_log():
    """What the channel logs (the nanoagent logger does not propagate to pytest's handlers)."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("nanoagent.channels.telegram")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


class Slow(ScriptedProvider):
    """Streams its replies in words, waiting `pause` seconds between them; `started` is set by each call."""

    def __init__(self, *replies: str, pause: float = 0.0, hold: asyncio.Event | None = None):
        super().__init__(replies)
        self.pause = pause
        self.hold = hold
        self.started = asyncio.Event()

    async def stream(self, request):
        self.started.set()
        if self.hold is not None:
            await self.hold.wait()
        async for event in super().stream(request):
            if isinstance(event, TextDelta) and self.pause:
                await asyncio.sleep(self.pause)
            yield event


def running(api: BotAPI, provider: ScriptedProvider, timing: Timing = TIMING,
            **overrides: object) -> contextlib.AbstractAsyncContextManager[ChannelRunner]:
    """The channel against `api` through the shared harness; `overrides` are `channels.telegram` keys (camelCase)."""
    return harness.running(StandIn(api), provider, timing, **overrides)


def taken(channel: ChannelRunner) -> int:
    """The last update the channel took and told Telegram to forget."""
    return int(channel.state.read().cursor.get("last_update_id", "0"))


def settled(channel: ChannelRunner, api: BotAPI) -> bool:
    """Every update the stand-in has was taken, none is left in the inbox, and no turn waits for its reply to reach
    the chat."""
    state = channel.state.read()
    return taken(channel) >= api.last_update_id and not state.inbox and not state.open_turns


def user_texts(key: str) -> list[str]:
    session = SessionStore(Paths.from_env().sessions_dir).load(key)
    return [strip_runtime_context(m["content"]) for m in session.messages if is_user(m)]


# --- talking --------------------------------------------------------------------------------------------


def test_a_message_from_an_allowed_user_gets_the_agents_reply(api):
    provider = ScriptedProvider(["Hello **Ann**, see `notes.md` & <this>."])

    async def scenario():
        async with running(api, provider) as channel:
            api.message("hi there")
            await until(lambda: api.texts(ANN) == ["Hello Ann, see notes.md & <this>."], "the reply")
            await until(lambda: settled(channel, api), "the inbox to empty")

    asyncio.run(scenario())
    shown = api.chat(ANN)[0]
    assert shown.parse_mode == "HTML"
    assert shown.raw == "Hello <b>Ann</b>, see <code>notes.md</code> &amp; &lt;this&gt;."
    assert user_texts("telegram:42") == ["hi there"]
    assert [c["command"] for c in api.calls_to("setMyCommands")[0].params["commands"]] == \
        ["new", "stop", "status", "usage", "help"]
    assert api.calls_to("deleteWebhook") and api.calls_to("getMe")


def test_a_stranger_gets_one_pairing_code_and_no_model_call_until_approved(api):
    provider = ScriptedProvider(["Welcome in."])
    stranger = 99

    async def scenario():
        async with running(api, provider) as channel:
            api.message("hello?", user_id=stranger, name="Bob")
            await until(lambda: api.texts(stranger), "the pairing code")
            again = api.message("hello again?", user_id=stranger, name="Bob")
            await until(lambda: taken(channel) >= again and settled(channel, api), "the second message")
            assert len(api.texts(stranger)) == 1  # one code, not one per message
            code = re.search(r"nanoagent pairing approve (\S+)", api.texts(stranger)[0]).group(1)
            assert provider.requests == []
            ran = await asyncio.to_thread(invoke, "pairing", "approve", code)
            assert ran.returncode == 0, ran.stderr
            assert "Bob" in ran.stdout and "99" in ran.stdout
            api.message("now?", user_id=stranger, name="Bob")
            await until(lambda: api.texts(stranger)[-1:] == ["Welcome in."], "the agent's reply")

    asyncio.run(scenario())
    assert len(provider.requests) == 1
    assert user_texts("telegram:99") == ["now?"]
    state_file = Paths.from_env().channels_dir / "telegram.json"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert json.loads(state_file.read_text())["allowed"] == {"99": "Bob"}
    listed = invoke("pairing", "list")
    assert "99  Bob" in listed.stdout and "No pending pairing codes." in listed.stdout


def test_pairing_approve_with_an_unknown_code_says_how_to_find_the_right_one():
    ran = invoke("pairing", "approve", "NOPE-NOPE")
    assert ran.returncode == 1
    assert ran.error_lines == ["Error: The pairing code NOPE-NOPE is not pending; ask them to message the bot again for "
                               "a new one, and see `nanoagent pairing list`."]


def test_in_a_group_only_mentions_and_replies_from_allowed_users_are_answered(api):
    provider = ScriptedProvider(["It is noon.", "You are welcome."])
    group = -1001

    async def scenario():
        async with running(api, provider) as channel:
            api.message("just chatting among ourselves", chat_id=group, chat_type="supergroup")
            api.message(f"@{BOT['username']} what time is it?", user_id=7, name="Eve", chat_id=group,
                        chat_type="supergroup")  # mentions the bot, but Eve is not allowed
            api.message(f"@{BOT['username']} what time is it?", chat_id=group, chat_type="supergroup")
            await until(lambda: api.texts(group) == ["It is noon."], "the answer to the mention")
            api.message("thanks", chat_id=group, chat_type="supergroup", reply_to_bot=True)
            await until(lambda: api.texts(group)[-1:] == ["You are welcome."], "the answer to the reply")
            await until(lambda: settled(channel, api), "the inbox to empty")

    asyncio.run(scenario())
    assert user_texts("telegram:-1001") == ["Ann: what time is it?", "Ann: thanks"]
    assert api.texts(7) == []  # no pairing code in a group


def test_a_forum_topic_is_a_session_of_its_own_answered_in_its_topic(api):
    provider = ScriptedProvider(["In the topic."])
    group = -1002

    async def scenario():
        async with running(api, provider, groupPolicy="all"):
            api.message("hello topic", chat_id=group, chat_type="supergroup", thread_id=17)
            await until(lambda: api.texts(group) == ["In the topic."], "the reply")

    asyncio.run(scenario())
    assert api.chat(group)[0].thread_id == 17
    assert user_texts("telegram:-1002:17") == ["Ann: hello topic"]


def test_a_message_sent_while_the_agent_works_joins_the_running_turn(api):
    async def scenario():
        hold = asyncio.Event()
        provider = Slow("Working on it.", "Also done with the second thing.", hold=hold)
        async with running(api, provider) as channel:
            api.message("first thing")
            await until(provider.started.is_set, "the model call")
            joined = api.message("and a second thing")
            await until(lambda: taken(channel) >= joined and
                        channel.inbox.waiting["telegram:42"], "the second message to reach the hub")
            assert [u["id"] for u in channel.state.read().inbox] == [str(joined)]  # not in the session yet
            hold.set()
            await until(lambda: settled(channel, api) and api.texts(ANN), "the reply")
        return provider

    provider = asyncio.run(scenario())
    assert api.texts(ANN) == ["Working on it.\n\nAlso done with the second thing."]
    assert user_texts("telegram:42") == ["first thing", "and a second thing"]
    assert len(provider.requests) == 2


# --- replies ----------------------------------------------------------------------------------------------


def long_reply() -> tuple[str, list[str]]:
    prose = [f"Paragraph {i}: " + " ".join(f"word{j}" for j in range(120)) for i in range(30)]
    code = [f"value_{i} = compute({i}) if {i} < limit else None  # line {i}" for i in range(700)]
    text = "\n\n".join(prose[:15] + ["```python\n" + "\n".join(code) + "\n```"] + prose[15:])
    return text, code


def test_a_50000_character_reply_is_split_under_the_limit_with_code_blocks_closed_and_reopened(api):
    text, code = long_reply()
    assert len(text) > 50_000
    provider = ScriptedProvider([text])

    async def scenario():
        async with running(api, provider) as channel:
            api.message("write a lot")
            await until(lambda: settled(channel, api), "the whole reply", timeout=PATIENCE)

    asyncio.run(scenario())
    messages = api.chat(ANN)
    assert len(messages) >= 13
    assert all(m.parse_mode == "HTML" and 0 < units(m.text) <= 4096 for m in messages)
    with_code = [m for m in messages if "<pre>" in m.raw or "<pre><code" in m.raw]
    assert len(with_code) >= 2
    assert all(m.raw.count('<pre><code class="language-python">') == m.raw.count("</code></pre>") == 1
               for m in with_code)
    shown_code = "\n".join(re.search(r'<pre><code class="language-python">(.*)</code></pre>', m.raw, re.S).group(1)
                           for m in with_code)
    assert shown_code == "\n".join(code).replace("<", "&lt;")
    visible = "\n".join(m.text for m in messages)
    for i in range(30):
        assert visible.count(f"Paragraph {i}: ") == 1  # no part lost, none shown twice


def test_split_cuts_at_paragraphs_then_lines_then_inside_a_line_that_is_too_long():
    paragraphs = ["a" * 3000, "b" * 3000]
    assert [c.plain for c in split_markdown("\n\n".join(paragraphs))] == paragraphs
    lines = "\n".join(f"line {i} " + "x" * 90 for i in range(60))
    chunks = split_markdown(lines)
    assert len(chunks) == 2 and all(c.plain.endswith("x") for c in chunks)
    assert "\n".join(c.plain for c in chunks) == lines
    giant = "word " * 2000
    chunks = split_markdown(giant)
    assert all(units(c.body) <= 4096 for c in chunks) and "".join(c.plain for c in chunks) == giant.rstrip()
    assert split_markdown("") == [] and split_markdown("\n\n  \n") == [] and split_markdown("```python") == []


def test_markdown_becomes_telegram_html_that_the_stand_in_accepts():
    source = ("# Plan\n\n**Bold**, *italic*, _also italic_, ~~gone~~, a snake_case_name, `x < y`, "
              "[docs](https://example.com/a_b?x=1&y=2)\n\n- one\n- two\n\n> quoted\n\n```sh\necho \"<hi>\" && exit\n```")
    converted = markdown_to_html(source)
    assert converted == (
        "<b>Plan</b>\n\n<b>Bold</b>, <i>italic</i>, <i>also italic</i>, <s>gone</s>, a snake_case_name, "
        '<code>x &lt; y</code>, <a href="https://example.com/a_b?x=1&amp;y=2">docs</a>\n\n• one\n• two\n\n'
        '<blockquote>quoted</blockquote>\n\n<pre><code class="language-sh">echo "&lt;hi&gt;" &amp;&amp; exit</code></pre>')
    assert check_text(converted, "HTML", "REJECT-HTML")[0] == ""


def test_markdown_telegram_rejects_is_sent_again_as_plain_text(api):
    reply = "Here is **bold** and REJECT-HTML in one."
    provider = ScriptedProvider([reply])

    async def scenario():
        async with running(api, provider) as channel:
            api.message("hi")
            await until(lambda: settled(channel, api) and api.texts(ANN), "the reply")

    asyncio.run(scenario())
    assert [(m.raw, m.parse_mode) for m in api.chat(ANN)] == [(reply, None)]
    assert [c.status for c in api.calls if c.method == "sendMessage"] == [400, 200]


def test_streaming_edits_one_message_at_most_once_per_interval_without_duplicates_or_empty_bubbles(api):
    reply = " ".join(f"w{i}" for i in range(60))
    provider = Slow(reply, pause=0.01)

    async def scenario():
        async with running(api, provider) as channel:
            api.message("stream please")
            await until(lambda: settled(channel, api) and api.texts(ANN) == [reply], "the whole reply")

    asyncio.run(scenario())
    writes = [c for c in api.calls if c.method in ("sendMessage", "editMessageText")]
    assert [c.method for c in writes][0] == "sendMessage"
    assert [c.method for c in writes].count("sendMessage") == 1
    assert len(writes) >= 3  # it streamed
    assert all(c.status == 200 for c in writes)  # no empty text, nothing sent twice the same
    gaps = [b.at - a.at for a, b in zip(writes, writes[1:], strict=False)]
    assert min(gaps) >= TIMING.interval
    assert api.calls_to("sendChatAction")


def test_with_streaming_off_the_reply_is_sent_once_at_the_end(api):
    reply = " ".join(f"w{i}" for i in range(40))

    async def scenario():
        async with running(api, Slow(reply, pause=0.01), streaming=False) as channel:
            api.message("no streaming")
            await until(lambda: settled(channel, api) and api.texts(ANN), "the reply")

    asyncio.run(scenario())
    assert [c.method for c in api.calls if c.method in ("sendMessage", "editMessageText")] == ["sendMessage"]
    assert api.texts(ANN) == [reply]


# --- commands ---------------------------------------------------------------------------------------------


def test_stop_cancels_the_running_turn_and_status_answers_meanwhile(api):
    async def scenario():
        provider = Slow("never said", hold=asyncio.Event())
        async with running(api, provider) as channel:
            api.message("a long job")
            await until(provider.started.is_set, "the model call")
            api.message("/status")
            await until(lambda: any("model:" in t for t in api.texts(ANN)), "/status")
            api.message("/stop")
            await until(lambda: "Stopped the running turn." in api.texts(ANN), "/stop")
            await until(lambda: settled(channel, api), "the inbox to empty")
        return provider

    provider = asyncio.run(scenario())
    status = next(m for m in api.chat(ANN) if "model:" in m.text)
    assert status.raw.startswith("<pre>") and "session:  telegram:42" in status.text
    session = SessionStore(Paths.from_env().sessions_dir).load("telegram:42")
    assert session.messages[-1]["content"] == CANCELLED
    assert "never said" not in "".join(api.texts(ANN))
    assert [r.text for r in provider.replies] == ["never said"]  # the held call never got to answer


def test_help_and_new_work_as_in_the_terminal(api):
    async def scenario():
        async with running(api, ScriptedProvider(["first answer"])) as channel:
            api.message("hello")
            await until(lambda: "first answer" in api.texts(ANN), "the reply")
            api.message("/new")
            await until(lambda: any("fresh conversation" in t for t in api.texts(ANN)), "/new")
            api.message(f"/help@{BOT['username']}")
            await until(lambda: any("/usage" in t for t in api.texts(ANN)), "/help")
            await until(lambda: settled(channel, api), "the inbox to empty")

    asyncio.run(scenario())
    assert "Started a fresh conversation" in api.texts(ANN)[1]


# --- media ------------------------------------------------------------------------------------------------


def test_a_photo_and_a_binary_document_are_saved_under_media_and_named_in_the_message(api, isolated_home):
    provider = ScriptedProvider(["Nice photo.", "Got the file."])
    photo = b"\xff\xd8\xff" + b"jpeg-bytes" * 50
    binary = b"%PDF-1.7\n\x00\xff\xfe binary"

    async def scenario():
        async with running(api, provider) as channel:
            api.message(photo=photo, caption="what is this?")
            await until(lambda: api.texts(ANN) == ["Nice photo."], "the reply to the photo")
            api.message(document=("../../.report", binary))
            await until(lambda: api.texts(ANN)[-1:] == ["Got the file."], "the reply to the document")
            await until(lambda: settled(channel, api), "the inbox to empty")

    asyncio.run(scenario())
    first, second = user_texts("telegram:42")
    saved = re.fullmatch(r"what is this\?\n\[photo saved as (media/photo-\d{8}-\d{6}-[0-9a-f]{6}\.jpg)\]", first)
    assert saved, first
    workspace = Paths.from_env().workspace
    assert (workspace / saved.group(1)).read_bytes() == photo
    assert stat.S_IMODE((workspace / saved.group(1)).stat().st_mode) == 0o600
    document = re.fullmatch(r"\[document saved as (media/report-[0-9a-f]{6})\]", second)
    assert document, second
    assert (workspace / document.group(1)).read_bytes() == binary
    assert sorted(p.name for p in (workspace / "media").iterdir() if p.name.startswith("."))  == []


def test_a_text_document_reaches_the_model_as_marked_text_and_one_over_the_text_limit_is_saved(api):
    provider = ScriptedProvider(["Read it.", "Saved it."])
    notes = "first line\nsecond </attached_file> line\n"
    big = "x" * 1_001 + "\n"

    async def scenario():
        paths = Paths.from_env()
        hub = Hub(build_agent(Config(), paths, provider=provider))
        config = TelegramConfig(enabled=True, token=api.token, allow_from=[str(ANN)], api_base=api.url)
        runner = ChannelRunner(CHANNEL, config, paths, hub, TIMING, max_text_bytes=1_000)
        task = asyncio.create_task(runner.run())
        try:
            api.message(document=("../notes.md", notes.encode()), caption="summarise this")
            await until(lambda: api.texts(ANN) == ["Read it."], "the reply to the notes")
            api.message(document=("big.log", big.encode()))
            await until(lambda: settled(runner, api) and len(api.texts(ANN)) == 2, "the reply to the big file")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    first, second = user_texts("telegram:42")
    assert first == ('<attached_file name="notes.md">\nThe user attached this file.\n\nfirst line\n'
                     'second &lt;/attached_file> line\n</attached_file>\n\nsummarise this')  # as `agent -a` marks it
    assert re.fullmatch(r"\[document saved as media/big-[0-9a-f]{6}\.log\]", second), second
    media = list((Paths.from_env().workspace / "media").iterdir())
    assert [p.read_text() for p in media] == [big]  # the text that went to the model is not saved as well


def test_a_voice_note_is_saved_and_a_file_over_20_mb_is_named_but_not_downloaded(api):
    provider = ScriptedProvider(["Heard you.", "Too big."])

    async def scenario():
        async with running(api, provider) as channel:
            api.message(voice=b"OggS-voice")
            await until(lambda: api.texts(ANN)[1:] == ["Heard you."], "the reply to the voice note")
            api.message(document=("disk.iso", b"small stand-in"), file_size=21 * 1024 * 1024, caption="look")
            await until(lambda: settled(channel, api) and len(api.texts(ANN)) == 3, "the reply to the file")

    asyncio.run(scenario())
    assert api.texts(ANN)[0] == HINT  # transcription is off: how to turn it on (test_transcribe.py has it on)
    voice, big = user_texts("telegram:42")
    assert re.fullmatch(r"\[voice note saved as media/voice-note-\d{8}-\d{6}-[0-9a-f]{6}\.oga; not transcribed: "
                        r"transcription is off\]", voice), voice
    assert big == "look\n[document not saved: it is over the 20 MB limit]"
    assert [c.params["file_id"] for c in api.calls_to("getFile")] == [next(iter(api.files))]  # the voice note only
    assert len(list((Paths.from_env().workspace / "media").iterdir())) == 1


def test_saved_file_names_have_no_folders_no_leading_dots_and_keep_a_safe_extension():
    assert media_name("document", "../../etc/.passwd", None, 0) == ("passwd", "")
    assert media_name("document", "..\\..\\report final.PDF", None, 0) == ("report final", "pdf")
    assert media_name("document", "a/b/c$(rm -rf).txt", None, 0) == ("c__rm -rf_", "txt")
    assert media_name("voice note", None, "audio/ogg", 0) == ("voice-note-19700101-000000", "oga")
    assert media_name("document", "...", None, 0) == ("document-19700101-000000", "")


# --- trouble ----------------------------------------------------------------------------------------------


def test_a_429_from_telegram_is_waited_out_as_long_as_it_says(api, channel_log):
    api.fail("sendMessage", 429, "Too Many Requests: retry after 0.4", retry_after=0.4)

    async def scenario():
        async with running(api, ScriptedProvider(["after the wait"]), streaming=False) as channel:
            api.message("hi")
            await until(lambda: settled(channel, api) and api.texts(ANN), "the reply")

    asyncio.run(scenario())
    sends = [c for c in api.calls if c.method == "sendMessage"]
    assert [c.status for c in sends] == [429, 200]
    assert sends[1].at - sends[0].at >= 0.4
    assert api.texts(ANN) == ["after the wait"]
    assert any('"telegram_rate_limited"' in r and '"retry_after": 0.4' in r for r in channel_log)


def test_the_channel_recovers_when_the_bot_api_is_unreachable_for_a_while(api, channel_log):
    async def scenario():
        hold = asyncio.Event()
        provider = Slow("first answer", "second answer", hold=hold)
        async with running(api, provider) as channel:
            api.message("first")
            await until(provider.started.is_set, "the first model call")
            api.down()  # refuses connections; the long poll in flight is dropped
            hold.set()  # the first answer is ready while Telegram is away
            await until(lambda: any('"telegram_unreachable"' in r for r in channel_log), "the channel to notice")
            api.message("second")
            api.up()
            await until(lambda: api.texts(ANN) == ["first answer", "second answer"], "both answers")
            await until(lambda: settled(channel, api), "the inbox to empty")

    asyncio.run(scenario())
    assert user_texts("telegram:42") == ["first", "second"]


def test_methods_the_server_does_not_know_are_logged_and_skipped(api, channel_log):
    api.unknown = {"sendChatAction", "setMyCommands"}

    async def scenario():
        async with running(api, Slow("still fine", pause=0.01)) as channel:
            api.message("hi")
            await until(lambda: settled(channel, api) and api.texts(ANN) == ["still fine"], "the reply")

    asyncio.run(scenario())
    unsupported = [json.loads(r)["method"] for r in channel_log if "telegram_method_unsupported" in r]
    assert sorted(unsupported) == ["sendChatAction", "setMyCommands"]  # each once
    assert all(api.token not in r for r in channel_log)


def test_a_rejected_token_stops_the_channel_with_the_fix_in_the_log_and_no_token(api, channel_log):
    paths = Paths.from_env()
    hub = Hub(build_agent(Config(), paths, provider=ScriptedProvider([])))
    wrong = "999:not-the-token"
    channel = ChannelRunner(CHANNEL, TelegramConfig(enabled=True, token=wrong, api_base=api.url), paths, hub, TIMING)
    with pytest.raises(TelegramUnauthorized):
        asyncio.run(channel.run())
    assert any("TELEGRAM_BOT_TOKEN (from @BotFather)" in r for r in channel_log)
    assert all(wrong not in r for r in channel_log)


def test_an_update_taken_before_a_restart_is_handled_once_even_if_telegram_sends_it_again(api):
    update_id = api.message("are you there?")
    raw = {"id": str(update_id), "update_id": update_id, "message": {
        "message_id": 3, "date": 1, "chat": {"id": ANN, "type": "private"},
        "from": {"id": ANN, "is_bot": False, "first_name": "Ann"}, "text": "are you there?"}}
    state = state_file(Paths.from_env(), "telegram")
    state.update(lambda s: (s.take([raw]), s.cursor.update(last_update_id=str(update_id))))
    provider = ScriptedProvider(["yes"], default="a second answer")

    async def scenario():
        async with running(api, provider) as channel:
            await until(lambda: settled(channel, api) and api.texts(ANN), "the reply")
            await until(lambda: api.pending() == [], "Telegram to be told")

    asyncio.run(scenario())
    assert api.texts(ANN) == ["yes"] and len(provider.requests) == 1


def test_a_reply_finished_on_disk_but_not_delivered_is_sent_after_a_restart_without_a_model_call(api):
    paths = Paths.from_env()
    store = SessionStore(paths.sessions_dir)
    session = store.load("telegram:42")
    store.add_messages(session, [{"role": "user", "content": "what is 6 x 7?"},
                                 {"role": "assistant", "content": "It is **42**."}], sync=True)
    state_file(paths, "telegram").update(lambda s: s.open_turns.append("telegram:42"))
    provider = ScriptedProvider([])

    async def scenario():
        async with running(api, provider) as channel:
            await until(lambda: settled(channel, api) and api.texts(ANN), "the reply")

    asyncio.run(scenario())
    assert api.texts(ANN) == ["It is 42."] and provider.requests == []


def test_a_turn_cut_by_a_gateway_shutdown_is_finished_after_the_restart(api):
    async def first_run():
        provider = Slow("never", hold=asyncio.Event())
        async with running(api, provider) as channel:
            api.message("summarise my notes")
            await until(provider.started.is_set, "the model call")
            await channel.hub.drain(0)  # SIGTERM with no grace left: the turn is cancelled
            await until(lambda: not channel.hub.running(), "the turn to stop")
        return channel

    channel = asyncio.run(first_run())
    assert channel.state.read().open_turns == ["telegram:42"]
    assert api.texts(ANN) == []  # nothing was said, not even an empty bubble
    provider = ScriptedProvider(["Here is the summary."])

    async def second_run():
        async with running(api, provider) as channel:
            await until(lambda: settled(channel, api) and api.texts(ANN), "the reply")

    asyncio.run(second_run())
    assert api.texts(ANN) == ["Here is the summary."]
    assert user_texts("telegram:42")[0] == "summarise my notes"
    assert "restarted" in user_texts("telegram:42")[1]
    sent = provider.requests[0].messages
    assert [strip_runtime_context(m["content"]) for m in sent if m["role"] == "user"][0] == "summarise my notes"


# --- the gateway ------------------------------------------------------------------------------------------


@pytest.mark.process
def test_a_gateway_killed_mid_turn_answers_the_message_once_after_a_restart(api, llm, isolated_home):
    write_config(isolated_home, {"channels": {"telegram": {"enabled": True, "allowFrom": [ANN],
                                                           "apiBase": api.url}}})
    llm.script(Reply(text="never delivered", delay=2), Reply(text="The answer is 42."))
    env = {**openai_env(llm), "TELEGRAM_BOT_TOKEN": api.token}
    state = state_file(Paths.from_env(), "telegram")
    log_path = isolated_home.parent / "gateway.stderr"  # where start_gateway_process logs

    first = start_gateway_process({**os.environ, **env})
    try:
        api.message("what is the answer?")
        wait_until(lambda: llm.requests, "the model call")
    finally:
        first.kill()  # SIGKILL, mid-turn
        first.wait()
    assert state.read().inbox == [] and state.read().open_turns == ["telegram:42"]

    second = start_gateway_process({**os.environ, **env})
    try:
        wait_until(lambda: any("The answer is 42." in t for t in api.texts(ANN)), "the answer")
        wait_until(lambda: state.read().open_turns == [] and state.read().inbox == [], "the turn to close")
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=PATIENCE) == 0, log_path.read_text()

    assert api.texts(ANN) == ["The answer is 42."]
    assert len(llm.requests) == 2
    resumed = json.dumps(llm.requests[1].body["messages"])
    assert resumed.count("what is the answer?") == 1
    session_file = isolated_home / "sessions" / "telegram__42.jsonl"
    records = [json.loads(line) for line in session_file.read_text().splitlines()]  # every line whole
    assert user_texts("telegram:42").count("what is the answer?") == 1
    assert [r["message"]["content"] for r in records if r["type"] == "message"
            and r["message"]["role"] == "assistant"] == ["The answer is 42."]
    logs = log_path.read_text() + "".join(p.read_text() for p in (isolated_home / "logs").iterdir())
    assert api.token not in logs and "what is the answer" not in logs


def test_the_gateway_refuses_to_start_telegram_without_a_token(isolated_home):
    write_config(isolated_home, {"channels": {"telegram": {"enabled": True}}})
    ran = invoke("gateway", env={"OPENAI_API_KEY": "sk-test", "NANOAGENT_MODEL": "openai/gpt-test"})
    assert ran.returncode == 1
    assert ran.error_lines[-1] == ("Error: channels.telegram.enabled is true but there is no bot token: set "
                                   "TELEGRAM_BOT_TOKEN or channels.telegram.token (create a bot with @BotFather in "
                                   "Telegram).")


def test_telegram_settings_come_from_config_and_the_token_from_the_environment_first(isolated_home):
    path = write_config(isolated_home, {"channels": {"telegram": {
        "enabled": True, "token": "from-file", "allowFrom": [1, 2], "groupPolicy": "all", "streaming": False,
        "apiBase": "http://127.0.0.1:9"}}})
    config, warnings = load_config(path, env={})
    telegram = CHANNEL.settings(config)
    assert warnings == []
    assert (telegram.token, telegram.allow_from, telegram.group_policy, telegram.streaming, telegram.api_base) == \
        ("from-file", ["1", "2"], "all", False, "http://127.0.0.1:9")
    assert CHANNEL.settings(load_config(path, env={"TELEGRAM_BOT_TOKEN": "from-env"})[0]).token == "from-env"
    assert CHANNEL.settings(Config()).api_base == "https://api.telegram.org"


@pytest.mark.process
def test_nanoagent_help_does_not_import_the_telegram_library():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "nanoagent", "--help"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0 and "pairing" in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert "telegram" not in imported


def test_a_flood_of_strangers_cannot_push_out_a_friends_pending_pairing_code(api, channel_log):
    from nanoagent.channels.state import CODE_TTL, MAX_PENDING

    clock = [time.time()]  # the wall clock, moved on by hand below (`pairing approve` reads the real one)
    timing = Timing(interval=0.1, typing=0.3, poll=1, backoff=(0.05, 0.1, 0.2), now=lambda: clock[0])
    friend, strangers = 7, range(1000, 1000 + MAX_PENDING + 10)

    async def scenario():
        async with running(api, ScriptedProvider(["Welcome in."]), timing) as channel:
            api.message("it's me", user_id=friend, name="Friend")
            await until(lambda: api.texts(friend), "the friend's code")
            for stranger in strangers:  # within the hour
                last = api.message("let me in", user_id=stranger, name=f"S{stranger}")
            await until(lambda: taken(channel) >= last and settled(channel, api), "the flood",
                        timeout=PATIENCE)
            coded = [s for s in strangers if api.texts(s)]
            assert coded == list(strangers)[:MAX_PENDING - 1]  # those who wrote first; the rest get nothing
            code = re.search(r"nanoagent pairing approve (\S+)", api.texts(friend)[0]).group(1)
            ran = await asyncio.to_thread(invoke, "pairing", "approve", code)
            assert ran.returncode == 0, ran.stderr  # the friend's code survived the flood
            clock[0] += CODE_TTL + 1  # an hour later the flood's codes have expired: newcomers get codes again
            api.message("me too", user_id=5, name="Late")
            await until(lambda: api.texts(5), "a code for a newcomer after the flood's codes expired")

    asyncio.run(scenario())
    assert sum('"telegram_pairing_full"' in line for line in channel_log) == 11


def test_the_gateway_refuses_an_allow_from_entry_that_is_not_a_telegram_user_id(isolated_home):
    write_config(isolated_home, {"channels": {"telegram": {"enabled": True, "token": "1:x", "allowFrom": ["@ann"]}}})
    ran = invoke("gateway", env={"OPENAI_API_KEY": "sk-test", "NANOAGENT_MODEL": "openai/gpt-test"})
    assert ran.returncode == 1
    assert ran.error_lines[-1] == ("Error: channels.telegram.allowFrom holds '@ann', which is not a Telegram user id: "
                                   "write the number (a message to @userinfobot shows yours).")


def test_the_component_says_whether_it_is_connected_and_as_whom(api):
    paths = Paths.from_env()
    hub = Hub(build_agent(Config(), paths, provider=ScriptedProvider([])))
    settings = TelegramConfig(enabled=True, token=api.token, api_base=api.url)
    component = channel_component(CHANNEL, settings, paths, hub, TIMING)
    wrong = channel_component(CHANNEL, TelegramConfig(enabled=True, token="9:wrong", api_base=api.url), paths, hub,
                              TIMING)

    async def scenario():
        task = asyncio.create_task(component.run())
        await until(lambda: component.health, "the component's health")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with pytest.raises(TelegramUnauthorized):
            await wrong.run()

    asyncio.run(scenario())
    assert component.health == "connected as @nano_test_bot"
    assert wrong.health.startswith("failing: Telegram rejected the bot token")


def test_the_components_health_says_failing_while_the_bot_api_is_down_and_connected_once_it_is_back(api,
                                                                                                        channel_log):
    paths = Paths.from_env()
    hub = Hub(build_agent(Config(), paths, provider=ScriptedProvider([])))
    component = channel_component(CHANNEL, TelegramConfig(enabled=True, token=api.token, api_base=api.url), paths,
                                  hub, TIMING)
    seen: list[str] = []

    async def scenario():
        task = asyncio.create_task(component.run())
        try:
            await until(lambda: component.health == "connected as @nano_test_bot", "connected")
            api.down()  # the long poll in flight is dropped, and every call after it refused
            await until(lambda: component.health.startswith("failing: "), "the health to say failing")
            seen.append(component.health)
            api.up()
            await until(lambda: component.health == "connected as @nano_test_bot", "connected again")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    [failing] = seen
    assert failing.startswith("failing: Telegram's Bot API unreachable: ")
    assert len(failing) > len("failing: Telegram's Bot API unreachable: ")  # the reason, not only that it failed
    assert api.token not in failing and api.token.partition(":")[2] not in failing
    assert all(api.token not in r for r in channel_log)


def test_a_delivery_outside_the_gateway_is_telegram_html_through_the_same_client(api):
    settings = TelegramConfig(enabled=True, token=api.token, api_base=api.url)
    api.fail("sendMessage", 429, "Too Many Requests: retry after 0.3", retry_after=0.3)

    async def scenario():
        started = time.monotonic()
        await CHANNEL.deliver(settings, Place("telegram", "42", "17"), "It is **time**.")
        waited = time.monotonic() - started
        await CHANNEL.deliver(settings, Place("telegram", "42"), "Here is REJECT-HTML **bold**.")
        return waited

    waited = asyncio.run(scenario())
    assert waited >= 0.3
    assert [(m.raw, m.parse_mode, m.thread_id) for m in api.chat(ANN)] == [
        ("It is <b>time</b>.", "HTML", 17), ("Here is REJECT-HTML **bold**.", None, None)]


def test_a_delivery_that_cannot_arrive_says_why(api):
    settings = TelegramConfig(enabled=True, token=api.token, api_base=api.url)
    api.fail("sendMessage", 400, "Bad Request: chat not found")
    with pytest.raises(DeliveryError, match="Telegram refused the message to chat 5: Chat not found"):
        asyncio.run(CHANNEL.deliver(settings, Place("telegram", "5"), "hello"))
    api.down()
    with pytest.raises(DeliveryError, match=r"Telegram could not be reached \(NetworkError\)"):
        asyncio.run(CHANNEL.deliver(settings, Place("telegram", "5"), "hello", backoff=(0.01,)))
    with pytest.raises(DeliveryError, match="no Telegram bot token"):
        asyncio.run(CHANNEL.deliver(TelegramConfig(enabled=True), Place("telegram", "5"), "hello"))


def test_verify_names_the_bot_or_says_the_token_was_rejected(api):
    good = TelegramConfig(enabled=True, token=api.token, api_base=api.url)
    assert asyncio.run(CHANNEL.verify(good)) == "@nano_test_bot"
    wrong = TelegramConfig(enabled=True, token="9:wrong", api_base=api.url)
    with pytest.raises(NanoagentError, match="Telegram rejected the bot token: copy it again from @BotFather."):
        asyncio.run(CHANNEL.verify(wrong))


def test_a_reply_whose_delivery_keeps_raising_is_parked_and_the_channel_answers_the_next_message():
    from nanoagent.messages import assistant, user
    from tests.telegram_server import StandIn

    paths = Paths.from_env()
    stand_in = StandIn()
    store = SessionStore(paths.sessions_dir)
    broken = "telegram:not-a-chat"  # a turn left open for a chat Telegram cannot address: sending it raises
    store.add_messages(store.load(broken), [user("hello"), assistant("an answer with nowhere to go")])
    state_file(paths, "telegram").update(lambda state: state.open_turns.append(broken))
    provider = ScriptedProvider(["Still here."])

    async def scenario():
        async with harness.running(stand_in, provider) as runner:
            await until(lambda: runner.state.read().parked, "the reply to be parked")
            stand_in.write(stand_in.owner, "are you there?")
            await until(lambda: "Still here." in stand_in.shown(stand_in.owner) and harness.settled(runner),
                        "the next answer, its turn closed")
            return runner.state.read()

    try:
        state = asyncio.run(scenario())
    finally:
        stand_in.close()
    [parked] = state.parked
    assert (parked.kind, parked.key, parked.text) == ("reply", broken, "an answer with nowhere to go")
    assert parked.failures == 3 and parked.error.startswith("ValueError")
    assert state.open_turns == []
    told = [text for text in stand_in.shown(stand_in.owner) if text != "Still here."]  # the owner, named: told once
    assert len(told) == 1 and f"A reply in {broken} failed 3 times" in told[0]
    assert "nanoagent channels retry telegram" in told[0]


def test_the_owner_hears_of_parked_items_in_their_private_chat_once_channels_name_an_owner():
    from types import SimpleNamespace

    from nanoagent.channels.owners import owner_places

    settings = TelegramConfig(enabled=True, token="1:x")
    assert owner_places(CHANNEL, settings) == []  # no owner named: the log alone says it
    assert owner_places(CHANNEL, TelegramConfig(enabled=True, token="1:x", owner=["42"])) == [Place("telegram", "42")]
    assert owner_places(CHANNEL, SimpleNamespace(enabled=True)) == []  # a channel whose settings carry no owner
