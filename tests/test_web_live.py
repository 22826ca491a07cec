"""The web chat's server side of issue 37: a reply rendered by blocks as it streams (`web.live`), a reply's parts in
their order as stored, voice notes from the page transcribed as every channel's are, `/help` that speaks of the
page, and the home-screen manifest a browser can fetch to install the app."""

from __future__ import annotations

from nanoagent.config.schema import Config
from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.web.api_chat import message_views
from nanoagent.web.live import LiveReply
from nanoagent.web.markdown import render
from tests.llm_server import Transcript
from tests.test_web_api import Stream, app_client, kind, run

REPLY = ("# Plan\n\nFirst **read** the file,\nthen [fix it](https://example.com/x).\n\n- one\n- two\n\n"
         "| n | value |\n|---|---:|\n| 1 | 17,736 |\n\n```python\nprint('<b>')\n```\n\n> quoted\n\nThe end. <script>x</script>"
         "![tracker](https://evil.example/p.png)")


def test_a_reply_streamed_in_small_pieces_renders_as_the_whole_reply_does_each_finished_block_sent_once():
    live = LiveReply()
    done: list[str] = []
    for i in range(0, len(REPLY), 3):
        update = live.add(REPLY[i:i + 3])
        done.extend(update["done"])
    assert "".join(done) + update["tail"] == render(REPLY)
    assert len(done) >= 6  # the heading, paragraph, list, table, code and quote were each finished and sent once
    assert len(live.text) < 80  # what is parsed again on each update is the open tail, not the reply so far


def test_a_tool_call_closes_the_streamed_text_and_the_text_after_it_is_a_new_segment():
    from nanoagent.agent import events as ev

    live = LiveReply()
    first = live.wire(ev.TextDelta("Let me look."))
    assert live.wire(ev.ToolStarted(call_id="c1", name="list_dir", arguments={})) is None
    second = live.wire(ev.TextDelta("Found it."))
    assert first is not None and second is not None
    assert second["seg"] == first["seg"] + 1 and "Found it." in second["tail"] and "Let me" not in second["tail"]


def test_a_stored_turn_shows_its_text_then_its_tool_call_then_the_text_after_it_in_one_reply():
    views = message_views([
        {"role": "user", "content": "what is here?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "c1", "name": "list_dir",
                                                                         "arguments": "{\"path\": \".\"}"}]},
        {"role": "tool", "tool_call_id": "c1", "name": "list_dir", "content": "notes.md"},
        {"role": "assistant", "content": "Found **notes.md**."},
    ])
    assert [v["role"] for v in views] == ["user", "assistant"]
    parts = views[1]["parts"]
    assert [p["kind"] for p in parts] == ["text", "tool", "text"]
    assert "Let me look." in parts[0]["html"] and parts[1]["name"] == "list_dir" and "<strong>" in parts[2]["html"]
    assert views[1]["text"] == "Let me look.\n\nFound **notes.md**."  # what its copy button copies


def test_each_streamed_delta_reaches_the_page_with_its_finished_blocks_and_its_open_tail_rendered():
    async def test() -> None:
        async with app_client(ScriptedProvider(["# Title\n\nA paragraph with *words* in it."])) as (client, _):
            tab = Stream(await client.get("/api/sessions/web:md/events"))
            await tab.next(lambda m: m["type"] == "hello")
            assert (await client.post("/api/sessions/web:md/messages", json={"text": "hi"})).status == 202
            done: list[str] = []
            tail = ""
            while True:
                message = await tab.next(lambda m: kind("TextDelta")(m) or kind("TurnEnded")(m))
                if message["event"]["kind"] == "TurnEnded":
                    break
                done += message["event"]["md"]["done"]
                tail = message["event"]["md"]["tail"]
            assert done == ["<h1>Title</h1>\n"]
            assert tail == "<p>A paragraph with <em>words</em> in it.</p>\n"

    run(test)


def test_a_voice_note_from_the_page_is_transcribed_and_sent_as_the_persons_message(llm):
    llm.transcriptions.script(Transcript("remind me to water the plants"))
    config = Config()
    config.tools.transcribe.model, config.tools.transcribe.api_base = "whisper-test", llm.url

    async def test() -> None:
        async with app_client(ScriptedProvider(["Noted."]), config) as (client, hub):
            features = await (await client.get("/api/chat/features")).json()
            assert features["voice"] is True
            tab = Stream(await client.get("/api/sessions/web:voice/events"))
            await tab.next(lambda m: m["type"] == "hello")
            webm = b"\x1a\x45\xdf\xa3" + b"\x00" * 200  # what Chromium's MediaRecorder writes
            sent = await client.post("/api/sessions/web:voice/voice", data=webm, headers={"Content-Type": "audio/webm"})
            assert sent.status == 202, await sent.text()
            await tab.next(kind("TurnEnded"))
            said = hub.sessions.load("web:voice").messages[0]
            assert "remind me to water the plants" in str(said["content"]) and "voice note" in str(said["content"])
            assert llm.transcriptions.requests[-1].file_name.endswith(".webm")
            shown = (await (await client.get("/api/sessions/web:voice")).json())["messages"][0]
            assert shown["text"] == "remind me to water the plants" and shown["voice"].endswith(".webm")

    run(test)


def test_a_voice_note_is_refused_with_how_to_turn_transcription_on_when_it_is_off():
    async def test() -> None:
        async with app_client() as (client, _):
            assert (await (await client.get("/api/chat/features")).json())["voice"] is False
            refused = await client.post("/api/sessions/web:voice/voice", data=b"\x1a\x45\xdf\xa3" + b"\x00" * 10)
            assert refused.status == 400
            assert "tools.transcribe.model" in (await refused.json())["error"]

    run(test)


def test_a_reply_with_markup_streams_as_text_never_as_markup():
    live = LiveReply()
    html = "".join(live.add(piece)["tail"] for piece in ("<img src=x onerror=alert(1)>", " and ", "<script>"))
    assert "<img" not in html and "<script>" not in html


def test_help_in_the_web_app_speaks_of_the_page_and_at_the_terminal_of_its_keys():
    async def test() -> None:
        async with app_client() as (client, hub):
            tab = Stream(await client.get("/api/sessions/web:help/events"))
            await tab.next(lambda m: m["type"] == "hello")
            await client.post("/api/sessions/web:help/messages", json={"text": "/help"})
            shown = (await tab.next(lambda m: m["type"] == "result"))["text"]
            assert "Shift-Enter" in shown and "Alt-Enter" not in shown and "copy button" in shown
            at_terminal = await hub.send("cli:direct", "/help")
            assert at_terminal is not None and "Alt-Enter" in at_terminal.reply

    run(test)


def test_the_manifest_and_icons_are_served_without_sign_in_and_nothing_else_of_the_app_is(isolated_home):
    import httpx

    from tests.browser import web_gateway

    with web_gateway() as web, httpx.Client(base_url=web.url, timeout=30) as http:
        manifest = http.get("/static/manifest.json")
        assert manifest.status_code == 200 and manifest.json()["display"] == "standalone"
        for icon in manifest.json()["icons"]:
            assert http.get(icon["src"]).status_code == 200
        for private in ("/static/app.js", "/static/chat.js", "/", "/api/sessions", "/api/chat/features"):
            assert http.get(private).status_code == 401, private


def test_a_long_open_block_is_rendered_a_few_times_a_second_and_once_more_when_it_ends(monkeypatch):
    from nanoagent.agent import events as ev
    from nanoagent.web import live as module

    now = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    live = LiveReply()
    code = "```\n" + "x = 1\n" * 2000  # one fence, still open: over LONG_TAIL characters
    assert live.add(code)["tail"] is not None  # the first render
    skipped = live.add("y = 2\n")
    assert skipped["tail"] is None and skipped["done"] == []  # within SLOW of the last: the page keeps what it has
    now[0] += module.SLOW * 2
    assert "y = 2" in live.add("z = 3\n")["tail"]
    live.add("last = 4\n")
    final = live.wire(ev.ToolStarted(call_id="c1", name="exec", arguments={}))
    assert final is not None and "last = 4" in final["tail"]  # its segment ended: the render the page has not had
