# ruff: noqa: F811 - the fixtures of tests/browser.py are imported by name and named by the tests
"""The web listener against the attacks of issue 29: a reply's link that hands the session cookie to another port, a
path swapped for a link while it is read, connections that escape their deadline, and requests for another Host."""

from __future__ import annotations

import os
import re
import socket
import threading
import time

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


def test_a_signed_in_upload_that_stalls_mid_body_is_answered_408_and_closed(web, monkeypatch, linger_past_patience):
    from nanoagent.web import api_chat

    monkeypatch.setattr(api_chat, "BODY_IDLE", 0.5)
    cookie = web.cookie()
    token = client(web, cookie).get("/api/session").json()["csrf"]
    with socket.create_connection(("127.0.0.1", port_of(web)), timeout=PATIENCE) as conn:
        conn.sendall((f"POST /api/uploads HTTP/1.1\r\nHost: localhost\r\nCookie: {cookie}\r\nX-CSRF-Token: {token}\r\n"
                      "Content-Type: image/png\r\nContent-Length: 100000\r\n\r\n").encode() + b"\x89PNG\r\n\x1a\n")
        answer = b"".join(iter(lambda: conn.recv(65536), b""))  # then nothing more: the gateway closes it
    assert answer.startswith(b"HTTP/1.1 408") and b"stopped coming" in answer


def test_a_v1_request_whose_body_stalls_is_answered_408_and_closed(web, monkeypatch, linger_past_patience):
    from nanoagent.web import api_chat

    monkeypatch.setattr(api_chat, "BODY_IDLE", 0.5)
    with socket.create_connection(("127.0.0.1", port_of(web)), timeout=PATIENCE) as conn:
        conn.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {web.token}\r\n"
                      "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"messages\":").encode())
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 408") and b"stopped coming" in answer


# --- only known hosts -----------------------------------------------------------------------------------------


def _get(port: int, host: str, path: str = "/health", extra: str = "") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n".encode())
        return b"".join(iter(lambda: conn.recv(65536), b""))


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "10.0.0.7",
                                  "localhost.evil.example:{port}", "[::2]:{port}", ""])
def test_a_request_naming_a_host_this_gateway_is_not_is_refused_421_before_anything_else(web, host):
    port = port_of(web)
    cookie = web.cookie()
    for path in ("/health", "/api/session", "/v1/models"):
        answer = _get(port, host.format(port=port), path, f"Cookie: {cookie}\r\nAuthorization: Bearer {web.token}\r\n")
        assert answer.startswith(b"HTTP/1.1 421"), answer
        assert b"gateway.http.allowedHosts" in answer and b"csrf" not in answer


def test_a_body_sent_to_an_unknown_host_with_expect_100_continue_is_never_read(web):
    with socket.create_connection(("127.0.0.1", port_of(web)), timeout=PATIENCE) as conn:
        conn.sendall(b"POST /api/uploads HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 50000000\r\n"
                     b"Expect: 100-continue\r\n\r\n")
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 421") and b"100 Continue" not in answer


@pytest.mark.parametrize("host", ["localhost", "localhost:{port}", "127.0.0.1:{port}", "LOCALHOST.:{port}",
                                  "127.0.0.2", "[::1]:{port}"])
def test_loopback_names_and_addresses_are_served(web, host):
    assert _get(port_of(web), host.format(port=port_of(web))).startswith(b"HTTP/1.1 200")


def test_a_name_in_allowed_hosts_is_served_and_a_link_to_it_stays_text(isolated_home):
    from nanoagent.config.schema import Config

    config = Config()
    config.gateway.http.allowed_hosts = ["Agent.Example.org"]
    with web_gateway(config=config) as web:
        assert _get(port_of(web), "agent.example.org").startswith(b"HTTP/1.1 200")
        assert _get(port_of(web), "agent.example.org:443").startswith(b"HTTP/1.1 200")
        assert _get(port_of(web), "other.example.org").startswith(b"HTTP/1.1 421")
        assert "href" not in render("[x](https://agent.example.org:8443/)")


def _own_address() -> str | None:
    """An address of this machine that is not loopback (the route's source address; no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_bound_to_every_address_the_machine_s_own_address_is_served_and_another_name_refused(isolated_home):
    from nanoagent.config.schema import Config

    address = _own_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    config = Config()
    config.gateway.http.host = "0.0.0.0"
    with web_gateway(config=config) as web:
        port = port_of(web)
        with socket.create_connection((address, port), timeout=PATIENCE) as conn:
            conn.sendall(f"GET /health HTTP/1.1\r\nHost: {address}:{port}\r\nConnection: close\r\n\r\n".encode())
            served = b"".join(iter(lambda: conn.recv(65536), b""))
        with socket.create_connection((address, port), timeout=PATIENCE) as conn:
            conn.sendall(f"GET /health HTTP/1.1\r\nHost: rebound.example:{port}\r\nConnection: close\r\n\r\n".encode())
            refused = b"".join(iter(lambda: conn.recv(65536), b""))
    assert served.startswith(b"HTTP/1.1 200") and refused.startswith(b"HTTP/1.1 421")
