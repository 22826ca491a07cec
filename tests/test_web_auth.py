# ruff: noqa: F811 - the fixtures of tests/browser.py are imported by name and named by the tests
"""Who may use the web app: sign-in links, cookie sessions, CSRF, the security headers, the limits of the listener,
and `nanoagent web`. A real Gateway with its HTTP listener (tests/browser.py), httpx or raw sockets as clients, and
Debian's chromium through Playwright for what a browser does."""

from __future__ import annotations

import json
import os
import resource
import socket
import stat
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from nanoagent.config.schema import Config
from nanoagent.gateway import protocol
from nanoagent.web.auth import CODE_TTL, CSP
from tests.browser import browser, page, sign_in, web, web_gateway  # noqa: F401 - fixtures
from tests.conftest import PATIENCE, invoke, wait_until

SESSION_TTL = 30 * 86_400.0  # gateway.web.deviceIdleDays' default, in seconds


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client(web: Any, cookie: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=web.url, timeout=PATIENCE, follow_redirects=False,
                        headers={"Cookie": cookie} if cookie else {})


def csrf(web: Any, cookie: str) -> str:
    with client(web, cookie) as http:
        return http.get("/api/session").json()["csrf"]


def raw(port: int, data: bytes) -> bytes:
    """Send bytes on a fresh connection; everything the gateway answers until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE) as conn:
        conn.sendall(data)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def port_of(web: Any) -> int:
    return int(web.url.rsplit(":", 1)[1])


# --- signing in --------------------------------------------------------------------------------------------


def test_a_sign_in_link_sets_a_private_strict_cookie_and_leads_to_the_app(web):
    with client(web) as http:
        signed = http.get(web.signin_url().removeprefix(web.url))
        cookie = signed.headers["set-cookie"]
        page = http.get("/", headers={"Cookie": cookie.split(";")[0]})
        session = http.get("/api/session", headers={"Cookie": cookie.split(";")[0]})
    assert (signed.status_code, signed.headers["location"]) == (303, "/")
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path"} <= attributes and "secure" not in attributes  # plain HTTP here
    assert f"max-age={int(SESSION_TTL)}" in cookie.lower()  # kept as long as the device may stay unused
    assert "samesite=strict" in cookie.lower()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert session.status_code == 200 and session.json()["csrf"]


def test_over_https_through_a_proxy_on_this_machine_the_cookie_is_secure(web):
    with client(web) as http:
        signed = http.get(web.signin_url().removeprefix(web.url), headers={"X-Forwarded-Proto": "https"})
    assert signed.status_code == 303 and "secure" in signed.headers["set-cookie"].lower()


def test_a_sign_in_code_works_once(web):
    link = web.signin_url().removeprefix(web.url)
    with client(web) as http:
        first, second = http.get(link), http.get(link)
    assert first.status_code == 303
    assert second.status_code == 403 and "set-cookie" not in second.headers
    assert "nanoagent web" in second.text


def test_a_wrong_code_and_one_older_than_a_minute_are_refused(isolated_home):
    clock = Clock()
    with web_gateway(clock=clock) as web:
        late = web.signin_url().removeprefix(web.url)
        clock.now += CODE_TTL + 1
        with client(web) as http:
            expired, wrong = http.get(late), http.get("/signin/not-a-code-anyone-made")
        in_time = web.signin_url().removeprefix(web.url)
        clock.now += CODE_TTL - 1
        with client(web) as http:
            good = http.get(in_time)
    assert (expired.status_code, wrong.status_code, good.status_code) == (403, 403, 303)
    assert "nanoagent web" in expired.text and "set-cookie" not in expired.headers


# --- the cookie and CSRF -----------------------------------------------------------------------------------


def test_requests_without_a_cookie_or_with_a_forged_or_stale_one_are_refused(isolated_home):
    clock = Clock()
    with web_gateway(clock=clock) as web:
        cookie = web.cookie()
        name = cookie.split("=")[0]
        with client(web) as http:
            none_api, none_page = http.get("/api/session"), http.get("/")
            forged = http.get("/api/session", headers={"Cookie": f"{name}=forged-by-someone"})
            fine = http.get("/api/session", headers={"Cookie": cookie})
            clock.now += SESSION_TTL + 1
            stale = http.get("/api/session", headers={"Cookie": cookie})
    assert fine.status_code == 200 and fine.json()["csrf"]
    for refused in (none_api, forged, stale):
        assert refused.status_code == 401 and "nanoagent web" in refused.json()["error"]
    assert none_page.status_code == 401 and none_page.headers["content-type"].startswith("text/html")
    assert "nanoagent web" in none_page.text


def test_a_state_changing_request_needs_the_csrf_token_and_the_pages_own_origin(web):
    cookie = web.cookie()
    token = csrf(web, cookie)
    with client(web, cookie) as http:
        no_token = http.post("/api/signout")
        wrong_token = http.post("/api/signout", headers={"X-CSRF-Token": "guessed"})
        other_site = http.post("/api/signout", headers={"X-CSRF-Token": token, "Origin": "http://evil.example"})
        still_in = http.get("/api/session")
        own = http.post("/api/signout", headers={"X-CSRF-Token": token, "Origin": web.url})
        out = http.get("/api/session")
    assert [r.status_code for r in (no_token, wrong_token, other_site)] == [403, 403, 403]
    assert "another site" in other_site.json()["error"] and "X-CSRF-Token" in no_token.json()["error"]
    assert still_in.status_code == 200
    assert own.status_code == 200 and out.status_code == 401


def test_every_response_carries_the_security_headers_and_none_is_kept_by_a_shared_cache(web):
    cookie = web.cookie()
    with client(web) as http:
        responses = [http.get("/", headers={"Cookie": cookie}), http.get("/api/session", headers={"Cookie": cookie}),
                     http.get("/"), http.get("/signin/nope"), http.get("/health"),
                     http.get("/v1/models", headers={"Authorization": f"Bearer {web.token}"})]
    for response in responses:
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert "aiohttp" not in response.headers.get("server", "")


def test_a_path_with_dot_dot_never_leaves_the_app(web):
    cookie = web.cookie().encode()
    answers = [raw(port_of(web), b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nCookie: " + cookie
                   + b"\r\n\r\n")
               for path in (b"/../../../../etc/passwd", b"/static/../../../../etc/passwd",
                            b"/%2e%2e/%2e%2e/%2e%2e/etc/passwd", b"/static/..%2f..%2f..%2fetc/passwd",
                            b"/api/../../etc/passwd")]
    for answer in answers:
        assert answer.split(b" ", 2)[1] in (b"400", b"403", b"404"), answer[:200]
        assert b"root:" not in answer


# --- limits --------------------------------------------------------------------------------------------------


def test_a_50_mb_upload_is_refused_with_413_without_being_held_in_memory(web):
    cookie = web.cookie()
    token = csrf(web, cookie)
    size = 50 * 1024 * 1024
    block = b"x" * 65536

    def body() -> Iterator[bytes]:
        for _ in range(size // len(block)):
            yield block

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with client(web, cookie) as http:
        refused = http.post("/api/upload", content=body(), headers={
            "X-CSRF-Token": token, "Content-Length": str(size), "Content-Type": "application/octet-stream"})
        served = http.get("/api/session")
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert refused.status_code == 413
    assert "over the limit of 10 MB" in refused.json()["error"]
    assert served.status_code == 200
    assert grew_mb < 40, f"the process grew by {grew_mb:.0f} MB"


def headers_only(port: int, head: str) -> tuple[str, bytes, bool]:
    """Send a request's headers (with `Expect: 100-continue`) and no body; the first answer's status line, its
    bytes, and whether the gateway then closed the connection, all read before any body is sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE) as conn:
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            assert chunk, f"the gateway closed the connection without an answer: {data!r}"
            data += chunk
        status = data.split(b"\r\n", 1)[0].decode()
        if status.split()[1] == "100":
            return status, data, False
        while chunk := conn.recv(65536):  # the refusal's body, then the end of the connection
            data += chunk
        return status, data, True


def test_a_50_mb_body_sent_with_expect_100_continue_is_refused_before_a_byte_of_it_is_sent_and_closed_at_once(
        web, monkeypatch, linger_past_patience):
    from nanoagent.gateway import http as listener

    monkeypatch.setattr(listener, "AUTH_DEADLINE", 2 * PATIENCE)  # each refusal must close by itself, not at the deadline
    cookie = web.cookie()
    token = csrf(web, cookie)
    port = port_of(web)
    size = 50 * 1024 * 1024
    signed_in = f"Cookie: {cookie}\nX-CSRF-Token: {token}\n"
    upload = "POST /api/uploads HTTP/1.1\nHost: localhost\n{who}Content-Type: image/png\nContent-Length: {size}\n" \
             "Expect: 100-continue\n"
    status, data, closed = headers_only(port, upload.format(who=signed_in, size=size))
    assert status == "HTTP/1.1 413 Request Entity Too Large" and closed
    assert b"attach a smaller one" in data and b"100 Continue" not in data
    status, data, closed = headers_only(port, upload.format(who="", size=1000))  # no cookie: 401, body unread
    assert status.startswith("HTTP/1.1 401") and closed and b"nanoagent web" in data
    status, data, closed = headers_only(port, upload.format(who="Cookie: nanoagent-1=forged\n", size=size))
    assert status.split()[1] in ("401", "413") and closed
    chat = "POST /v1/chat/completions HTTP/1.1\nHost: localhost\n{auth}Content-Type: application/json\n" \
           "Content-Length: {size}\nExpect: 100-continue\n"
    status, data, closed = headers_only(port, chat.format(auth=f"Authorization: Bearer {web.token}\n", size=size))
    assert status.startswith("HTTP/1.1 413") and closed and b"over the limit of 10 MB" in data
    status, data, closed = headers_only(port, chat.format(auth="", size=100))  # no token: 401, body unread
    assert status.startswith("HTTP/1.1 401") and closed and b"missing_token" in data
    # a request the gateway takes still gets its 100 Continue, and is served once its body comes
    status, _, closed = headers_only(port, upload.format(who=signed_in, size=100))
    assert status == "HTTP/1.1 100 Continue" and not closed
    with client(web, cookie) as http:
        assert http.get("/api/session").status_code == 200


def test_silent_connections_do_not_keep_a_signed_in_browser_out(web, monkeypatch):
    from nanoagent.gateway import http as listener

    monkeypatch.setattr(listener, "AUTH_DEADLINE", 120.0)  # no deadline frees a slot during this test
    cookie = web.cookie()
    quiet = [socket.create_connection(("127.0.0.1", port_of(web)), timeout=PATIENCE) for _ in range(300)]
    try:
        with client(web, cookie) as http:
            served = http.get("/api/session")
    finally:
        for conn in quiet:
            conn.close()
    assert served.status_code == 200


def test_200_idle_event_streams_do_not_keep_out_a_signed_in_client(web):
    cookie = web.cookie().encode()
    request = (b"GET /api/events?session=web:idle HTTP/1.1\r\nHost: localhost\r\nCookie: " + cookie
               + b"\r\nAccept: text/event-stream\r\n\r\n")
    streams = []
    try:
        for _ in range(200):
            conn = socket.create_connection(("127.0.0.1", port_of(web)), timeout=PATIENCE)
            conn.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head, head
            streams.append(conn)
        with client(web, cookie.decode()) as http:
            answers = [http.get("/api/session").status_code for _ in range(3)]
        with httpx.Client(base_url=web.url, timeout=PATIENCE) as sdk:
            models = sdk.get("/v1/models", headers={"Authorization": f"Bearer {web.token}"}).status_code
    finally:
        for conn in streams:
            conn.close()
    assert answers == [200, 200, 200] and models == 200


def test_past_the_limit_of_event_streams_the_oldest_is_closed_and_the_newest_served(web, monkeypatch):
    from nanoagent.gateway import http as listener

    monkeypatch.setattr(listener, "MAX_STREAMS", 3)
    cookie = web.cookie().encode()
    request = b"GET /api/events?session=web:many HTTP/1.1\r\nHost: localhost\r\nCookie: " + cookie + b"\r\n\r\n"
    streams = []
    try:
        for _ in range(4):
            conn = socket.create_connection(("127.0.0.1", port_of(web)), timeout=PATIENCE)
            conn.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            assert head.startswith(b"HTTP/1.1 200"), head
            streams.append(conn)
        while streams[0].recv(65536):  # read to its end (a timeout would fail the test): the gateway closed it
            pass
        streams[-1].sendall(b"")
        newest = streams[-1].getpeername()  # still connected
    finally:
        for conn in streams:
            conn.close()
    assert newest[1] == port_of(web)


def test_the_event_stream_carries_a_sessions_events_to_a_signed_in_page(isolated_home):
    from nanoagent.providers.scripted import ScriptedProvider

    with web_gateway(ScriptedProvider(["streamed words here"])) as web:
        cookie = web.cookie()
        with client(web, cookie) as http, http.stream("GET", "/api/events?session=web:one") as events:
            lines = events.iter_lines()
            assert next(lines).startswith(": ")
            web.call(lambda: web.gateway.hub.send("web:one", "hi"))
            kinds = []
            for line in lines:
                if line.startswith("data: "):
                    kinds.append(json.loads(line[6:])["kind"])
                if "TurnEnded" in kinds:
                    break
    assert "TextDelta" in kinds and kinds[-1] == "TurnEnded"


# --- what a reply may link to -------------------------------------------------------------------------------


def test_a_link_in_a_reply_to_another_port_on_the_gateway_s_host_is_text_the_cookie_cannot_follow(isolated_home):
    from nanoagent.providers.scripted import ScriptedProvider

    reply = "Here is the report: [open report](http://127.0.0.1:{port}/report) and [docs](https://example.com/d)"
    other = _free_port()  # where another program on this machine could listen
    with web_gateway(ScriptedProvider(default=reply.format(port=other))) as web:
        web.call(lambda: web.gateway.hub.send("web:demo", "hello"))
        with client(web, web.cookie()) as http:
            shown = http.get("/api/sessions/web:demo").json()["messages"][-1]["parts"][0]["html"]
    assert f"http://127.0.0.1:{other}/report" in shown and f'href="http://127.0.0.1:{other}' not in shown
    assert 'href="https://example.com/d"' in shown


# --- sign-out ends event streams ----------------------------------------------------------------------------


STREAMS = ["/api/sessions/web:victim/events", "/api/events?session=web:victim"]


def open_stream(port: int, path: str, cookie: str) -> socket.socket:
    """An event stream read from a raw socket, past its first line (the chat's hello, or the events' comment)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while b"hello" not in data and b"nanoagent events" not in data:
        chunk = conn.recv(65536)
        assert chunk, data
        data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data
    return conn


def read_to_end(conn: socket.socket) -> bytes:
    """Everything until the gateway closes the stream (a stream left open fails the test at PATIENCE)."""
    chunks = []
    with conn:
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def read_until(conn: socket.socket, text: bytes) -> bytes:
    data = b""
    while text not in data:
        chunk = conn.recv(65536)
        assert chunk, data
        data += chunk
    return data


@pytest.mark.parametrize("path", STREAMS)
def test_signing_out_ends_that_sign_in_s_open_event_streams_and_no_later_event_reaches_them(web, path):
    cookie, other = web.cookie(), web.cookie()
    stream, bystander = open_stream(port_of(web), path, cookie), open_stream(port_of(web), path, other)
    with client(web, cookie) as http:
        assert http.post("/api/signout", headers={"X-CSRF-Token": csrf(web, cookie)}).status_code == 200
    after = read_to_end(stream)  # the gateway ends it at once
    with client(web, other) as http:
        sent = http.post("/api/sessions/web:victim/messages", headers={"X-CSRF-Token": csrf(web, other)},
                         json={"text": "secret message"})
    with bystander:
        assert b"secret message" in read_until(bystander, b"secret message")  # the other sign-in still streams
    assert sent.status_code == 202 and b"secret" not in after


@pytest.mark.parametrize("path", STREAMS)
def test_a_sign_in_that_expires_ends_its_event_stream_at_the_next_keep_alive(isolated_home, monkeypatch, path):
    from nanoagent.web import api_chat, events

    monkeypatch.setattr(api_chat, "KEEPALIVE", 0.05)
    monkeypatch.setattr(events, "KEEPALIVE", 0.05)
    clock = Clock()
    with web_gateway(clock=clock) as web:
        stream = open_stream(port_of(web), path, web.cookie())
        read_until(stream, b"keep-alive")  # still signed in: kept alive
        clock.now += SESSION_TTL + 1
        read_to_end(stream)


@pytest.mark.parametrize("path", STREAMS)
def test_a_sign_in_evicted_by_newer_ones_ends_its_event_stream(web, monkeypatch, path):
    from nanoagent.web import auth

    monkeypatch.setattr(auth, "MAX_SESSIONS", 2)
    stream = open_stream(port_of(web), path, web.cookie())
    web.cookie()
    web.cookie()  # the third sign-in signs the least recently used out: the stream's
    read_to_end(stream)


# --- files the app serves -----------------------------------------------------------------------------------


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_a_media_name_linked_to_the_api_token_is_not_served(web, link):
    token_file = web.paths.run_dir / "http-token"
    media = web.paths.workspace / "media"
    media.mkdir(exist_ok=True)
    link(token_file, media / "image-0123456789abcdef.png")
    (media / "image-fedcba9876543210.png").write_bytes(b"\x89PNG\r\n\x1a\nplain")
    with client(web, web.cookie()) as http:
        linked = http.get("/api/media/image-0123456789abcdef.png")
        plain = http.get("/api/media/image-fedcba9876543210.png")
    assert linked.status_code == 404 and web.token.encode() not in linked.content
    assert plain.status_code == 200 and plain.content == b"\x89PNG\r\n\x1a\nplain"
    assert plain.headers["content-type"] == "image/png"


def test_a_skill_folder_linked_outside_the_workspace_is_not_served(web):
    outside = web.paths.home / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("SECRET outside the workspace\n")
    (web.paths.workspace / "skills").mkdir(exist_ok=True)
    os.symlink(outside, web.paths.workspace / "skills" / "evil")
    (web.paths.workspace / "skills" / "fine").mkdir()
    (web.paths.workspace / "skills" / "fine" / "SKILL.md").write_text("a skill of the workspace\n")
    with client(web, web.cookie()) as http:
        linked = http.get("/api/memory/file", params={"path": "skills/evil/SKILL.md"})
        fine = http.get("/api/memory/file", params={"path": "skills/fine/SKILL.md"})
        missing = http.get("/api/memory/file", params={"path": "skills/none/SKILL.md"})
    assert linked.status_code == 404 and "SECRET" not in linked.text
    assert fine.status_code == 200 and fine.json()["text"] == "a skill of the workspace\n"
    assert missing.status_code == 200 and missing.json()["exists"] is False  # "(not written yet)"


# --- uploads ------------------------------------------------------------------------------------------------


def slow_upload(port: int, cookie: str, token: str, head: str, parts: list[bytes]) -> bytes:
    """A POST /api/uploads whose body comes in parts: the headers with `Expect: 100-continue`, then, once the
    gateway said 100 (its handler reads now), each part with a short pause between."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE) as conn:
        conn.sendall((f"POST /api/uploads HTTP/1.1\r\nHost: localhost\r\nCookie: {cookie}\r\nX-CSRF-Token: {token}\r\n"
                      f"Content-Type: image/png\r\nConnection: close\r\nExpect: 100-continue\r\n{head}\r\n").encode())
        assert read_until(conn, b"\r\n\r\n").startswith(b"HTTP/1.1 100")
        for part in parts:
            conn.sendall(part)
            time.sleep(0.3)  # the handler has read what came so far
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_a_slow_2_mb_upload_is_stored_whole(web):
    cookie = web.cookie()
    data = b"\x89PNG\r\n\x1a\n" + os.urandom(2_000_000)
    answer = slow_upload(port_of(web), cookie, csrf(web, cookie), f"Content-Length: {len(data)}\r\n",
                         [data[:100_000], data[100_000:]])
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    stored = web.paths.workspace / json.loads(answer.split(b"\r\n\r\n", 1)[1])["attachment"]["path"]
    assert stored.read_bytes() == data


def test_a_slow_chunked_upload_over_the_cap_is_refused_not_cut_short(web):
    cookie = web.cookie()
    data = b"\x89PNG\r\n\x1a\n" + os.urandom(5_100_000)  # over tools.attachments.maxImageBytes (5 MB)

    def chunk(part: bytes) -> bytes:
        return f"{len(part):x}\r\n".encode() + part + b"\r\n"

    answer = slow_upload(port_of(web), cookie, csrf(web, cookie), "Transfer-Encoding: chunked\r\n",
                         [chunk(data[:100_000]), chunk(data[100_000:]) + b"0\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"attach a smaller one" in answer
    assert not list((web.paths.workspace / "media").glob("image-*"))


# --- small ones ---------------------------------------------------------------------------------------------


def test_the_events_route_refuses_a_session_name_with_dot_dot_as_the_chat_does(web):
    with client(web, web.cookie()) as http:
        for bad in ("../../x", "web:a/b", "web:..", "web:\x01"):
            refused = http.get("/api/events", params={"session": bad})
            assert refused.status_code == 400 and "not a session name" in refused.json()["error"], bad


def test_a_sign_in_link_refused_for_want_of_a_free_connection_still_works_after(web, monkeypatch):
    from nanoagent.gateway import http as listener

    monkeypatch.setattr(listener, "MAX_CONNECTIONS", 1)
    link = web.signin_url().removeprefix(web.url)
    with client(web, web.cookie()) as holder:
        assert holder.get("/api/session").status_code == 200  # takes the only slot and keeps it
        with client(web) as http:
            busy = http.get(link)
    assert busy.status_code == 503
    with client(web) as http:
        again = wait_until(lambda: (r := http.get(link)).status_code != 503 and r, "the slot to free")
    assert again.status_code == 303 and "set-cookie" in again.headers


def test_a_request_aiohttp_refuses_itself_names_no_server_software_and_carries_the_security_headers(web):
    answer = raw(port_of(web), b"GARBAGE\r\n\r\n")
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.split(b" ")[1] == b"400"
    assert b"aiohttp" not in answer.lower() and b"python" not in answer.lower()
    assert b"server: nanoagent" in head and b"x-content-type-options: nosniff" in head
    assert b"cache-control: no-store" in head


# --- `nanoagent web` ------------------------------------------------------------------------------------------


def test_nanoagent_web_prints_a_one_time_link_and_opens_it_in_the_browser(web, tmp_path, monkeypatch):
    opened = tmp_path / "opened"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("BROWSER", str(script))
    ran = invoke("web")
    assert ran.returncode == 0, ran.stderr
    link = ran.stdout.strip().rsplit(" ", 1)[1]
    assert link.startswith(f"{web.url}/signin/")
    with client(web) as http:
        assert http.get(link.removeprefix(web.url)).status_code == 303
    wait_until(lambda: opened.exists() and opened.read_text().strip(), "the browser to be opened")
    assert opened.read_text().strip() == link


def test_nanoagent_web_without_a_gateway_says_how_to_start_one_in_one_line():
    ran = invoke("web", "--no-open")
    assert ran.returncode == 1
    assert ran.stderr.strip().count("\n") == 0 and "nanoagent gateway" in ran.stderr, ran.stderr


def test_nanoagent_web_in_a_script_with_the_listener_off_says_what_to_set(isolated_home):
    with _gateway_without_http():
        ran = invoke("web", "--no-open")
    assert ran.returncode == 1
    assert ran.stderr.strip().count("\n") == 0 and "gateway.http.enabled" in ran.stderr, ran.stderr


def test_a_gateway_asked_to_enable_its_listener_turns_it_on_on_loopback_and_signs_in(isolated_home):
    with _gateway_without_http() as paths:
        off = _ask(paths, False)
        on = _ask(paths, True)
        with httpx.Client(timeout=PATIENCE) as http:
            signed = http.get(on["url"], follow_redirects=False)
    assert (off["type"], off["off"]) == ("signin", True) and "url" not in off
    assert on["url"].startswith(f"http://127.0.0.1:{off['port']}/signin/") and signed.status_code == 303


@pytest.mark.process
def test_nanoagent_web_on_a_terminal_asks_before_turning_the_listener_on_and_a_no_leaves_it_off(isolated_home):
    import os
    import sys

    import pexpect

    from tests.conftest import ROOT

    env = {**os.environ, "TERM": "dumb", "BROWSER": "true"}
    with _gateway_without_http() as paths:
        answers = {}
        for answer in ("n", "y"):
            child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "web"], cwd=str(ROOT), env=env,
                                  encoding="utf-8", timeout=PATIENCE, dimensions=(30, 200))
            child.expect_exact("The gateway's HTTP listener is off. Turn it on at http://127.0.0.1:")
            child.expect_exact("[y/N] ")
            child.send(answer + "\r")
            child.expect(pexpect.EOF)
            child.close()
            answers[answer] = (child.exitstatus, child.before)
        still_off = _ask(paths, False)
    assert answers["n"][0] == 1 and "gateway.http.enabled" in answers["n"][1]
    code, shown = answers["y"]
    link = shown.split("Sign-in link (good once, for one minute): ")[1].split()[0]
    assert code == 0 and link.startswith("http://127.0.0.1:") and "/signin/" in link
    assert "url" in still_off  # turned on by the yes, until the gateway stops


def _ask(paths: Any, enable: bool) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(PATIENCE)
        conn.connect(str(paths.gateway_socket))
        conn.sendall(protocol.encode({"type": "signin", "id": "w1", "enable": enable}))
        with conn.makefile("rb") as stream:
            return protocol.decode(stream.readline())


class _gateway_without_http:
    """A Gateway whose HTTP listener is off, as `nanoagent gateway` builds it (the listener made when asked)."""

    def __enter__(self) -> Any:
        import asyncio
        import threading

        from nanoagent.agent.build import build_agent
        from nanoagent.gateway.http import Listener
        from nanoagent.gateway.hub import Hub
        from nanoagent.gateway.server import Gateway
        from nanoagent.paths import Paths
        from nanoagent.providers.scripted import ScriptedProvider

        config = Config()
        config.gateway.http.port = _free_port()
        self.paths = Paths.from_env()
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        async def serve() -> None:
            hub = Hub(build_agent(config, self.paths, provider=ScriptedProvider(default="ok")))
            self.server = Gateway(hub, self.paths, grace=2)
            self.listener = Listener(hub, self.paths, config, self.server.start_component, self.server)
            self.server.signin = self.listener.signin
            await self.server.serve(started.set, handle_signals=False)

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(serve(),), daemon=True)
        self.thread.start()
        assert started.wait(PATIENCE)
        return self.paths

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.server.stop)
        self.thread.join(PATIENCE)
        self.loop.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- in a real browser ------------------------------------------------------------------------------------------


@pytest.mark.process
def test_signing_in_through_the_link_lands_in_the_app_signed_in(page, web):
    sign_in(page, web)
    session = "async () => { const r = await fetch('/api/session'); return [r.status, (await r.json()).csrf]; }"
    status, token = page.evaluate(session)
    assert status == 200 and token
    assert "nanoagent web" not in page.locator("body").inner_text()  # the app, not the sign-in page
    cookies = page.context.cookies()
    assert len(cookies) == 1 and cookies[0]["httpOnly"] and cookies[0]["sameSite"] == "Strict"
    assert page.evaluate("() => document.cookie") == ""  # the page's script cannot read it
    again = page.goto(web.url + "/")  # still signed in on the next visit
    assert again is not None and again.status == 200


@pytest.mark.process
def test_a_wrong_or_expired_link_shows_the_page_that_says_to_run_nanoagent_web(page, isolated_home):
    clock = Clock()
    with web_gateway(clock=clock) as web:
        late = web.signin_url()
        clock.now += CODE_TTL + 1
        for link in (late, web.url + "/signin/wrong-code", web.url + "/"):
            response = page.goto(link)
            assert response is not None and response.status in (401, 403)
            assert "nanoagent web" in page.locator("body").inner_text()
        assert page.context.cookies() == []


@pytest.mark.process
def test_help_a_one_shot_and_an_attaching_terminal_do_not_import_aiohttp(llm):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, anthropic_env

    runs = [["-m", "nanoagent", "--help"], ["-m", "nanoagent", "agent", "-m", "hi"],
            ["-c", "import nanoagent.gateway.client, nanoagent.cli.attach, nanoagent.cli.web_cmd"]]
    for args in runs:
        ran = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, **anthropic_env(llm)}, timeout=PATIENCE)
        assert ran.returncode == 0, ran.stderr[-500:]
        imported = {line.split("|")[-1].strip().split(".")[0] for line in ran.stderr.splitlines() if "|" in line}
        assert "aiohttp" not in imported, args
