"""Who may use the web app: one-time sign-in codes, cookie sessions, the CSRF check and the security headers.

- `nanoagent web` asks the gateway (over its socket) for a sign-in code: single use, valid CODE_TTL seconds, kept
  in the gateway's memory only. `GET /signin/<code>` turns it into a session cookie (HttpOnly, SameSite=Strict,
  Secure when the page came over HTTPS) and redirects to `/`; the code and the cookie never hold the API token.
- Every route but `/signin/<code>`, `/health` and `/v1/*` (which keep their bearer token) needs the cookie: without
  it `/api/*` answers 401 JSON `{"error": ...}` and a page answers a small page that says to run `nanoagent web`.
- POST, PUT, PATCH and DELETE also need `X-CSRF-Token` equal to the `csrf` of `GET /api/session`, and an `Origin`,
  when sent, equal to the page's own origin.
- Every response says `Content-Security-Policy` (no inline script or style, nothing from another origin),
  `Cache-Control: no-store` (`private` under /static/: never in a shared proxy), `nosniff`, `no-referrer`.
Sessions live in the gateway's memory: a restart signs every browser out (run `nanoagent web` again).
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass

from aiohttp import web

from nanoagent.linkhost import listen_on

CODE_TTL = 60.0  # seconds a sign-in code is good for
SESSION_TTL = 7 * 24 * 3600.0  # seconds a browser stays signed in without using the app
MAX_CODES = 64  # codes waiting to be used; the oldest goes first
MAX_SESSIONS = 256  # signed-in browsers; the one unused longest is signed out first
STATIC_MAX_AGE = 300  # seconds a browser keeps /static/ files (never a shared cache: `private`)
CSRF_HEADER = "X-CSRF-Token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
PUBLIC_STATIC = frozenset({"/static/manifest.json", "/static/icon.svg", "/static/icon-192.png", "/static/icon-512.png"})
SIGN_IN_HINT = "run `nanoagent web` on the machine the gateway runs on; it opens a sign-in link"


@dataclass
class WebSession:
    id: str
    csrf: str
    last: float  # clock time of its last use


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
    """Signed-in browsers, by the random id in their cookie. A long-lived response (an event stream) registers an
    `ender` for its session: signing out, expiring or being evicted calls it at once, so the stream ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl: float = SESSION_TTL):
        self.clock = clock
        self.ttl = ttl
        self._sessions: dict[str, WebSession] = {}
        self._enders: dict[str, set[Callable[[], None]]] = {}

    def start(self) -> WebSession:
        if len(self._sessions) >= MAX_SESSIONS:
            self.end(min(self._sessions.values(), key=lambda s: s.last).id)
        session = WebSession(secrets.token_urlsafe(32), secrets.token_urlsafe(32), self.clock())
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> WebSession | None:
        session = self._sessions.get(session_id or "")
        if session is None or not self.alive(session.id):
            return None
        session.last = self.clock()
        return session

    def alive(self, session_id: str) -> bool:
        """Whether the session is still signed in (ending it now if it expired), without counting as a use."""
        session = self._sessions.get(session_id)
        if session is not None and self.clock() - session.last > self.ttl:
            self.end(session_id)
            return False
        return session is not None

    def end(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        for ender in self._enders.pop(session_id, set()):
            ender()

    def on_end(self, session_id: str, ender: Callable[[], None]) -> Callable[[], None]:
        """Call `ender` when the session ends; the function returned forgets it (the stream ended first)."""
        if session_id not in self._sessions:
            ender()
            return lambda: None
        self._enders.setdefault(session_id, set()).add(ender)
        return lambda: self._enders.get(session_id, set()).discard(ender)


class WebAuth:
    """The gateway's sign-in state (in memory) and the aiohttp pieces that enforce it. `admit(request)` is called
    for each request that proved who it is (the HTTP side counts its connection; it may refuse with a response)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.codes = SignInCodes(clock)
        self.sessions = WebSessions(clock)
        self.admit: Callable[[web.Request], None] = lambda request: None

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self.middleware)
        app.on_response_prepare.append(security_headers)
        app.router.add_get("/signin/{code}", self.signin)
        app.router.add_get("/api/session", self.session_info)
        app.router.add_post("/api/signout", self.signout)

    @staticmethod
    def cookie_name(request: web.Request) -> str:
        """One cookie per listening port: cookies ignore ports, and two gateways (two homes) on one host must not
        clash. The port is the listener's own, whatever Host a proxy sends."""
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        port = sockname[1] if isinstance(sockname, tuple) and len(sockname) > 1 else 0
        return f"nanoagent-{port}"

    def hold(self, request: web.Request, ender: Callable[[], None]) -> tuple[Callable[[], bool], Callable[[], None]]:
        """For an event stream: `ender` runs the moment the request's web session signs out, expires or is evicted;
        `alive()` rechecks it (each keep-alive tick); `release()` when the stream ends by itself."""
        session_id = request.cookies.get(self.cookie_name(request), "")
        release = self.sessions.on_end(session_id, ender)
        return (lambda: self.sessions.alive(session_id)), release

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
        own routes under `/channels/`, which check the app's signature themselves), and the home-screen manifest and
        icons (a browser fetches those without the cookie when it installs the app; they hold nothing private)."""
        path = request.path
        return not (path == "/health" or path == "/v1" or path in PUBLIC_STATIC
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
        session = self.sessions.start()
        listen_on(request.host)  # the cookie's host: a reply's link to it (any port) stays text from now on
        response = web.Response(status=303, headers={"Location": "/"})
        # no Max-Age or Expires: a browser-session cookie, gone when the browser closes (the gateway's session
        # also ends after SESSION_TTL unused)
        response.set_cookie(self.cookie_name(request), session.id, path="/", httponly=True, samesite="Strict",
                            secure=is_https(request))
        return response

    async def session_info(self, request: web.Request) -> web.StreamResponse:
        session = self.session_of(request)
        assert session is not None  # the middleware let it through
        return web.json_response({"csrf": session.csrf, "signed_in": True})

    async def signout(self, request: web.Request) -> web.StreamResponse:
        session = self.session_of(request)
        assert session is not None
        self.sessions.end(session.id)
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
