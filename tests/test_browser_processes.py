"""The browser's processes: none before the first use, closed when idle, none left after a kill -9 of nanoagent;
`nanoagent browser login` in a window under Xvfb, and its one line where there is no display."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from nanoagent.tools.sandbox import check_bwrap
from tests.browser_tool_helpers import (
    BrowserUnderTest,
    LoopThread,
    chromium_processes,
    page,
    require_chromium,
    send,
    settings,
)
from tests.conftest import PATIENCE, ROOT, invoke, wait_until, write_config
from tests.web_server import WebServer

pytestmark = pytest.mark.process  # Chromium, Python and Xvfb are real processes


def descendants(pid: int) -> set[int]:
    """Every process under `pid`, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def running(pids: set[int]) -> set[int]:
    """Those of `pids` still running (a zombie has ended)."""
    alive = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


CHILD = """
import asyncio, sys
from pathlib import Path
from nanoagent.tools import ToolContext
from nanoagent.tools.browser import Browser, browser_tool
from tests.browser_tool_helpers import settings

async def main():
    browser = Browser(settings(Path(sys.argv[1])))
    await browser_tool(browser).call(ToolContext(Path(sys.argv[1])), {"action": "open", "url": sys.argv[2]})
    print("ready", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_no_browser_process_outlives_nanoagent_killed_with_sigkill(tmp_path):
    require_chromium()
    site = WebServer({"/": page("<p>still here</p>")})
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), site.url + "/"], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        profile = str(tmp_path / "browser" / "profile")
        assert chromium_processes(profile), "the browser should be running"
        tree = descendants(child.pid)
        child.kill()
        child.wait(PATIENCE)
        wait_until(lambda: not chromium_processes(profile) and not running(tree),
                   "every process the killed nanoagent started (driver, bwrap, Chromium) to end")
    finally:
        if child.poll() is None:
            child.kill()
        site.close()


def test_the_browser_closes_itself_when_idle_and_starts_again_on_the_next_call(tmp_path):
    loop = LoopThread()
    site = WebServer({"/": page("<p>hello</p>")})
    browser = BrowserUnderTest(loop, settings(tmp_path, idle_seconds=1.0))
    profile = str(browser.browser.settings.profile)
    try:
        assert "hello" in browser(action="open", url=site.url + "/")
        chromium = chromium_processes(profile)
        assert chromium
        if check_bwrap().ok:  # inside bubblewrap: a pid namespace of its own
            assert os.readlink(f"/proc/{chromium[-1]}/ns/pid") != os.readlink("/proc/self/ns/pid")
        wait_until(lambda: browser.browser.running is None and not chromium_processes(profile),
                   "the idle browser to close")
        assert "hello" in browser(action="open", url=site.url + "/")
    finally:
        browser.close()
        loop.close()
        site.close()
    assert not chromium_processes(profile)


def test_an_agent_with_the_browser_offered_imports_no_playwright_and_starts_no_browser_until_used(tmp_path):
    require_chromium()
    script = ("import sys\nfrom nanoagent.agent.build import build_agent\nfrom nanoagent.config.schema import Config\n"
              "from nanoagent.paths import Paths\nfrom nanoagent.providers.scripted import ScriptedProvider\n"
              "loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider([]))\n"
              "print(sorted(loop.context.tools.names()))\n"
              "print(sorted(m for m in sys.modules if m.startswith('playwright')))\n")
    ran = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE,
                         env={**os.environ, "NANOAGENT_HOME": str(tmp_path / "home")})
    assert ran.returncode == 0, ran.stderr
    tools, imported = ran.stdout.splitlines()
    assert "'browser'" in tools
    assert imported == "[]"
    assert not chromium_processes(str(tmp_path / "home" / "browser"))


def test_browser_login_without_a_display_says_so_in_one_line(isolated_home):
    require_chromium()
    ran = invoke("browser", "login", "https://example.com/login", env={"DISPLAY": None})
    assert ran.returncode != 0
    assert len(ran.error_lines) == 1 and "No display here" in ran.stderr and "ssh -X" in ran.stderr


def login(handler):
    send(handler, "<p>Logged in</p>", headers={"Set-Cookie": "session=by-hand; Max-Age=86400; Path=/"})


def whoami(handler):
    send(handler, f"<p>Cookie: {handler.headers.get('Cookie') or 'nobody'}</p>")


def test_browser_login_opens_a_window_and_the_agent_browser_then_sends_its_cookie(isolated_home, tmp_path):
    require_chromium()
    if shutil.which("Xvfb") is None:
        if os.environ.get("NANOAGENT_CI"):
            pytest.fail("CI must run the login test: apt-get install xvfb", pytrace=False)
        pytest.skip("no Xvfb here: apt-get install xvfb")
    write_config(isolated_home, {"tools": {"web": {"allowPrivate": ["127.0.0.1/32"]}}})
    site = WebServer({"/login": login, "/whoami": whoami})
    read, write = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                            pass_fds=(write,), stderr=subprocess.DEVNULL)
    os.close(write)
    command = None
    try:
        with os.fdopen(read) as displays:
            display = displays.readline().strip()
        command = subprocess.Popen([sys.executable, "-m", "nanoagent", "browser", "login", site.url + "/login"],
                                   cwd=ROOT, env={**os.environ, "DISPLAY": f":{display}"}, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        assert command.stdout is not None
        said = command.stdout.readline()  # once the page is shown
        assert "Log in in the browser window" in said, command.communicate()
        assert "/login" in site.paths()
        command.send_signal(signal.SIGINT)  # the person is done: Ctrl-C (or closing the window)
        out, err = command.communicate(timeout=PATIENCE)
        assert command.returncode == 0, err
        assert "keeps what the sites set" in out
    finally:
        if command is not None and command.poll() is None:
            command.kill()
        xvfb.terminate()
        xvfb.wait(PATIENCE)
    from nanoagent.config import load_config
    from nanoagent.paths import Paths
    from nanoagent.tools.browser import settings_from

    config, _ = load_config(isolated_home / "config.json")
    loop = LoopThread()
    browser = BrowserUnderTest(loop, settings_from(config, Paths.from_env()))
    try:
        assert "Cookie: session=by-hand" in browser(action="open", url=site.url + "/whoami")
    finally:
        browser.close()
        loop.close()
        site.close()
    assert json.loads((isolated_home / "config.json").read_text())  # the command left config.json as it was


def test_the_model_reads_a_page_through_the_gateway_and_the_browser_ends_with_the_gateway(llm, isolated_home):
    from tests.conftest import anthropic_env, start_gateway_process
    from tests.llm_server import Reply

    require_chromium()
    write_config(isolated_home, {"tools": {"web": {"allowPrivate": ["127.0.0.1/32"]}}})
    site = WebServer({"/": page("<div id=out></div><script>document.getElementById('out').textContent = "
                           "'Made by script'</script>")})
    env = {**os.environ, **anthropic_env(llm)}
    gateway = start_gateway_process(env)
    try:
        llm.script(Reply(tool_calls=[("browser", {"action": "open", "url": site.url + "/"})]), Reply(text="read it"))
        asked = subprocess.run([sys.executable, "-m", "nanoagent", "agent", "-m", "what does the page say?"], cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=PATIENCE, stdin=subprocess.DEVNULL)
        assert asked.returncode == 0 and asked.stdout.strip() == "read it", asked.stderr
        result = json.dumps(llm.requests[-1].body["messages"][-1])
        assert "untrusted_data source=\\\"browser\\\"" in result and "Made by script" in result
        profile = str(isolated_home / "browser")
        assert chromium_processes(profile)
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(PATIENCE)
        wait_until(lambda: not chromium_processes(profile), "the browser to close with the gateway")
    finally:
        if gateway.poll() is None:
            gateway.kill()
        site.close()


def test_doctor_says_where_the_browser_and_its_profile_are(isolated_home):
    require_chromium()
    ran = invoke("doctor")
    line = next(line for line in ran.stdout.splitlines() if "browser:" in line)
    assert "chromium" in line and str(isolated_home / "browser") in line


def test_with_the_sandbox_off_the_browser_runs_without_bubblewrap_and_still_behind_the_guard(tmp_path):
    loop = LoopThread()
    site = WebServer({"/": page("<p>unsandboxed</p><img src=http://127.0.0.2:47999/x.png>")})
    browser = BrowserUnderTest(loop, settings(tmp_path, sandbox="none"))
    profile = str(browser.browser.settings.profile)
    try:
        said = [browser(action="open", url=site.url + "/")]
        assert "unsandboxed" in said[0]
        chromium = chromium_processes(profile)
        assert chromium and os.readlink(f"/proc/{chromium[-1]}/ns/pid") == os.readlink("/proc/self/ns/pid")
        wait_until(lambda: "127.0.0.2 is a loopback address" in said[-1] or said.append(browser(action="tabs")),
                   "the refused image's note")
    finally:
        browser.close()
        loop.close()
        site.close()
