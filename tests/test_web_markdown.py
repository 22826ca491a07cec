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
    assert views[1]["tools"][0]["output"] == "<script>alert(2)</script>"  # shown with textContent by the page
    assert views[2]["html"] == "<p>&lt;b&gt;hi&lt;/b&gt;</p>\n"
