"""The web app in a real browser (Debian's chromium through Playwright, `tests/browser.py`) against a real gateway:
chat that streams, Stop, approvals, the Dream log's diff and undo, adding jobs, the usage chart against
`nanoagent usage --json`, what a model, tool, session name or skill wrote never running or loading, and a phone."""
# ruff: noqa: F811 - the fixtures imported from tests.browser are parameters of the tests

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from nanoagent.config.schema import Config
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.usage import Usage
from tests.browser import WebGateway, browser, page, sign_in, web, web_gateway  # noqa: F401
from tests.conftest import PATIENCE, anthropic_env, invoke, write_config
from tests.llm_server import Reply

pytestmark = pytest.mark.process  # a chromium per module
WAIT = PATIENCE * 1000 / 4  # ms, Playwright's unit
XSS = ["<script>window.__xss = 1</script>", "<img src=x onerror=\"window.__xss = 2\">",
       "[click me](javascript:window.__xss=3)", "![tracker](https://evil.example/pixel.png)"]


@contextmanager
def llm_gateway(llm: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebGateway]:
    """A gateway whose model is the local LLM server, through the real provider (httpx, Anthropic's API) with the
    spend meter of a real gateway."""
    from nanoagent.agent.build import spend_meter
    from nanoagent.config.loader import load_config
    from nanoagent.paths import Paths
    from nanoagent.providers.registry import build_provider

    for name, value in anthropic_env(llm).items():
        monkeypatch.setenv(name, value)
    paths = Paths.from_env()
    config = load_config(paths.config_file)[0]
    provider = build_provider(config, config.defaults.model, lambda message: None, spend_meter(config, paths))
    with web_gateway(provider, config) as gateway:  # the spend ledger counts its calls, as the gateway's
        yield gateway


def watch_outside(page: Any, gateway: WebGateway) -> list[str]:
    """Every request the page makes to anywhere but the gateway, and every dialog it opens."""
    seen: list[str] = []
    page.on("request", lambda request: None if request.url.startswith(gateway.url) else seen.append(request.url))
    page.on("dialog", lambda dialog: (seen.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    return seen


def open_chat(page: Any, gateway: WebGateway, key: str) -> None:
    sign_in(page, gateway)
    page.goto(f"{gateway.url}/#/chat/{key}")
    page.locator("#message").wait_for()


def test_a_message_sent_in_the_chat_streams_into_the_page_and_a_second_tab_sees_it(browser, llm, monkeypatch):
    llm.script(Reply(text="The first words, then some more words, and the last words.", chunk_delay=0.6))
    with llm_gateway(llm, monkeypatch) as gateway:
        tab = browser.new_context().new_page()
        other = browser.new_context().new_page()
        open_chat(tab, gateway, "web:stream")
        open_chat(other, gateway, "web:stream")
        tab.fill("#message", "hello")
        tab.keyboard.press("Enter")
        for page_ in (tab, other):  # part of the reply is on the page before the whole of it
            page_.wait_for_function("() => { const n = document.querySelector('[data-live]');"
                                    " return n && n.textContent.length > 0 && !n.textContent.includes('last words'); }",
                                    timeout=WAIT)
        for page_ in (tab, other):
            page_.locator(".msg.assistant", has_text="the last words.").wait_for(timeout=WAIT)
        assert tab.locator(".msg.user", has_text="hello").count() == 1
        tab.context.close()
        other.context.close()


def test_a_persons_message_shows_in_every_tab_as_it_is_sent_and_a_new_chat_joins_the_other_tabs_lists(browser, llm,
                                                                                                       monkeypatch):
    release = threading.Event()
    llm.script(Reply(text="The answer, at last.", release=release),  # the turn runs until the test lets it end
               Reply(text="Noted the second thought."))
    try:
        with llm_gateway(llm, monkeypatch) as gateway:
            pages = [browser.new_context().new_page() for _ in range(3)]
            tab, watcher, other = pages
            open_chat(other, gateway, "web:elsewhere")  # a tab in another conversation
            other.locator(".sessions li", has_text="No sessions yet.").wait_for(timeout=WAIT)
            open_chat(tab, gateway, "web:brandnew")
            open_chat(watcher, gateway, "web:brandnew")  # a second tab of the new chat, open before it has a message
            tab.fill("#message", "a first message")
            tab.keyboard.press("Enter")
            watcher.locator(".msg.user", has_text="a first message").wait_for(timeout=WAIT)
            link = other.locator(".sessions a", has_text="web:brandnew")
            link.wait_for(timeout=WAIT)  # the list of the other tab gained the new chat, without a reload
            link.click()
            other.locator(".msg.user", has_text="a first message").wait_for(timeout=WAIT)
            tab.fill("#message", "and a second thought")  # it joins the running turn
            tab.keyboard.press("Enter")
            for page_ in (watcher, other):
                page_.locator(".msg.user", has_text="and a second thought").wait_for(timeout=WAIT)
            assert gateway.gateway.hub.busy("web:brandnew")  # all of it while the turn still runs
            release.set()
            for page_ in pages:
                page_.locator(".msg.assistant", has_text="Noted the second thought.").wait_for(timeout=WAIT)
                for said in ("a first message", "and a second thought"):
                    assert page_.locator(".msg.user", has_text=said).count() == 1
                page_.context.close()
    finally:
        release.set()


def test_stop_ends_the_running_turn_from_the_page(browser, llm, monkeypatch):
    release = threading.Event()
    llm.script(Reply(text="never shown", release=release))
    try:
        with llm_gateway(llm, monkeypatch) as gateway:
            page_ = browser.new_context().new_page()
            open_chat(page_, gateway, "web:stop")
            page_.fill("#message", "think for a long time")
            page_.click("#send")
            stop = page_.locator("#stop")
            stop.wait_for(state="visible")
            page_.wait_for_function("() => !document.querySelector('#stop').disabled", timeout=WAIT)
            stop.click()
            page_.locator(".status", has_text="Stopped.").wait_for(timeout=WAIT)
            assert not gateway.gateway.hub.busy("web:stop")
            page_.context.close()
    finally:
        release.set()


def test_an_approval_is_asked_in_the_page_and_approving_runs_the_command(browser, isolated_home):
    config = Config()
    config.tools.exec.sandbox, config.tools.exec.approve = "none", "always"
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("exec", {"command": "echo approved-$((40+2))"})]),
                                 ScriptedReply("It printed the number.")])
    with web_gateway(provider, config) as gateway:
        page_ = browser.new_context().new_page()
        open_chat(page_, gateway, "web:approve")
        page_.fill("#message", "run the command")
        page_.click("#send")
        question = page_.get_by_role("alertdialog")
        question.wait_for(timeout=WAIT)
        assert "echo approved-$((40+2))" in question.inner_text()
        question.get_by_role("button", name="Approve").click()
        page_.locator(".msg.assistant", has_text="It printed the number.").wait_for(timeout=WAIT)
        page_.locator("details.tool summary", has_text="exec").click()
        assert "approved-42" in page_.locator("details.tool pre").inner_text()
        assert page_.get_by_role("alertdialog").count() == 0
        page_.context.close()


def test_a_dream_edit_is_shown_with_its_diff_and_undone_from_the_page(browser, web):
    from nanoagent.memory.gitlog import MemoryGit

    memory = web.paths.workspace / "memory" / "MEMORY.md"
    git = MemoryGit(web.paths.workspace, web.paths.memory_git_dir)
    git.ensure()
    before = memory.read_text()
    memory.write_text(before + "\n- Prefers green tea in the afternoon.\n")
    made = git.commit(["memory/MEMORY.md"], "Dream: the tea preference")
    assert made is not None
    page_ = browser.new_context().new_page()
    sign_in(page_, web)
    page_.goto(f"{web.url}/#/memory")
    edit = page_.locator(f'li[data-sha="{made.short}"]')
    edit.get_by_role("button", name="Show diff").click()
    edit.locator(".diff-add").first.wait_for(timeout=WAIT)
    assert "+- Prefers green tea in the afternoon." in edit.locator(".diff-add").all_inner_texts()
    edit.get_by_role("button", name="Undo this edit").click()
    edit.get_by_role("status").wait_for(timeout=WAIT)
    assert "green tea" not in memory.read_text()
    again = page_.locator(f'li[data-sha="{made.short}"]')
    again.get_by_role("button", name="Undo this edit").click()  # undone already: the same conflict message
    assert "Cannot restore" in again.get_by_role("alert").inner_text()
    page_.context.close()


def test_a_job_with_a_bad_schedule_shows_cron_adds_error_and_a_good_one_is_listed(browser, web):
    cli = invoke("cron", "add", "--cron", "0 25 * * *", "-m", "water the plants")
    assert cli.returncode != 0
    page_ = browser.new_context().new_page()
    sign_in(page_, web)
    page_.goto(f"{web.url}/#/schedules")
    page_.fill("#job-message", "water the plants")
    page_.select_option("#job-kind", "cron")
    page_.fill("#job-when", "0 25 * * *")
    page_.click("#job-add")
    error = page_.locator("#schedule-error [role=alert]")
    error.wait_for(timeout=WAIT)
    assert error.inner_text() in cli.stderr
    page_.fill("#job-name", "plants")
    page_.fill("#job-when", "0 9 * * *")
    page_.click("#job-add")
    page_.locator(".job", has_text="plants").wait_for(timeout=WAIT)
    assert "At 09:00 every day" in page_.locator(".job", has_text="plants").inner_text()
    page_.context.close()


def test_the_usage_charts_totals_equal_usage_json(browser, isolated_home):
    provider = ScriptedProvider([ScriptedReply("a", usage=Usage(12_000, 3_000)), ScriptedReply("b", usage=Usage(800, 50)),
                                 ScriptedReply("c", usage=Usage(4_000, 900, 2_000))])
    with web_gateway(provider) as gateway:
        for key, text in (("web:one", "x"), ("cli:direct", "y"), ("web:two", "z")):
            gateway.call(lambda key=key, text=text: gateway.gateway.hub.send(key, text))
        cli = json.loads(invoke("usage", "--json").stdout)["total"]
        page_ = browser.new_context().new_page()
        sign_in(page_, gateway)
        page_.goto(f"{gateway.url}/#/usage")
        total = page_.locator("#usage-total")
        total.wait_for(timeout=WAIT)
        bars = page_.locator("svg.chart rect.bar")
        shown_cost = sum(float(bar.get_attribute("data-cost")) for bar in bars.all())
        shown_tokens = sum(int(bar.get_attribute("data-tokens")) for bar in bars.all())
        assert abs(shown_cost - cli["cost"]) < 1e-6
        assert shown_tokens == cli["input_tokens"] + cli["output_tokens"]
        assert int(total.get_attribute("data-calls")) == cli["calls"] == 3
        assert f"{cli['input_tokens']:,} in" in total.inner_text()
        page_.context.close()


def test_the_usage_page_shows_spend_by_source_as_usage_by_source_json_gives_it(browser, isolated_home, llm, monkeypatch):
    write_config(isolated_home, {"providers": {"anthropic": {"prices": {"claude-test": {"input": 0.0,
                                                                                         "output": 100.0}}}},
                                 "agents": {"defaults": {"maxTokens": 100}}})
    llm.script(Reply(text="one", output_tokens=100), Reply(text="DONE", output_tokens=20),  # the turn; the flush
               Reply(text="- the user said hello", output_tokens=50))  # and the summary of /new
    with llm_gateway(llm, monkeypatch) as gateway:
        turn = gateway.call(lambda: gateway.gateway.hub.send("web:spend", "hello"))
        assert turn is not None and turn.result is not None and turn.result.error is None
        gateway.call(lambda: gateway.gateway.hub.send("web:spend", "/new"))
        cli = json.loads(invoke("usage", "--by", "source", "--json").stdout)
        page_ = browser.new_context().new_page()
        sign_in(page_, gateway)
        page_.goto(f"{gateway.url}/#/usage")
        page_.locator("#usage-sources tr.source").first.wait_for(timeout=WAIT)
        shown = {(row.get_attribute("data-source"), row.get_attribute("data-model")): row.locator("td").all_inner_texts()
                 for row in page_.locator("#usage-sources tr.source").all()}
        expected = {(row["source"], row["model"]): row for row in cli["rows"]}
        assert set(shown) == set(expected) == {(kind, "anthropic/claude-test") for kind in ("turn", "flush", "summary")}
        for key, cells in shown.items():
            assert cells[5] == f"${expected[key]['cost']:.4f}"
        section = page_.locator("#usage-sources")
        assert float(section.get_attribute("data-cost") or "nan") == cli["total"]["cost"] == 0.017


def test_the_usage_pages_budget_panel_shows_each_cap_with_the_figures_of_budget_json(browser, isolated_home, llm,
                                                                                     monkeypatch):
    # priced so every figure is known: output $100 per million tokens, so a 100-token reply costs $0.01
    write_config(isolated_home, {"providers": {"anthropic": {"prices": {"claude-test": {"input": 0.0,
                                                                                         "output": 100.0}}}},
                                 "agents": {"defaults": {"maxTokens": 100, "timezone": "Europe/Berlin"}},
                                 "budget": {"daily": 2.0, "sessions": {"web:*": 0.5}}})
    llm.script(Reply(text="one", output_tokens=100), Reply(text="two", output_tokens=250))
    with llm_gateway(llm, monkeypatch) as gateway:
        for key in ("web:spend", "cli:direct"):  # real calls through the provider: the ledger counts them
            turn = gateway.call(lambda key=key: gateway.gateway.hub.send(key, "hello"))
            assert turn is not None and turn.result is not None and turn.result.error is None
        cli = json.loads(invoke("budget", "--json").stdout)
        page_ = browser.new_context().new_page()
        sign_in(page_, gateway)
        page_.goto(f"{gateway.url}/#/usage")
        page_.locator("#budget tr.cap").first.wait_for(timeout=WAIT)
        shown = {row.get_attribute("data-name"): row for row in page_.locator("#budget tr.cap").all()}
        caps = {cap["name"]: cap for cap in cli["caps"]}
        assert set(shown) == set(caps) == {"daily", "sessions web:*"}
        assert caps["daily"]["spent"] == 0.035 and caps["sessions web:*"]["spent"] == 0.01  # cli:direct is not web:*
        for name, cap in caps.items():
            row = shown[name]
            assert float(row.get_attribute("data-spent")) == cap["spent"]
            assert float(row.get_attribute("data-limit")) == cap["limit"]
            assert float(row.get_attribute("data-reserved")) == cap["reserved"] == 0
            assert row.get_attribute("data-resets") == cap["resets_at"]
            # the forecast is the rate so far carried to the period's end: read a moment apart, it differs a little
            assert abs(float(row.get_attribute("data-forecast")) - cap["forecast"]) <= cap["forecast"] * 0.01
            cells = row.locator("td").all_inner_texts()
            assert cells[1] == f"${cap['spent']:.4f}" and cells[2] == f"${cap['limit']:.4f}"
            assert cells[3] == cap["resets_at"][:16].replace("T", " ") + " (Europe/Berlin)"
            assert cells[4].startswith("$")
        today = page_.locator("#budget [data-period]").first
        assert today.get_attribute("data-period") == cli["today"]["name"]
        assert float(today.get_attribute("data-spent")) == cli["today"]["spent"] == 0.035
        page_.context.close()


def test_markup_in_a_reply_a_tool_output_a_session_name_and_a_skill_neither_runs_nor_loads(browser, isolated_home):
    from nanoagent.paths import Paths

    payload = " ".join(XSS)
    skill = Paths.from_env().workspace / "skills" / "shiny"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: shiny\ndescription: {json.dumps(payload)}\n---\nbody\n")
    config = Config()
    config.tools.exec.sandbox, config.tools.exec.approve = "none", "never"
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("exec", {"command": f"printf '%s' {json.dumps(payload)}"})]),
                                 ScriptedReply(payload)])
    name = "web:<img src=x onerror=window.__xss=4>"
    with web_gateway(provider, config) as gateway:
        gateway.call(lambda: gateway.gateway.hub.send(name, payload))
        page_ = browser.new_context().new_page()
        outside = watch_outside(page_, gateway)
        sign_in(page_, gateway)
        page_.goto(f"{gateway.url}/#/chat/{name}")
        page_.locator(".msg.assistant", has_text="<script>").last.wait_for(timeout=WAIT)
        page_.locator("details.tool summary").first.click()
        assert "<script>window.__xss = 1</script>" in page_.locator("details.tool pre").first.inner_text()
        assert page_.locator(".sessions .key", has_text="<img src=x").count() == 1
        page_.locator("a", has_text="image: tracker").wait_for()
        page_.goto(f"{gateway.url}/#/settings")
        page_.locator(".skill-description", has_text="<script>").wait_for(timeout=WAIT)
        page_.goto(f"{gateway.url}/#/memory")
        page_.locator("#memory-query").wait_for()
        assert page_.evaluate("() => window.__xss") is None
        assert page_.locator("main img").count() == 0
        assert page_.locator("a[href^='javascript']").count() == 0
        assert outside == []
        page_.context.close()


def test_the_pages_fit_a_phone_and_work_from_the_keyboard(browser, web):
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True)
    page_ = context.new_page()
    sign_in(page_, web)
    for route in ("chat/web:phone", "memory", "schedules", "usage", "settings"):
        page_.goto(f"{web.url}/#/{route}")
        page_.locator("main h1").first.wait_for(timeout=WAIT)
        page_.wait_for_load_state("networkidle")
        width = page_.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"{route} is {width} px wide"
    page_.goto(f"{web.url}/#/chat/web:phone-keys")
    page_.locator("#message").wait_for(timeout=WAIT)
    page_.wait_for_load_state("networkidle")  # the chat drawn whole: a redraw after the focus would move it
    page_.focus("#message")
    page_.keyboard.press("Shift+Tab")  # from the message box back through real controls
    focused = page_.evaluate("() => document.activeElement.id || document.activeElement.tagName")
    assert focused in ("BUTTON", "A", "INPUT", "TEXTAREA", "SELECT", "SUMMARY", "log")  # the log scrolls by keys
    page_.focus("#menu")  # at a phone's width the pages are behind one menu button
    page_.keyboard.press("Enter")
    page_.focus("nav a[data-page=usage]")
    page_.keyboard.press("Enter")
    page_.locator("h1", has_text="Usage").wait_for(timeout=WAIT)
    context.close()


def test_a_page_without_the_cookie_gets_no_app_and_no_data(browser, web):
    page_ = browser.new_context().new_page()
    response = page_.goto(f"{web.url}/api/sessions")
    assert response.status == 401
    page_.goto(f"{web.url}/#/chat")
    assert page_.locator(".sessions").count() == 0
    assert re.search(r"nanoagent web", page_.content())
    page_.context.close()




def test_an_incognito_chat_is_marked_while_it_lasts_and_new_ends_it(browser, web):
    page_ = browser.new_context().new_page()
    sign_in(page_, web)
    page_.goto(f"{web.url}/#/chat")
    page_.get_by_role("button", name="Incognito chat").click()
    marker = page_.locator("#incognito-marker")
    marker.wait_for(state="visible", timeout=WAIT)
    assert "temporary" in marker.inner_text()
    page_.fill("#message", "/new")
    page_.keyboard.press("Enter")
    page_.locator(".msg.system", has_text="Ended the temporary chat").wait_for(timeout=WAIT)
    assert not marker.is_visible()
    page_.context.close()


def tiny_png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" + b"\xff\x00\x00" * 2 + b"\x00" + b"\x00\x00\xff" * 2))
            + chunk(b"IEND", b""))


def test_an_image_attached_in_the_page_goes_with_the_message_and_shows_in_the_conversation(browser, isolated_home):
    seen: list[int] = []

    def respond(request: Any) -> str:
        seen.append(sum(1 for m in request.messages for b in (m.get("content") if isinstance(m.get("content"), list)
                                                              else []) if b.get("type") != "text"))
        return "A red and blue square."

    with web_gateway(ScriptedProvider(respond=respond)) as gateway:
        page_ = browser.new_context().new_page()
        open_chat(page_, gateway, "web:image")
        page_.set_input_files("#attach", files=[{"name": "square.png", "mimeType": "image/png", "buffer": tiny_png()}])
        page_.locator("#attached .chip", has_text="square.png").wait_for(timeout=WAIT)
        page_.wait_for_function("() => !document.querySelector('#attached').textContent.includes('uploading')",
                                timeout=WAIT)
        page_.fill("#message", "what is this?")
        page_.click("#send")
        page_.locator(".msg.assistant", has_text="A red and blue square.").wait_for(timeout=WAIT)
        image = page_.locator(".msg.user img")
        image.wait_for(timeout=WAIT)
        page_.wait_for_function("() => document.querySelector('.msg.user img').naturalWidth === 2", timeout=WAIT)
        assert seen and seen[-1] == 1
        page_.context.close()
