"""The Mattermost channel's own behaviour, beyond the shared cases (test_channel_cases.py): threads in channels, the
catch-up after a restart, the token check, and what a reply may not do. The channel's aiohttp client talks to the
stand-in (tests/mattermost_server.py) over real sockets, through the shared engine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from nanoagent.channels import registry
from nanoagent.errors import NanoagentError
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.session.store import SessionStore
from tests.channel_harness import running, settings_of, settled
from tests.conftest import invoke, until, write_config
from tests.mattermost_server import BOT, GENERAL, OWNER, TOKEN, StandIn

CHANNEL = registry.get("mattermost")


@pytest.fixture
def mm() -> Iterator[StandIn]:
    made = StandIn()
    yield made
    made.close()


def test_a_mention_in_a_channel_is_answered_in_its_thread_and_a_reply_there_needs_no_mention(mm: StandIn) -> None:
    provider = ScriptedProvider(["In the thread.", "Still here."])

    async def scenario() -> str:
        async with running(mm, provider) as runner:
            root = mm.write(OWNER, "what now?", private=False)
            await until(lambda: mm.thread(GENERAL, root) == ["In the thread."], "the answer in the thread")
            mm.write(OWNER, "and then?", private=False, root_id=root, mention=False)
            mm.write(OWNER, "not for the bot", private=False, mention=False)  # outside the thread, no mention
            await until(lambda: mm.thread(GENERAL, root) == ["In the thread.", "Still here."], "the second answer")
            await until(lambda: settled(runner) and not runner.hub.running(), "the turns to end")
        return root

    root = asyncio.run(scenario())
    assert len(provider.requests) == 2
    assert SessionStore(Paths.from_env().sessions_dir).load(f"mattermost:{GENERAL}:{root}").messages


def test_a_post_made_while_the_gateway_was_down_in_a_channel_it_knows_is_answered_once_after_a_restart(
        mm: StandIn) -> None:
    provider = ScriptedProvider(["First.", "Caught up."])

    async def scenario() -> None:
        async with running(mm, provider) as runner:
            mm.write(OWNER, "hello")
            await until(lambda: mm.shown(OWNER) == ["First."] and settled(runner), "the first answer")
        mm.write(OWNER, "while you were away")  # no websocket open: only the channel's posts have it
        async with running(mm, provider) as runner:
            await until(lambda: mm.shown(OWNER) == ["First.", "Caught up."], "the caught-up answer")
            await until(lambda: settled(runner) and not runner.hub.running(), "the turn to end")

    asyncio.run(scenario())
    assert len(provider.requests) == 2
    assert mm.calls_to("GET", f"channels/{mm.dm(OWNER)}/posts")  # read by since=, the cursor's


def test_a_refused_token_is_one_line_naming_the_setting_and_a_good_one_names_the_bot(mm: StandIn) -> None:
    async def main() -> None:
        with pytest.raises(NanoagentError, match=r"Mattermost refused channels\.mattermost\.token \(HTTP 401\)"):
            await CHANNEL.verify(settings_of(mm, token="not-the-token"))
        assert await CHANNEL.verify(settings_of(mm)) == "@nano"

    asyncio.run(main())
    assert [c.path for c in mm.calls] == ["users/me", "users/me"]


def test_channels_add_mattermost_checks_the_token_with_users_me_and_writes_config(
        mm: StandIn, isolated_home: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([mm.url, TOKEN, OWNER, "y"])
    monkeypatch.setattr("nanoagent.cli.oneshot.stdin_is_terminal", lambda: True)
    monkeypatch.setattr("nanoagent.cli.channels_cmd.read_answer", lambda prompt, secret: next(answers))
    write_config(isolated_home, {})
    ran = invoke("channels", "add", "mattermost")
    assert ran.returncode == 0, ran.stderr
    assert "(@nano)" in ran.stdout and TOKEN not in ran.stdout + ran.stderr
    written = json.loads((isolated_home / "config.json").read_text())["channels"]["mattermost"]
    assert written == {"url": mm.url, "token": TOKEN, "allowFrom": [OWNER], "owner": [OWNER], "enabled": True}
    assert [(c.method, c.path) for c in mm.calls] == [("GET", "users/me")]


def test_a_reply_notifies_no_whole_channel_and_links_only_to_the_web() -> None:
    [chunk] = CHANNEL.split("Hey @channel and @all, see [this](https://example.com) or [that](http://127.0.0.1:8765/x)")
    assert "@channel" not in chunk.body and "@all" not in chunk.body
    assert "[this](https://example.com)" in chunk.body
    assert "](http://127.0.0.1" not in chunk.body and "`http://127.0.0.1:8765/x`" in chunk.body


def test_a_persons_home_is_their_dm_and_only_a_mattermost_id_has_one() -> None:
    assert CHANNEL.home(OWNER.upper()).key == f"mattermost:{OWNER}"  # type: ignore[union-attr]
    assert CHANNEL.home("ann") is None
    assert BOT != OWNER
