# ruff: noqa: F811 - the fixtures of tests/browser.py are imported by name and named by the tests
"""The web listener against the attacks of issue 29: a reply's link that hands the session cookie to another port, a
path swapped for a link while it is read, connections that escape their deadline, and requests for another Host."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from typing import Any

import pytest

from nanoagent.linkhost import reaches_here
from nanoagent.web.markdown import render
from tests.browser import browser, page, sign_in, web, web_gateway  # noqa: F401 - fixtures
from tests.conftest import PATIENCE
from tests.test_web_auth import client, port_of

# the spellings of this machine that Python's URL reading let through and Chromium opened as 127.0.0.1 / localhost
UNICODE_DOTTED = ["http://127.0.0.1%E3%80%82:{port}/x", "http://127%EF%BC%8E0.0.1:{port}/x",
                  "http://%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1:{port}/x", "http://localhost%E3%80%82:{port}/x",
                  "http://127.0.0.1\u3002:{port}/x", "http://127\uff0e0\uff0e0\uff0e1:{port}/x",
                  "http://127.0.0.1\uff61:{port}/x", "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:{port}/x",
                  "http://localhost\u00ad:{port}/x", "http://127.0.0.%31:{port}/x", "http://0x7f.1:{port}/x",
                  "http://017700000001:{port}/x", "http:/127.0.0.1:{port}/x", "http://[::ffff:7f00:1]:{port}/x",
                  "http://a.localhost\u3002:{port}/x"]


@pytest.mark.parametrize("url", UNICODE_DOTTED)
def test_a_link_to_this_machine_spelled_with_unicode_dots_or_percent_escapes_stays_text(url):
    target = url.format(port=8999)
    html = render(f"[open]({target}) and ![img]({target})")
    assert "href" not in html and "<img" not in html
    assert reaches_here(target)


@pytest.mark.parametrize("url", ["https://example.com/x", "https://m\u00fcnchen.de/", "https://xn--mnchen-3ya.de/",
                                 "http://93.184.215.14/", "https://example.com%E3%80%82/"])
def test_a_link_to_a_public_host_in_any_spelling_is_still_a_link(url):
    assert "href" in render(f"[x]({url})") and not reaches_here(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1%zz/", "http://127.0.0.1%C3/", "http://08.0.0.1/",
                                 "http://256.256.256.256.1/", "http://a%2Fb.example/", "http://[::1/"])
def test_a_host_the_browser_would_refuse_stays_text_rather_than_guessed(url):
    assert "href" not in render(f"[x]({url})") and reaches_here(url)


def _listener() -> tuple[socket.socket, list[bytes], threading.Thread]:
    """A program on another port of this machine: it keeps the head of every request it gets and answers a page."""
    server = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(PATIENCE)
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                heads.append(data)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\nConnection: close\r\n\r\nother")

    thread = threading.Thread(target=serve, name="other port", daemon=True)
    thread.start()
    return server, heads, thread


@pytest.mark.process
def test_clicking_a_unicode_dotted_link_in_chromium_never_hands_the_cookie_to_another_port(browser, isolated_home):
    from nanoagent.providers.scripted import ScriptedProvider

    server, heads, thread = _listener()
    other = server.getsockname()[1]
    links = [url.format(port=other) for url in UNICODE_DOTTED[:4]]
    reply = "Reports: " + " ".join(f"[report {i}]({url})" for i, url in enumerate(links)) + " [docs](https://d.example/)"
    signed_in, blank = browser.new_context(), browser.new_context()
    try:
        with web_gateway(ScriptedProvider(default=reply)) as web:
            web.call(lambda: web.gateway.hub.send("web:demo", "hello"))
            app = sign_in(signed_in.new_page(), web)
            app.goto(f"{web.url}/#/chat/web:demo")
            app.locator(".msg.assistant a", has_text="docs").wait_for(timeout=PATIENCE * 1000)
            for anchor in app.locator(".msg.assistant a").all():  # the person clicks every link the reply has
                if "report" in anchor.inner_text():
                    anchor.click(modifiers=["Shift"])  # target=_blank: a window of its own
            app.goto(f"{web.url}/#/chat/web:demo")  # the app still answers: what was clicked has had its turn
            # the same spellings followed by a browser without the app's cookie: each reaches the other port
            stranger = blank.new_page()
            for url in links:
                stranger.set_content(f'<a id="go" href="{url}">go</a>')
                with stranger.expect_navigation(url=re.compile(rf"http://(127\.0\.0\.1|localhost\.):{other}/x")):
                    stranger.click("#go")
    finally:
        signed_in.close()
        blank.close()
        server.shutdown(socket.SHUT_RDWR)  # wakes its accept
        server.close()
        thread.join(PATIENCE)
    followed = [head for head in heads if head.startswith(b"GET /x ")]  # not the favicon
    assert len(followed) == len(links), heads  # only the stranger's four: the app showed the links as text
    assert not any(b"nanoagent-" in head for head in heads)


# --- a path that changes while it is read ---------------------------------------------------------------------


def test_a_skill_folder_swapped_with_a_link_outside_while_requested_never_serves_the_outside_file_nor_fails(web):
    outside = web.paths.home / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("SECRET outside the workspace\n")
    skills = web.paths.workspace / "skills"
    skills.mkdir(exist_ok=True)
    (skills / ".real").mkdir()
    (skills / ".real" / "SKILL.md").write_text("a skill of the workspace\n")
    os.symlink(outside, skills / ".link")
    swapping = threading.Event()
    done = threading.Event()

    def swap() -> None:  # what a command in the workspace can do: `skills/evil` is the folder, then the link
        while not done.is_set():
            os.rename(skills / ".real", skills / "evil")
            swapping.set()
            os.rename(skills / "evil", skills / ".real")
            os.rename(skills / ".link", skills / "evil")
            os.rename(skills / "evil", skills / ".link")

    swapper = threading.Thread(target=swap, name="swapper", daemon=True)
    swapper.start()
    answers = []
    try:
        assert swapping.wait(PATIENCE)
        with client(web, web.cookie()) as http:
            for _ in range(300):
                for path in ("/api/memory/file?path=skills/evil/SKILL.md", "/api/memory"):
                    answers.append(http.get(path))
    finally:
        done.set()
        swapper.join(PATIENCE)
    assert not [a for a in answers if "SECRET" in a.text]
    assert {a.status_code for a in answers} <= {200, 404}
    served = [a for a in answers if a.request.url.path == "/api/memory/file" and a.status_code == 200]
    assert any(a.json().get("text") == "a skill of the workspace\n" for a in served)  # the race was run


def test_a_media_folder_that_is_a_link_out_of_the_workspace_serves_nothing(web):
    outside = web.paths.home / "pictures"
    outside.mkdir()
    (outside / "image-0123456789abcdef.png").write_bytes(b"\x89PNG\r\n\x1a\nSECRET")
    os.symlink(outside, web.paths.workspace / "media")
    with client(web, web.cookie()) as http:
        linked = http.get("/api/media/image-0123456789abcdef.png")
    assert linked.status_code == 404 and b"SECRET" not in linked.content


# --- every connection under its deadline ----------------------------------------------------------------------


def test_30_silent_sockets_opened_back_to_back_are_all_closed_at_their_deadline(web, monkeypatch):
    from nanoagent.gateway import http as listener

    monkeypatch.setattr(listener, "AUTH_DEADLINE", 1.0)  # read when each connection is accepted
    quiet = [socket.create_connection(("127.0.0.1", port_of(web)), timeout=PATIENCE) for _ in range(30)]
    started = time.monotonic()
    answers = []
    for conn in quiet:
        with conn:
            answers.append(b"".join(iter(lambda c=conn: c.recv(65536), b"")))  # until the gateway closes it
    assert all(a.startswith(b"HTTP/1.1 408 Request Timeout") for a in answers), answers
    assert time.monotonic() - started < listener.IDLE_TIMEOUT  # not aiohttp's idle timeout of 60 s
