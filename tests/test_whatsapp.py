"""The WhatsApp channel's own behaviour, beyond the shared cases (test_channel_cases.py): Meta's webhook on the gateway's
listener (the signature checked first, the verify-token handshake, 401/404/413 without a model call), the 24-hour
window, read receipts, what doctor and `channels add` say of the webhook, and WhatsApp's markup. The link runs
against the Graph API stand-in (tests/whatsapp_server.py), which posts signed webhooks as Meta does."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time

import httpx
import pytest

from nanoagent.channels import registry
from nanoagent.channels.base import DeliveryError
from nanoagent.keys import Place
from nanoagent.providers.scripted import ScriptedProvider
from tests import whatsapp_server
from tests.channel_harness import extra_config, running, settings_of, settled
from tests.conftest import (
    PATIENCE,
    invoke,
    openai_env,
    start_gateway_process,
    until,
    wait_until,
    write_config,
)
from tests.test_channel_cases import PNG

CHANNEL = registry.get("whatsapp")


@pytest.fixture
def app():
    made = whatsapp_server.StandIn()
    yield made
    made.close()


def notification(app: whatsapp_server.StandIn, text: str = "hi") -> bytes:
    message = {"from": app.owner, "id": "wamid.X1", "timestamp": str(int(time.time())), "type": "text",
               "text": {"body": text}}
    value = {"messaging_product": "whatsapp", "messages": [message],
             "metadata": {"display_phone_number": whatsapp_server.BUSINESS, "phone_number_id": whatsapp_server.PHONE_ID}}
    return json.dumps({"object": "whatsapp_business_account",
                       "entry": [{"id": "1", "changes": [{"field": "messages", "value": value}]}]}).encode()


def oversized(port: int, path: str) -> int:
    """The status a POST announcing an 11 MB body gets, the body not sent (the listener answers before reading it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE) as conn:
        conn.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                     f"X-Hub-Signature-256: sha256={'0' * 64}\r\nContent-Length: {11 * 1024 * 1024}\r\n\r\n".encode()
                     + b"{" * 1024)
        return int(conn.recv(1024).split(b" ", 2)[1])


@pytest.mark.process
def test_a_webhook_with_a_wrong_signature_an_unknown_route_or_an_oversized_body_gets_401_404_413_and_no_model_call(
        app, llm, isolated_home):
    write_config(isolated_home, {**extra_config(app), "channels": {"whatsapp": app.settings()}})
    env = {**os.environ, **openai_env(llm)}
    gateway = start_gateway_process(env)
    body = notification(app)
    try:
        wait_until(lambda: _answers(app.webhook), "the gateway's listener")
        base = f"http://127.0.0.1:{app.gateway_port}/channels"
        answers = [httpx.post(app.webhook, content=body, headers={"X-Hub-Signature-256": "sha256=" + "0" * 64}),
                   httpx.post(app.webhook, content=body),  # no signature
                   httpx.post(app.webhook, content=body, headers={"X-Hub-Signature-256": whatsapp_server.sign(
                       body, "another app's secret")}),
                   httpx.post(app.webhook, content=b"not json", headers={"X-Hub-Signature-256": "sha256=1"}),
                   httpx.post(f"{base}/whatsapp/other", content=body,
                              headers={"X-Hub-Signature-256": whatsapp_server.sign(body)}),
                   httpx.post(f"{base}/nothing/webhook", content=body)]
        statuses = [answer.status_code for answer in answers]
        too_big = oversized(app.gateway_port, "/channels/whatsapp/webhook")
        chunked = httpx.post(app.webhook, content=iter([b" " * 1024 * 1024] * 11),  # no length said: read, bounded
                             headers={"X-Hub-Signature-256": "sha256=" + "0" * 64}).status_code
        app.write(app.owner, "and this one?")  # a signed message is answered: the gateway was up and connected
        wait_until(lambda: llm.requests, "the signed message's model call")
    finally:
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=PATIENCE) == 0
    assert statuses == [401, 401, 401, 401, 404, 404] and too_big == chunked == 413
    assert len(llm.requests) == 1 and "and this one?" in json.dumps(llm.requests[0].body)  # only the signed one
    assert whatsapp_server.SECRET not in (isolated_home.parent / "gateway.stderr").read_text()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 403  # the handshake, refused without the token
    except httpx.HTTPError:
        return False


def test_the_verify_token_handshake_echoes_meta_s_challenge_only_for_the_configured_token(app):
    provider = ScriptedProvider([])

    async def scenario() -> list[tuple[int, str]]:
        async with running(app, provider), httpx.AsyncClient() as client:
            asked = [{"hub.mode": "subscribe", "hub.verify_token": whatsapp_server.VERIFY, "hub.challenge": "1158201444"},
                     {"hub.mode": "subscribe", "hub.verify_token": "guessed", "hub.challenge": "1158201444"},
                     {"hub.mode": "unsubscribe", "hub.verify_token": whatsapp_server.VERIFY, "hub.challenge": "1"},
                     {"hub.mode": "subscribe", "hub.verify_token": whatsapp_server.VERIFY,
                      "hub.challenge": "<script>alert(1)</script>"}]
            answers = [await client.get(app.webhook, params=query) for query in asked]
            return [(answer.status_code, answer.text) for answer in answers]

    answers = asyncio.run(scenario())
    assert answers[0] == (200, "1158201444")
    assert [status for status, _ in answers[1:]] == [403, 403, 403]  # nothing echoed but a plain challenge
    assert provider.requests == []


def test_a_reply_outside_the_24_hour_window_waits_in_the_outbox_with_one_log_line_and_goes_once_they_write_again(
        app, caplog):
    provider = ScriptedProvider(["The late answer.", "The fresh answer."])

    async def scenario() -> str:
        async with running(app, provider) as runner:
            app.write(app.owner, "a question from yesterday", at=time.time() - 25 * 3600)  # Meta retried it late
            await until(lambda: runner.state.read().outbox, "the reply to wait in the outbox")
            await until(lambda: settled(runner) and not runner.hub.running(), "the turn to end")
            await until(lambda: runner.state.read().outbox[0].tries >= 2, "the sweep to try it again, twice")
            listed = (await asyncio.to_thread(invoke, "channels", "list")).stdout
            assert app.shown(app.owner) == []
            app.write(app.owner, "are you there?")
            await until(lambda: len(app.shown(app.owner)) == 2 and not runner.state.read().outbox, "both answers")
        return listed

    listed = asyncio.run(scenario())
    assert sorted(app.shown(app.owner)) == ["The fresh answer.", "The late answer."]
    assert caplog.text.count("whatsapp_window_closed") == 1  # one line, not one per try
    assert "1 reply waiting in the outbox for the app to take (WhatsApp's 24-hour window is closed for " \
           f"whatsapp:{app.owner}" in " ".join(listed.split())
    sends = [call for call in app.graph.scripted.calls if call.method == "messages"]
    assert len(sends) == 2  # nothing was sent while the window was closed (the link knew it)


def test_each_private_message_handled_is_marked_read_and_an_image_comes_in_by_its_media_id(app):
    provider = ScriptedProvider(["Seen."])

    async def scenario() -> str:
        async with running(app, provider) as runner:
            id = app.write(app.owner, "look", image=PNG)
            await until(lambda: app.shown(app.owner) == ["Seen."] and id in app.graph.read, "the reply and receipt")
            await until(lambda: settled(runner), "the inbox to empty")
        return id

    id = asyncio.run(scenario())
    assert app.graph.read.count(id) >= 1
    assert "image_data" in json.dumps(provider.requests[0].messages[-1])


def test_a_message_for_another_business_number_of_the_same_app_is_not_taken(app):
    provider = ScriptedProvider(["Hello."])
    other = notification(app, "for the other number").replace(whatsapp_server.PHONE_ID.encode(), b"999999999999")

    async def scenario() -> None:
        async with running(app, provider) as runner:
            app.notifications.put(other)
            app.write(app.owner, "for this one")
            await until(lambda: app.shown(app.owner) == ["Hello."] and settled(runner), "the reply")

    asyncio.run(scenario())
    assert len(provider.requests) == 1 and "for the other number" not in json.dumps(provider.requests[0].messages)


def test_delivery_with_no_gateway_outside_the_window_says_so_and_sends_nothing(app):
    settings = settings_of(app)

    async def deliver() -> None:
        await CHANNEL.deliver(settings, Place("whatsapp", app.owner), "A reminder.")

    with pytest.raises(DeliveryError, match="24-hour window"):  # never heard from: Graph refuses (error 131047)
        asyncio.run(deliver())
    app.graph.heard[app.owner] = time.time()
    asyncio.run(deliver())
    assert app.shown(app.owner) == ["A reminder."]


def test_doctor_says_the_webhook_needs_the_gateways_listener_and_a_public_host_name(app, isolated_home):
    write_config(isolated_home, {"channels": {"whatsapp": app.settings()}})
    lines = invoke("doctor", "--offline").stdout.splitlines()
    assert "ok    whatsapp: the credentials work (Nano (+15…0999))" in lines
    assert any(line.startswith("FIX   whatsapp: its webhook (/channels/whatsapp/webhook) needs the gateway's HTTP "
                               "listener, which is off") for line in lines), lines
    assert any(line.startswith("FIX   whatsapp: no public host name in gateway.http.allowedHosts") for line in lines)
    write_config(isolated_home, {"gateway": {"http": {"enabled": True, "allowedHosts": ["bot.example.com"]}},
                                 "channels": {"whatsapp": app.settings()}})
    lines = invoke("doctor", "--offline").stdout.splitlines()
    assert "ok    whatsapp: its webhook (/channels/whatsapp/webhook) is served by the gateway's HTTP listener" in lines
    assert "ok    whatsapp: WhatsApp may call bot.example.com" in lines


def test_channels_add_whatsapp_checks_the_number_and_says_what_the_webhook_needs(app, isolated_home, monkeypatch):
    from nanoagent.cli import channels_cmd

    answers = iter(["106540352242922", whatsapp_server.TOKEN, whatsapp_server.SECRET, whatsapp_server.VERIFY,
                    "+15550000001", ""])
    monkeypatch.setattr("nanoagent.cli.oneshot.stdin_is_terminal", lambda: True)
    monkeypatch.setattr(channels_cmd, "read_answer", lambda prompt, secret: next(answers))
    write_config(isolated_home, {"channels": {"whatsapp": {"apiBase": app.graph.url}}})
    ran = invoke("channels", "add", "whatsapp")
    assert ran.returncode == 0, ran.stderr
    assert "Checked: WhatsApp knows these credentials (Nano (+15…0999))." in ran.stdout
    said = " ".join(ran.stdout.split())
    assert "To do: whatsapp: its webhook (/channels/whatsapp/webhook) needs the gateway's HTTP listener" in said
    assert "set gateway.http.enabled to true in config.json" in said and "gateway.http.allowedHosts" in said
    written = json.loads((isolated_home / "config.json").read_text())["channels"]["whatsapp"]
    assert written["owner"] == ["+15550000001"] and written["appSecret"] == whatsapp_server.SECRET


def test_problem_names_the_missing_setting_and_where_it_comes_from(app):
    assert CHANNEL.problem(settings_of(app)) is None
    assert "phoneNumberId" in (CHANNEL.problem(settings_of(app, phoneNumberId="")) or "")
    assert "appSecret is not set" in (CHANNEL.problem(settings_of(app, appSecret="")) or "")
    assert "no phone number" in (CHANNEL.problem(settings_of(app, allowFrom=["ann"])) or "")
    assert CHANNEL.allowed(settings_of(app), "15550000001") and not CHANNEL.allowed(settings_of(app), "15550000002")


def test_markdown_becomes_whatsapps_markup_and_only_web_links_stay_links():
    from nanoagent.channels.whatsapp.format import to_whatsapp

    reply = ("# Plan\n\n**Bold**, *slanted*, ~~gone~~ and `code`; see [the docs](https://example.com/docs) or "
             "[https://example.com](https://example.com), not [this](javascript:alert(1)).\n\n"
             "```python\nprint('hi')\n```")
    shown = "\n\n".join(to_whatsapp(chunk.body) for chunk in CHANNEL.split(reply))
    assert shown == ("*Plan*\n\n*Bold*, _slanted_, ~gone~ and `code`; see the docs (https://example.com/docs) or "
                     "https://example.com, not this (javascript:alert(1)).\n\n```\nprint('hi')\n```")


def test_a_voice_note_is_heard_as_one_and_audio_the_agent_sends_arrives_as_audio(app, llm):
    from nanoagent.config.schema import Config, ToolsConfig, TranscribeConfig
    from nanoagent.messages import is_user, strip_runtime_context, text_of
    from nanoagent.paths import Paths
    from nanoagent.providers.scripted import ScriptedReply
    from nanoagent.transcribe import transcriber
    from tests.llm_server import Transcript

    voice = b"OggS\x00\x02" + bytes(26) + b"OpusHead" + bytes(100)
    (workspace := Paths.from_env().workspace).mkdir(parents=True, exist_ok=True)
    (workspace / "answer.ogg").write_bytes(voice)
    llm.transcriptions.script(Transcript("What is on today?"))
    ears = transcriber(Config(tools=ToolsConfig(transcribe=TranscribeConfig(model="whisper-local",
                                                                            api_base=llm.url + "/v1"))))
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("message", {"text": "Listen.", "files": ["answer.ogg"]})]),
                                 "Sent."])

    async def scenario() -> None:
        async with running(app, provider, transcriber=ears) as runner:
            app.write(app.owner, "", file=("", "audio/ogg", voice))  # recorded, no words: a voice note
            await until(lambda: "Sent." in app.shown(app.owner) and settled(runner), "the reply")

    asyncio.run(scenario())
    asked = strip_runtime_context(text_of([m for m in provider.requests[0].messages if is_user(m)][-1]))
    assert asked.startswith("[voice note saved as media/") and "What is on today?" in asked
    assert [(s.kind, s.file) for s in app.to(app.owner) if s.file] == [("audio", ("answer.ogg", voice, "audio/ogg"))]
