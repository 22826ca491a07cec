"""The Matrix channel against the homeserver stand-in (matrix_server.py), through the shared engine: what is its
own beyond the shared cases (test_channel_cases.py): the kept device, invites, threads, encrypted rooms, the sync
token across a restart, Matrix HTML."""

from __future__ import annotations

import asyncio

import pytest

from nanoagent.channels.matrix.format import markdown_to_html
from nanoagent.channels.matrix.link import ENCRYPTED
from nanoagent.providers.scripted import ScriptedProvider
from tests.channel_harness import running, settled
from tests.conftest import until
from tests.matrix_server import BOT, StandIn


@pytest.fixture
def matrix():
    stand_in = StandIn()
    yield stand_in
    stand_in.close()


def test_a_restart_reuses_the_kept_device_instead_of_logging_in_again(matrix):
    provider = ScriptedProvider(["first", "second"])

    async def scenario():
        for turn, reply in enumerate(["first", "second"]):
            async with running(matrix, provider) as runner:
                matrix.write(matrix.owner, f"message {turn}")
                await until(lambda reply=reply: matrix.shown(matrix.owner)[-1:] == [reply], "the reply")
                await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert matrix.server.logins == 1
    assert len(set(matrix.server.tokens.values())) == 1  # one device on the account


def test_messages_written_while_the_gateway_was_stopped_are_answered_after_a_restart(matrix):
    provider = ScriptedProvider(["before", "after"])

    async def scenario():
        async with running(matrix, provider) as runner:
            matrix.write(matrix.owner, "hello")
            await until(lambda: matrix.shown(matrix.owner) == ["before"], "the first reply")
            await until(lambda: settled(runner), "the inbox to empty")
        matrix.write(matrix.owner, "written while nothing listened")
        async with running(matrix, provider) as runner:
            await until(lambda: matrix.shown(matrix.owner) == ["before", "after"], "the catch-up's reply")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert len(provider.requests) == 2


def test_an_invite_is_joined_from_the_owner_and_declined_from_a_stranger(matrix):
    async def scenario():
        async with running(matrix, ScriptedProvider(["hi"])) as runner:
            matrix.write(matrix.stranger, "let me in")
            matrix.write(matrix.owner, "hello")
            await until(lambda: matrix.shown(matrix.owner) == ["hi"], "the owner's reply")
            await until(lambda: matrix.dms[matrix.stranger].members.get(BOT) == "leave", "the invite declined")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert matrix.dms[matrix.owner].members[BOT] == "join"


def test_a_message_in_a_thread_is_answered_in_that_thread_as_a_session_of_its_own(matrix):
    provider = ScriptedProvider(["in the room", "in the thread"])

    async def scenario():
        async with running(matrix, provider) as runner:
            root_id = matrix.write(matrix.owner, "start", private=False)
            await until(lambda: provider.requests and settled(runner) and not runner.hub.running(), "the root's turn")
            room = matrix.group
            with matrix.server.cond:
                matrix.server.event(room, matrix.owner, "m.room.message", {
                    "msgtype": "m.text", "body": f"{BOT}: and this?", "m.mentions": {"user_ids": [BOT]},
                    "m.relates_to": {"rel_type": "m.thread", "event_id": root_id}})
            await until(lambda: any((c.get("m.relates_to") or {}).get("event_id") == root_id
                                    for c in matrix.server.bot_messages(room)), "the reply in the thread")
            await until(lambda: settled(runner), "the inbox to empty")
            return room.id, root_id, runner.state.read().groups

    room_id, root_id, groups = asyncio.run(scenario())
    assert f"matrix:{room_id[1:].replace(':', '=')}:{root_id[1:]}" in groups


def test_an_encrypted_rooms_message_gets_one_line_saying_it_cannot_be_read_and_no_model_call(matrix):
    provider = ScriptedProvider([])

    async def scenario():
        async with running(matrix, provider) as runner:
            matrix.write(matrix.owner, "/budget")  # the direct chat, joined; then encrypted messages come
            await until(lambda: matrix.shown(matrix.owner), "the answer to /budget")
            with matrix.server.cond:
                for _ in range(2):
                    matrix.server.event(matrix.dms[matrix.owner], matrix.owner, "m.room.encrypted",
                                        {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgA", "session_id": "s",
                                         "sender_key": "k", "device_id": "D"})
            await until(lambda: ENCRYPTED in matrix.shown(matrix.owner), "the line about encryption")
            matrix.write(matrix.owner, "/budget")
            await until(lambda: len(matrix.shown(matrix.owner)) == 3, "the second answer")
            await until(lambda: settled(runner), "the inbox to empty")

    asyncio.run(scenario())
    assert matrix.shown(matrix.owner).count(ENCRYPTED) == 1
    assert provider.requests == []


def test_a_reply_is_matrix_html_with_its_markup_escaped_and_only_http_links():
    html = markdown_to_html("## Plan\n**Bold** <script> & [site](https://example.com)\n- one\n- two\n\n```py\nx < 1\n```")
    assert html == ('<h4>Plan</h4>\n<p><strong>Bold</strong> &lt;script&gt; &amp; <a href="https://example.com">site</a>'
                    '</p>\n<ul><li>one</li><li>two</li></ul>\n<pre><code class="language-py">x &lt; 1</code></pre>')
