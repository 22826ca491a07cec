"""A reply's link to this machine or its network stays text in every channel's markup too (`nanoagent.linkhost`),
read as the person's browser will read its host: the spellings of issue 29 included."""

from __future__ import annotations

import pytest

from nanoagent.channels.discord.format import to_discord
from nanoagent.channels.email.format import to_html
from nanoagent.channels.slack.format import markdown_to_mrkdwn
from nanoagent.channels.telegram.format import markdown_to_html

HERE = ["http://127.0.0.1%E3%80%82:8999/x", "http://127%EF%BC%8E0.0.1:8999/x",
        "http://%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1:8999/x", "http://localhost%E3%80%82:8999/x", "http://10.0.0.5/admin",
        "http://[::1]:8080/", "http://0x7f.1/"]


@pytest.mark.parametrize("url", HERE)
def test_a_telegram_reply_s_link_to_this_machine_is_its_label_and_the_address_as_code(url):
    shown = markdown_to_html(f"See [report]({url}) or {url}")
    assert "<a " not in shown and shown.count(f"<code>{url}</code>") == 2 and "report" in shown


@pytest.mark.parametrize("url", HERE)
def test_a_slack_reply_s_link_to_this_machine_is_code_never_a_link(url):
    shown = markdown_to_mrkdwn(f"See [report]({url}) or {url}")
    assert f"<{url}" not in shown and shown.count(f"`{url}`") == 2


@pytest.mark.parametrize("url", HERE)
def test_a_discord_reply_s_link_to_this_machine_is_code_never_a_masked_link(url):
    shown = to_discord(f"See [report]({url}) or <{url}> and `{url}` as written")
    assert f"]({url})" not in shown and shown.count(f"`{url}`") == 3 and "<" not in shown


@pytest.mark.parametrize("url", HERE)
def test_a_letter_s_html_part_holds_no_link_to_this_machine(url):
    assert "<a " not in to_html(f"See [report]({url}) or <{url}>")


def test_links_to_public_hosts_stay_links_in_every_channel():
    text = "See [docs](https://example.com/d) or https://example.org/x"
    assert '<a href="https://example.com/d">docs</a>' in markdown_to_html(text)
    assert "<https://example.com/d|docs>" in markdown_to_mrkdwn(text)
    assert to_discord(text) == text
    assert '<a href="https://example.com/d">docs</a>' in to_html(text)
