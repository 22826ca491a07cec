"""Images and files out: the `message` tool (or the Outbox) sends workspace files with its text to a chat, in every
channel, through each channel's real library against its stand-in: an image arrives as one (Telegram's photo,
Discord's and Slack's image attachment, a mail's image part) with its bytes, a text file as a document under its
name. Paths outside the workspace and files over the cap are refused in one line."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from nanoagent.agent.build import build_agent, build_outbox
from nanoagent.channels.base import DeliveryError
from nanoagent.channels.discord.settings import DiscordConfig
from nanoagent.channels.email.settings import EmailConfig, MailServerConfig
from nanoagent.channels.slack.settings import SlackConfig
from nanoagent.channels.telegram.settings import TelegramConfig
from nanoagent.config.schema import Config
from nanoagent.keys import Place
from nanoagent.messages import is_tool
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from tests import pigeon_channel
from tests.discord_server import DiscordAPI
from tests.email_server import PASSWORD, USER, MailStandIn
from tests.slack_server import APP_TOKEN, BOT_TOKEN, GENERAL, OWNER, SlackAPI

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00" + bytes(range(200))
TEXT = b"The plan:\n1. water the plants\n2. call mom\n"
ANN = 42


@pytest.fixture
def files() -> list[str]:
    """A PNG and a text file in the workspace, as the agent would have written them."""
    workspace = Paths.from_env().workspace
    (workspace / "out").mkdir(parents=True)
    (workspace / "out" / "chart.png").write_bytes(PNG)
    (workspace / "out" / "plan.txt").write_bytes(TEXT)
    return ["out/chart.png", "out/plan.txt"]


def turn(key: str, *calls: tuple[str, dict], config: Config) -> list[str]:
    """Run one turn in session `key` whose model makes `calls`; the tool results it got."""
    provider = ScriptedProvider([ScriptedReply(tool_calls=list(calls)), "Done."])
    loop = build_agent(config, Paths.from_env(), provider=provider)
    start = len(loop.session(key).messages)
    asyncio.run(loop.handle("please", key))
    return [m["content"] for m in loop.session(key).messages[start:] if is_tool(m)]


def deliver(config: Config, place: Place, text: str, paths: list[str]) -> None:
    workspace = Paths.from_env().workspace
    outbox = build_outbox(config, Paths.from_env())
    asyncio.run(outbox.send(place, text, "a test", [workspace / p for p in paths]))


def test_the_message_tool_sends_a_png_as_a_telegram_photo_and_a_text_file_as_a_document(api, files):
    config = Config()
    config.channels.blocks["telegram"] = TelegramConfig(token=api.token, allow_from=[str(ANN)], owner=[str(ANN)],
                                              api_base=api.url)
    [result] = turn("cli:direct", ("message", {"text": "Here is the **chart**.", "to": "telegram", "files": files}),
                    config=config)
    assert "Sent to telegram:42." in result
    assert api.texts(ANN) == ["Here is the chart."]
    assert [(u.kind, u.name, u.data) for u in api.received(ANN)] == [("photo", "chart.png", PNG),
                                                                     ("document", "plan.txt", TEXT)]


def test_in_a_chats_own_turn_the_message_tool_sends_a_file_into_that_chat(api, files):
    config = Config()
    config.channels.blocks["telegram"] = TelegramConfig(token=api.token, allow_from=[str(ANN)], owner=[str(ANN)],
                                              api_base=api.url)
    results = turn("telegram:42", ("message", {"text": "", "files": files[:1]}),
                   ("message", {"text": "just words", "to": "telegram:42"}), config=config)
    assert "Sent to telegram:42." in results[0]
    assert [(u.kind, u.data) for u in api.received(ANN)] == [("photo", PNG)]
    assert api.texts(ANN) == []  # no empty message beside the photo
    assert "That is this conversation" in results[1]  # words alone go in the reply


def test_an_image_without_an_images_name_is_still_sent_as_one_named_for_its_kind(api, files):
    config = Config()
    config.channels.blocks["telegram"] = TelegramConfig(token=api.token, allow_from=[str(ANN)], api_base=api.url)
    (Paths.from_env().workspace / "out" / "chart.png").rename(Paths.from_env().workspace / "out" / "chart")
    deliver(config, Place("telegram", str(ANN)), "", ["out/chart"])
    assert [(u.kind, u.name, u.data) for u in api.received(ANN)] == [("photo", "chart.png", PNG)]


def test_an_image_telegram_refuses_as_a_photo_still_arrives_as_a_document(api, files):
    config = Config()
    config.channels.blocks["telegram"] = TelegramConfig(token=api.token, allow_from=[str(ANN)], api_base=api.url)
    api.fail("sendPhoto", 400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
    deliver(config, Place("telegram", str(ANN)), "", files[:1])
    assert [(u.kind, u.name, u.data) for u in api.received(ANN)] == [("document", "chart.png", PNG)]


def test_discord_gets_the_files_as_attachments_in_a_dm_and_in_a_thread(files):
    api = DiscordAPI()
    try:
        config = Config()
        config.channels.blocks["discord"] = DiscordConfig(enabled=True, token=api.token, allow_from=[api.owner],
                                                api_base=api.api_base)
        deliver(config, Place("discord", api.owner), "Here is the chart.", files)
        thread = api.thread("reports")
        deliver(config, Place("discord", api.general, thread), "", files[:1])
        assert api.shown(api.owner)[0] == "Here is the chart."
        assert api.received(api.dm(api.owner)) == [("chart.png", PNG, "image/png"), ("plan.txt", TEXT, "text/plain")]
        assert api.received(thread) == [("chart.png", PNG, "image/png")]
        with open(Paths.from_env().workspace / "out" / "video.mp4", "wb") as f:
            f.truncate(11 * 1024 * 1024)
        with pytest.raises(DeliveryError, match=r"^video.mp4 is 11.0 MB; Discord takes files up to 10 MB"):
            deliver(config, Place("discord", api.owner), "", ["out/video.mp4"])
    finally:
        api.close()


def test_slack_gets_the_files_uploaded_into_the_thread_by_files_upload_v2(files):
    slack = SlackAPI()
    try:
        config = Config()
        config.channels.blocks["slack"] = SlackConfig(enabled=True, bot_token=BOT_TOKEN, app_token=APP_TOKEN,
                                            allow_from=[OWNER], api_base=slack.api_base)
        deliver(config, Place("slack", GENERAL, "1.000001"), "Here is the chart.", files)
        assert slack.thread(GENERAL, "1.000001") == ["Here is the chart.", "", ""]  # then the two file shares
        assert slack.uploaded(GENERAL, "1.000001") == [("chart.png", PNG, "image/png"),
                                                         ("plan.txt", TEXT, "text/plain")]
        assert [c.method for c in slack.calls if "files" in c.method or c.method == "upload"] == [
            "files.getUploadURLExternal", "upload", "files.completeUploadExternal"] * 2
        deliver(config, Place("slack", OWNER), "", files[1:])  # a person's DM
        assert slack.uploaded(f"D{OWNER}") == [("plan.txt", TEXT, "text/plain")]
    finally:
        slack.close()


def test_a_mail_carries_the_files_as_attachments(files):
    mail = MailStandIn()
    try:
        config = Config()
        server = {"host": "127.0.0.1", "user": USER, "password": PASSWORD, "security": "none"}
        config.channels.blocks["email"] = EmailConfig(enabled=True, imap=MailServerConfig(**server, port=mail.imap.port),
                                            smtp=MailServerConfig(**server, port=mail.smtp.port),
                                            allow_from=[mail.owner])
        deliver(config, Place("email", mail.owner), "Here is the chart.", files)
        [sent] = mail.smtp.wait(1)
        assert sent.text() == "Here is the chart.\n"
        assert sent.files() == [("chart.png", PNG, "image/png"), ("plan.txt", TEXT, "text/plain")]
    finally:
        mail.close()


def test_a_terminal_session_gets_a_note_naming_the_files(tmp_path, monkeypatch, files):
    pigeon_channel.register(monkeypatch)
    config = Config()
    pigeon_channel.configure(config, tmp_path / "loft", [str(ANN)])
    [result] = turn("pigeon:42", ("message", {"text": "Build finished.", "to": "cli:direct", "files": files}),
                    config=config)
    assert "Sent to cli:direct." in result
    lines = [json.loads(x) for x in Paths.from_env().session_file("cli:direct").read_text().splitlines()]
    [note] = [r["message"]["content"] for r in lines if r["type"] == "message"]
    assert note.endswith("Build finished.\n\nFiles: chart.png, plan.txt")


def test_paths_outside_the_workspace_and_files_over_the_cap_are_refused_in_one_line(tmp_path, monkeypatch, files):
    pigeon_channel.register(monkeypatch)
    loft = tmp_path / "loft"
    config = Config()
    pigeon_channel.configure(config, loft, [str(ANN)])
    workspace = Paths.from_env().workspace
    secret = tmp_path / "secret.txt"
    secret.write_text("the neighbour's wifi password")
    (Path(os.environ["HOME"])).mkdir(parents=True, exist_ok=True)
    (Path(os.environ["HOME"]) / "notes.txt").write_text("private")
    (workspace / "out" / "innocent.txt").symlink_to(secret)
    with open(workspace / "out" / "big.bin", "wb") as f:
        f.truncate(20 * 1024 * 1024 + 1)
    asked = ["../../secret.txt", "out/innocent.txt", "~/notes.txt", str(secret), "out/big.bin", "out/nothing.txt"]
    results = turn("cli:direct", *[("message", {"text": "hi", "to": "pigeon", "files": [p]}) for p in asked],
                   config=config)
    for path, result in zip(asked[:4], results, strict=False):
        assert f"'{path}' is not inside the workspace" in result and "\n" not in result.strip(), result
    assert "'out/big.bin' is 20.0 MB, over the 20 MB a file sent to a chat may be" in results[4]
    assert "\n" not in results[4].strip()
    assert "'out/nothing.txt' is not a file in the workspace" in results[5]
    assert pigeon_channel.arrived(loft, "pigeon:42") == []  # nothing went, not even the text
