"""The Discord channel: the real discord.py against a Discord stand-in over real sockets (discord_server.py: REST and
the gateway websocket), at the `apiBase` the settings name."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nanoagent.channels import registry
from nanoagent.channels.base import Chunk, DeliveryError, Incoming, Timing
from nanoagent.channels.discord import CHANNEL
from nanoagent.channels.discord.format import split, to_discord, units
from nanoagent.channels.discord.link import DiscordLink
from nanoagent.channels.discord.settings import DiscordConfig
from nanoagent.channels.state import state_file
from nanoagent.errors import NanoagentError
from nanoagent.keys import make
from nanoagent.messages import is_user, strip_runtime_context, text_of
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.session.store import SessionStore
from tests.channel_harness import running, settled
from tests.conftest import PATIENCE, openai_env, start_gateway_process, until, wait_until, write_config
from tests.discord_server import DiscordAPI
from tests.llm_server import Reply

TIMING = Timing(interval=0.1, typing=0.3, backoff=(0.05, 0.1, 0.2))
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture
def api():
    server = DiscordAPI()
    yield server
    server.close()


@pytest.fixture
def logged():
    """Every log record of the process, at every level (discord.py's and the channel's)."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    root, handler = logging.getLogger(), Keep(logging.DEBUG)
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield records
    root.removeHandler(handler)
    root.setLevel(level)


def settings(api: DiscordAPI, **changes: Any) -> DiscordConfig:
    values: dict[str, Any] = {"enabled": True, "token": api.token, "allow_from": [api.owner],
                              "api_base": api.api_base, **changes}
    return DiscordConfig(**values)



@contextlib.asynccontextmanager
async def connected(api: DiscordAPI, home: Path, **changes: Any) -> AsyncIterator[tuple[DiscordLink, Inbox]]:
    link = DiscordLink(settings(api, **changes), Paths(home, home / "workspace"), TIMING)
    try:
        assert await link.connect() == "@nano"
        inbox = Inbox(link)
        await until(lambda: api.connected(), "the gateway session")
        yield link, inbox
    finally:
        await link.close()


class Inbox:
    """What `receive` gives, read until a wanted message arrives."""

    def __init__(self, link: DiscordLink) -> None:
        self.link = link
        self.messages = link.receive().__aiter__()
        self.got: list[Incoming] = []

    async def until(self, message_id: str) -> list[Incoming]:
        """Every message received up to and including `message_id`, acknowledged as the engine would."""
        start = len(self.got)
        while all(m.id != message_id for m in self.got[start:]):
            batch = await asyncio.wait_for(self.messages.__anext__(), PATIENCE)
            await self.link.acknowledge(batch)
            self.got.extend(batch)
        return self.got[start:]


async def write(api: DiscordAPI, user: str, text: str, **options: Any) -> str:
    return await asyncio.to_thread(api.write, user, text, **options)


# --- receiving ---------------------------------------------------------------------------------------------------


def test_a_direct_message_arrives_as_a_private_message_from_its_sender_in_the_dm_place(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (_, inbox):
            sent = await write(api, api.owner, "hello there")
            [got] = await inbox.until(sent)
        assert (got.place, got.user, got.name, got.text, got.private) == (
            make("discord", api.owner), api.owner, "Ann", "hello there", True)

    asyncio.run(main())


def test_in_a_guild_channel_only_mentions_and_replies_to_the_bot_arrive_with_the_mention_removed(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (link, inbox):
            chatter = await write(api, api.owner, "just talking", private=False, mention=False)
            other_bot = await write(api, api.other_bot, "beep", private=False)
            mention = await write(api, api.owner, "what time is it?", private=False)
            reply_id = await link.send(make("discord", api.general), Chunk("noon", "noon"), persistent=True)
            assert reply_id is not None
            replied = await write(api, api.stranger, "thanks", private=False, mention=False, reply_to=reply_id)
            got = await inbox.until(replied)
        assert [(m.id, m.text, m.private, m.place) for m in got] == [
            (mention, "what time is it?", False, make("discord", api.general)),
            (replied, "thanks", False, make("discord", api.general))]
        assert chatter not in {m.id for m in got} and other_bot not in {m.id for m in got}

    asyncio.run(main())


def test_group_policy_all_takes_every_guild_message_and_off_takes_none_while_dms_still_arrive(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path, group_policy="all") as (_, inbox):
            chatter = await write(api, api.owner, "just talking", private=False, mention=False)
            assert [m.text for m in await inbox.until(chatter)] == ["just talking"]
        async with connected(api, tmp_path / "off", group_policy="off") as (_, inbox):
            mention = await write(api, api.owner, "are you there?", private=False)
            dm = await write(api, api.owner, "in private")
            assert [m.id for m in await inbox.until(dm)] == [dm]
            assert mention

    asyncio.run(main())


def test_a_thread_is_a_place_of_its_own_under_its_channel_and_the_reply_lands_in_the_thread(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (link, inbox):
            thread = await asyncio.to_thread(api.thread, "plans")
            sent = await write(api, api.owner, "in the thread", channel=thread)
            [got] = await inbox.until(sent)
            assert got.place == make("discord", api.general, thread)
            assert got.place.key == f"discord:{api.general}:{thread}"
            assert await link.send(got.place, Chunk("threaded answer", "threaded answer"), persistent=True)
        assert [m["content"] for m in api.messages(thread)][-1] == "threaded answer"
        assert all(m["content"] != "threaded answer" for m in api.messages(api.general))

    asyncio.run(main())


def test_a_thread_the_cache_does_not_know_is_asked_of_discord_and_keyed_under_its_parent(api, tmp_path):
    """Without the guilds intent's cache (a thread made while the gateway was away), the thread is looked up."""
    async def main() -> None:
        async with connected(api, tmp_path) as (link, inbox):
            thread = await asyncio.to_thread(api.thread, "plans")
            assert link.client is not None
            await until(lambda: link.client.get_channel(int(thread)), "THREAD_CREATE")  # type: ignore[union-attr]
            guild = link.client.guilds[0]
            guild._remove_thread(guild.get_thread(int(thread)))  # type: ignore[arg-type]
            sent = await write(api, api.owner, "hello", channel=thread)
            [got] = await inbox.until(sent)
        assert got.place == make("discord", api.general, thread)
        assert api.calls_to("GET", f"/channels/{thread}")

    asyncio.run(main())


def test_an_image_arrives_as_a_photo_with_its_url_and_downloads_to_its_bytes(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (link, inbox):
            sent = await write(api, api.owner, "look", image=PNG)
            doc = await write(api, api.owner, "", document=("notes.txt", b"plain words"))
            got = await inbox.until(doc)
            [photo], [text] = got[0].files, got[1].files
            assert (photo.kind, photo.name, photo.size, photo.media_type) == ("photo", "image.png", len(PNG),
                                                                               "image/png")
            assert photo.ref.startswith(api.url) and got[0].id == sent
            assert (text.kind, text.name) == ("document", "notes.txt")
            assert await link.download(photo) == PNG
            assert await link.download(text) == b"plain words"

    asyncio.run(main())


def test_an_incoming_rebuilt_from_its_raw_json_is_the_same_message(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (link, inbox):
            sent = await write(api, api.owner, "keep me", image=PNG)
            [got] = await inbox.until(sent)
        assert link.rebuild(got.raw) == got
        assert link.rebuild({"id": "1", "place": "telegram:5"}) is None

    asyncio.run(main())


def test_after_a_dropped_connection_the_session_is_resumed_and_what_came_meanwhile_arrives_once(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (_, inbox):
            await inbox.until(await write(api, api.owner, "before"))
            await asyncio.to_thread(api.drop)
            meanwhile = await write(api, api.owner, "while dropped")
            await until(lambda: api.resumes(), "a RESUME")
            after = await write(api, api.owner, "after")
            got = await inbox.until(after)
        assert [m.id for m in got] == [meanwhile, after]

    asyncio.run(main())


# --- catching up after a restart ---------------------------------------------------------------------------------


def test_after_a_restart_each_known_chat_is_caught_up_from_its_cursor_once_within_the_last_hour(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (_, inbox):
            first = await write(api, api.owner, "first")
            thread = await asyncio.to_thread(api.thread, "plans")
            in_thread = await write(api, api.owner, "in the thread", channel=thread)
            await inbox.until(in_thread)
            assert first
        cursor = state_file(Paths(tmp_path, tmp_path / "workspace"), "discord").read().cursor
        assert cursor == {f"discord:{api.owner}": first, f"discord:{api.general}:{thread}": in_thread}
        missed = [await write(api, api.owner, "while down 1"), await write(api, api.owner, "while down 2")]
        missed_thread = await write(api, api.owner, "thread while down", channel=thread)
        async with connected(api, tmp_path) as (_, inbox):
            live = await write(api, api.owner, "after the restart")
            got = await inbox.until(live)
        assert sorted(m.id for m in got) == sorted([*missed, missed_thread, live])
        assert [m.text for m in got if m.private][:2] == ["while down 1", "while down 2"]

    asyncio.run(main())


def test_the_catch_up_reads_no_further_back_than_an_hour(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (_, inbox):
            await inbox.until(await write(api, api.owner, "old", at=time.time() - 3 * 3600))
        await write(api, api.owner, "two hours ago", at=time.time() - 2 * 3600)
        recent = await write(api, api.owner, "ten minutes ago", at=time.time() - 600)
        async with connected(api, tmp_path) as (_, inbox):
            live = await write(api, api.owner, "now")
            assert [m.id for m in await inbox.until(live)] == [recent, live]

    asyncio.run(main())


# --- sending -----------------------------------------------------------------------------------------------------


def test_a_long_reply_goes_out_in_messages_under_2000_characters_and_discord_refuses_an_edit_past_it(api, tmp_path):
    reply = "\n\n".join(f"Paragraph {i}: " + "words " * 60 for i in range(20)) + "\n\n```python\n" + \
        "\n".join(f"print({i})" for i in range(400)) + "\n```"

    async def main() -> None:
        async with connected(api, tmp_path) as (link, _):
            place = make("discord", api.owner)
            chunks = CHANNEL.split(reply)
            ids = [await link.send(place, chunk, persistent=True) for chunk in chunks]
            assert all(ids)
            assert await link.edit(place, str(ids[0]), Chunk("x" * 2001, "x" * 2001), persistent=True) is False
            assert await link.edit(place, str(ids[0]), Chunk("short now", "short now"), persistent=True) is True
        shown = api.shown(api.owner)
        assert len(shown) == len(chunks) > 3 and shown[0] == "short now"
        assert all(len(text) <= 2000 for text in shown)
        assert all(text.count("```") % 2 == 0 for text in shown)
        assert api.edits() == 1

    asyncio.run(main())


def test_a_429_is_waited_out_for_its_retry_after_and_the_message_then_sent_once(api, tmp_path, logged):
    async def main() -> None:
        async with connected(api, tmp_path) as (link, _):
            place = make("discord", api.owner)
            api.rate_limit(1, 0.6)
            assert await link.send(place, Chunk("patience", "patience"), persistent=False)
        refused, sent = api.calls_to("POST", "/messages")
        assert (refused.status, sent.status) == (429, 200)
        assert sent.at - refused.at >= 0.6
        assert api.shown(api.owner) == ["patience"]

    asyncio.run(main())


def test_while_discord_fails_a_persistent_send_keeps_trying_and_arrives_and_a_streaming_edit_gives_up(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (link, _):
            place = make("discord", api.owner)
            first = await link.send(place, Chunk("one", "one"), persistent=True)
            api.down(True)
            assert await link.edit(place, str(first), Chunk("one more", "one more"), persistent=False) is False
            sending = asyncio.create_task(link.send(place, Chunk("two", "two"), persistent=True))
            await until(lambda: len([c for c in api.calls_to("POST", "/messages") if c.status == 503]) >= 3,
                        "three failed sends")
            assert not sending.done()
            api.down(False)
            assert await asyncio.wait_for(sending, PATIENCE)
        assert api.shown(api.owner) == ["one", "two"]

    asyncio.run(main())


def test_typing_and_delete_reach_discord(api, tmp_path):
    async def main() -> None:
        async with connected(api, tmp_path) as (link, _):
            place = make("discord", api.owner)
            await link.typing(place)
            sent = await link.send(place, Chunk("gone soon", "gone soon"), persistent=True)
            await link.delete(place, str(sent))
            await link.delete(place, str(sent))  # gone already: nothing to say
        assert api.calls_to("POST", "/typing") and api.shown(api.owner) == []

    asyncio.run(main())


# --- signing in, verify and deliver --------------------------------------------------------------------------------


def test_a_refused_token_says_where_to_put_the_right_one_and_the_token_is_never_logged(api, tmp_path, logged):
    async def main() -> None:
        link = DiscordLink(settings(api, token="wrong-token"), Paths(tmp_path, tmp_path / "workspace"), TIMING)
        with pytest.raises(NanoagentError, match="DISCORD_BOT_TOKEN"):
            await link.connect()
        with pytest.raises(NanoagentError, match="refused the bot token"):
            await CHANNEL.verify(settings(api, token="wrong-token"))
        async with connected(api, tmp_path) as (link, inbox):
            await inbox.until(await write(api, api.owner, "secret words"))
            await link.send(make("discord", api.owner), Chunk("answer", "answer"), persistent=True)

    asyncio.run(main())
    assert logged and not [line for line in logged if api.token in line or "wrong-token" in line]
    assert not [line for line in logged if "secret words" in line and "discord_" in line]


def test_without_the_message_content_intent_allowed_the_link_stops_saying_where_to_turn_it_on(api, tmp_path):
    api.content_intent = False

    async def main() -> None:
        link = DiscordLink(settings(api), Paths(tmp_path, tmp_path / "workspace"), TIMING)
        try:
            with pytest.raises(NanoagentError, match="Message Content Intent"):
                await link.connect()
        finally:
            await link.close()

    asyncio.run(main())


def test_verify_asks_who_the_bot_is(api):
    assert asyncio.run(CHANNEL.verify(settings(api))) == "@nano"
    assert [c.path for c in api.calls] == ["/users/@me"]


def test_deliver_over_rest_alone_opens_the_dm_of_a_user_or_posts_in_a_channel_or_thread(api):
    thread = api.thread("news")
    asyncio.run(CHANNEL.deliver(settings(api), CHANNEL.home(api.owner), "the **report**"))  # type: ignore[arg-type]
    asyncio.run(CHANNEL.deliver(settings(api), make("discord", api.owner), "x" * 2500))
    asyncio.run(CHANNEL.deliver(settings(api), make("discord", api.general), "to the channel"))
    asyncio.run(CHANNEL.deliver(settings(api), make("discord", api.general, thread), "to the thread"))
    assert api.shown(api.owner) == ["the **report**", "x" * 2000, "x" * 500]
    assert [m["content"] for m in api.messages(api.general)] == ["to the channel"]
    assert [m["content"] for m in api.messages(thread)] == ["to the thread"]
    assert api.calls_to("POST", "/users/@me/channels") and api.sessions == {}
    with pytest.raises(DeliveryError, match="discord:1234"):
        asyncio.run(CHANNEL.deliver(settings(api), make("discord", "1234"), "nowhere"))


def test_the_channel_is_registered_and_says_what_keeps_it_from_starting():
    channel = registry.get("discord")
    assert (channel.name, channel.limit, channel.edits, channel.pairing) == ("discord", 2000, True, True)
    assert "DISCORD_BOT_TOKEN" in str(channel.problem(DiscordConfig(enabled=True)))
    assert channel.problem(DiscordConfig(enabled=True, token="t")) is None
    assert channel.allowed(DiscordConfig(allow_from=["123"]), "123")
    assert not channel.allowed(DiscordConfig(allow_from=["123"]), "1234")
    assert channel.home("123") == make("discord", "123")


# --- through the shared engine ------------------------------------------------------------------------------------


def test_nanoagents_commands_work_as_text_in_a_dm_and_after_a_mention_in_a_guild_channel(api):
    provider = ScriptedProvider(["First answer."])

    async def scenario() -> None:
        async with running(api, provider) as runner:
            api.write(api.owner, "hello")
            await until(lambda: api.shown(api.owner) == ["First answer."], "the answer")
            for command in ("/status", "/usage", "/help", "/new"):
                before = len(api.shown(api.owner))
                api.write(api.owner, command)
                await until(lambda: len(api.shown(api.owner)) > before, command)  # noqa: B023
            api.write(api.owner, "/help", private=False)  # "@Nano /help" in #general
            await until(lambda: api.messages(api.general)[-1]["author"]["id"] == api.bot["id"],
                                   "/help in the guild")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    # no command made a model call but /new's flush (the owner's own chat) and archive of the conversation
    answer, _flush, archive = provider.requests
    assert "[user] hello\n[assistant] First answer." in text_of(archive.messages[-1])
    status, usage, help_text, new = api.shown(api.owner)[1:]
    assert "/new" in help_text and "/stop" in help_text
    assert help_text == api.messages(api.general)[-1]["content"]
    assert f"session:  discord:{api.owner} (2 messages" in status and "1 calls" in usage
    assert new.startswith("Started a fresh conversation.")


def test_a_mention_in_a_thread_is_answered_in_the_thread_in_a_session_of_its_own(api):
    provider = ScriptedProvider(["In the thread.", "In the channel."])

    def last(channel: str) -> str:
        return "".join(m["content"] for m in api.messages(channel)[-1:])

    async def scenario() -> str:
        async with running(api, provider) as runner:
            thread = api.thread("plans")
            api.write(api.owner, "here?", channel=thread)
            await until(lambda: last(thread) == "In the thread.", "the reply in the thread")
            api.write(api.owner, "and here?", private=False)
            await until(lambda: last(api.general) == "In the channel.", "the reply in the channel")
            await until(lambda: settled(runner), "the inbox to empty")
            return thread

    thread = asyncio.run(scenario())
    sessions = SessionStore(Paths.from_env().sessions_dir)
    asked = [strip_runtime_context(text_of(m)) for m in sessions.load(f"discord:{api.general}:{thread}").messages
             if is_user(m)]
    assert asked == ["Ann: here?"]
    assert [strip_runtime_context(text_of(m)) for m in sessions.load(f"discord:{api.general}").messages
            if is_user(m)] == ["Ann: and here?"]


@pytest.mark.process
def test_a_message_written_while_the_gateway_was_killed_is_answered_once_from_the_history(llm, isolated_home):
    """Discord does not send it again: the restarted gateway reads it from the DM's history after its cursor."""
    api = DiscordAPI()
    try:
        write_config(isolated_home, {"channels": {"discord": api.settings()}})
        llm.script(Reply(text="First answer."), Reply(text="Second answer."))
        env = {**os.environ, **openai_env(llm)}
        state = state_file(Paths.from_env(), "discord")
        first = start_gateway_process(env)
        try:
            api.write(api.owner, "first question")
            wait_until(lambda: api.shown(api.owner) == ["First answer."], "the first answer")
            wait_until(lambda: not state.read().open_turns and not state.read().inbox, "the first turn to close")
        finally:
            first.kill()  # SIGKILL: the gateway session is gone, never resumed
            first.wait()
        api.write(api.owner, "asked while it was down")
        second = start_gateway_process(env)
        try:
            wait_until(lambda: api.shown(api.owner) == ["First answer.", "Second answer."], "the second answer")
            wait_until(lambda: not state.read().open_turns and not state.read().inbox, "the second turn to close")
            api.write(api.owner, "and now?")  # live again: whatever was to arrive twice came before this one
            wait_until(lambda: len(llm.requests) == 3, "the third model call")
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=PATIENCE) == 0
        session = SessionStore(Paths.from_env().sessions_dir).load(f"discord:{api.owner}")
        asked = [strip_runtime_context(text_of(m)) for m in session.messages if is_user(m)]
        assert asked == ["first question", "asked while it was down", "and now?"]
    finally:
        api.close()


# --- the format ----------------------------------------------------------------------------------------------------


def test_markdown_passes_as_written_and_a_table_becomes_an_aligned_code_block():
    text = "# Title\n\n**bold** and `code`\n\n| name | n |\n|---|---:|\n| apples | 3 |\n| kiwi | 12 |\n\n#### Small"
    assert to_discord(text) == ("# Title\n\n**bold** and `code`\n\n```\nname    n\n------  --\napples  3\nkiwi    12\n"
                                "```\n\n**Small**")


def test_a_code_block_too_long_for_one_message_is_closed_and_reopened_with_its_language():
    code = "```python\n" + "\n".join(f"value_{i} = {i}" for i in range(300)) + "\n```"
    chunks = split("Intro\n\n" + code + "\n\nOutro")
    assert len(chunks) > 1 and all(units(c.body) <= 2000 for c in chunks)
    assert all(c.body.count("```") == 2 for c in chunks)
    assert all(c.body.split("```", 1)[1].startswith("python\n") for c in chunks)
    joined = "\n".join(line for c in chunks for line in c.body.splitlines() if line.startswith("value_"))
    assert joined == "\n".join(f"value_{i} = {i}" for i in range(300))
    assert chunks[0].body.startswith("Intro") and chunks[-1].body.endswith("Outro")


def test_a_line_longer_than_a_message_is_cut_and_nothing_is_empty():
    chunks = split("word " * 1000 + "\n\n\n\n")
    assert all(0 < units(c.body) <= 2000 for c in chunks) and "".join(c.body for c in chunks).split() == ["word"] * 1000
    assert split("") == [] and split("   \n\n") == []


@pytest.mark.process
def test_the_channel_and_its_format_load_without_discord_py():
    code = ("import sys; from nanoagent.channels import registry; c = registry.get('discord'); c.split('# hi'); "
            "print(sorted(m for m in ('discord', 'aiohttp') if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PATIENCE, check=True)
    assert found.stdout.strip() == "[]"


def test_a_send_that_timed_out_is_sent_again_with_its_nonce_and_discord_keeps_one_message(api):
    from dataclasses import replace

    from tests.channel_harness import TIMING

    timing = replace(TIMING, send_timeout=0.5)  # the app answers 1.5 s late: the link times out and resends

    async def scenario():
        async with running(api, ScriptedProvider(["just one"]), timing=timing, streaming=False) as runner:
            api.slow(1, 1.5)
            api.write(api.owner, "hi")
            await until(lambda: api.shown(api.owner), "the reply")
            await until(lambda: settled(runner) and not runner.hub.running(), "the send to be answered")
            return [c for c in api.calls if c.method == "POST" and c.path.endswith("/messages")]

    posts = asyncio.run(scenario())
    assert len(posts) == 2  # the first timed out, the second carried the same nonce
    assert api.shown(api.owner) == ["just one"]
