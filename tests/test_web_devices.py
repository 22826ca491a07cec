# ruff: noqa: F811 - the fixtures of tests/browser.py are imported by name and named by the tests
"""Devices that stay signed in to the web app, pairing a phone by QR code, and the listener `nanoagent web` leaves on:
a real Gateway with its HTTP listener (tests/browser.py), stopped and started again on the same home for a restart,
Debian's chromium through Playwright, and the QR codes read back by an independent reader (tests/qr_reader.py)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
from typing import Any

import httpx
import pytest

from nanoagent.config.schema import Config
from nanoagent.web.devices import device_name
from tests.browser import browser, page, sign_in, web, web_gateway  # noqa: F401 - fixtures
from tests.conftest import (
    PATIENCE,
    anthropic_env,
    free_port,
    invoke,
    start_gateway_process,
    wait_until,
    write_config,
)
from tests.qr_reader import read_matrix, read_terminal
from tests.test_web_auth import Clock, client, csrf, open_stream, port_of, read_to_end, read_until

DAY = 86_400.0


def _stored(web: Any) -> list[dict[str, Any]]:
    return json.loads(web.paths.web_devices_file.read_text())["devices"]


def _token(cookie: str) -> str:
    return cookie.split("=", 1)[1]


# --- staying signed in ------------------------------------------------------------------------------------------


@pytest.mark.process
def test_a_browser_stays_signed_in_when_the_gateway_restarts_and_its_page_can_still_change_things(page, isolated_home):
    port = free_port()
    with web_gateway(port=port) as first:
        sign_in(page, first)
        token = page.evaluate("async () => (await (await fetch('/api/session')).json()).csrf")
        cookie = page.context.cookies()[0]
    stored = first.paths.web_devices_file
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert cookie["value"] not in stored.read_text()  # only its hash is kept
    assert hashlib.sha256(cookie["value"].encode()).hexdigest() in stored.read_text()
    with web_gateway(port=port) as second:
        shown = page.goto(second.url + "/?restarted#/settings")  # a new load, not a move within the page
        assert shown is not None and shown.status == 200
        page.get_by_role("heading", name="Settings").wait_for()
        # the page loaded before the restart keeps its CSRF token: a sign-out with it is taken
        signed_out = page.evaluate("async (t) => (await fetch('/api/signout', {method: 'POST', "
                                   "headers: {'X-CSRF-Token': t}})).status", token)
        after = page.evaluate("async () => (await fetch('/api/session')).status")
    assert (signed_out, after) == (200, 401)
    assert _stored(second) == []  # signing out removes the device from the file


@pytest.mark.process
def test_a_real_gateway_restarted_keeps_its_devices_signed_in_and_hears_web_revoke(isolated_home, llm):
    port = free_port()
    write_config(isolated_home, {"gateway": {"http": {"enabled": True, "port": port}}})
    env = {**os.environ, **anthropic_env(llm)}
    url = f"http://127.0.0.1:{port}"

    def sign_in_once() -> str:
        ran = invoke("web", "--no-open")
        link = ran.stdout.strip().rsplit(" ", 1)[1]
        signed = httpx.get(link, follow_redirects=False, timeout=PATIENCE)
        assert signed.status_code == 303, signed.text
        return "; ".join(f"{name}={value}" for name, value in signed.cookies.items())

    first = start_gateway_process(env)
    try:
        kept, gone = sign_in_once(), sign_in_once()
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=PATIENCE) == 0
    second = start_gateway_process(env)
    try:
        wait_until(lambda: _answers(f"{url}/health"), "the listener to be up")  # the socket answers first
        stream = open_stream(port, "/api/events?session=web:x", gone)
        gone_id = next(d["id"] for d in json.loads((isolated_home / "web-devices.json").read_text())["devices"]
                       if d["hash"] == hashlib.sha256(_token(gone).encode()).hexdigest())
        assert invoke("web", "revoke", gone_id).returncode == 0
        read_to_end(stream)
        answers = [httpx.get(f"{url}/api/session", headers={"Cookie": c}, timeout=PATIENCE).status_code
                   for c in (kept, gone)]
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=PATIENCE) == 0
    assert answers == [200, 401]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=PATIENCE).status_code == 200
    except httpx.ConnectError:
        return False


def test_the_cookie_lasts_as_long_as_a_device_may_stay_unused(isolated_home):
    config = Config()
    config.gateway.web.device_idle_days = 2
    with web_gateway(config=config) as web, client(web) as http:
        signed = http.get(web.signin_url().removeprefix(web.url))
        renewed = http.get("/api/session", headers={"Cookie": signed.headers["set-cookie"].split(";")[0]})
    assert "max-age=172800" in signed.headers["set-cookie"].lower()
    assert "max-age=172800" in renewed.headers["set-cookie"].lower()  # each visit starts the days again


def test_a_device_unused_past_its_idle_days_is_signed_out_and_left_out_of_the_list(isolated_home):
    clock = Clock()
    with web_gateway(clock=clock) as web:
        idle, used = web.cookie(), web.cookie()
        clock.now += 20 * DAY
        with client(web, used) as http:
            assert http.get("/api/session").status_code == 200  # a use: its 30 days start again
        clock.now += 11 * DAY  # idle for 31 days, used 11 days ago
        with client(web) as http:
            expired = http.get("/api/session", headers={"Cookie": idle})
            kept = http.get("/api/session", headers={"Cookie": used})
            listed = http.get("/api/devices", headers={"Cookie": used}).json()["devices"]
        web.call(lambda: web.listener.auth.sessions.flush())
        stored = _stored(web)
    assert (expired.status_code, kept.status_code) == (401, 200)
    assert len(listed) == 1 and listed[0]["current"] is True
    assert [d["hash"] for d in stored] == [hashlib.sha256(_token(used).encode()).hexdigest()]


def test_last_use_is_written_at_most_once_a_minute_not_on_every_request(isolated_home):
    clock = Clock()
    with web_gateway(clock=clock) as web:
        cookie = web.cookie()
        written = web.paths.web_devices_file.stat().st_mtime_ns, web.paths.web_devices_file.stat().st_ino
        clock.now += 3600
        with client(web, cookie) as http:
            for _ in range(30):
                assert http.get("/api/session").status_code == 200
        unchanged = web.paths.web_devices_file.stat().st_mtime_ns, web.paths.web_devices_file.stat().st_ino
        web.call(lambda: web.listener.auth.sessions.flush())  # what the listener does every FLUSH_EVERY seconds
        stored = _stored(web)
    assert unchanged == written
    assert stored[0]["last_used"] == clock.now


# --- revoking ---------------------------------------------------------------------------------------------------


def _no_keep_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """No keep-alive tick and no write of last uses (both also read the devices file again) comes while a test runs:
    only the revocation can end a stream. Set before the gateway starts (its writer's first wait begins then)."""
    from nanoagent.web import api_chat, auth, events

    monkeypatch.setattr(api_chat, "KEEPALIVE", PATIENCE * 10)
    monkeypatch.setattr(events, "KEEPALIVE", PATIENCE * 10)
    monkeypatch.setattr(auth, "FLUSH_EVERY", PATIENCE * 10)


def test_nanoagent_web_revoke_ends_that_device_s_open_event_stream_at_once_and_no_other(isolated_home, monkeypatch):
    _no_keep_alive(monkeypatch)
    with web_gateway() as web:
        _revoke_from_the_terminal(web)


def _revoke_from_the_terminal(web: Any) -> None:
    mine, other = web.cookie(), web.cookie()
    path = "/api/sessions/web:victim/events"
    stream, bystander = open_stream(port_of(web), path, mine), open_stream(port_of(web), path, other)
    listed = invoke("web", "devices")
    ids = re.findall(r"^([0-9a-f]{6})  ", listed.stdout, re.M)
    assert listed.returncode == 0 and len(ids) == 2 and "A browser" in listed.stdout, listed.stdout
    mine_id = next(d["id"] for d in _stored(web) if d["hash"] == hashlib.sha256(_token(mine).encode()).hexdigest())
    ran = invoke("web", "revoke", mine_id)
    assert ran.returncode == 0 and f"Signed out {mine_id}" in ran.stdout, ran.stderr
    read_to_end(stream)  # the gateway ends it at once (a stream left open fails the test at PATIENCE)
    with client(web) as http:
        refused = http.get("/api/session", headers={"Cookie": mine})
        sent = http.post("/api/sessions/web:victim/messages", headers={"Cookie": other, "X-CSRF-Token": csrf(web, other)},
                         json={"text": "still here"})
    with bystander:
        assert b"still here" in read_until(bystander, b"still here")
    assert refused.status_code == 401 and sent.status_code == 202
    again = invoke("web", "revoke", mine_id)
    assert again.returncode == 1 and "nanoagent web devices" in again.stderr


def test_revoking_another_device_from_the_app_ends_its_stream_and_needs_the_csrf_token(isolated_home, monkeypatch):
    _no_keep_alive(monkeypatch)
    with web_gateway() as web:
        _revoke_from_the_app(web)


def _revoke_from_the_app(web: Any) -> None:
    mine, other = web.cookie(), web.cookie()
    stream = open_stream(port_of(web), "/api/events?session=web:x", other)
    with client(web, mine) as http:
        listed = http.get("/api/devices").json()["devices"]
        target = next(d["id"] for d in listed if not d["current"])
        forged = http.delete(f"/api/devices/{target}")
        revoked = http.delete(f"/api/devices/{target}", headers={"X-CSRF-Token": csrf(web, mine)})
        unknown = http.delete("/api/devices/nope", headers={"X-CSRF-Token": csrf(web, mine)})
    read_to_end(stream)
    assert forged.status_code == 403 and revoked.json() == {"revoked": target} and unknown.status_code == 404
    assert [d["id"] for d in _stored(web)] == [d["id"] for d in listed if d["current"]]


def test_a_device_removed_from_the_file_by_another_process_is_signed_out_on_its_next_request(web):
    cookie = web.cookie()
    with client(web, cookie) as http:
        assert http.get("/api/session").status_code == 200
        from nanoagent.web.devices import DeviceStore

        DeviceStore(web.paths.web_devices_file).change(lambda devices: [])  # no notice sent to the gateway
        assert http.get("/api/session").status_code == 401


@pytest.mark.parametrize(("agent", "name"), [
    ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Mobile "
     "Safari/537.36", "Chrome on Android"),
    ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 "
     "Mobile/15E148 Safari/604.1", "Safari on iPhone"),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36 "
     "Edg/126.0", "Edge on Windows"),
    ("Mozilla/5.0 (Macintosh; Intel Mac OS X 14.5; rv:127.0) Gecko/20100101 Firefox/127.0", "Firefox on macOS"),
    ("python-httpx/0.27", "A browser"),
])
def test_a_device_is_named_by_its_browser_and_platform(agent, name):
    assert device_name(agent) == name


# --- pairing a phone --------------------------------------------------------------------------------------------


def _svg_rows(svg_path: str) -> list[str]:
    """The dark modules of the page's QR code (`M{x} {y}h1v1h-1z` each, with a quiet zone of 4) as rows."""
    cells = {(int(x), int(y)) for x, y in re.findall(r"M(\d+) (\d+)h1v1h-1z", svg_path)}
    low = min(min(x for x, _ in cells), min(y for _, y in cells))
    high = max(max(x for x, _ in cells), max(y for _, y in cells))
    assert low == 4
    return ["".join("1" if (x, y) in cells else "0" for x in range(low, high + 1)) for y in range(low, high + 1)]


@pytest.mark.process
def test_the_pair_button_shows_a_qr_code_of_a_one_time_link_that_signs_another_browser_in(browser, page, web):
    sign_in(page, web)
    page.goto(web.url + "/#/devices")
    page.locator("li.device").first.wait_for()
    page.get_by_role("button", name="Pair a device").click()
    link = page.locator("#pair-link").inner_text()
    drawn = page.locator("#pair-qr path").get_attribute("d")
    note = page.locator("#pair-note").inner_text()
    assert link.startswith(web.url + "/signin/")
    assert read_matrix(_svg_rows(drawn or "")) == link  # the code a phone scans is the link
    assert "loopback only" in note and "gateway.http.host" in note  # the listener is on 127.0.0.1 here
    phone = browser.new_context(user_agent="Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, "
                                           "like Gecko) Chrome/126.0 Mobile Safari/537.36")
    try:
        scanned = phone.new_page()
        scanned.goto(link)
        assert scanned.url == web.url + "/"
        page.reload()
        page.locator("li.device", has_text="Chrome on Android").wait_for()
        assert page.locator("li.device").count() == 2
        page.locator("li.device", has_text="Chrome on Android").get_by_role("button", name="Sign out").click()
        page.locator("li.device", has_text="Chrome on Android").wait_for(state="detached")
        assert scanned.evaluate("async () => (await fetch('/api/session')).status") == 401
    finally:
        phone.close()


def test_nanoagent_web_qr_prints_the_link_as_a_qr_code_and_says_it_is_loopback_only(web):
    ran = invoke("web", "--qr")
    assert ran.returncode == 0, ran.stderr
    link = re.search(r"good once, for one minute\): (\S+)", ran.stdout)
    assert link is not None and link.group(1).startswith(web.url + "/signin/")
    assert read_terminal(ran.stdout, border=2) == link.group(1)
    assert "loopback only: a phone cannot reach this link" in ran.stdout
    with client(web) as http:  # the code is good (once)
        assert http.get(link.group(1).removeprefix(web.url)).status_code == 303


def test_a_listener_on_every_address_pairs_with_this_machine_s_lan_address_and_allowed_names(isolated_home):
    from nanoagent.web.pairing import lan_address

    address = lan_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    config = Config()
    config.gateway.http.host = "0.0.0.0"
    config.gateway.http.allowed_hosts = ["mybox.local"]
    with web_gateway(config=config) as web:
        ran = invoke("web", "--qr")
        answer = web.call(lambda: web.listener.signin(False))
    port = port_of(web)
    code = answer["url"].rsplit("/", 1)[1]
    assert answer["remote"] == [f"http://{address}:{port}/signin/{code}", f"http://mybox.local:{port}/signin/{code}"]
    shown = re.search(r"good once, for one minute\): (\S+)", ran.stdout)
    assert shown is not None and shown.group(1).startswith(f"http://{address}:{port}/signin/")
    assert read_terminal(ran.stdout, border=2) == shown.group(1)
    assert "or: http://mybox.local:" in ran.stdout and "loopback only" not in ran.stdout


def test_a_page_opened_at_the_lan_address_pairs_with_that_address(isolated_home):
    from nanoagent.web.pairing import lan_address

    address = lan_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    config = Config()
    config.gateway.http.host = "0.0.0.0"
    with web_gateway(config=config) as web:
        cookie = web.cookie()
        lan = f"http://{address}:{port_of(web)}"
        with httpx.Client(base_url=lan, timeout=PATIENCE, headers={"Cookie": cookie}) as http:
            token = http.get("/api/session").json()["csrf"]
            paired = http.post("/api/pair", headers={"X-CSRF-Token": token}).json()
            refused = http.post("/api/pair")  # no CSRF token: refused like any change
            signed = httpx.get(paired["url"], follow_redirects=False, timeout=PATIENCE)
    assert paired["url"].startswith(f"{lan}/signin/") and paired["reachable"] is True and paired["note"] == ""
    assert read_matrix(paired["qr"]) == paired["url"]
    assert refused.status_code == 403 and signed.status_code == 303


def test_on_loopback_behind_a_proxy_the_pairing_link_names_the_proxy_over_https():
    from nanoagent.web.pairing import bases

    assert bases("127.0.0.1", 8765, ["agent.example.org"]) == ["https://agent.example.org"]
    assert bases("127.0.0.1", 8765, []) == []
    assert bases("192.168.1.20", 8765, ["mybox.local"]) == ["http://192.168.1.20:8765", "http://mybox.local:8765"]


# --- the listener stays on --------------------------------------------------------------------------------------


@pytest.mark.process
def test_saying_yes_to_the_listener_writes_it_to_config_json_keeping_the_rest(isolated_home):
    import os
    import sys

    import pexpect

    from tests.conftest import ROOT
    from tests.test_web_auth import _ask, _gateway_without_http

    config_file = isolated_home / "config.json"
    isolated_home.mkdir(parents=True, exist_ok=True)
    config_file.write_text(json.dumps({"agents": {"defaults": {"model": "anthropic/claude-test"}},
                                       "gateway": {"shutdownGrace": 3}}, indent=2) + "\n")
    env = {**os.environ, "TERM": "dumb", "BROWSER": "true"}
    with _gateway_without_http() as paths:
        child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "web", "--no-open"], cwd=str(ROOT), env=env,
                              encoding="utf-8", timeout=PATIENCE, dimensions=(30, 200))
        child.expect_exact("(this machine only), now and at every start? [y/N] ")
        child.send("y\r")
        child.expect(pexpect.EOF)
        child.close()
        on = _ask(paths, False)
    written = json.loads(config_file.read_text())
    assert child.exitstatus == 0 and "url" in on
    assert written == {"agents": {"defaults": {"model": "anthropic/claude-test"}},
                       "gateway": {"shutdownGrace": 3, "http": {"enabled": True}}}  # loopback: the default host
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert "the listener stays on at every start" in str(child.before)
