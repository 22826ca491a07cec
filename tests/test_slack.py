"""The Slack channel's link: the real slack-sdk (Socket Mode on aiohttp, AsyncWebClient) against the Slack stand-in
over real sockets (slack_server.py), driven as the engine drives it: receive, store in the state's inbox, then
acknowledge."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from nanoagent.channels import registry
from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing
from nanoagent.channels.slack.format import LIMIT, from_slack, markdown_to_mrkdwn, split_markdown
from nanoagent.channels.slack.link import SlackLink
from nanoagent.channels.slack.settings import SlackConfig
from nanoagent.channels.state import ChannelState, state_file
from nanoagent.errors import NanoagentError
from nanoagent.keys import Place
from nanoagent.paths import Paths
from tests.conftest import PATIENCE, invoke, until, write_config
from tests.slack_server import APP_TOKEN, BOT_TOKEN, BOT_USER, GENERAL, OWNER, STRANGER, SlackAPI

TIMING = Timing(interval=0.1, typing=0.3, backoff=(0.05, 0.1, 0.2))
CHANNEL = registry.get("slack")


@pytest.fixture
def slack():
    api = SlackAPI(redeliver_after=0.5)
    yield api
    api.close()


@pytest.fixture
def slack_log():
    """What the channel logs, as the gateway's log file would hold it."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    loggers = [logging.getLogger("nanoagent.channels.slack"), logging.getLogger("nanoagent.channels.slack.sdk")]
    handler, levels = Keep(), [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
    loggers[0].setLevel(logging.DEBUG)
    yield records
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


def home(path: Any) -> Paths:
    return Paths(home=path, workspace=path / "workspace")


def settings(api: SlackAPI, **changes: Any) -> SlackConfig:
    return SlackConfig(enabled=True, bot_token=BOT_TOKEN, app_token=APP_TOKEN, allow_from=[OWNER],
                       api_base=api.api_base, **changes)



class Driver:
    """The engine's side of the contract: each batch into the state's inbox, then acknowledged."""

    def __init__(self, link: SlackLink, paths: Paths, store: bool = True):
        self.link = link
        self.paths = paths
        self.store = store
        self.got: list[Incoming] = []
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        async for batch in self.link.receive():
            fresh = set(state_file(self.paths, "slack").update(functools.partial(ChannelState.take,
                                                                                 raws=[i.raw for i in batch])))
            self.got.extend(i for i in batch if i.id in fresh)
            if self.store:
                await self.link.acknowledge(batch)

    async def next(self, count: int = 1) -> list[Incoming]:
        await until(lambda: len(self.got) >= count, f"{count} message(s)")
        return self.got[:count]


@asynccontextmanager
async def running(api: SlackAPI, paths: Paths, store: bool = True, **changes: Any) -> AsyncIterator[Driver]:
    link = SlackLink(settings(api, **changes), paths, TIMING)
    assert await link.connect() == "@nano"
    driver = Driver(link, paths, store)
    driver.task = asyncio.create_task(driver.run())
    try:
        yield driver
    finally:
        driver.task.cancel()
        await link.close()


def scenario(api: SlackAPI, tmp_path: Any, body: Callable[[Driver], Awaitable[None]], **changes: Any) -> None:
    async def main() -> None:
        async with running(api, home(tmp_path / "home"), **changes) as driver:
            await body(driver)

    asyncio.run(main())


# --- what arrives -------------------------------------------------------------------------------------------


def test_a_direct_message_is_a_private_message_of_its_dm_session(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        slack.write(OWNER, "hello &lt;there&gt;")
        [incoming] = await driver.next()
        assert incoming.place == Place("slack", OWNER) == CHANNEL.home(OWNER)  # a DM is its person's place
        assert (incoming.user, incoming.name, incoming.text, incoming.private) == (OWNER, "Ann", "hello <there>", True)
        assert CHANNEL.allowed(settings(slack), incoming.user) and not CHANNEL.allowed(settings(slack), STRANGER)

    scenario(slack, tmp_path, body)


def test_a_mention_in_a_channel_is_answered_in_its_own_thread(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        ts = slack.write(OWNER, "what is up?", private=False)
        [incoming] = await driver.next()
        assert incoming.place == Place("slack", GENERAL, ts)
        assert incoming.place.key == f"slack:{GENERAL}:{ts}"
        assert (incoming.text, incoming.private) == ("what is up?", False)
        await driver.link.send(incoming.place, Chunk("*all good*", "**all good**"), persistent=True)
        assert slack.thread(GENERAL, ts) == ["*all good*"]
        assert slack.bot_messages(GENERAL, "") == []  # nothing in the channel itself
        await until(lambda: len(slack.acked()) == 2, "both envelopes acknowledged")  # message and app_mention
        assert len(driver.got) == 1

    scenario(slack, tmp_path, body)


def test_a_reply_in_a_thread_the_bot_serves_needs_no_mention(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        ts = slack.write(OWNER, "start", private=False)
        await driver.next()
        slack.write(OWNER, "and then?", private=False, thread_ts=ts, mention=False)
        slack.write(OWNER, "unrelated chatter", private=False, mention=False)  # not for the bot
        _, reply = await driver.next(2)
        assert (reply.place, reply.text) == (Place("slack", GENERAL, ts), "and then?")
        await asyncio.sleep(0.3)
        assert len(driver.got) == 2
        assert not slack.unacked()  # the chatter was acknowledged, and dropped

    scenario(slack, tmp_path, body)


def test_group_policy_all_takes_every_channel_message_and_off_none(slack: SlackAPI, tmp_path: Any) -> None:
    async def every(driver: Driver) -> None:
        ts = slack.write(OWNER, "no mention here", private=False, mention=False)
        [incoming] = await driver.next()
        assert incoming.place == Place("slack", GENERAL, ts)

    scenario(slack, tmp_path, every, group_policy="all")

    async def none(driver: Driver) -> None:
        slack.write(OWNER, "hey bot", private=False)
        slack.write(OWNER, "a DM still counts")
        [incoming] = await driver.next()
        assert incoming.text == "a DM still counts"

    scenario(slack, tmp_path / "off", none, group_policy="off")


def test_the_bots_own_messages_and_edits_are_ignored(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        channel = f"D{OWNER}"
        slack.event({"type": "message", "channel": channel, "channel_type": "im", "user": BOT_USER,
                     "bot_id": "B0BOT", "text": "my own", "ts": slack.ts()})
        slack.event({"type": "message", "subtype": "message_changed", "channel": channel, "channel_type": "im",
                     "message": {"user": OWNER, "text": "edited", "ts": "1.000001"}, "ts": slack.ts()})
        slack.write(OWNER, "real")
        [incoming] = await driver.next()
        assert incoming.text == "real"
        await until(lambda: len(slack.acked()) == 3, "every envelope acknowledged")

    scenario(slack, tmp_path, body)


# --- exactly once ---------------------------------------------------------------------------------------------


def test_an_envelope_is_acknowledged_only_after_it_is_stored_and_within_three_seconds(slack: SlackAPI,
                                                                                      tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        slack.write(OWNER, "one")
        [incoming] = await driver.next()
        assert slack.acked() == []  # stored in the inbox, not yet acknowledged
        inbox = state_file(driver.paths, "slack").read().inbox
        assert [m["id"] for m in inbox] == [incoming.id]
        await driver.link.acknowledge([incoming])
        [envelope] = await until(slack.acked, "the ack")
        assert envelope.acked_at is not None and envelope.first_sent is not None
        assert envelope.acked_at - envelope.first_sent < 3.0
        assert envelope.attempts == 1  # never sent again
        assert state_file(driver.paths, "slack").read().cursor == {f"D{OWNER}": incoming.raw["ts"]}

    scenario(slack, tmp_path, body, store=False)


def test_an_envelope_the_engine_is_slow_to_store_is_acknowledged_before_slack_resends_it(slack: SlackAPI,
                                                                                        tmp_path: Any) -> None:
    async def live() -> None:
        slack.redeliver_after = 3.0
        link = SlackLink(settings(slack), home(tmp_path / "home2"), TIMING, ack_deadline=0.3)
        await link.connect()
        try:
            receiving = link.receive()
            slack.write(OWNER, "slow")
            [incoming] = await anext(receiving)
            assert incoming.text == "slow"
            [envelope] = await until(slack.acked, "the early ack")
            assert envelope.acked_at is not None and envelope.acked_at - envelope.sent_at < 3.0
            assert envelope.attempts == 1
            # a restart reads the history from just before it: the chat had no cursor yet
            assert state_file(link.paths, "slack").read().cursor == {f"D{OWNER}": f"{float(incoming.raw['ts']) - 1e-6:.6f}"}
        finally:
            await link.close()

    asyncio.run(live())

    async def restart() -> None:
        async with running(slack, home(tmp_path / "home2")) as driver:
            [again] = await driver.next()
            assert again.text == "slow"

    asyncio.run(restart())


def test_an_envelope_not_acknowledged_is_delivered_again_to_the_next_connection(slack: SlackAPI,
                                                                              tmp_path: Any) -> None:
    paths = home(tmp_path / "home")

    async def first() -> str:
        async with running(slack, paths, store=False) as driver:
            slack.write(OWNER, "are you there?")
            [incoming] = await driver.next()
            return incoming.id  # gone before it acknowledged

    async def second(first_id: str) -> None:
        link = SlackLink(settings(slack), paths, TIMING)
        await link.connect()
        try:
            receiving = link.receive()
            [again] = await anext(receiving)
            assert (again.id, again.text) == (first_id, "are you there?")
            await link.acknowledge([again])
            [envelope] = await until(slack.acked, "the ack of the redelivery")
            assert envelope.attempts == 2
        finally:
            await link.close()

    asyncio.run(second(asyncio.run(first())))


def test_messages_written_while_the_link_was_away_are_read_from_the_history_once(slack: SlackAPI,
                                                                                tmp_path: Any) -> None:
    paths = home(tmp_path / "home")

    async def before() -> str:
        async with running(slack, paths) as driver:
            ts = slack.write(OWNER, "start", private=False)
            slack.write(OWNER, "first DM")
            await driver.next(2)
            return ts

    thread = asyncio.run(before())
    slack.write(OWNER, "while away, in the thread", private=False, thread_ts=thread, mention=False)
    slack.write(OWNER, "while away, a DM")
    slack.write(OWNER, "while away, chatter", private=False, mention=False)
    assert len(slack.acked()) == 3 and all(e.attempts == 1 for e in slack.unacked())  # nobody to deliver to

    async def after() -> None:
        async with running(slack, paths) as driver:
            caught = await driver.next(2)
            assert {(i.place.key, i.text) for i in caught} == {
                (f"slack:{GENERAL}:{thread}", "while away, in the thread"), (f"slack:{OWNER}", "while away, a DM")}
            await asyncio.sleep(0.3)
            assert len(driver.got) == 2

    asyncio.run(after())

    async def again() -> None:  # a second restart reads nothing new: the cursor moved
        async with running(slack, paths) as driver:
            slack.write(OWNER, "new")
            [incoming] = await driver.next()
            assert incoming.text == "new"

    asyncio.run(again())


def test_a_reconnect_catches_up_on_what_came_while_the_socket_was_away(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        slack.write(OWNER, "before")
        await driver.next()
        slack.down(True)
        slack.write(OWNER, "during")  # no socket: Slack gives up on the event
        slack.down(False)
        [_, during] = await driver.next(2)
        assert during.text == "during"
        assert slack.connections >= 2

    scenario(slack, tmp_path, body)


def test_slacks_disconnect_message_is_followed_by_a_new_connection(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        slack.disconnect()  # refresh_requested, as Slack sends every few hours
        await until(lambda: slack.connections >= 2, "the new connection")
        await until(lambda: sum(1 for c in slack.calls if c.method == "apps.connections.open") >= 2, "a new URL")
        slack.write(OWNER, "still there?")
        [incoming] = await driver.next()
        assert incoming.text == "still there?"

    scenario(slack, tmp_path, body)


# --- what goes out ------------------------------------------------------------------------------------------------


def test_a_long_reply_is_split_under_slacks_limit_and_arrives_whole(slack: SlackAPI, tmp_path: Any) -> None:
    text = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum dolor " * 20 for i in range(60))
    text += "\n\n```\n" + "\n".join(f"print({i})" for i in range(600)) + "\n```"

    async def body(driver: Driver) -> None:
        place = Place("slack", OWNER)  # the DM is opened from the person's id
        for chunk in CHANNEL.split(text):
            assert await driver.link.send(place, chunk, persistent=True)
        shown = slack.shown(OWNER)
        assert len(shown) > 5 and all(len(m) <= LIMIT for m in shown)
        assert all(m.count("```") % 2 == 0 for m in shown)  # code blocks closed and reopened
        assert "Paragraph 59" in shown[-3] + shown[-2] + shown[-1] and "print(599)" in shown[-1]

    scenario(slack, tmp_path, body)


def test_a_rate_limit_is_waited_out_for_its_retry_after(slack: SlackAPI, tmp_path: Any, slack_log: list[str]) -> None:
    async def body(driver: Driver) -> None:
        place = Place("slack", f"D{OWNER}")  # a DM channel's id works as well
        slack.rate_limit(1, 1.0)
        assert await driver.link.send(place, Chunk("hi", "hi"), persistent=False)
        first, second = [c for c in slack.calls if c.method == "chat.postMessage"]
        assert first.status == 429 and second.status == 200
        assert second.at - first.at >= 1.0
        assert slack.shown(OWNER) == ["hi"]
        assert any(json.loads(r)["event"] == "slack_rate_limited" for r in slack_log)

    scenario(slack, tmp_path, body)


def test_edits_deletes_and_the_thinking_status_in_a_thread(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        ts = slack.write(OWNER, "go", private=False)
        [incoming] = await driver.next()
        await driver.link.typing(incoming.place)
        assert slack.statuses == [(GENERAL, ts, "is thinking…")]
        sent = await driver.link.send(incoming.place, Chunk("draft", "draft"), persistent=False)
        assert sent and await driver.link.edit(incoming.place, sent, Chunk("more", "more"), persistent=True)
        assert slack.statuses == [(GENERAL, ts, "is thinking…")]  # the post cleared it, as Slack does
        await driver.link.typing(incoming.place)  # a tool runs
        assert await driver.link.edit(incoming.place, sent, Chunk("final", "final"), persistent=True)
        assert slack.statuses[-1] == (GENERAL, ts, "")  # an edit does not clear it: the link does
        assert slack.thread(GENERAL, ts) == ["final"] and slack.edits() == 2
        await driver.link.delete(incoming.place, sent)
        assert slack.thread(GENERAL, ts) == []
        slack.fail("assistant.threads.setStatus", "missing_scope")
        await driver.link.typing(incoming.place)
        await driver.link.typing(incoming.place)  # refused once: not asked again
        assert len([c for c in slack.calls if c.method == "assistant.threads.setStatus"]) == 4
        await driver.link.typing(Place("slack", f"D{OWNER}"))  # a DM outside threads has no indicator at all

    scenario(slack, tmp_path, body)


def test_a_slash_command_is_a_message_of_the_chat_it_was_typed_in(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        slack.send_envelope("slash_commands", {"command": "/stop", "text": "", "user_id": OWNER,
                                               "channel_id": f"D{OWNER}", "trigger_id": "1.2.abc"})
        [incoming] = await driver.next()
        assert (incoming.place.key, incoming.text, incoming.private) == (f"slack:{OWNER}", "/stop", True)
        await until(lambda: len(slack.acked()) == 1, "the command acknowledged")
        slack.send_envelope("slash_commands", {"command": "/nanoagent", "text": "status", "user_id": OWNER,
                                               "channel_id": f"D{OWNER}", "trigger_id": "1.3.abc"})
        slack.send_envelope("slash_commands", {"command": "/nanoagent", "text": "", "user_id": OWNER,
                                               "channel_id": f"D{OWNER}", "trigger_id": "1.4.abc"})
        slack.write(OWNER, " /usage")  # a leading space keeps Slack from taking it for a command
        _, status, bare, usage = await driver.next(4)
        assert (status.text, bare.text, usage.text) == ("/status", "/help", "/usage")

    scenario(slack, tmp_path, body)


def test_with_group_policy_off_a_slash_command_in_a_channel_is_dropped_as_its_messages_are(slack: SlackAPI,
                                                                                            tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        slack.send_envelope("slash_commands", {"command": "/nanoagent", "text": "new", "user_id": OWNER,
                                               "channel_id": GENERAL, "trigger_id": "1.5.abc"})
        slack.send_envelope("slash_commands", {"command": "/nanoagent", "text": "status", "user_id": OWNER,
                                               "channel_id": f"D{OWNER}", "trigger_id": "1.6.abc"})
        [incoming] = await driver.next()
        assert (incoming.place.key, incoming.text) == (f"slack:{OWNER}", "/status")  # the DM's, not the channel's
        await until(lambda: len(slack.acked()) == 2, "both acknowledged")

    scenario(slack, tmp_path, body, group_policy="off")


def test_a_file_is_downloaded_with_the_bot_token_and_only_from_slack(slack: SlackAPI, tmp_path: Any) -> None:
    async def body(driver: Driver) -> None:
        slack.write(OWNER, "look", file=("notes.txt", "text/plain", b"some notes"), image=b"\x89PNG fake")
        [incoming] = await driver.next()
        image, notes = incoming.files
        assert (image.kind, image.media_type, notes.kind, notes.name) == ("photo", "image/png", "document",
                                                                          "notes.txt")
        assert await driver.link.download(notes) == b"some notes"
        assert await driver.link.download(image) == b"\x89PNG fake"
        elsewhere = FileIn("document", "x", 1, "http://127.0.0.2:9/files-pri/x")
        assert await driver.link.download(elsewhere) is None  # the token is never sent elsewhere
        assert [c.error for c in slack.calls if c.method == "files-pri"] == ["", ""]

    scenario(slack, tmp_path, body)


def test_a_refused_token_is_one_line_naming_the_setting(slack: SlackAPI, tmp_path: Any) -> None:
    async def main() -> None:
        for wrong, setting in ((dict(bot_token="xoxb-wrong"), "botToken"), (dict(app_token="xapp-wrong"),
                                                                            "appToken")):
            link = SlackLink(SlackConfig(**{**settings(slack).__dict__, **wrong}), home(tmp_path), TIMING)
            with pytest.raises(NanoagentError, match=f"channels.slack.{setting} \\(invalid_auth\\)"):
                await link.connect()
            await link.close()
        assert await CHANNEL.verify(settings(slack)) == "@nano"

    asyncio.run(main())


def test_a_websocket_that_never_opens_is_an_error_not_a_hang(slack: SlackAPI, tmp_path: Any) -> None:
    async def main() -> None:
        slack.socket_refused = True
        link = SlackLink(settings(slack), home(tmp_path), TIMING, connect_timeout=0.5)
        try:
            with pytest.raises(NanoagentError, match="Socket Mode websocket did not open"):
                await link.connect()
        finally:
            await link.close()

    asyncio.run(main())


def test_the_log_holds_no_token_and_no_message_text(slack: SlackAPI, tmp_path: Any, slack_log: list[str]) -> None:
    async def body(driver: Driver) -> None:
        slack.rate_limit(1, 0.1)
        slack.write(OWNER, "secret words")
        [incoming] = await driver.next()
        await driver.link.send(incoming.place, Chunk("answer words", "answer words"), persistent=True)
        slack.down(True)
        slack.down(False)
        await until(lambda: slack.connections >= 2, "a reconnect")

    scenario(slack, tmp_path, body)
    text = "\n".join(slack_log)
    assert slack_log and "slack_connected" in text
    for secret in (BOT_TOKEN, APP_TOKEN, "secret words", "answer words"):
        assert secret not in text


def test_channel_problems_name_the_missing_setting() -> None:
    assert "SLACK_BOT_TOKEN" in (CHANNEL.problem(SlackConfig(enabled=True)) or "")
    assert "SLACK_APP_TOKEN" in (CHANNEL.problem(SlackConfig(enabled=True, bot_token="xoxb-1")) or "")
    assert CHANNEL.problem(SlackConfig(enabled=True, bot_token="xoxb-1", app_token="xapp-1")) is None
    assert CHANNEL.edits and CHANNEL.pairing and CHANNEL.home(" u0ann ") == Place("slack", OWNER)


def test_deliver_posts_through_the_web_api_into_the_thread(slack: SlackAPI) -> None:
    asyncio.run(CHANNEL.deliver(settings(slack), Place("slack", GENERAL, "1.000001"), "**done**"))
    assert slack.thread(GENERAL, "1.000001") == ["*done*"]
    asyncio.run(CHANNEL.deliver(settings(slack), Place("slack", STRANGER), "a note"))  # a DM before they wrote
    assert slack.shown(STRANGER) == ["a note"]
    slack.fail("chat.postMessage", "channel_not_found")
    with pytest.raises(DeliveryError, match="channel_not_found"):
        asyncio.run(CHANNEL.deliver(settings(slack), Place("slack", "C0GONE"), "hello"))


# --- mrkdwn ------------------------------------------------------------------------------------------------------


def test_markdown_becomes_mrkdwn_with_slacks_special_characters_escaped() -> None:
    text = ("# Plan\n\n**bold**, *it*, ~~gone~~ and [the docs](https://x.com/a?b=1&c=2) for <@U1> & co.\n"
            "- one\n- two `a<b`\n\n```python\nif a < b and c:\n    pass\n```")
    assert markdown_to_mrkdwn(text) == (
        "*Plan*\n\n*bold*, _it_, ~gone~ and <https://x.com/a?b=1&amp;c=2|the docs> for &lt;@U1&gt; &amp; co.\n"
        "• one\n• two `a&lt;b`\n\n```\nif a &lt; b and c:\n    pass\n```")


def test_a_heading_is_one_bold_line_even_with_bold_inside() -> None:
    assert markdown_to_mrkdwn("## The **big** plan ##\n1. first\n   - nested") == "*The big plan*\n1. first\n   • nested"


def test_a_code_block_longer_than_a_message_is_closed_and_reopened() -> None:
    chunks = split_markdown("intro\n\n```\n" + "\n".join(f"line {i}" for i in range(1500)) + "\n```")
    assert len(chunks) >= 3 and all(len(c.body) <= LIMIT and len(c.plain) <= LIMIT for c in chunks)
    assert all(c.body.startswith("```") and c.body.endswith("```") for c in chunks[1:])
    assert "".join(c.body for c in chunks).count("line ") == 1500


def test_text_from_slack_reads_as_the_person_meant_it() -> None:
    assert from_slack("<@U0BOT> see <https://x.com|x.com> and <https://y.com|docs>, ping <@U7|ann> in <#C1|gen>"
                      " &amp; &lt;3", "U0BOT") == "see https://x.com and docs (https://y.com), ping @ann in #gen & <3"


@pytest.mark.process
def test_the_channel_and_its_format_load_without_slack_sdk_or_aiohttp() -> None:
    code = ("import sys; from nanoagent.channels import registry; c = registry.get('slack'); c.split('**x**'); "
            "print([m for m in sys.modules if m.startswith(('slack_sdk', 'aiohttp'))])")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PATIENCE, check=True)
    assert ran.stdout.strip() == "[]"


def test_channels_add_slack_asks_both_tokens_checks_them_with_auth_test_and_writes_config(
        slack: SlackAPI, isolated_home: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, bool]] = []
    answers = iter([BOT_TOKEN, APP_TOKEN, OWNER, "y"])

    def read(prompt: str, secret: bool) -> str:
        asked.append((prompt, secret))
        return next(answers)

    monkeypatch.setattr("nanoagent.cli.oneshot.stdin_is_terminal", lambda: True)
    monkeypatch.setattr("nanoagent.cli.channels_cmd.read_answer", read)
    write_config(isolated_home, {"channels": {"slack": {"apiBase": slack.api_base}}})
    ran = invoke("channels", "add", "slack")
    assert ran.returncode == 0, ran.stderr
    assert [secret for _, secret in asked] == [True, True, False, False]  # the last: "Is U... you?"
    assert "Checked: Slack knows these credentials (@nano)." in ran.stdout
    written = json.loads((isolated_home / "config.json").read_text())["channels"]["slack"]
    assert written == {"apiBase": slack.api_base, "botToken": BOT_TOKEN, "appToken": APP_TOKEN, "allowFrom": [OWNER],
                       "owner": [OWNER], "enabled": True}
    assert [c.method for c in slack.calls] == ["auth.test"]
    assert BOT_TOKEN not in ran.stdout + ran.stderr and APP_TOKEN not in ran.stdout + ran.stderr
