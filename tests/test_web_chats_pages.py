"""Managing chats in a real browser (Debian's chromium, `tests/browser.py`) against a real gateway: titles in the
sidebar and the heading, rename, delete, search, the model picker, and markup in titles and search results that
neither runs nor loads."""
# ruff: noqa: F811 - the fixtures imported from tests.browser are parameters of the tests

from __future__ import annotations

from typing import Any

import pytest

from nanoagent.config.loader import load_config
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.session.store import SessionStore
from tests.browser import WebGateway, browser, page, sign_in, web_gateway  # noqa: F401
from tests.conftest import anthropic_env, write_config
from tests.llm_server import Reply
from tests.test_web_pages import WAIT, XSS, watch_outside

pytestmark = pytest.mark.process  # a chromium per module
FIRST = "Plan a three day trip to Lisbon in May, with one day at the beach"
# the pages' payloads (tests/test_web_pages.py) and the Markdown renderer's (tests/test_web_markdown.py)
PAYLOADS = [*XSS, "<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
            "<iframe src=https://evil.example></iframe>", "<a href=javascript:alert(1)>x</a>"]


def send(gateway: WebGateway, key: str, text: str) -> None:
    gateway.call(lambda: gateway.gateway.hub.send(key, text))


def open_chat(page_: Any, gateway: WebGateway, key: str) -> None:
    sign_in(page_, gateway)
    page_.goto(f"{gateway.url}/#/chat/{key}")
    page_.locator("#message").wait_for(timeout=WAIT)


def row(page_: Any, key: str) -> Any:
    return page_.locator(f'#main .sessions li[data-key="{key}"]')


def test_a_chat_shows_its_title_and_is_renamed_and_deleted_from_the_page(browser, isolated_home):
    with web_gateway(ScriptedProvider(default="ok")) as gateway:
        send(gateway, "web:trip", FIRST)
        send(gateway, "web:bread", "How long should sourdough proof?")
        page_ = browser.new_context().new_page()
        open_chat(page_, gateway, "web:trip")
        page_.locator("main h1", has_text="Plan a three day trip to…").wait_for(timeout=WAIT)
        assert row(page_, "web:trip").locator(".title").inner_text() == "Plan a three day trip to…"
        assert row(page_, "web:bread").locator(".title").inner_text() == "How long should sourdough proof?"
        page_.click("#rename")
        page_.fill("#rename-title", "Lisbon in May")
        page_.keyboard.press("Enter")
        page_.locator("main h1", has_text="Lisbon in May").wait_for(timeout=WAIT)
        row(page_, "web:trip").locator(".title", has_text="Lisbon in May").wait_for(timeout=WAIT)  # the list too
        store = SessionStore(gateway.paths.sessions_dir)
        assert store.load("web:trip").meta.title == "Lisbon in May"
        page_.click("#delete")
        page_.click("#delete-confirm")
        page_.wait_for_function("() => location.hash === '#/chat'", timeout=WAIT)
        row(page_, "web:bread").wait_for(timeout=WAIT)
        assert row(page_, "web:trip").count() == 0
        assert "web:trip" not in store.keys() and "web:bread" in store.keys()
        page_.context.close()


def test_searching_chats_finds_them_by_title_and_content_and_never_a_guests(browser, isolated_home):
    write_config(isolated_home, {"channels": {"telegram": {"owner": ["111"]}}})
    config = load_config(Paths.from_env().config_file)[0]
    with web_gateway(ScriptedProvider(default="ok"), config) as gateway:
        send(gateway, "web:trip", FIRST)
        send(gateway, "web:bread", "How long should sourdough proof?")
        send(gateway, "web:bread", "The starter smells of green apples")
        send(gateway, "telegram:999", "a guest asks about sourdough and green apples")
        page_ = browser.new_context().new_page()
        open_chat(page_, gateway, "web:trip")
        page_.fill("#chat-search", "sourdough")
        page_.keyboard.press("Enter")
        found = page_.locator("#chat-results li[data-key]")
        found.first.wait_for(timeout=WAIT)
        assert found.evaluate_all("rows => rows.map(r => r.dataset.key)") == ["web:bread"]
        page_.fill("#chat-search", "green apples")
        page_.keyboard.press("Enter")
        hit = page_.locator("#chat-results li", has_text="message")
        hit.wait_for(timeout=WAIT)
        assert found.evaluate_all("rows => rows.map(r => r.dataset.key)") == ["web:bread"]
        assert "green apples" in hit.locator(".snippet").inner_text()
        hit.locator("a").click()
        page_.locator("main h1", has_text="How long should sourdough proof?").wait_for(timeout=WAIT)
        page_.fill("#chat-search", "zanzibar")
        page_.keyboard.press("Enter")
        page_.locator("#chat-results li", has_text="No chat matches.").wait_for(timeout=WAIT)
        page_.context.close()


def test_the_model_picker_switches_the_chats_model_and_refuses_an_unknown_one_in_one_line(browser, llm,
                                                                                          monkeypatch):
    llm.script(Reply(text="Answered by the other model."))
    for name, value in anthropic_env(llm).items():
        monkeypatch.setenv(name, value)
    config = load_config(Paths.from_env().config_file)[0]
    with web_gateway(config=config, configured=True) as gateway:  # models checked by name, as a real gateway's
        page_ = browser.new_context().new_page()
        open_chat(page_, gateway, "web:pick")
        picker = page_.locator("#model-pick")
        page_.wait_for_function("() => document.querySelector('#model-pick').value === 'anthropic/claude-test'",
                                timeout=WAIT)
        picker.fill("mystery-model")
        page_.click("#model-switch")
        refused = page_.locator(".chat-note [role=alert]")
        refused.wait_for(timeout=WAIT)
        assert refused.inner_text().startswith("Cannot switch: Unknown model 'mystery-model'")
        assert "\n" not in refused.inner_text()
        picker.fill("anthropic/claude-other")
        page_.click("#model-switch")
        page_.locator(".chat-note [role=status]", has_text="This session now uses anthropic/claude-other").wait_for(
            timeout=WAIT)
        page_.fill("#message", "hello")
        page_.keyboard.press("Enter")
        page_.locator(".msg.assistant", has_text="Answered by the other model.").wait_for(timeout=WAIT)
        assert llm.requests[-1].body["model"] == "claude-other"
        page_.context.close()


def test_markup_in_titles_and_search_results_neither_runs_nor_loads(browser, isolated_home):
    with web_gateway(ScriptedProvider(default="ok")) as gateway:
        store = SessionStore(gateway.paths.sessions_dir)
        for number, payload in enumerate(PAYLOADS):
            key = f"web:xss{number}"
            send(gateway, key, f"{payload} zebracorn")  # the first words are the title, markup and all
            renamed = store.load(f"web:named{number}")
            store.append(renamed, [{"type": "message", "message": {"role": "user", "content": "zebracorn again"}}])
            store.set_title(renamed, payload)  # a name given (or a model's)
        page_ = browser.new_context().new_page()
        outside = watch_outside(page_, gateway)
        open_chat(page_, gateway, "web:named0")
        page_.locator("main h1", has_text="<script>").wait_for(timeout=WAIT)
        for number, payload in enumerate(PAYLOADS):
            assert row(page_, f"web:named{number}").locator(".title").inner_text() == payload
        page_.fill("#chat-search", "zebracorn")
        page_.keyboard.press("Enter")
        results = page_.locator("#chat-results li[data-key]")
        page_.wait_for_function(f"() => document.querySelectorAll('#chat-results li[data-key]').length === "
                                f"{2 * len(PAYLOADS)}", timeout=WAIT)
        shown = results.all_inner_texts()
        for payload in PAYLOADS:
            assert any(payload in text for text in shown), payload  # as text: titles and snippets
        page_.fill("#chat-search", "<img src=x onerror")
        page_.keyboard.press("Enter")
        results.first.wait_for(timeout=WAIT)
        assert page_.evaluate("() => window.__xss") is None
        assert page_.locator("main img, main iframe, main script").count() == 0
        assert page_.locator("a[href^='javascript']").count() == 0
        assert outside == []  # no request elsewhere, no dialog
        page_.context.close()
