"""Adding a channel needs only its folder: a fifth channel added by the test
(`tests/channels/fifth/`) shows up in `channels list` (with the running gateway's view of it), in `pairing`, in
`channels add` and in `doctor`, with nothing in the command line naming it."""

from __future__ import annotations

import asyncio
import time

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.channels.state import ChannelState, state_file
from nanoagent.config.schema import Config
from nanoagent.gateway.hub import Hub
from nanoagent.gateway.server import Component, Gateway
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from tests import channel_folders, fifth_server
from tests.conftest import PATIENCE, invoke, until, write_config


@pytest.fixture(autouse=True)
def fifth(monkeypatch: pytest.MonkeyPatch) -> None:
    channel_folders.add(monkeypatch, "fifth")


def row(listing: str, name: str) -> str:
    return next(line for line in listing.splitlines() if line.split()[0] == name)


def test_a_fifth_channel_is_listed_not_configured_then_enabled_without_a_gateway(isolated_home):
    listed = invoke("channels", "list")
    assert listed.returncode == 0, listed.stderr
    assert row(listed.stdout, "fifth").split(None, 1)[1] == "not configured (`nanoagent channels add fifth`)"
    write_config(isolated_home, {"channels": {"fifth": {"token": "x"}}})
    assert row(invoke("channels", "list").stdout, "fifth").split(None, 1)[1] == \
        "configured, not enabled (set channels.fifth.enabled to true)"
    write_config(isolated_home, {"channels": {"fifth": {"token": "x", "enabled": True}}})
    assert row(invoke("channels", "list").stdout, "fifth").split(None, 1)[1] == \
        "enabled; no gateway is running (start `nanoagent gateway`)"
    write_config(isolated_home, {"channels": {"fifth": {"enabled": True}}})
    assert row(invoke("channels", "list").stdout, "fifth").split(None, 1)[1] == \
        "enabled, cannot start: no token: set channels.fifth.token (`nanoagent channels add fifth`)"


def test_channels_list_shows_the_running_gateways_health_of_the_fifth_channel(isolated_home):
    write_config(isolated_home, {"channels": {"fifth": {"token": "x", "enabled": True}}})
    paths = Paths.from_env()
    connected = asyncio.Event()

    async def run() -> None:
        component.health = "connected as @fifthbot"
        connected.set()
        await asyncio.Event().wait()

    component = Component("fifth", run)

    async def scenario() -> tuple[str, str, str]:
        server = Gateway(Hub(build_agent(Config(), paths, provider=ScriptedProvider([]))), paths,
                         components=[component], grace=1)
        serving = asyncio.create_task(server.serve(handle_signals=False))
        try:
            await asyncio.wait_for(connected.wait(), PATIENCE)
            healthy = await asyncio.to_thread(invoke, "channels", "list")
            component.health = "failing: Fifth refused the token (HTTP 401)"
            failing = await asyncio.to_thread(invoke, "channels", "list")
            status = await asyncio.to_thread(invoke, "gateway", "status")
        finally:
            server.stop()
            await asyncio.wait_for(serving, PATIENCE)
        return healthy.stdout, failing.stdout, status.stdout

    healthy, failing, status = asyncio.run(scenario())
    assert row(healthy, "fifth").split(None, 1)[1] == "enabled, connected as @fifthbot"
    assert row(failing, "fifth").split(None, 1)[1] == "enabled, failing: Fifth refused the token (HTTP 401)"
    assert "channels: fifth (failing: Fifth refused the token (HTTP 401))" in status


def test_channels_list_and_gateway_status_show_the_fifth_channels_outbox_and_what_is_parked(isolated_home):
    write_config(isolated_home, {"channels": {"fifth": {"token": "x", "enabled": True}}})
    paths = Paths.from_env()

    def backlog(state: ChannelState) -> None:
        state.queue("reply-1", "fifth:chat-42", "an answer", 0, "refused", time.time())
        state.inbox.append({"id": "m-7", "text": "a message"})
        state.park_message("m-7", "fifth:chat-42", "ValueError: bad", 3, time.time())

    state_file(paths, "fifth").update(backlog)
    component = Component("fifth", asyncio.Event().wait)

    async def scenario() -> tuple[str, str]:
        server = Gateway(Hub(build_agent(Config(), paths, provider=ScriptedProvider([]))), paths,
                         components=[component], grace=1)
        serving = asyncio.create_task(server.serve(handle_signals=False))
        try:
            await until(lambda: paths.gateway_socket.exists(), "the gateway's socket")
            listed = await asyncio.to_thread(invoke, "channels", "list")
            status = await asyncio.to_thread(invoke, "gateway", "status")
        finally:
            server.stop()
            await asyncio.wait_for(serving, PATIENCE)
        return listed.stdout, status.stdout

    listed, status = asyncio.run(scenario())
    waiting = ("1 reply waiting in the outbox for the app to take (refused); 1 item parked after failing (see the "
               "gateway's log; `nanoagent channels retry fifth` tries again)")  # the outbox entry's reason shown
    assert waiting in listed.splitlines()[listed.splitlines().index(row(listed, "fifth")) + 1]
    assert f"fifth: {waiting}" in status.splitlines()
    retried = invoke("channels", "retry", "fifth")
    assert retried.returncode == 0 and "Put back 1 message(s) and 0 reply(ies) of fifth" in retried.stdout
    state = state_file(paths, "fifth").read()
    assert [m["id"] for m in state.inbox] == ["m-7"] and state.parked == [] and len(state.outbox) == 1


def test_a_fifth_channel_pairs_through_the_pairing_commands(isolated_home):
    paths = Paths.from_env()
    code = state_file(paths, "fifth").update(lambda state: state.pair("u-42", "chat-42", "Ada", time.time()))
    assert code is not None
    listed = invoke("pairing", "list")
    assert f"{code[:4]}-{code[4:]}  fifth  Ada (user id u-42)" in listed.stdout
    approved = invoke("pairing", "approve", code)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == "Approved Ada (Fifth user id u-42) on Fifth: their next message there reaches the agent.\n"
    assert state_file(paths, "fifth").read().allowed == {"u-42": "Ada"}
    listed = invoke("pairing", "list")
    assert "No pending pairing codes." in listed.stdout and "  fifth  u-42  Ada" in listed.stdout
    assert invoke("pairing", "revoke", "u-42").returncode == 0
    assert state_file(paths, "fifth").read().allowed == {}


def test_doctor_checks_an_enabled_fifth_channels_credentials_with_its_api(isolated_home):
    with fifth_server.stand_in() as url:
        write_config(isolated_home, {"channels": {"fifth": {"enabled": True, "token": "wrong", "apiBase": url}}})
        ran = invoke("doctor")
        assert ran.returncode == 1
        line = next(line for line in ran.stdout.splitlines() if "fifth:" in line)
        assert line == "FIX   fifth: Fifth refused the token (HTTP 401); copy it again from Fifth's settings"
        write_config(isolated_home, {"channels": {"fifth": {"enabled": True, "token": fifth_server.TOKEN,
                                                            "apiBase": url}}})
        ran = invoke("doctor")
    assert "ok    fifth: the credentials work (@fifthbot)" in ran.stdout.splitlines()
    assert fifth_server.TOKEN not in ran.stdout + ran.stderr


def test_doctor_says_an_enabled_fifth_channel_serves_nobody_without_a_gateway(isolated_home):
    write_config(isolated_home, {"channels": {"fifth": {"enabled": True}}})
    lines = invoke("doctor").stdout.splitlines()
    assert "FIX   fifth: no token: set channels.fifth.token (`nanoagent channels add fifth`)" in lines
    assert any(line.startswith("FIX   gateway: not running, so channels.fifth (enabled in config)") for line in lines)


def test_doctor_warns_when_a_channel_that_answers_people_names_no_owner(isolated_home):
    with fifth_server.stand_in() as url:
        write_config(isolated_home, {"channels": {"fifth": {"enabled": True, "token": fifth_server.TOKEN,
                                                            "apiBase": url, "allowFrom": ["u-1"]}}})
        lines = invoke("doctor").stdout.splitlines()
        assert any(line.startswith("FIX   fifth: names no owner, so everyone it answers is a guest") for line in lines)
        write_config(isolated_home, {"channels": {"fifth": {"enabled": True, "token": fifth_server.TOKEN,
                                                            "apiBase": url, "allowFrom": ["u-1"], "owner": ["u-1"]}}})
        lines = invoke("doctor").stdout.splitlines()
    assert "ok    fifth: names its owner" in lines


def test_a_state_files_outbox_and_parked_items_of_the_wrong_shape_are_left_out_and_the_rest_kept(isolated_home):
    import json

    file = state_file(Paths.from_env(), "fifth")
    file.path.parent.mkdir(parents=True, exist_ok=True)
    file.path.write_text(json.dumps({"version": 2, "outbox": [
        {"id": "r-1", "key": "fifth:c", "text": "kept", "skip": 1, "tries": 2, "since": 5, "next": 9.5},
        {"id": "r-2", "key": "fifth:c"}, "junk"], "parked": [
        {"kind": "message", "id": "m-1", "key": "fifth:c", "error": "E", "failures": 3, "at": 1, "raw": {"id": "m-1"}},
        {"kind": "reply", "id": "r-3", "key": "fifth:c", "error": "E", "failures": True, "at": 1, "text": "x"},
        {"kind": "reply", "id": "r-4", "key": "fifth:c", "error": "E", "failures": 3, "at": 1}]}))
    state = file.read()
    assert [(e.id, e.skip, e.tries, e.failures, e.since, e.next) for e in state.outbox] == [("r-1", 1, 2, 0, 5.0, 9.5)]
    assert [(p.id, p.raw) for p in state.parked] == [("m-1", {"id": "m-1"})]
    file.update(lambda s: None)  # written back as read
    assert file.read() == state


def test_config_json_reads_the_fifth_channels_block_with_the_class_and_the_variable_its_folder_declares(isolated_home):
    from nanoagent.channels import registry
    from nanoagent.config.loader import load_config
    from nanoagent.errors import ConfigError

    fifth = registry.get("fifth")
    path = write_config(isolated_home, {"channels": {"fifth": {"token": "from-file", "allowFrom": ["u-1"], "colour": 1},
                                                     "replyLimit": {"perThread": 3}, "tenth": {"enabled": True}}})
    config, warnings = load_config(path, env={})
    settings = fifth.settings(config)
    assert (type(settings), settings.token, settings.allow_from) == (fifth.settings_class, "from-file", ["u-1"])
    assert config.channels.reply_limit.per_thread == 3  # shared by every channel
    assert warnings == [f"{path}: unknown key `channels.fifth.colour` ignored.",
                        f"{path}: unknown key `channels.tenth` ignored (no channel is called 'tenth': "
                        "`nanoagent channels list` shows them)."]
    assert fifth.settings(load_config(path, env={"FIFTH_TOKEN": "from-env"})[0]).token == "from-env"
    write_config(isolated_home, {})
    assert fifth.settings(load_config(path, env={"FIFTH_TOKEN": "from-env"})[0]).token == "from-env"  # no block
    write_config(isolated_home, {"channels": {"fifth": {"allowFrom": "u-1"}}})
    with pytest.raises(ConfigError, match="`channels.fifth.allowFrom` must be a list"):
        load_config(path, env={})


def test_a_channels_own_webhook_route_is_served_under_its_name_with_no_sign_in_and_checks_its_signature(
        isolated_home):
    """A channel folder declares the routes an app posts to (`Channel.routes`); the gateway's listener serves them at
    `/channels/<name>/<path>` while the channel is enabled, without the token or a web sign-in, and the route's own
    signature check decides; a disabled channel's routes and other paths are 404, a wrong Host still 421."""
    import hashlib
    import hmac
    import json

    import httpx
    from nanoagent.channels.fifth import RECEIVED

    from tests.test_gateway_http import gateway

    secret = "s3cret"
    body = json.dumps({"event": "message", "text": "hi"}).encode()
    signed = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()

    async def post(enabled: bool) -> list[int]:
        write_config(isolated_home, {"channels": {"fifth": {"enabled": enabled, "token": "x",
                                                            "webhookSecret": secret}}})
        from nanoagent.config.loader import load_config

        config, _ = load_config(isolated_home / "config.json", env={})
        async with gateway(ScriptedProvider([]), config) as live, httpx.AsyncClient() as client:
            base = f"http://127.0.0.1:{live.port}/channels/fifth"
            answers = [await client.post(f"{base}/events", content=body, headers={"X-Fifth-Signature": signed}),
                       await client.post(f"{base}/events", content=body, headers={"X-Fifth-Signature": "0" * 64}),
                       await client.post(f"{base}/other", content=body),
                       await client.post(f"{base}/events", content=body, headers={"Host": "evil.example"})]
            return [answer.status_code for answer in answers]

    RECEIVED.clear()
    assert asyncio.run(post(enabled=True)) == [202, 401, 404, 421]
    assert RECEIVED == [{"event": "message", "text": "hi"}]  # only the signed one reached the channel
    assert asyncio.run(post(enabled=False))[:3] == [404, 404, 404]
    assert len(RECEIVED) == 1
