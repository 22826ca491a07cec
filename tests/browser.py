"""What the web app's tests share: a real gateway with its HTTP listener (in a thread of this process, so a test can
mint sign-in codes and reach the hub), and Debian's chromium driven by Playwright, one per test module.

    from tests.browser import browser, page, web, sign_in  # noqa: F401 - fixtures

    @pytest.mark.process
    def test_x(page, web):
        sign_in(page, web)
        page.goto(web.url + "/")

Without chromium (or Playwright) the browser tests are skipped with one line saying how to install it; under CI
(NANOAGENT_CI set) they fail instead. Chromium runs with `--no-sandbox` (root in CI) and without its background
connections (the network here is closed); no browser is ever downloaded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from nanoagent.config.schema import Config
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from tests.conftest import PATIENCE

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
INSTALL = "apt-get install chromium chromium-driver"
T = TypeVar("T")


def _missing() -> str:
    """Why no browser test can run here, or ""."""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        return f"no chromium at {CHROMIUM}: {INSTALL}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed: pip install -e '.[test]' (and " + INSTALL + ")"
    return ""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One chromium for the module (a cold start costs ~1.5 s of CPU)."""
    reason = _missing()
    if reason:
        if os.environ.get("NANOAGENT_CI"):
            pytest.fail(f"browser tests cannot run under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM if os.path.exists(CHROMIUM) else
                                              shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page in a context of its own (no cookies from another test)."""
    context = browser.new_context()
    context.set_default_timeout(PATIENCE * 1000 / 4)
    try:
        yield context.new_page()
    finally:
        context.close()


@dataclass
class WebGateway:
    """A running Gateway with its HTTP listener, on an event loop in a thread of its own."""

    url: str  # http://127.0.0.1:<port>
    loop: asyncio.AbstractEventLoop
    listener: Any  # nanoagent.gateway.http.Listener
    gateway: Any  # nanoagent.gateway.server.Gateway
    paths: Paths
    token: str

    def call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine on the gateway's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result(PATIENCE)

    def signin_url(self) -> str:
        """A fresh one-time sign-in link, as `nanoagent web` gets it over the socket."""
        return str(self.call(lambda: self.listener.signin(False))["url"])

    def cookie(self) -> str:
        """`name=value` of a session signed in through a real sign-in code (for clients that are not a browser)."""
        import httpx

        response = httpx.get(self.signin_url(), follow_redirects=False, timeout=PATIENCE)
        assert response.status_code == 303, response.text
        name, value = next(iter(response.cookies.items()))
        return f"{name}={value}"


@contextmanager
def web_gateway(provider: ScriptedProvider | None = None, config: Config | None = None,
                clock: Callable[[], float] | None = None, configured: bool = False,
                port: int = 0) -> Iterator[WebGateway]:
    """A real Gateway with the listener on a loopback port (a free one unless given: a gateway started again on the
    same home and port is a restart); `clock` replaces the sign-in state's clocks. `configured`: the models
    config.json and the environment name, each built and checked by name as a real gateway does (`/model` refuses
    an unknown one), instead of `provider` answering for every model."""
    from nanoagent.agent.build import build_agent
    from nanoagent.gateway.http import Listener
    from nanoagent.gateway.hub import Hub
    from nanoagent.gateway.server import Gateway
    from nanoagent.web.auth import WebAuth
    from nanoagent.web.devices import DeviceStore

    paths = Paths.from_env()
    config = config or Config()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    made: dict[str, Any] = {}

    async def serve() -> None:
        hub = Hub(build_agent(config, paths, provider=None if configured else provider or ScriptedProvider(default="ok")))
        server = Gateway(hub, paths, grace=2)
        listener = Listener(hub, paths, config, server.start_component, server)
        if clock is not None:
            listener.auth = WebAuth(clock, DeviceStore(paths.web_devices_file), config.gateway.web.device_idle_days)
        server.components.append(listener.component(dataclasses.replace(config.gateway.http, enabled=True,
                                                                         port=port)))
        server.signin = listener.signin
        made.update(server=server, listener=listener)
        serving = asyncio.create_task(server.serve(handle_signals=False))
        await asyncio.wait({serving, asyncio.create_task(listener._bound.wait())},
                           return_when=asyncio.FIRST_COMPLETED)
        ready.set()
        await serving

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(serve())
        except BaseException as e:  # noqa: BLE001 - shown by the waiting test
            made["error"] = e
            ready.set()

    thread = threading.Thread(target=run, name="web gateway", daemon=True)
    thread.start()
    assert ready.wait(PATIENCE), "the gateway did not start"
    if "error" in made:
        raise made["error"]
    host, port = made["listener"].address
    token = (paths.run_dir / "http-token").read_text().strip()
    try:
        yield WebGateway(f"http://127.0.0.1:{port}", loop, made["listener"], made["server"], paths, token)
    finally:
        loop.call_soon_threadsafe(made["server"].stop)
        thread.join(PATIENCE)
        loop.close()


@pytest.fixture
def web(isolated_home: Any) -> Iterator[WebGateway]:
    with web_gateway() as gateway:
        yield gateway


def sign_in(page: Any, gateway: WebGateway) -> Any:
    """Sign the page in through a real one-time link; it lands on the app's first page."""
    page.goto(gateway.signin_url())
    assert page.url == gateway.url + "/", page.url
    return page


__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "WebGateway", "browser", "page", "sign_in", "web", "web_gateway"]
