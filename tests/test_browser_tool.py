"""The browser tool against local pages: what JavaScript builds, forms, tabs, screenshots, downloads, logins kept in
the profile, the address guard and a page that never finishes loading. One browser serves the module."""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
import time
from pathlib import Path

import pytest

from nanoagent.config.schema import WebConfig
from nanoagent.tools import ToolContext, ToolError, ToolResult
from nanoagent.tools.web import web_tools
from tests.browser_tool_helpers import BrowserUnderTest, LoopThread, page, send, settings
from tests.conftest import PATIENCE, invoke, wait_until, write_config
from tests.web_server import WebServer

pytestmark = pytest.mark.process  # Chromium is a real process


def form_result(handler):
    send(handler, f"<p>Got {handler.path.split('?', 1)[1]}</p>")


def login(handler):
    send(handler, "<p>Logged in</p>", headers={"Set-Cookie": "session=s3cret; Max-Age=86400; Path=/"})


def whoami(handler):
    cookie = handler.headers.get("Cookie") or "nobody"
    send(handler, f"<p>Cookie: {cookie}</p>")


def hang(handler):
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    handler.wfile.write(b"<html><body><p>Part of a page")
    handler.wfile.flush()
    SITE_CLOSING.wait(PATIENCE)


def websocket(handler):
    """A WebSocket that sends one message: the handshake and a single unmasked text frame."""
    import base64
    import hashlib

    key = handler.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
    handler.send_response(101)
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
    handler.end_headers()
    message = b"hello over the socket"
    handler.wfile.write(bytes([0x81, len(message)]) + message)
    handler.wfile.flush()
    SITE_CLOSING.wait(PATIENCE)


def download(handler):
    send(handler, "a,b\n1,2\n", content_type="text/csv", headers={"Content-Disposition": "attachment; filename=data.csv"})


SITE_CLOSING = __import__("threading").Event()
ROUTES = {
    "/js": page("<div id=out>loading</div><script>setTimeout(() => {document.getElementById('out').textContent = "
                "'Built by JavaScript: ' + (6 * 7)}, 50)</script>"),
    "/form": page("<form action=/result><label>Name <input name=name></label>"
                  "<select name=colour><option value=r>Red</option><option value=g>Green</option></select>"
                  "<button type=submit>Send</button></form>"),
    "/result": form_result,
    "/login": login,
    "/whoami": whoami,
    "/hang": hang,
    "/tabs": page("<a href=/js target=_blank>Open the script page</a>"),
    "/socket": websocket,
    "/talk": page("<p id=said>waiting</p><script>const socket = new WebSocket('ws://' + location.host + '/socket');"
                  "socket.onmessage = (e) => { document.getElementById('said').textContent = 'Socket: ' + e.data }"
                  "</script>"),
    "/download": page("<a href=/data.csv>Get the data</a>"),
    "/data.csv": download,
}


@pytest.fixture(scope="module")
def site():
    server = WebServer(ROUTES)
    yield server
    SITE_CLOSING.set()
    server.close()


@pytest.fixture(scope="module")
def elsewhere():
    """A server on 127.0.0.2, a loopback address the tests do not allow."""
    server = WebServer({"/": page("You should not see this")}, host="127.0.0.2")
    yield server
    server.close()


@pytest.fixture(scope="module")
def loop():
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def browser(loop, tmp_path_factory):
    under_test = BrowserUnderTest(loop, settings(tmp_path_factory.mktemp("browser-home")))
    yield under_test
    under_test.close()


def test_a_page_built_by_javascript_is_read_by_the_browser_and_not_by_web_fetch(browser, site):
    fetch = next(t for t in web_tools(WebConfig(allow_private=["127.0.0.1/32"])) if t.name == "web_fetch")
    fetched = asyncio.run(fetch.call(ToolContext(Path(".")), {"url": site.url + "/js"}))
    assert "Built by JavaScript" not in fetched

    browser(action="open", url=site.url + "/js")
    seen = browser(action="wait", text="Built by JavaScript")
    assert "Built by JavaScript: 42" in seen
    assert "Built by JavaScript: 42" in browser(action="text")


def test_a_form_is_filled_and_submitted_by_the_numbers_of_its_snapshot(browser, site):
    snapshot = browser(action="open", url=site.url + "/form")
    assert '[1] textbox "Name"' in snapshot and '[2] combobox' in snapshot and '[3] button "Send"' in snapshot
    browser(action="type", ref=1, text="Ada")
    browser(action="select", ref=2, text="Green")
    result = browser(action="click", ref=3)
    assert "Got name=Ada&colour=g" in result
    assert "/result?name=Ada&colour=g" in site.paths()


def test_a_key_pressed_in_a_field_submits_it_and_back_returns_to_the_form(browser, site):
    browser(action="open", url=site.url + "/form")
    browser(action="type", ref=1, text="Grace")
    assert "Got name=Grace&colour=r" in browser(action="press", ref=1, text="Enter")
    back = browser(action="back")
    assert back.startswith(f"URL: {site.url}/form") and '[3] button "Send"' in back


def test_a_redirect_to_a_loopback_address_that_is_not_allowed_is_refused_before_it_is_reached(browser, elsewhere):
    redirect = WebServer({"/": lambda h: send(h, "", status=302, headers={"Location": elsewhere.url + "/"})})
    try:
        with pytest.raises(ToolError) as refused:
            browser(action="open", url=redirect.url + "/")
    finally:
        redirect.close()
    assert "127.0.0.2 is a loopback address" in str(refused.value)
    assert "tools.web.allowPrivate" in str(refused.value) and "redirect from" in str(refused.value)
    assert elsewhere.paths() == []


def test_a_websocket_to_an_allowed_address_goes_through_the_guard(browser, site):
    browser(action="open", url=site.url + "/talk")
    assert "Socket: hello over the socket" in browser(action="wait", text="Socket:")
    assert "/socket" in site.paths()


def test_sub_requests_frames_and_websockets_to_a_refused_address_never_reach_it(browser, site, elsewhere):
    target = elsewhere.url.removeprefix("http://")
    sneaky = WebServer({"/": page(f"<img src=http://{target}/pixel.png><iframe src=http://{target}/frame></iframe>"
                             f"<script>fetch('http://{target}/fetch').catch(() => {{}});"
                             f"new WebSocket('ws://{target}/socket');</script><p>Sneaky</p>")})
    try:
        opened = browser(action="open", url=sneaky.url + "/")
        said = [opened]
        wait_until(lambda: "Refused a connection" in said[-1] or said.append(browser(action="snapshot")),
                   "the note of the refused connections")
    finally:
        sneaky.close()
    assert "Sneaky" in opened
    assert "127.0.0.2 is a loopback address" in said[-1]
    assert elsewhere.paths() == []


def test_a_page_that_never_finishes_loading_is_cut_at_the_timeout_and_the_browser_goes_on(browser, site):
    began = time.monotonic()
    with pytest.raises(ToolError) as cut:
        browser(action="open", url=site.url + "/hang")
    assert "did not finish loading within 6 s" in str(cut.value)
    assert time.monotonic() - began < PATIENCE
    assert "Built by JavaScript" in browser(action="open", url=site.url + "/js") + browser(action="wait",
                                                                                             text="Built by")


def test_a_screenshot_is_an_image_under_media_the_model_can_see(browser, site):
    browser(action="open", url=site.url + "/form")
    shot = browser(action="screenshot")
    assert isinstance(shot, ToolResult) and len(shot.images) == 1
    image = browser.browser.settings.workspace / shot.images[0]["path"]
    assert image.read_bytes()[:3] == b"\xff\xd8\xff"  # a JPEG


def test_a_link_that_opens_a_tab_is_listed_and_the_model_can_switch_between_tabs(browser, site):
    browser(action="open", url=site.url + "/tabs", new_tab=True)
    browser(action="click", ref=1)
    tabs = wait_until(lambda: (lambda listed: "/js (current)" in listed and listed)(browser(action="tabs")),
                      "the tab the link opened, as the current one")
    number = next(line.split(".")[0] for line in tabs.splitlines() if line.endswith("/tabs"))
    assert "Open the script page" in browser(action="switch", tab=int(number))
    assert "Closed the tab" in browser(action="close")
    assert "/tabs" not in browser(action="tabs")


def test_a_download_is_kept_under_media_downloads_and_the_model_is_told(browser, site):
    browser(action="open", url=site.url + "/download")
    said = [browser(action="click", ref=1)]  # the note comes with this result or a later one
    wait_until(lambda: "Downloaded" in said[-1] or said.append(browser(action="tabs")), "the download's note")
    assert "Downloaded 'data.csv' (8 bytes) to media/downloads/data.csv" in said[-1]
    workspace = browser.browser.settings.workspace
    assert (workspace / "media" / "downloads" / "data.csv").read_text() == "a,b\n1,2\n"


def test_a_profile_in_use_by_a_running_browser_is_refused_to_another_in_one_line(browser, site, isolated_home):
    browser(action="open", url=site.url + "/form")  # running, holding its profile
    second = BrowserUnderTest(browser.loop, browser.browser.settings)
    with pytest.raises(ToolError, match="is in use by another nanoagent process"):
        second(action="open", url=site.url + "/form")
    profile = str(browser.browser.settings.profile)
    write_config(isolated_home, {"tools": {"browser": {"profile": profile}}})
    ran = invoke("browser", "login", site.url + "/form", env={"DISPLAY": ":99"})
    assert ran.returncode != 0 and len(ran.error_lines) == 1, ran.stderr
    assert f"The browser profile {profile} is in use" in ran.stderr


def test_a_login_cookie_is_kept_in_the_profile_for_the_next_browser(browser, loop, site):
    browser(action="open", url=site.url + "/login")
    browser.close()  # the browser ends, as it does when idle or when nanoagent stops
    again = BrowserUnderTest(loop, browser.browser.settings)
    try:
        assert "Cookie: session=s3cret" in again(action="open", url=site.url + "/whoami")
    finally:
        again.close()


def authorized_keys(handler):
    send(handler, "ssh-ed25519 AAAA attacker\n", content_type="text/plain",
         headers={"Content-Disposition": "attachment; filename=authorized_keys"})


def test_a_download_is_never_written_through_a_link_planted_in_place_of_media_downloads(browser, site, tmp_path):
    outside = tmp_path / "ssh"
    outside.mkdir()
    downloads = browser.browser.settings.workspace / "media" / "downloads"
    downloads.parent.mkdir(parents=True, exist_ok=True)
    if downloads.exists():
        downloads.rename(downloads.with_name("downloads-before"))
    downloads.symlink_to(outside)  # what a command run by exec can do in the workspace
    trap = WebServer({"/": page("<a href=/keys>Get the keys</a>"), "/keys": authorized_keys})
    try:
        browser(action="open", url=trap.url + "/")
        said = [browser(action="click", ref=1)]
        wait_until(lambda: "authorized_keys" in said[-1] or said.append(browser(action="tabs")), "the download's note")
    finally:
        trap.close()
        downloads.unlink()
        if downloads.with_name("downloads-before").exists():
            downloads.with_name("downloads-before").rename(downloads)
    assert "The download 'authorized_keys' was not kept: media/downloads in the workspace is a link" in said[-1]
    assert list(outside.iterdir()) == []
    assert list(browser.browser.settings.staging.iterdir()) == []  # nor left behind in the staging folder


def test_a_screenshot_is_never_written_through_a_link_planted_in_place_of_media(browser, site, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    media = browser.browser.settings.workspace / "media"
    media.rename(media.with_name("media-before"))
    media.symlink_to(outside)
    try:
        browser(action="open", url=site.url + "/form")
        with pytest.raises(ToolError, match="media in the workspace is a link or not a folder"):
            browser(action="screenshot")
    finally:
        media.unlink()
        media.with_name("media-before").rename(media)
    assert list(outside.iterdir()) == []


def test_files_a_dead_browser_left_in_staging_do_not_count_against_a_download_and_go_at_the_next_start(browser,
                                                                                                      site):
    staging = browser.browser.settings.staging
    with open(staging / "left-by-a-dead-browser", "wb") as stale:
        stale.truncate(browser.browser.settings.max_download_bytes + 1)  # sparse: over the cap, no disk used
    browser(action="open", url=site.url + "/download")
    said = [browser(action="click", ref=1)]
    wait_until(lambda: "'data.csv'" in said[-1] or said.append(browser(action="tabs")), "the download's note")
    assert "Downloaded 'data.csv' (8 bytes)" in said[-1]

    browser.close()
    assert (staging / "left-by-a-dead-browser").exists()
    browser(action="open", url=site.url + "/form")  # a new browser, on the same profile
    assert not (staging / "left-by-a-dead-browser").exists()


def proxy_request(proxy_port: int, request: bytes) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", proxy_port), timeout=PATIENCE)
    connection.sendall(request)
    return connection


def read_response(connection: socket.socket) -> bytes:
    """One response whose body has a Content-Length, or whatever comes before the connection closes."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length and (chunk := connection.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.fixture
def proxy(loop):
    from nanoagent.tools.browser.proxy import GuardedProxy
    from nanoagent.tools.netguard import Guard

    guarded = GuardedProxy(Guard.from_config(["127.0.0.1/32"]))
    loop.run(guarded.start())
    yield guarded
    loop.run(guarded.close())


def test_a_second_request_on_a_kept_alive_connection_never_reaches_the_first_server(proxy, elsewhere):
    seen = []
    listener = socket.create_server(("127.0.0.1", 0))

    def keep_alive_server():  # answers every request on its connection and keeps it open, as servers may
        connection, _ = listener.accept()
        with connection:
            data = b""
            while chunk := connection.recv(65536):
                data += chunk
                while b"\r\n\r\n" in data:
                    head, _, data = data.partition(b"\r\n\r\n")
                    seen.append(head.split(b"\r\n")[0].decode())
                    connection.sendall(b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok")

    server = threading.Thread(target=keep_alive_server, daemon=True)
    server.start()
    port = listener.getsockname()[1]
    auth = "Proxy-Authorization: Basic " + base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
    with proxy_request(proxy.port, f"GET http://127.0.0.1:{port}/first HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                                   f"{auth}\r\n\r\n".encode()) as connection:
        first = read_response(connection)
        assert first.startswith(b"HTTP/1.1 200 OK") and first.endswith(b"ok")
        assert b"Connection: close" in first and b"keep-alive" not in first  # the browser opens a new one next
        target = elsewhere.url.removeprefix("http://")
        connection.sendall(f"GET http://{target}/router-admin HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n\r\n".encode())
        second = read_response(connection)
    listener.close()
    server.join(PATIENCE)
    assert second == b""  # the connection was closed, not handed to the first server
    assert seen == ["GET /first HTTP/1.1"]
    assert elsewhere.paths() == []


def test_the_proxy_answers_407_to_a_local_process_without_its_credentials(proxy, site):
    host = site.url.removeprefix("http://")
    before = len(site.requests)
    wrong = "Proxy-Authorization: Basic " + base64.b64encode(b"nanoagent:guessed").decode() + "\r\n"
    for request in (f"GET {site.url}/form HTTP/1.1\r\nHost: {host}\r\n\r\n",
                    f"GET {site.url}/form HTTP/1.1\r\nHost: {host}\r\n{wrong}\r\n",
                    f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n"):
        with proxy_request(proxy.port, request.encode()) as connection:
            answer = read_response(connection)
        assert answer.startswith(b"HTTP/1.1 407 Proxy Authentication Required"), answer
        assert b'Proxy-Authenticate: Basic realm="nanoagent browser"' in answer
    assert len(site.requests) == before
