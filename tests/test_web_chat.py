"""The web chat in a real browser (Debian's chromium through Playwright) against a real gateway, as issue 37 asks:
a message box on the first page, the view following the stream, Markdown rendered while a reply still streams, the
parts of a turn in their order, copy buttons, a pasted image, a phone's width, and markup that stays inert while it
streams. Replies that must still be streaming are held by `Held`: it gives a reply's pieces, then waits for the test
before the last one."""
# ruff: noqa: F811 - the fixtures imported from tests.browser are parameters of the tests

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from nanoagent.config.schema import Config
from nanoagent.providers.base import ChatRequest, ProviderEvent, StreamEnd, TextDelta, UsageReport
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.usage import Usage
from tests.browser import WebGateway, browser, page, sign_in, web, web_gateway  # noqa: F401
from tests.conftest import PATIENCE
from tests.test_web_pages import XSS, tiny_png, watch_outside

pytestmark = pytest.mark.process  # a chromium per module
WAIT = PATIENCE * 1000 / 4  # ms, Playwright's unit


class Held(ScriptedProvider):
    """A reply given as a list of pieces streams them one by one and waits for `release` before its last piece; a
    ScriptedReply or a string is answered at once, as the ScriptedProvider does."""

    def __init__(self, replies: Iterable[list[str] | ScriptedReply | str], release: threading.Event):
        given = list(replies)
        super().__init__([ScriptedReply("".join(r)) if isinstance(r, list) else r for r in given])
        self.pieces = [r if isinstance(r, list) else None for r in given]
        self.release = release

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        pieces = self.pieces.pop(0)
        if pieces is None:
            async for event in super().stream(request):
                yield event
            return
        self.replies.pop(0)
        for piece in pieces[:-1]:
            yield TextDelta(piece)
        await asyncio.to_thread(self.release.wait, PATIENCE)
        yield TextDelta(pieces[-1])
        yield UsageReport(Usage(10, 10))
        yield StreamEnd("end_turn")


def in_view(page_: Any, selector: str) -> bool:
    """Whether the last element matching `selector` is inside the log's visible box."""
    return bool(page_.evaluate("""(selector) => {
        const log = document.querySelector('#log').getBoundingClientRect();
        const all = document.querySelectorAll(selector);
        const box = all[all.length - 1].getBoundingClientRect();
        return box.bottom <= log.bottom + 1 && box.bottom >= log.top; }""", selector))


def parts_of_last_reply(page_: Any) -> list[str]:
    return list(page_.evaluate("""() => {
        const replies = document.querySelectorAll('.msg.assistant');
        return Array.from(replies[replies.length - 1].children).filter((c) => !c.classList.contains('actions'))
          .map((c) => c.matches('details.tool') ? 'tool' : c.textContent.trim()); }"""))


def test_the_first_page_has_a_message_box_and_the_first_message_starts_a_chat(browser, web):
    page_ = browser.new_context().new_page()
    sign_in(page_, web)
    page_.locator("#message").wait_for(timeout=WAIT)  # no "New chat" click needed
    assert page_.locator("h1").inner_text() == "New chat"
    page_.fill("#message", "hello there")
    page_.keyboard.press("Enter")
    page_.locator(".msg.assistant", has_text="ok").wait_for(timeout=WAIT)
    page_.wait_for_function("() => /^#\\/chat\\/web%3A[0-9a-f]{8}$/.test(location.hash)", timeout=WAIT)
    key = page_.evaluate("() => decodeURIComponent(location.hash.slice(7))")
    page_.locator(".sessions a", has_text=key).wait_for(timeout=WAIT)  # the new chat joined the list
    page_.reload()
    page_.locator(".msg.user", has_text="hello there").wait_for(timeout=WAIT)
    assert page_.locator(".msg.user").count() == 1
    page_.context.close()


def test_a_long_session_opens_at_its_end_the_view_follows_a_reply_and_a_person_who_scrolled_up_gets_a_jump(
        browser, isolated_home):
    release = threading.Event()
    long = "\n\n".join(f"Paragraph {n} of a long reply." for n in range(12))
    provider = Held([long] * 8 + [long, ["The newest ", "words ", "at last."]], release)
    try:
        with web_gateway(provider) as gateway:
            for n in range(8):
                gateway.call(lambda n=n: gateway.gateway.hub.send("web:long", f"question {n}"))
            page_ = browser.new_context(viewport={"width": 1000, "height": 700}).new_page()
            sign_in(page_, gateway)
            page_.goto(f"{gateway.url}/#/chat/web:long")
            page_.locator(".msg.user", has_text="question 7").wait_for(timeout=WAIT)
            page_.wait_for_function("() => { const l = document.querySelector('#log');"
                                    " return l.scrollHeight > l.clientHeight * 2; }", timeout=WAIT)
            assert in_view(page_, ".msg.assistant")  # opening a session shows its end
            page_.fill("#message", "one more")
            page_.keyboard.press("Enter")
            page_.wait_for_function("() => document.querySelectorAll('.msg.assistant:not([data-live])').length === 9"
                                    " && !document.querySelector('[data-live]')", timeout=WAIT)
            assert in_view(page_, ".msg.assistant")  # the newest reply is in view after sending
            page_.fill("#message", "and the last")
            page_.keyboard.press("Enter")
            page_.locator("[data-live]", has_text="The newest").wait_for(timeout=WAIT)
            page_.evaluate("() => { const l = document.querySelector('#log'); l.scrollTop = 0;"
                           " l.dispatchEvent(new Event('scroll')); }")
            release.set()
            jump = page_.locator("#jump")
            jump.wait_for(state="visible", timeout=WAIT)  # new words came while the person read above
            assert page_.evaluate("() => document.querySelector('#log').scrollTop") == 0
            jump.click()
            page_.locator(".msg.assistant", has_text="at last.").wait_for(timeout=WAIT)
            page_.wait_for_function("() => { const l = document.querySelector('#log');"
                                    " return l.scrollHeight - l.scrollTop - l.clientHeight < 2; }", timeout=WAIT)
            assert in_view(page_, ".msg.assistant")
            page_.context.close()
    finally:
        release.set()


def test_a_heading_is_a_heading_while_the_reply_still_streams(browser, isolated_home):
    release = threading.Event()
    provider = Held([["# A heading\n\n", "Some **bold** words\n", "and the end."]], release)
    try:
        with web_gateway(provider) as gateway:
            page_ = browser.new_context().new_page()
            sign_in(page_, gateway)
            page_.fill("#message", "write it")
            page_.keyboard.press("Enter")
            page_.locator("[data-live] h1", has_text="A heading").wait_for(timeout=WAIT)
            page_.locator("[data-live] strong", has_text="bold").wait_for(timeout=WAIT)
            assert "#" not in page_.locator("[data-live]").inner_text()
            key = page_.evaluate("() => decodeURIComponent(location.hash.slice(7))")
            assert page_.locator("[data-live]").count() == 1 and gateway.gateway.hub.busy(key)  # still streaming
            late = browser.new_context().new_page()  # a tab opened mid-reply gets the reply so far, rendered
            sign_in(late, gateway)
            late.goto(f"{gateway.url}/#/chat/{key}")
            late.locator("[data-live] h1", has_text="A heading").wait_for(timeout=WAIT)
            late.locator("[data-live] strong", has_text="bold").wait_for(timeout=WAIT)
            release.set()
            late.locator(".msg.assistant", has_text="and the end.").wait_for(timeout=WAIT)
            assert late.locator(".msg.assistant").count() == 1
            late.context.close()
            page_.locator(".msg.assistant", has_text="and the end.").wait_for(timeout=WAIT)
            assert page_.locator(".msg.assistant h1", has_text="A heading").count() == 1
            page_.context.close()
    finally:
        release.set()


def test_the_text_before_a_tool_call_stays_above_it_live_and_after_a_reload(browser, isolated_home):
    release = threading.Event()
    provider = Held([ScriptedReply("Let me look.", tool_calls=[("list_dir", {"path": "."})]),
                     ["Found ", "it."]], release)
    try:
        with web_gateway(provider) as gateway:
            page_ = browser.new_context().new_page()
            sign_in(page_, gateway)
            page_.goto(f"{gateway.url}/#/chat/web:order")
            page_.fill("#message", "look around")
            page_.keyboard.press("Enter")
            page_.locator("[data-live]", has_text="Found").wait_for(timeout=WAIT)
            assert parts_of_last_reply(page_)[:2] == ["Let me look.", "tool"]  # live, before the reply ends
            assert parts_of_last_reply(page_)[2].startswith("Found")
            release.set()
            page_.locator(".msg.assistant:not([data-live])", has_text="Found it.").wait_for(timeout=WAIT)
            assert parts_of_last_reply(page_) == ["Let me look.", "tool", "Found it."]
            page_.reload()
            page_.locator(".msg.assistant", has_text="Found it.").wait_for(timeout=WAIT)
            assert parts_of_last_reply(page_) == ["Let me look.", "tool", "Found it."]
            page_.context.close()
    finally:
        release.set()


def test_the_copy_buttons_copy_a_code_block_and_a_whole_reply(browser, isolated_home):
    reply = "Run this:\n\n```sh\necho 'hello world'\n```\n\nThen **check** it."
    with web_gateway(ScriptedProvider([reply])) as gateway:
        context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
        page_ = context.new_page()
        sign_in(page_, gateway)
        page_.fill("#message", "how?")
        page_.keyboard.press("Enter")
        page_.locator(".msg.assistant:not([data-live])", has_text="Then check it.").wait_for(timeout=WAIT)
        page_.locator(".msg.assistant .code .copy").click()
        page_.locator(".msg.assistant .code .copy", has_text="Copied").wait_for(timeout=WAIT)
        assert page_.evaluate("() => navigator.clipboard.readText()") == "echo 'hello world'\n"
        page_.get_by_role("button", name="Copy the reply").click()
        page_.get_by_role("button", name="Copy the reply").filter(has_text="Copied").wait_for(timeout=WAIT)
        assert page_.evaluate("() => navigator.clipboard.readText()") == reply
        context.close()


def test_an_image_pasted_into_the_message_box_and_one_dropped_on_the_chat_go_with_the_message(browser, isolated_home):
    seen: list[int] = []

    def respond(request: Any) -> str:
        seen.append(sum(1 for m in request.messages for b in (m.get("content") if isinstance(m.get("content"), list)
                                                              else []) if b.get("type") != "text"))
        return "A red and blue square."

    with web_gateway(ScriptedProvider(respond=respond)) as gateway:
        page_ = browser.new_context().new_page()
        sign_in(page_, gateway)
        page_.locator("#message").wait_for(timeout=WAIT)
        page_.evaluate("""(data) => {
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], 'pasted.png', { type: 'image/png' }));
            document.querySelector('#message').dispatchEvent(new ClipboardEvent('paste',
              { clipboardData: transfer, bubbles: true, cancelable: true })); }""",
                       base64.b64encode(tiny_png()).decode())
        page_.locator("#attached .chip", has_text="pasted.png").wait_for(timeout=WAIT)
        page_.evaluate("""(data) => {  // and one dropped on the conversation
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], 'dropped.png', { type: 'image/png' }));
            const view = document.querySelector('.conversation');
            view.dispatchEvent(new DragEvent('dragover', { dataTransfer: transfer, bubbles: true, cancelable: true }));
            view.dispatchEvent(new DragEvent('drop', { dataTransfer: transfer, bubbles: true, cancelable: true })); }""",
                       base64.b64encode(tiny_png()).decode())
        page_.locator("#attached .chip", has_text="dropped.png").wait_for(timeout=WAIT)
        page_.wait_for_function("() => !document.querySelector('#attached').textContent.includes('uploading')",
                                timeout=WAIT)
        page_.fill("#message", "what is this?")
        page_.keyboard.press("Enter")
        page_.locator(".msg.assistant", has_text="A red and blue square.").wait_for(timeout=WAIT)
        page_.wait_for_function("() => document.querySelector('.msg.user img')?.naturalWidth === 2", timeout=WAIT)
        assert seen == [2]  # the pasted image and the dropped one went to the model
        assert page_.locator("#attached .chip").count() == 0
        page_.context.close()


def test_a_phone_has_one_header_row_no_sideways_scroll_whole_numbers_and_tables_that_scroll_inside(browser,
                                                                                                   isolated_home):
    table = "| " + " | ".join(f"column {n}" for n in range(12)) + " |\n|" + "---|" * 12 + "\n| " + \
        " | ".join(f"{n * 1234567:,}" for n in range(12)) + " |"
    provider = ScriptedProvider([ScriptedReply(table, usage=Usage(17_736_123, 3_645_987, 1_234_567))])
    with web_gateway(provider) as gateway:
        gateway.call(lambda: gateway.gateway.hub.send("web:phone", "a wide table please"))
        context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        page_ = context.new_page()
        sign_in(page_, gateway)
        for route in ("chat", "chat/web:phone", "memory", "schedules", "usage", "settings"):
            page_.goto(f"{gateway.url}/#/{route}")
            page_.locator("main h1").first.wait_for(timeout=WAIT)
            page_.wait_for_load_state("networkidle")
            assert page_.evaluate("() => document.documentElement.scrollWidth") <= 390, route
            assert page_.locator("header.top").bounding_box()["height"] < 64, route  # one row: the pages in a menu
        page_.goto(f"{gateway.url}/#/chat/web:phone")
        wide = page_.locator(".msg.assistant table")
        wide.wait_for(timeout=WAIT)
        assert page_.evaluate("() => { const t = document.querySelector('.msg.assistant table');"
                              " return t.scrollWidth > t.clientWidth && t.clientWidth <= 390; }")
        box = page_.locator("#message").bounding_box()
        assert box["y"] + box["height"] <= 844  # the composer is on the screen
        page_.goto(f"{gateway.url}/#/usage")
        page_.locator("td.num").first.wait_for(timeout=WAIT)
        broken = page_.evaluate("""() => Array.from(document.querySelectorAll('td.num')).filter((cell) => {
            if (!cell.offsetParent) return false;
            const range = document.createRange();
            range.selectNodeContents(cell);
            return new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top))).size > 1;
          }).map((cell) => cell.textContent)""")
        assert broken == []  # every number on one line
        assert page_.locator("td.num", has_text="17,736,123").count() >= 1
        context.close()


def test_markup_streamed_in_a_reply_neither_runs_nor_loads_while_it_streams(browser, isolated_home):
    release = threading.Event()
    provider = Held([[XSS[0] + "\n\n", XSS[1] + "\n\n", XSS[2] + "\n\n", XSS[3] + "\n\n", "the end"]], release)
    try:
        with web_gateway(provider) as gateway:
            page_ = browser.new_context().new_page()
            outside = watch_outside(page_, gateway)
            sign_in(page_, gateway)
            page_.fill("#message", "say it")
            page_.keyboard.press("Enter")
            page_.locator("[data-live] a", has_text="image: tracker").wait_for(timeout=WAIT)
            for _ in range(2):  # while it streams, then once it is stored
                assert "<script>window.__xss = 1</script>" in page_.locator(".msg.assistant").last.inner_text()
                assert page_.evaluate("() => window.__xss") is None
                assert page_.locator("main img").count() == 0
                assert page_.locator("a[href^='javascript']").count() == 0
                release.set()
                page_.locator(".msg.assistant:not([data-live])", has_text="the end").wait_for(timeout=WAIT)
            assert outside == []
            page_.context.close()
    finally:
        release.set()


def own_chromium(browser: Any, *extra: str) -> Any:
    """A second chromium of this Playwright, with flags of its own."""
    import os
    import shutil

    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    return browser.browser_type.launch(executable_path=CHROMIUM if os.path.exists(CHROMIUM) else
                                       shutil.which("chromium"), args=[*CHROMIUM_ARGS, *extra])


def test_a_voice_note_recorded_in_the_page_is_transcribed_and_answered(browser, llm, isolated_home):
    from tests.llm_server import Transcript

    llm.transcriptions.script(Transcript("remind me to water the plants"))
    config = Config()
    config.tools.transcribe.model, config.tools.transcribe.api_base = "whisper-test", llm.url
    with web_gateway(ScriptedProvider(["I will remind you."]), config) as gateway:
        fake = own_chromium(browser, "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream")
        try:
            context = fake.new_context(permissions=["microphone"])
            page_ = context.new_page()
            sign_in(page_, gateway)
            voice = page_.locator("#voice")
            voice.wait_for(state="visible", timeout=WAIT)  # transcription is set up, and 127.0.0.1 is secure
            voice.click()
            page_.locator(".status", has_text="Recording").wait_for(timeout=WAIT)
            page_.wait_for_function("() => new Promise((done) => setTimeout(() => done(true), 300))")  # some audio
            voice.click()
            page_.locator(".msg.assistant", has_text="I will remind you.").wait_for(timeout=WAIT)
            page_.locator(".msg.user", has_text="remind me to water the plants").wait_for(timeout=WAIT)
            assert page_.locator(".msg.user .voice-note").count() == 1
            assert "saved as" not in page_.locator(".msg.user").inner_text()
            assert llm.transcriptions.requests[-1].file.startswith(b"\x1a\x45\xdf\xa3")  # the recorder's WebM
        finally:
            fake.close()


def test_on_a_plain_http_address_the_page_says_a_secure_connection_is_needed_and_offers_no_microphone(browser, llm,
                                                                                                    isolated_home):
    config = Config()
    config.tools.transcribe.model, config.tools.transcribe.api_base = "whisper-test", llm.url
    config.gateway.http.allowed_hosts = ["chat.test"]
    with web_gateway(config=config) as gateway:
        lan = own_chromium(browser, "--host-resolver-rules=MAP chat.test 127.0.0.1")
        try:
            page_ = lan.new_context().new_page()
            address = gateway.url.replace("127.0.0.1", "chat.test")
            page_.goto(gateway.signin_url().replace(gateway.url, address))
            note = page_.locator("#secure-note")
            note.wait_for(state="visible", timeout=WAIT)
            assert "HTTPS" in note.inner_text()
            assert page_.evaluate("() => window.isSecureContext") is False
            assert not page_.locator("#voice").is_visible()
        finally:
            lan.close()


def test_chromium_finds_the_app_installable_to_a_home_screen_and_nothing_is_cached_for_offline(browser, web,
                                                                                                 tmp_path):
    import os
    import shutil

    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    profile = browser.browser_type.launch_persistent_context(  # a profile of its own: not incognito, which never installs
        str(tmp_path / "profile"), executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"),
        args=CHROMIUM_ARGS)
    try:
        page_ = profile.new_page()
        sign_in(page_, web)
        page_.locator("#message").wait_for(timeout=WAIT)
        page_.wait_for_load_state("networkidle")
        cdp = profile.new_cdp_session(page_)
        assert cdp.send("Page.getAppManifest").get("errors") == []
        assert cdp.send("Page.getInstallabilityErrors")["installabilityErrors"] == []
        assert page_.evaluate("() => navigator.serviceWorker.getRegistrations().then((r) => r.length)") == 0
    finally:
        profile.close()
