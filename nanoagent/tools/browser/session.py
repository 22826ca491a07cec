"""One Chromium for the process: started on first use, closed when idle, never outliving nanoagent.

Playwright (imported here, at the first start) drives the system's Chromium through a small launcher script that
runs it inside bubblewrap, as exec's commands run: the system read-only, a private /tmp and home, nothing of
$NANOAGENT_HOME but the profile and the downloads' staging folder bound in. Inside, Chromium runs without its own
sandbox (it could not make its namespaces there, and as root it refuses to try), so bwrap is the boundary. The
network namespace is shared: Chromium reaches the internet only through the guarded proxy (`proxy.py`), with
loopback not bypassed, QUIC off and WebRTC's UDP kept to the proxy.

The launcher joins the browser's cgroup (where nanoagent may make one) and writes its pid before it becomes bwrap,
so procguard's watcher ends the whole browser (every renderer included) when nanoagent dies, kill -9 included.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shlex
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nanoagent.fsutil import private_dir
from nanoagent.procguard import Cgroup, release, start_guard, watch
from nanoagent.tools.base import ToolError
from nanoagent.tools.browser.proxy import GuardedProxy
from nanoagent.tools.netguard import Guard
from nanoagent.tools.sandbox import ETC_FILES, _system_binds, check_bwrap

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Download, Page, Playwright

    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

EXECUTABLES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL = "install Chromium (`apt-get install chromium`) or set tools.browser.executable"
MAX_PROCESSES = 1024
LAUNCH_TIMEOUT = 60.0  # seconds Chromium gets to start (a loaded machine is slow at it)
CHROMIUM_FILES = ("/etc/fonts", "/etc/chromium", "/etc/chromium.d", "/etc/machine-id", "/var/cache/fontconfig")
ARGS = ("--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-quic", "--disable-dev-shm-usage",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp", "--proxy-bypass-list=<-loopback>")
SINGLETON = ("SingletonLock", "SingletonSocket", "SingletonCookie")


@dataclass(frozen=True)
class BrowserSettings:
    """tools.browser with its defaults filled in, and what it shares with exec and web_fetch."""

    executable: str  # a path, or "" when none was found
    profile: Path
    workspace: Path
    home: Path  # $NANOAGENT_HOME: hidden inside the sandbox, like exec's
    allow_private: tuple[str, ...] = ()
    sandbox: str = "auto"  # tools.exec.sandbox: auto, bwrap or none
    headless: bool = True
    idle_seconds: float = 300.0
    timeout_seconds: float = 30.0
    max_download_bytes: int = 50_000_000

    @property
    def staging(self) -> Path:
        """Where Chromium writes downloads before they are checked and moved under media/."""
        return self.profile.parent / "downloads"


def settings_from(config: Config, paths: Paths) -> BrowserSettings:
    """tools.browser, with the profile defaulting to $NANOAGENT_HOME/browser/<workspace>/profile: out of the
    workspace, so neither the file tools nor exec's commands (which see the workspace, not the home) read its
    cookies."""
    b = config.tools.browser
    profile = Path(os.path.expanduser(b.profile)) if b.profile else \
        paths.home / "browser" / paths.workspace_slug() / "profile"
    return BrowserSettings(find_executable(b.executable), profile.absolute(), paths.workspace, paths.home,
                           tuple(config.tools.web.allow_private), config.tools.exec.sandbox, b.headless,
                           b.idle_seconds, b.timeout_seconds, b.max_download_bytes)


def find_executable(configured: str | None) -> str:
    """The Chromium to run: tools.browser.executable (a path or a name on PATH), else the first of EXECUTABLES on
    PATH; "" when there is none."""
    for name in ([configured] if configured else EXECUTABLES):
        found = shutil.which(os.path.expanduser(name))
        if found:
            return found
    return ""


def missing(settings: BrowserSettings) -> str | None:
    """Why the browser cannot start here (one sentence with the fix), or None."""
    import importlib.util

    if importlib.util.find_spec("playwright") is None:
        return "The browser needs Playwright: `pip install 'nanoagent[browser]'` (it uses the system's Chromium)."
    if not settings.executable:
        return f"No Chromium found: {INSTALL}."
    return None


@dataclass
class Running:
    playwright: Playwright
    context: BrowserContext
    proxy: GuardedProxy
    guard: asyncio.subprocess.Process | None
    group: Cgroup | None
    lock_fd: int
    run_dir: Path
    current: Page | None = None
    notes: list[str] = field(default_factory=list)  # for the model with the next result: tabs opened, downloads
    downloads: set[asyncio.Task[None]] = field(default_factory=set)
    claimed: set[str] = field(default_factory=set)  # staging files a running download measures as its own


class Browser:
    """The process's one browser. `use()` gives the running browser to one action at a time."""

    def __init__(self, settings: BrowserSettings, warn: Callable[[str], None] = lambda text: None):
        self.settings = settings
        self.warn = warn
        self.running: Running | None = None
        self._lock = asyncio.Lock()
        self._idle: asyncio.TimerHandle | None = None
        self._idle_close: asyncio.Task[None] | None = None

    @classmethod
    def offered(cls, settings: BrowserSettings, enabled: bool, warn: Callable[[str], None] = lambda text: None
                ) -> Browser | None:
        """The browser for the tool, when it is enabled and can start here (Playwright and a Chromium found)."""
        if not enabled or missing(settings):
            return None
        return cls(settings, warn)

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[Running]:
        """The running browser (started if it is not), for one action; the idle timer starts again after it."""
        async with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            if self.running is None or not self._alive(self.running):
                if self.running is not None:
                    await self._stop(self.running)
                self.running = await self._start(self.settings.headless)
            try:
                yield self.running
            finally:
                if self.running is not None:
                    loop = asyncio.get_running_loop()
                    self._idle = loop.call_later(self.settings.idle_seconds, self._on_idle)

    async def aclose(self) -> None:
        """Close the browser, if it runs (the process is ending, or it was idle)."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        async with self._lock:
            running, self.running = self.running, None
            if running is not None:
                await self._stop(running)
        closing = self._idle_close
        if closing is not None and closing is not asyncio.current_task():
            await asyncio.gather(closing, return_exceptions=True)

    async def kill(self) -> None:
        """End the browser at once (it stopped answering); the lock may be held by the action that found out."""
        running, self.running = self.running, None
        if running is not None:
            await self._stop(running, graceful=False)

    def _on_idle(self) -> None:
        self._idle = None
        self._idle_close = asyncio.get_running_loop().create_task(self.aclose())

    @staticmethod
    def _alive(running: Running) -> bool:
        browser = running.context.browser
        return browser is None or browser.is_connected()

    async def _start(self, headless: bool) -> Running:
        s = self.settings
        why = missing(s)
        if why:
            raise ToolError(why)
        from playwright.async_api import Error, async_playwright

        sandboxed = _use_bwrap(s.sandbox)
        if not sandboxed and s.sandbox == "auto":
            self.warn(f"The browser runs without bubblewrap ({check_bwrap().explain()}); only the address guard and "
                      "Chromium's own sandbox (none as root) hold it.")
        private_dir(s.profile)
        private_dir(s.staging)
        lock_fd = _lock_profile(s.profile)
        clear_staging(s.staging)  # the profile is ours: what a dead browser left there is nobody's
        proxy = GuardedProxy(Guard.from_config(s.allow_private))
        group = await asyncio.to_thread(Cgroup.create, MAX_PROCESSES)
        guard = await start_guard(cgroups=group.paths if group else ())
        run_dir = private_dir(s.home / "run" / f"browser-{os.getpid()}")
        playwright = None
        try:
            await proxy.start()
            launcher = _write_launcher(run_dir, s, group, sandboxed)
            async with asyncio.timeout(LAUNCH_TIMEOUT):
                playwright = await async_playwright().start()
            args = list(ARGS)
            if sandboxed or os.geteuid() == 0:
                args.append("--no-sandbox")  # inside bwrap; as root Chromium's own sandbox will not start
            context = await playwright.chromium.launch_persistent_context(
                str(s.profile), executable_path=str(launcher), headless=headless, args=args,
                downloads_path=str(s.staging), accept_downloads=True, timeout=max(LAUNCH_TIMEOUT, s.timeout_seconds) * 1000,
                env=_browser_env(), proxy={"server": f"http://127.0.0.1:{proxy.port}", "username": proxy.username,
                                           "password": proxy.password},
                viewport={"width": 1280, "height": 800} if headless else None,
                ignore_default_args=["--enable-automation"] if not headless else None)
        except BaseException as e:
            with contextlib.suppress(Exception):
                if playwright is not None:
                    await playwright.stop()
            await _free(proxy, guard, group, lock_fd)
            if isinstance(e, TimeoutError):
                raise ToolError(f"The browser did not start within {LAUNCH_TIMEOUT:g} s; try again, or run "
                                "`nanoagent doctor`.") from None
            if isinstance(e, Error):
                raise ToolError(f"The browser did not start ({_first_line(e)}); check tools.browser.executable "
                                f"({s.executable}), or run `nanoagent doctor`.") from None
            raise
        pid = _read_pid(run_dir / "launcher.pid")
        if pid:
            watch(guard, pid)
        running = Running(playwright, context, proxy, guard, group, lock_fd, run_dir)
        context.on("page", lambda page: self._watch_page(running, page))
        for page in context.pages:
            self._watch_page(running, page)
        running.current = context.pages[0] if context.pages else None
        return running

    def _watch_page(self, running: Running, page: Page) -> None:
        page.on("download", lambda download: self._download(running, download))
        page.on("popup", lambda popup: self._popup(running, popup))

    @staticmethod
    def _popup(running: Running, page: Page) -> None:
        """A page opened a tab (a link with a target, window.open): the model goes on in it, and is told."""
        running.current = page
        running.notes.append("A new tab opened and is now the current one (`tabs` lists them).")

    def _download(self, running: Running, download: Download) -> None:
        before = _staged(self.settings.staging)
        task = asyncio.get_running_loop().create_task(self._keep_download(running, download, before))
        running.downloads.add(task)
        task.add_done_callback(running.downloads.discard)

    async def _keep_download(self, running: Running, download: Download, before: set[str]) -> None:
        """Wait for the download within the size cap, then copy it under the workspace's media/downloads/ (a file
        made new there, through folders that are not links: a link planted by exec's commands is never followed)."""
        cap = self.settings.max_download_bytes
        name = _safe_name(download.suggested_filename)
        waiting = asyncio.ensure_future(download.path())
        path: Path | None = None
        mine: list[str] = []
        try:
            while not waiting.done():
                # only this download's file counts, not what else is in staging
                if _download_size(self.settings.staging, before, running.claimed, mine) > cap:
                    await download.cancel()
                    running.notes.append(f"The download {name!r} was stopped: it passed {cap:,} bytes "
                                         "(tools.browser.maxDownloadBytes).")
                    return
                await asyncio.wait([waiting], timeout=0.2)
            path = Path(await waiting)
            size = path.stat().st_size
            if size > cap:
                running.notes.append(f"The download {name!r} ({size:,} bytes) was dropped: over {cap:,} bytes "
                                     "(tools.browser.maxDownloadBytes).")
                return
            kept = await asyncio.to_thread(keep_in_workspace, self.settings.workspace, ("media", "downloads"),
                                           name, path)
            running.notes.append(f"Downloaded {name!r} ({size:,} bytes) to {kept}.")
        except ToolError as e:
            running.notes.append(f"The download {name!r} was not kept: {e}")
        except Exception as e:  # the browser closed, the download failed: say so, never raise into Playwright
            running.notes.append(f"The download {name!r} failed: {_first_line(e)}.")
        finally:
            waiting.cancel()
            running.claimed.difference_update(mine)
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()

    async def _stop(self, running: Running, graceful: bool = True) -> None:
        for task in list(running.downloads):
            task.cancel()
        closed = False
        if graceful:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await running.context.close()
                    closed = True
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10):
                await running.playwright.stop()
        # a browser that closed itself is gone (its pid may even be reused): the watcher is let go, not fired
        await _free(running.proxy, running.guard, running.group, running.lock_fd, fire=not closed)
        shutil.rmtree(running.run_dir, ignore_errors=True)


async def interactive_login(settings: BrowserSettings, url: str, say: Callable[[str], None]) -> None:
    """`nanoagent browser login`: the browser in a window at `url`, until the person closes it (or the command is
    cancelled); then it closes, so Chromium writes the profile out."""
    import dataclasses

    browser = Browser(dataclasses.replace(settings, headless=False, idle_seconds=86_400))
    try:
        async with browser.use() as running:
            page = running.current or await running.context.new_page()
            try:
                await page.goto(url, timeout=settings.timeout_seconds * 1000, wait_until="domcontentloaded")
            except Exception as e:  # a slow or refused page: the window stays, the person can go on
                say(f"Opening {url} did not finish ({_first_line(e)}); the window stays open.")
            say("Log in in the browser window, then close the window (or press Ctrl-C here).")
            await running.context.wait_for_event("close", timeout=0)
    finally:
        await asyncio.shield(browser.aclose())


async def _free(proxy: GuardedProxy, guard: asyncio.subprocess.Process | None, group: Cgroup | None, lock_fd: int,
                fire: bool = False) -> None:
    """Stop the proxy, end whatever is left of the browser, and let go of the profile."""
    await proxy.close()
    if group is not None:
        await asyncio.to_thread(group.close)
    if fire and guard is not None and guard.stdin is not None and guard.returncode is None:
        guard.stdin.close()  # the watcher ends the browser's process group, like a nanoagent that died
        with contextlib.suppress(Exception):
            await asyncio.wait_for(guard.wait(), 5)
    await release(guard)
    os.close(lock_fd)


def _use_bwrap(mode: str) -> bool:
    """Whether Chromium runs inside bubblewrap: tools.exec.sandbox decides, as for exec."""
    if mode == "none":
        return False
    check = check_bwrap()
    if check.ok:
        return True
    if mode == "bwrap":
        raise ToolError(f"The browser runs only sandboxed (tools.exec.sandbox is \"bwrap\"), and {check.explain()}.")
    return False


def _lock_profile(profile: Path) -> int:
    """Hold the profile for this process; Chromium's own lock files left by a killed browser go."""
    fd = os.open(profile.parent / "profile.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ToolError(f"The browser profile {profile} is in use by another nanoagent process (a gateway, or "
                        "`nanoagent browser login`); it is free again when that browser closes "
                        "(tools.browser.idleSeconds).") from None
    for name in SINGLETON:
        with contextlib.suppress(OSError):
            os.unlink(profile / name)
    return fd


def _write_launcher(run_dir: Path, s: BrowserSettings, group: Cgroup | None, sandboxed: bool) -> Path:
    """The script Playwright starts as the browser: it writes its pid, joins the cgroup, then runs Chromium (in
    bwrap when `sandboxed`) with the arguments it was given."""
    pid_file = run_dir / "launcher.pid"
    lines = ["#!/bin/sh", f"echo $$ > {shlex.quote(str(pid_file))}"]
    for path in group.paths if group else ():
        lines.append(f"echo $$ > {shlex.quote(str(path / 'cgroup.procs'))} 2>/dev/null")
    command = [*(bwrap_args(s) if sandboxed else []), s.executable]
    lines.append("exec " + " ".join(shlex.quote(part) for part in command) + ' "$@"')
    launcher = run_dir / "chromium"
    launcher.write_text("\n".join(lines) + "\n")
    launcher.chmod(0o700)
    return launcher


def bwrap_args(s: BrowserSettings) -> list[str]:
    """bwrap's command line up to the program: like exec's sandbox, with the network shared (the proxy is the way
    out) and the profile and downloads' staging folder the only writable places that outlast it."""
    args = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", *_system_binds()]
    for path in (*ETC_FILES, *CHROMIUM_FILES):
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]
    user_home = os.path.expanduser("~")
    if user_home not in ("/", "/tmp") and not user_home.startswith("/usr"):
        args += ["--tmpfs", user_home]
    args += ["--tmpfs", os.path.realpath(s.home)]
    if os.environ.get("DISPLAY"):
        args += ["--ro-bind-try", "/tmp/.X11-unix", "/tmp/.X11-unix"]
        xauthority = os.environ.get("XAUTHORITY")
        if xauthority:
            args += ["--ro-bind-try", xauthority, xauthority]
    for folder in (s.profile, s.staging):
        real = os.path.realpath(folder)
        args += ["--bind", real, real]
    return [*args, "--"]


def _browser_env() -> dict[str, str | float | bool]:
    """What Chromium gets of the environment: enough to run, and to find a display for `browser login`."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "DISPLAY", "XAUTHORITY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR")
    env: dict[str, str | float | bool] = {name: os.environ[name] for name in keep if name in os.environ}
    return env


def _read_pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().strip())
    return None


def _staged(staging: Path) -> set[str]:
    """The names in the staging folder, each without the `.crdownload` Chromium gives it while it is written."""
    with contextlib.suppress(OSError):
        return {name.removesuffix(".crdownload") for name in os.listdir(staging)}
    return set()


def _download_size(staging: Path, before: set[str], claimed: set[str], mine: list[str]) -> int:
    """How far this download has got: the size of its own file in the staging folder (the first name that was not
    there when it began and no other download has claimed), 0 before it is there. Other files do not count."""
    if not mine:
        new = sorted(_staged(staging) - before - claimed)
        if not new:
            return 0
        claimed.add(new[0])
        mine.append(new[0])
    size = 0
    for name in (mine[0], f"{mine[0]}.crdownload"):
        with contextlib.suppress(OSError):
            size = max(size, os.lstat(staging / name).st_size)
    return size


def clear_staging(staging: Path) -> None:
    """Files left in the downloads' staging folder by a browser that died: nothing will ever claim them."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(staging):
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)


def _open_folder(workspace: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of workspace/<parts>, made (0700) where missing, reached one folder at a time without following
    a link: a component that is a link or not a folder is refused (ToolError)."""
    fd = os.open(os.path.realpath(workspace), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, part in enumerate(parts):
            where = "/".join(parts[:depth + 1])
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o700, dir_fd=fd)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                raise ToolError(f"{where} in the workspace is a link or not a folder; nothing is written through it "
                                f"(remove it, and a real folder is made there).") from None
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def keep_in_workspace(workspace: Path, folder: tuple[str, ...], name: str, source: Path | bytes) -> str:
    """Copy `source` (a file, or the bytes themselves) to a new file under workspace/<folder>, named `name` or
    `stem-2.ext`...; the path relative to the workspace. No link is followed on the way or at the file."""
    fd = _open_folder(workspace, folder)
    try:
        stem, dot, suffix = name.rpartition(".") if "." in name.lstrip(".") else (name, "", "")
        n = 1
        while True:
            candidate = name if n == 1 else f"{stem}-{n}{dot}{suffix}"
            try:
                out = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                              dir_fd=fd)
                break
            except FileExistsError:
                n += 1
        with os.fdopen(out, "wb") as sink:
            if isinstance(source, bytes):
                sink.write(source)
            else:
                with open(source, "rb") as src:
                    shutil.copyfileobj(src, sink, 1 << 20)
        return "/".join((*folder, candidate))
    finally:
        os.close(fd)


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._- " else "_" for c in os.path.basename(name or "")).strip(" .")
    return cleaned[:120] or "download"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
