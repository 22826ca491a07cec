"""Who may use the web app: one-time sign-in codes, cookie sessions, the CSRF check and the security headers.

- `nanoagent web` asks the gateway (over its socket) for a sign-in code: single use, valid CODE_TTL seconds, kept
  in the gateway's memory only. `GET /signin/<code>` turns it into a session cookie (HttpOnly, SameSite=Strict,
  Secure when the page came over HTTPS) and redirects to `/`; the code and the cookie never hold the API token.
- Every route but `/signin/<code>`, `/health`, `/v1/*` and `/mcp` (which keep their bearer token) needs the cookie: without
  it `/api/*` answers 401 JSON `{"error": ...}` and a page answers a small page that says to run `nanoagent web`.
- POST, PUT, PATCH and DELETE also need `X-CSRF-Token` equal to the `csrf` of `GET /api/session`, and an `Origin`,
  when sent, equal to the page's own origin.
- Every response says `Content-Security-Policy` (no inline script or style, nothing from another origin),
  `Cache-Control: no-store` (`private` under /static/: never in a shared proxy), `nosniff`, `no-referrer`.
- A signed-in browser is a device (`web/devices.py`): kept hashed under the home, so it stays signed in across
  restarts until it goes unused for `gateway.web.deviceIdleDays` days (its cookie's Max-Age) or is revoked (the
  app's devices page, `nanoagent web revoke`); its open event streams end the moment it is signed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import html
import ipaddress
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass

from aiohttp import web

from nanoagent.linkhost import listen_on
from nanoagent.web.devices import DAY, Device, DeviceStore, MemoryStore, device_name, new_id, token_hash

log = logging.getLogger("nanoagent.web.auth")

CODE_TTL = 60.0  # seconds a sign-in code is good for
FLUSH_EVERY = 60.0  # seconds between writes of the devices' last use (coalesced: never one per request)
MAX_CODES = 64  # codes waiting to be used; the oldest goes first
MAX_SESSIONS = 256  # signed-in devices; the one unused longest is signed out first
STATIC_MAX_AGE = 300  # seconds a browser keeps /static/ files (never a shared cache: `private`)
CSRF_HEADER = "X-CSRF-Token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
PUBLIC_STATIC = frozenset({"/static/manifest.json", "/static/icon.svg", "/static/icon-192.png", "/static/icon-512.png"})
SIGN_IN_HINT = "run `nanoagent web` on the machine the gateway runs on; it opens a sign-in link"


@dataclass
class WebSession:
    id: str  # the token in the browser's cookie
    csrf: str
    device: Device


def csrf_for(token: str) -> str:
    """The page's CSRF token, derived from its cookie's token (so it survives a restart, and nothing stores it): the
    page reads it from `/api/session`; knowing it gives no way back to the cookie."""
    return hmac.new(token.encode(), b"nanoagent csrf", hashlib.sha256).hexdigest()


class SignInCodes:
    """One-time codes, each good once within CODE_TTL seconds of being made. `clock` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl: float = CODE_TTL):
        self.clock = clock
        self.ttl = ttl
        self._codes: dict[str, float] = {}  # code -> when it stops being good; oldest first

    def mint(self) -> str:
        now = self.clock()
        self._codes = {code: until for code, until in self._codes.items() if until > now}
        while len(self._codes) >= MAX_CODES:
            self._codes.pop(next(iter(self._codes)))
        code = secrets.token_urlsafe(24)
        self._codes[code] = now + self.ttl
        return code

    def valid(self, code: str) -> bool:
        """Whether `redeem` would take the code now, without using it."""
        until = self._codes.get(code)
        return until is not None and self.clock() < until

    def redeem(self, code: str) -> bool:
        """True once for a code minted here less than `ttl` seconds ago; a used, expired or unknown code is False."""
        until = self._codes.pop(code, None)
        return until is not None and self.clock() < until


class WebSessions:
    """Signed-in browsers (devices, `web/devices.py`), by the hash of the token in their cookie, as `store` keeps
    them; the store's file is the truth: a device missing from it (revoked by `nanoagent web revoke`) is signed out
    here the next time the file is looked at (each request, each keep-alive tick, the gateway's `devices_changed`).
    A long-lived response (an event stream) registers an `ender` for its session: signing out, revoking, expiring or
    being evicted calls it at once, so the stream ends. Last use is kept here and written by `flush`, at most once
    every FLUSH_EVERY seconds: never a write per request. `clock` is wall-clock seconds."""

    def __init__(self, store: DeviceStore, clock: Callable[[], float] = time.time, idle: float = 30 * DAY):
        self.store = store
        self.clock = clock
        self.idle = idle
        self._devices: dict[str, Device] = {}  # by hash
        self._written: dict[str, float] = {}  # hash -> the last use the file has
        self._stamp: tuple[int, int, int] | None = None
        self._enders: dict[str, set[Callable[[], None]]] = {}
        self._writing: asyncio.Lock | None = None

    def load(self) -> None:
        """Read the store now (another process changed it)."""
        self.take(self.store.stamp(), self.store.read())

    def take(self, stamp: tuple[int, int, int] | None, devices: list[Device]) -> None:
        """What the store holds (read at `stamp`) is who is signed in."""
        self._stamp = stamp
        self._merge(devices)

    def _merge(self, devices: list[Device]) -> None:
        now = self.clock()
        found = {d.hash: d for d in devices if not d.expired(now, self.idle)}
        for gone in [h for h in self._devices if h not in found]:
            self.end(gone)
        for key, device in found.items():
            self._written[key] = device.last_used
            mine = self._devices.get(key)
            if mine is not None:
                device.last_used = max(device.last_used, mine.last_used)
            self._devices[key] = device
            if device.host:
                listen_on(device.host)  # its cookie goes there: a reply's link to that host stays text

    def _fresh(self) -> None:
        if self.store.stamp() != self._stamp:
            self.load()

    async def _write(self, edit: Callable[[list[Device]], list[Device]]) -> None:
        """Edit the store (in a thread, under its lock) and take what it holds now; one write at a time, so results
        are taken in the order they were written."""
        if self._writing is None:
            self._writing = asyncio.Lock()
        async with self._writing:
            devices = await asyncio.to_thread(self.store.change, edit)
            self.take(self.store.written, devices)

    async def start(self, name: str, host: str) -> WebSession:
        """Sign a new device in (the least recently used one is signed out past MAX_SESSIONS)."""
        token = secrets.token_urlsafe(32)
        now = self.clock()
        device = Device("", token_hash(token), name[:80], now, now, host[:300])

        def add(devices: list[Device]) -> list[Device]:
            live = [d for d in devices if not d.expired(now, self.idle)]
            while live and len(live) >= MAX_SESSIONS:
                live.remove(min(live, key=lambda d: d.last_used))
            device.id = new_id({d.id for d in live})
            return [*live, device]

        await self._write(add)
        return WebSession(token, csrf_for(token), device)

    def get(self, token: str | None) -> WebSession | None:
        """The session of a cookie's token, counted as a use (None when signed out, expired or unknown)."""
        key = token_hash(token or "")
        if not token or not self._alive(key):
            return None
        device = self._devices[key]
        device.last_used = max(device.last_used, self.clock())
        return WebSession(token, csrf_for(token), device)

    def alive(self, token: str) -> bool:
        """Whether the token's device is still signed in (ending it now if it expired), without counting as a use."""
        return bool(token) and self._alive(token_hash(token))

    def _alive(self, key: str) -> bool:
        self._fresh()
        device = self._devices.get(key)
        if device is not None and device.expired(self.clock(), self.idle):
            self.end(key)
            return False
        return device is not None

    def devices(self) -> list[Device]:
        """The devices signed in, the most recently used first."""
        self._fresh()
        now = self.clock()
        return sorted((d for d in self._devices.values() if not d.expired(now, self.idle)), key=lambda d: -d.last_used)

    def end(self, key: str) -> None:
        """Sign the device out here, its streams at once (the store is written by `revoke` or the next `flush`)."""
        self._devices.pop(key, None)
        self._written.pop(key, None)
        for ender in self._enders.pop(key, set()):
            ender()

    async def revoke(self, device_id: str) -> bool:
        """Sign a device out everywhere (the app's devices page, sign-out); False when no device has that id."""
        keys = [key for key, d in self._devices.items() if d.id == device_id]
        for key in keys:
            self.end(key)
        found = bool(keys)

        def remove(devices: list[Device]) -> list[Device]:
            nonlocal found
            found = found or any(d.id == device_id for d in devices)
            return [d for d in devices if d.id != device_id]

        await self._write(remove)
        return found

    async def flush(self) -> None:
        """Write the last uses that changed since the file last had them (and drop expired devices)."""
        due = {key: d.last_used for key, d in self._devices.items() if d.last_used > self._written.get(key, 0.0)}
        if not due:
            return
        now = self.clock()

        def touch(devices: list[Device]) -> list[Device]:
            for device in devices:
                device.last_used = max(device.last_used, due.get(device.hash, 0.0))
            return [d for d in devices if not d.expired(now, self.idle)]

        await self._write(touch)

    def on_end(self, token: str, ender: Callable[[], None]) -> Callable[[], None]:
        """Call `ender` when the token's session ends; the function returned forgets it (the stream ended first)."""
        key = token_hash(token)
        if key not in self._devices:
            ender()
            return lambda: None
        self._enders.setdefault(key, set()).add(ender)
        return lambda: self._enders.get(key, set()).discard(ender)


class WebAuth:
    """The gateway's sign-in state (codes in memory, devices in `store`: in memory only when None) and the aiohttp
    pieces that enforce it. `admit(request)` is called for each request that proved who it is (the HTTP side counts
    its connection; it may refuse with a response). `clock` (for tests) replaces both the codes' monotonic clock
    and the devices' wall clock."""

    def __init__(self, clock: Callable[[], float] | None = None, store: DeviceStore | None = None,
                 idle_days: float = 30):
        self.codes = SignInCodes(clock or time.monotonic)
        self.sessions = WebSessions(store or MemoryStore(), clock or time.time, idle_days * DAY)
        self.admit: Callable[[web.Request], None] = lambda request: None

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self.middleware)
        app.on_response_prepare.append(security_headers)
        app.cleanup_ctx.append(self._kept)
        app.router.add_get("/signin/{code}", self.signin)
        app.router.add_get("/api/session", self.session_info)
        app.router.add_post("/api/signout", self.signout)

    async def _kept(self, app: web.Application) -> AsyncIterator[None]:
        """While the listener runs: the devices signed in before are read, and last uses written every FLUSH_EVERY
        seconds (and once more when it stops)."""
        store = self.sessions.store
        self.sessions.take(*await asyncio.to_thread(lambda: (store.stamp(), store.read())))
        task = asyncio.create_task(self._flushing())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            with contextlib.suppress(OSError, TimeoutError):
                await self.sessions.flush()

    async def _flushing(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY)
            try:
                await self.sessions.flush()
            except (OSError, TimeoutError) as e:  # the next round tries again; a sign-in says it to the person
                log.warning(json.dumps({"event": "web_devices_not_written", "error": str(e)[:200]}))

    @staticmethod
    def cookie_name(request: web.Request) -> str:
        """One cookie per listening port: cookies ignore ports, and two gateways (two homes) on one host must not
        clash. The port is the listener's own, whatever Host a proxy sends."""
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        port = sockname[1] if isinstance(sockname, tuple) and len(sockname) > 1 else 0
        return f"nanoagent-{port}"

    def hold(self, request: web.Request, ender: Callable[[], None]) -> tuple[Callable[[], bool], Callable[[], None]]:
        """For an event stream: `ender` runs the moment the request's web session signs out, expires, is revoked or
        evicted; `alive()` rechecks it (each keep-alive tick); `release()` when the stream ends by itself."""
        token = request.cookies.get(self.cookie_name(request), "")
        release = self.sessions.on_end(token, ender)
        return (lambda: self.sessions.alive(token)), release

    def session_of(self, request: web.Request) -> WebSession | None:
        """The signed-in session a request's cookie names (always one past the middleware, but for `/v1/`)."""
        return self.sessions.get(request.cookies.get(self.cookie_name(request)))

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        refused = self.refused(request)
        if refused is not None:
            return refused
        if self.guarded(request):
            self.admit(request)
        return await handler(request)

    @staticmethod
    def guarded(request: web.Request) -> bool:
        """Whether the route needs a signed-in session (all but `/health`, `/v1/...`, the sign-in link and a channel's
        own routes under `/channels/`, which check the app's signature themselves, `/mcp`, which keeps its token), and
        the home-screen manifest and icons (a browser fetches those without the cookie when it installs the app; they
        hold nothing private)."""
        path = request.path
        return not (path in ("/health", "/v1", "/mcp") or path in PUBLIC_STATIC
                    or path.startswith(("/v1/", "/signin/", "/channels/")))

    def refused(self, request: web.Request) -> web.Response | None:
        """The 401 (no session) or 403 (a failed CSRF check) a guarded request gets, or None. The middleware asks,
        and so does the HTTP side before it answers `Expect: 100-continue` (a refused body is never read)."""
        if not self.guarded(request):
            return None
        session = self.session_of(request)
        if session is None:
            return refusal(request, 401, "Not signed in (or the sign-in has expired)")
        if request.method in UNSAFE_METHODS:
            problem = _csrf_problem(request, session)
            if problem:
                return refusal(request, 403, problem)
        return None

    async def signin(self, request: web.Request) -> web.StreamResponse:
        if not self.codes.valid(request.match_info["code"]):
            return refusal(request, 403, "This sign-in link is wrong, used already or older than a minute")
        self.admit(request)  # first: a refusal (503, too many clients) leaves the link good for another try
        if not self.codes.redeem(request.match_info["code"]):
            return refusal(request, 403, "This sign-in link is wrong, used already or older than a minute")
        listen_on(request.host)  # the cookie's host: a reply's link to it (any port) stays text from now on
        try:
            session = await self.sessions.start(device_name(request.headers.get("User-Agent", "")), request.host)
        except (OSError, TimeoutError) as e:
            return refusal(request, 503, f"This device could not be recorded ({e}); run `nanoagent web` again")
        response = web.Response(status=303, headers={"Location": "/"})
        self._cookie(request, response, session.id)
        return response

    def _cookie(self, request: web.Request, response: web.StreamResponse, token: str) -> None:
        """The session cookie, kept by the browser as long as the device may stay unused (each visit renews it)."""
        response.set_cookie(self.cookie_name(request), token, path="/", httponly=True, samesite="Strict",
                            secure=is_https(request), max_age=int(self.sessions.idle))

    async def session_info(self, request: web.Request) -> web.StreamResponse:
        session = self.session_of(request)
        assert session is not None  # the middleware let it through
        response = web.json_response({"csrf": session.csrf, "signed_in": True, "device": session.device.id})
        self._cookie(request, response, session.id)
        return response

    async def signout(self, request: web.Request) -> web.StreamResponse:
        session = self.session_of(request)
        assert session is not None
        await self.sessions.revoke(session.device.id)
        response = web.json_response({"signed_out": True})
        response.del_cookie(self.cookie_name(request), path="/")
        return response


def _csrf_problem(request: web.Request, session: WebSession) -> str:
    origin = request.headers.get("Origin")
    if origin is not None and origin != own_origin(request):
        return "A request from another site (its Origin is not this page's) is refused"
    given = request.headers.get(CSRF_HEADER, "")
    if not given or not hmac.compare_digest(given.encode(), session.csrf.encode()):
        return f"The {CSRF_HEADER} header is missing or wrong; reload the page"
    return ""


def is_https(request: web.Request) -> bool:
    """The page came over HTTPS: TLS here, or a reverse proxy on this machine that says so (X-Forwarded-Proto).
    The header is believed only from a loopback peer: anyone else could send it."""
    if request.secure:
        return True
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return forwarded == "https" and _loopback_peer(request)


def _loopback_peer(request: web.Request) -> bool:
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        return False


def own_origin(request: web.Request) -> str:
    return f"{'https' if is_https(request) else 'http'}://{request.host}"


def refusal(request: web.Request, status: int, why: str) -> web.Response:
    """401/403 as JSON for /api/*, else the small page that says how to sign in."""
    if request.path.startswith("/api/"):
        return web.json_response({"error": f"{why}: {SIGN_IN_HINT}."}, status=status)
    page = PAGE.format(why=html.escape(why))
    return web.Response(status=status, text=page, content_type="text/html")


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>nanoagent: sign in</title></head>
<body><main><h1>nanoagent</h1><p>{why}.</p>
<p>To open the app, run <code>nanoagent web</code> on the machine the gateway runs on: it opens a sign-in link
(good once, for one minute) in your browser and prints it.</p></main></body></html>
"""


def secure_headers(headers: MutableMapping[str, str]) -> None:
    """The headers every response carries, also the ones aiohttp answers by itself (a request it cannot parse)."""
    headers.setdefault("Content-Security-Policy", CSP)
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "no-referrer")
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("Cache-Control", "no-store")
    headers["Server"] = "nanoagent"  # not aiohttp's name and version


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every response, just before its headers go out (streams included)."""
    headers = response.headers
    secure_headers(headers)
    if request.path.startswith("/static/") and response.status == 200:
        headers["Cache-Control"] = f"private, max-age={STATIC_MAX_AGE}"
    else:
        headers["Cache-Control"] = "no-store"


__all__ = ["CODE_TTL", "CSP", "CSRF_HEADER", "WebAuth", "WebSession", "is_https", "own_origin", "refusal", "secure_headers"]
