"""Markdown rendered for the web app: anything a model, tool, skill or web page wrote is text, never markup."""

from __future__ import annotations

import pytest

from nanoagent.web.api_chat import message_views
from nanoagent.web.markdown import render


@pytest.mark.parametrize("payload", ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
                                     "<iframe src=https://evil.example></iframe>", "<a href=javascript:alert(1)>x</a>"])
def test_raw_html_in_a_reply_is_shown_as_text(payload):
    html = render(f"before {payload} after")
    assert "<script" not in html and "<img" not in html and "<iframe" not in html and "<a " not in html
    assert "&lt;" in html


@pytest.mark.parametrize("target", ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "vbscript:x", "data:text/html,x",
                                    "file:///etc/passwd", " javascript:alert(1)"])
def test_a_link_to_anything_but_http_or_mailto_stays_text(target):
    html = render(f"[click]({target})")
    assert "href" not in html


def test_http_and_mailto_links_open_apart_from_the_page():
    html = render("[a](https://example.com/x) [b](mailto:me@example.com)")
    assert '<a href="https://example.com/x" rel="noopener noreferrer nofollow" target="_blank">a</a>' in html
    assert 'href="mailto:me@example.com"' in html


@pytest.mark.parametrize("src", ["https://evil.example/t.png", "http://evil.example/t.png", "//evil.example/t.png",
                                 "/\\evil.example/t.png"])
def test_an_image_from_outside_the_gateway_is_never_loaded(src):
    html = render(f"![tracker]({src})")
    assert "<img" not in html


def test_an_image_on_the_gateway_itself_is_shown():
    assert '<img src="/api/media/image-0123456789abcdef.png" alt="cat"' in render(
        "![cat](/api/media/image-0123456789abcdef.png)")


def test_tables_code_and_emphasis_render():
    html = render("**b** `x<y`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\n<script>\n```")
    assert "<strong>b</strong>" in html and "<code>x&lt;y</code>" in html and "<table>" in html
    assert "&lt;script&gt;" in html


def test_a_person_s_message_and_a_tool_output_go_to_the_page_as_text_fields_not_html():
    views = message_views([
        {"role": "user", "content": "<img src=x onerror=alert(1)>"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "name": "exec", "arguments": "{\"command\": \"ls\"}"}]},
        {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "<script>alert(2)</script>"},
        {"role": "assistant", "content": "<b>hi</b>"},
    ])
    assert views[0] == {"role": "user", "text": "<img src=x onerror=alert(1)>", "images": []}
    tool, text = views[1]["parts"]  # one reply: the tool call, then the text after it
    assert tool["output"] == "<script>alert(2)</script>"  # shown with textContent by the page
    assert text["html"] == "<p>&lt;b&gt;hi&lt;/b&gt;</p>\n"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8765/report", "http://localhost:9000/", "https://app.localhost/x",
                                 "http://[::1]:8080/", "http://10.0.0.5/admin", "http://192.168.1.1/",
                                 "http://169.254.169.254/latest", "http://0.0.0.0:3000/", "http://2130706433/",
                                 "http://127.1:9/", "http://[::ffff:127.0.0.1]/", "HTTP://LOCALHOST./x",
                                 "http:\\\\127.0.0.1:9\\x"])
def test_a_link_to_another_service_on_this_machine_or_network_is_shown_as_text_not_a_link(url):
    html = render(f"Here is the report: [open report]({url}) and <{url}>")
    assert "href" not in html
    assert url.replace("\\\\", "\\").split("//")[-1].split("/")[0].lower() in html.lower()  # the address still shown


@pytest.mark.parametrize("url", ["http://127.0.0.1:8765/t.png", "http://localhost/t.png", "http://10.1.2.3/t.png"])
def test_an_image_from_this_machine_is_neither_loaded_nor_a_link(url):
    html = render(f"![tracker]({url})")
    assert "<img" not in html and "href" not in html and url in html


def test_a_link_to_the_gateway_s_own_listening_host_is_text():
    from nanoagent.linkhost import OWN_HOSTS, listen_on

    before = set(OWN_HOSTS)
    try:
        assert 'href="http://gateway.example.com:9999/x"' in render("[x](http://gateway.example.com:9999/x)")
        listen_on("gateway.example.com")
        listen_on("203.0.113.9")
        assert "href" not in render("[x](http://gateway.example.com:9999/x)")
        assert "href" not in render("[x](https://203.0.113.9:4443/)")
        assert 'href="https://example.com/"' in render("[x](https://example.com/)")
    finally:
        OWN_HOSTS.clear()
        OWN_HOSTS.update(before)
