"""The gateway's HTTP listener (`gateway.http`, off by default; `nanoagent web` turns it on on loopback), on
aiohttp.web: the web app under `/` (`nanoagent.web`: sign-in, cookie sessions, the app's pages) and the
OpenAI-compatible endpoint under `/v1/`: a channel for Open WebUI, the openai SDK and anything else that speaks
Chat Completions. See docs/gateway.md, "OpenAI-compatible endpoint" and "The web app".

- `POST /v1/chat/completions` (streamed as server-sent events or one JSON reply), `GET /v1/models`, and
  `GET /health` (no token; says only that it is up). `/mcp` is the MCP server of `nanoagent mcp serve`
  (`nanoagent/mcp/serve/http.py`).
- Every other `/v1/` request, and `/mcp`, needs `Authorization: Bearer <token>`, the token in `run/http-token`
  (0600, made at the first start). A token in the URL is refused: URLs end up in logs and browser histories.
- The agent keeps each session's history itself, so only the LAST user message of a request is sent; the
  session is `http:<name>` from the `X-Nanoagent-Session` header, else the `user` field, else `http:default`.
  With `"incognito": true` (or `X-Nanoagent-Incognito: 1`) it is `http:<name>:incognito`, a temporary session.
- The last user message's `text` parts and `image_url` parts (base64 data: URLs, stored under media/) go to
  the agent; `tools` is refused (400); system messages are ignored, said in the X-Nanoagent-Ignored header.
  A reply's text is the same streamed or not.
- Nobody can approve a command over HTTP: commands that need approval are refused. Tool activity is not
  content: a stream carries it as comment lines. A client that goes away cancels the turn it started (what
  closing an OpenAI stream does); a message that joined a running turn is answered with a short note.
- The doors: a connection holds one of MAX_CONNECTIONS slots only once it proved who it is (the token, a session
  cookie, a sign-in code); until then it has AUTH_DEADLINE seconds, and past MAX_UNAUTHENTICATED such connections
  the oldest is dropped, so silent connections never keep out a real client. Event streams of the app are counted
  apart (MAX_STREAMS, the oldest dropped beyond). Bodies over MAX_BODY are refused (413) before they are read, and a
  body that stalls (no byte for `web.api_chat.BODY_IDLE` seconds) is answered 408.
- Only known hosts (`Hosts`): a request whose Host is not a loopback name or address, the configured host, the
  address it reached (one of this machine's), this machine's name when bound to every address, or one of
  `gateway.http.allowedHosts` is refused (421) before anything else, its body unread: a page on another site whose
  name was made to resolve here (DNS rebinding) reaches nothing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nanoagent.agent import events as ev
from nanoagent.attachments import AttachmentError, sniff, store_image
from nanoagent.config.schema import Config, HttpConfig
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import fsync_dir, private_dir
from nanoagent.gateway.hub import Hub, HubClosed
from nanoagent.gateway.server import Component
from nanoagent.linkhost import is_loopback
from nanoagent.mcp.serve.http import PATH as MCP_PATH
from nanoagent.mcp.serve.http import add_mcp
from nanoagent.messages import ImageBlock
from nanoagent.paths import Paths, check_session_key
from nanoagent.web.events import EventStream

if TYPE_CHECKING:
    from aiohttp.web_protocol import RequestHandler

    from nanoagent.gateway.server import Gateway
    from nanoagent.web.auth import WebAuth
    from nanoagent.web.context import WebContext

log = logging.getLogger("nanoagent.gateway.http")

TOKEN_FILE = "http-token"
TOKEN_HINT = "the token in $NANOAGENT_HOME/run/http-token"
QUERY_TOKEN_NAMES = {"api_key", "api-key", "apikey", "key", "token", "access_token", "auth", "authorization"}
MIN_TOKEN = 32  # characters a token needs to be served beyond loopback (a made one has 43)
MAX_CONNECTIONS = 64  # connections that proved who they are; one more is answered 503
MAX_UNAUTHENTICATED = 256  # connections yet to do so; beyond this the oldest of them is dropped
MAX_STREAMS = 256  # the app's open event streams; beyond this the oldest is dropped (its page reconnects)
AUTH_DEADLINE = 5.0  # seconds from connecting to an authenticated request; then the connection closes (408)
IDLE_TIMEOUT = 60.0  # seconds a kept-alive connection may wait for its next request
MAX_BODY = 10 * 1024 * 1024  # a request body's bytes; a longer one is refused (413) before it is read
KEEPALIVE = 15.0  # seconds of silence in a stream before a comment line keeps proxies from timing it out
JOINED = ("Your message joined the turn already running in session {key}; the reply to both comes in the "
          "response to the message that started it.")
NO_RETRY = {"x-should-retry": "false"}  # the openai SDK would send the message again: a second turn
_TIMEOUT_BODY = (b'{"error":{"message":"No authenticated request came in time; connect again.","type":'
                 b'"invalid_request_error","param":null,"code":null}}')
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY))


class HttpError(Exception):
    """A request answered with an error status, as an OpenAI-shaped error object; `close`: the connection ends."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None,
                 close: bool = False, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.close = close
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.code}}

    def response(self) -> web.Response:
        headers = {**self.headers, **({"WWW-Authenticate": "Bearer"} if self.status == 401 else {})}
        response = web.json_response(self.body(), status=self.status, headers=headers, dumps=_dumps)
        if self.close:
            response.force_close()
        return response


class ClientGone(Exception):
    """The HTTP client closed the connection (or stopped reading) before its reply was complete."""


def load_token(path: Path) -> str:
    """The bearer token in `path`; made with `secrets.token_urlsafe(32)` when missing, written whole (a temp file
    linked into place, so a second starter cannot replace a token already in use) with mode 0600."""
    private_dir(path.parent)
    token = _read_token(path)
    if token:
        return token
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if path.exists():  # an empty file: replace it
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # made meanwhile by another start: keep that one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    fsync_dir(path.parent)
    token = _read_token(path)
    if not token:
        raise OSError(0, "it is empty", str(path))
    return token


def _read_token(path: Path) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            info = os.fstat(f.fileno())
            if stat.S_IMODE(info.st_mode) & 0o077:
                log.warning(_record("http_token_tightened", mode=oct(stat.S_IMODE(info.st_mode))))
                os.fchmod(f.fileno(), 0o600)
            return f.read().strip()
    except FileNotFoundError:
        return ""


def http_component(hub: Hub, paths: Paths, settings: HttpConfig,
                   listening: Callable[[str, int], None] = lambda host, port: None,
                   max_image_bytes: int = 5_000_000, *,
                   web_context: Callable[[], WebContext] | None = None) -> Component:
    """The listener as a gateway component. The token is read (or made) now, so a gateway that could not check
    tokens never starts: it stops with one line saying why. `listening` gets the address once bound."""
    token_file = paths.run_dir / TOKEN_FILE
    try:
        token = load_token(token_file)
    except (OSError, UnicodeDecodeError) as e:
        raise NanoagentError(_no_token(settings, token_file, e)) from None
    if len(token) < MIN_TOKEN:
        if not is_loopback(settings.host):
            raise NanoagentError(
                f"Refusing to serve HTTP on {settings.host}:{settings.port}, which is not loopback, with a "
                f"{len(token)}-character token in {token_file} (at least {MIN_TOKEN} are needed); delete that file "
                "and start again for a strong one, or set gateway.http.host to 127.0.0.1.")
        log.warning(_record("http_token_short", length=len(token),
                            fix="delete run/http-token and restart the gateway for a strong one"))
    endpoint = Endpoint(hub, token, hub.default_model, max_image_bytes,
                        Hosts(settings.host, settings.allowed_hosts))

    async def run() -> None:
        from nanoagent.web.auth import WebAuth
        from nanoagent.web.context import WebContext

        ctx = web_context() if web_context is not None else WebContext(hub, paths, Config(), WebAuth())
        await endpoint.serve(settings.host, settings.port, listening, ctx)

    return Component("http", run)


class Listener:
    """The gateway's HTTP listener and its sign-in state: on from the start (`gateway.http.enabled`: `component`),
    or turned on (loopback only) when `nanoagent web` asks (`signin`, the gateway protocol's request)."""

    def __init__(self, hub: Hub, paths: Paths, config: Config, start: Callable[[Component], bool],
                 gateway: Gateway | None = None):
        from nanoagent.web.auth import WebAuth
        from nanoagent.web.devices import DeviceStore

        self.hub = hub
        self.paths = paths
        self.config = config
        self.start = start
        self.gateway = gateway
        self.auth = WebAuth(store=DeviceStore(paths.web_devices_file),
                            idle_days=config.gateway.web.device_idle_days)
        self.address: tuple[str, int] | None = None
        self.started = False
        self._bound = asyncio.Event()

    def component(self, settings: HttpConfig) -> Component:
        self.started = True
        return http_component(self.hub, self.paths, settings, self._listening,
                              self.config.tools.attachments.max_image_bytes, web_context=self.context)

    def context(self) -> WebContext:
        """What the app's handlers reach; made as the listener starts, when the gateway is known: from then on its
        `devices_changed` (`nanoagent web revoke` in another process) has the devices file read again."""
        from nanoagent.web.context import WebContext

        if self.gateway is not None:
            self.gateway.devices_changed = self.auth.sessions.load
        return WebContext(self.hub, self.paths, self.config, self.auth, self.gateway)

    def _listening(self, host: str, port: int) -> None:
        self.address = (host, port)
        self._bound.set()

    async def signin(self, enable: bool) -> dict[str, Any]:
        """A one-time sign-in link: `{"url": ..., "remote": [...]}`, the link for this machine and the same code at
        each address another device may reach (`web.pairing.bases`; [] on loopback only). `{"off": true, "host",
        "port"}` when the listener is off and `enable` is false; with `enable` it is started first, on
        `gateway.http.host` (127.0.0.1 unless the person set another), until the gateway stops."""
        from nanoagent.web.pairing import bases

        settings = self.config.gateway.http
        port = settings.port
        if not self.started:
            if not enable:
                return {"off": True, "host": settings.host, "port": port}
            if not self.start(self.component(dataclasses.replace(settings, enabled=True))):
                raise NanoagentError("The gateway is stopping; start it again with `nanoagent gateway`.")
        try:
            async with asyncio.timeout(10):
                await self._bound.wait()
        except TimeoutError:
            raise NanoagentError(f"The gateway's HTTP listener did not start on port {port} (see the gateway's log: "
                                 "another program may hold the port); set gateway.http.port to a free one.") from None
        assert self.address is not None
        host, bound = self.address
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"  # `nanoagent web` runs on this machine
        shown = f"[{host}]" if ":" in host else host
        code = self.auth.codes.mint()
        remote = await asyncio.to_thread(bases, self.address[0], bound, settings.allowed_hosts)
        return {"url": f"http://{shown}:{bound}/signin/{code}", "remote": [f"{base}/signin/{code}" for base in remote]}


def _no_token(settings: HttpConfig, path: Path, error: Exception) -> str:
    why = f"{path}: {error.strerror}" if isinstance(error, OSError) and error.strerror else f"{path}: {error}"
    if not is_loopback(settings.host):
        return (f"Refusing to serve HTTP on {settings.host}:{settings.port}, which is not loopback, without a token "
                f"({why}); fix that file or its folder, or set gateway.http.host to 127.0.0.1.")
    return (f"Cannot start the HTTP endpoint: it needs a token and cannot read or make one ({why}); fix that file "
            "or its folder, or set gateway.http.enabled to false.")


class Hosts:
    """The names a request's Host may give (see the module's doc): loopback, the configured host, the address the
    connection reached, this machine's name when bound to every address, and `gateway.http.allowedHosts`."""

    def __init__(self, host: str = "127.0.0.1", allowed: list[str] | None = None):
        wildcard = host.strip("[]") in ("", "0.0.0.0", "::")
        self.names: set[str] = set()
        for name in ["localhost", host, *(allowed or []), *([socket.gethostname()] if wildcard else [])]:
            with contextlib.suppress(ValueError):
                self.names.add(_host_name(name))
        self.names.discard("")

    def allows(self, request: web.Request) -> bool:
        """No Host at all (HTTP/1.0) names nothing else: a browser always sends one."""
        if "Host" not in request.headers:
            return True
        try:
            name = _host_name(request.headers["Host"])
        except ValueError:
            return False
        if name in self.names:
            return True
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            return False
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        return ip.is_loopback or (isinstance(sockname, tuple) and ip == _plain(str(sockname[0])))

    def refusal(self, request: web.Request) -> HttpError:
        shown = request.headers.get("Host", "")[:100]
        return HttpError(421, f"This gateway does not answer to the host {shown!r}; to reach it by that name, add it "
                              "to gateway.http.allowedHosts and restart the gateway.", code="unknown_host", close=True)

    def all(self) -> list[str]:
        return sorted(self.names)


def _host_name(host: str) -> str:
    """A Host header (or a configured name) without its port, as a browser writes it: lower case, no final dot, an
    IPv6 address without brackets. ValueError for one no browser sends."""
    from nanoagent.linkhost import canonical_host

    text = host.strip()
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        if rest and not re.fullmatch(r":\d*", rest):
            raise ValueError(text)
        return str(_plain(inside))
    name = canonical_host(text.rsplit(":", 1)[0] if text.count(":") == 1 else text).rstrip(".")
    try:
        return str(_plain(name))
    except ValueError:
        return name


def _plain(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address, an IPv4 one mapped into IPv6 (a dual-stack socket's) read as IPv4."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return ip.ipv4_mapped or ip if isinstance(ip, ipaddress.IPv6Address) else ip


class Doors:
    """The connections of the listener and their slots (see the module's doc): each is waiting (yet to prove who
    it is, until its deadline), a client (one of MAX_CONNECTIONS) or, while an app's event stream runs on it, a
    stream (one of MAX_STREAMS)."""

    def __init__(self) -> None:
        self.waiting: dict[RequestHandler, asyncio.TimerHandle] = {}  # oldest first
        self.clients: set[RequestHandler] = set()
        self.streams: dict[RequestHandler, None] = {}  # oldest first
        self.busy: dict[RequestHandler, int] = {}  # requests being answered on each connection

    def arrived(self, connection: RequestHandler) -> None:
        """A connection was accepted (its transport is set): its deadline starts now and it counts at once."""
        loop = asyncio.get_running_loop()
        self.waiting[connection] = loop.call_later(AUTH_DEADLINE, self._expire, connection)
        if len(self.waiting) > MAX_UNAUTHENTICATED:
            oldest = next(iter(self.waiting))
            self.waiting.pop(oldest).cancel()
            _close(oldest)

    def left(self, connection: RequestHandler) -> None:
        """The connection closed: it holds nothing any more."""
        timer = self.waiting.pop(connection, None)
        if timer is not None:
            timer.cancel()
        self.clients.discard(connection)
        self.streams.pop(connection, None)
        self.busy.pop(connection, None)

    def _expire(self, connection: RequestHandler) -> None:
        if self.waiting.pop(connection, None) is None:
            return
        transport = connection.transport
        if transport is not None and not transport.is_closing():
            if not self.busy.get(connection):  # between requests, or mid-head: say why before closing
                transport.write(TIMEOUT_RESPONSE)
            transport.close()

    def admit(self, connection: RequestHandler) -> None:
        """The connection proved who it is: it takes a client's slot for the rest of its life (HttpError 503 when
        none is free)."""
        if connection in self.clients or connection in self.streams:
            return
        if len(self.clients) >= MAX_CONNECTIONS:
            raise HttpError(503, f"Too many connections ({MAX_CONNECTIONS} signed-in clients); try again shortly.",
                            kind="server_error", close=True, headers={"Retry-After": "1"})
        timer = self.waiting.pop(connection, None)
        if timer is not None:
            timer.cancel()
        self.clients.add(connection)

    def streaming(self, connection: RequestHandler) -> None:
        """An event stream of the app started on the connection: counted apart while it runs."""
        if connection not in self.clients:
            return
        self.clients.discard(connection)
        self.streams[connection] = None
        if len(self.streams) > MAX_STREAMS:
            oldest = next(iter(self.streams))
            del self.streams[oldest]
            _close(oldest)

    def streamed(self, connection: RequestHandler) -> None:
        if self.streams.pop(connection, 0) is None and connection.transport is not None:
            self.clients.add(connection)


def _handler_class(doors: Doors) -> type[RequestHandler]:
    """aiohttp's connection handler, told to `doors` when a connection is accepted and when it closes (so each gets
    its deadline and slot from its first moment), and whose own answer to a request it refuses before any route (a
    malformed line, a header too long) carries the app's security headers and `Server: nanoagent`, not aiohttp's and
    Python's versions. aiohttp has no setting for either, so `serve` gives each connection this subclass."""
    from aiohttp.web_protocol import RequestHandler

    from nanoagent.web.auth import secure_headers

    class NeutralHandler(RequestHandler):
        __slots__ = ()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            doors.arrived(self)

        def connection_lost(self, exc: BaseException | None) -> None:
            doors.left(self)
            super().connection_lost(exc)

        def handle_error(self, *args: Any, **kwargs: Any) -> web.StreamResponse:
            response = super().handle_error(*args, **kwargs)
            secure_headers(response.headers)
            return response

        def unread(self) -> None:
            """The request being answered is refused before its body: close once the answer is out. aiohttp would
            otherwise linger up to `lingering_time` reading a body the client never sends (it waits for a 100
            Continue), and its force_close would drop the unsent answer."""
            self._lingering_time = 0.0

    return NeutralHandler


def _unread(request: web.Request) -> None:
    """The connection closes once this answer is out, without lingering for a body that is not coming (see
    `_handler_class`'s `unread`); a connection of another handler lingers as aiohttp does."""
    unread = getattr(request.protocol, "unread", None)
    if unread is not None:
        unread()


def _close(connection: RequestHandler) -> None:
    if connection.transport is not None:
        connection.transport.close()


class Endpoint:
    def __init__(self, hub: Hub, token: str, model: str, max_image_bytes: int = 5_000_000, hosts: Hosts | None = None):
        self.hub = hub
        self.hosts = hosts or Hosts()
        self.max_image_bytes = max_image_bytes
        self.token = token.encode()
        self.model = model
        self.created = int(time.time())
        self.doors = Doors()

    def application(self, ctx: WebContext) -> web.Application:
        """The aiohttp application: the limits, the web app's auth and pages (`nanoagent.web`), the OpenAI routes."""
        from nanoagent.web.app import add_app
        from nanoagent.web.events import add_events

        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._limits], handler_args={})
        ctx.auth.admit = lambda request: self.doors.admit(request.protocol)
        ctx.auth.install(app)
        app.on_response_prepare.append(self._prepared)
        app.router.add_route("*", "/health", self._health)
        app.router.add_route("*", "/v1{tail:.*}", self._v1)
        add_app(app, ctx)
        add_channel_routes(app, ctx.config)
        add_mcp(app, ctx, self._admit_with_token)
        if not any(r.resource is not None and r.resource.canonical == "/api/events" for r in app.router.routes()):
            add_events(app, ctx)  # the app's live updates, unless the app serves its own
        auth = ctx.auth

        async def expect(request: web.Request) -> web.StreamResponse | None:
            return await self._expect(request, auth)

        for route in app.router.routes():  # aiohttp sets an expect handler per route only (add_route's argument)
            route._expect_handler = expect  # noqa: SLF001
        return app

    async def _expect(self, request: web.Request, auth: WebAuth) -> web.StreamResponse | None:
        """`Expect: 100-continue` (curl sends it for big bodies) is answered before any middleware runs: a body over
        its limit (413) or a request without its token or sign-in (401, 403) gets its refusal here, with no 100
        Continue and the connection closed, so its body is never read. Otherwise aiohttp's default: 100 Continue."""
        from aiohttp.web_urldispatcher import _default_expect_handler

        from nanoagent.web.api_chat import too_big

        length = request.content_length or 0
        refused: web.StreamResponse | None = None
        if not self.hosts.allows(request):
            refused = _answer(request, self.hosts.refusal(request))
        elif request.path == "/api/uploads" and length > self.max_image_bytes:
            refused = too_big(self.max_image_bytes)  # what the upload route says of an image over the cap
        elif length > MAX_BODY:
            refused = _answer(request, _too_large(length))
        elif request.path == "/v1" or request.path.startswith("/v1/") or request.path == MCP_PATH:
            try:
                self._check_token(request)
            except HttpError as e:
                refused = e.response()
        else:
            refused = auth.refused(request)
        if refused is not None:
            refused.force_close()  # what the client sends next would be the body: nothing more is read
            _unread(request)
            return refused
        await _default_expect_handler(request)
        return None

    async def serve(self, host: str, port: int, listening: Callable[[str, int], None], ctx: WebContext) -> None:
        """Listen until cancelled; then close every connection."""
        runner = web.AppRunner(self.application(ctx), handle_signals=False, access_log=None,
                               handler_cancellation=True, keepalive_timeout=IDLE_TIMEOUT, shutdown_timeout=1.0,
                               logger=_quiet())
        await runner.setup()
        handlers = runner.server
        assert handlers is not None

        handler_class = _handler_class(self.doors)

        def connection() -> RequestHandler:
            made = handlers()
            made.__class__ = handler_class  # slots: no attribute can say it instead
            return made

        try:
            server = await asyncio.get_running_loop().create_server(connection, host, port)
        except OSError as e:
            await runner.cleanup()
            log.error(_record("http_cannot_listen", host=host, port=port, error=e.strerror or type(e).__name__,
                              fix="set gateway.http.port to a free port or gateway.http.host to an address here"))
            raise
        bound = server.sockets[0].getsockname()[1]
        log.info(_record("http_listening", url=url(host, bound), loopback=is_loopback(host),
                         token_file="$NANOAGENT_HOME/run/http-token"))
        from nanoagent.linkhost import listen_on

        for name in [host, *self.hosts.all()]:  # a reply's link to these (any port) stays text: the cookie would go
            listen_on(name)
        try:
            listening(host, bound)
            await asyncio.Event().wait()  # until cancelled
        finally:
            server.close()
            for stream in list(self.doors.streams):  # they never end by themselves: their handlers stop now
                _close(stream)
            await runner.cleanup()

    # --- every request ---------------------------------------------------------------------------

    @web.middleware
    async def _limits(self, request: web.Request,
                              handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        connection = request.protocol
        busy = self.doors.busy
        busy[connection] = busy.get(connection, 0) + 1
        try:
            if not self.hosts.allows(request):
                raise self.hosts.refusal(request)
            if request.version < (1, 0) or request.version > (1, 1):
                raise HttpError(505, f"HTTP/{request.version[0]}.{request.version[1]} is not supported; use "
                                     "HTTP/1.1.", close=True)
            if "Transfer-Encoding" in request.headers and request.path.startswith("/v1"):
                raise HttpError(501, "Request bodies with Transfer-Encoding are not supported; send "
                                     "Content-Length.", close=True)
            if (request.content_length or 0) > MAX_BODY:
                raise _too_large(request.content_length or 0)
            return await handler(request)
        except HttpError as e:
            return _answer(request, e)
        finally:
            left = busy.pop(connection, 1) - 1  # none: the connection closed meanwhile (`Doors.left`)
            if left:
                busy[connection] = left
            self.doors.streamed(connection)

    async def _prepared(self, request: web.Request, response: web.StreamResponse) -> None:
        if response.content_type == "text/event-stream" and not request.path.startswith("/v1"):
            self.doors.streaming(request.protocol)
        if response.status == 408 and not response.keep_alive:  # a body that stopped coming: none to linger for
            _unread(request)


    async def _health(self, request: web.Request) -> web.StreamResponse:
        _allow(request.method, "GET")
        return _json({"status": "ok"})

    async def _v1(self, request: web.Request) -> web.StreamResponse:
        self._check_token(request)
        self.doors.admit(request.protocol)
        path, method = request.path.rstrip("/") or "/", request.method
        if path == "/v1/models":
            _allow(method, "GET")
            return _json({"object": "list", "data": self._models()})
        if path.startswith("/v1/models/"):
            _allow(method, "GET")
            found = [m for m in self._models() if m["id"] == path.removeprefix("/v1/models/")]
            if not found:
                raise HttpError(404, "No such model; GET /v1/models lists them.", code="model_not_found")
            return _json(found[0])
        if path == "/v1/chat/completions":
            _allow(method, "POST")
            return await self._chat(request)
        raise HttpError(404, f"Nothing at {path[:100]}; this endpoint serves POST /v1/chat/completions, "
                             "GET /v1/models and GET /health.", kind="not_found_error")

    def _admit_with_token(self, request: web.Request) -> None:
        self._check_token(request)
        self.doors.admit(request.protocol)

    def _check_token(self, request: web.Request) -> None:
        """A missing, wrong or misplaced token is a 401."""
        if any(name.lower() in QUERY_TOKEN_NAMES or hmac.compare_digest(value.encode(), self.token)
               for name, value in request.query.items()):
            raise HttpError(401, "A token in the URL is not accepted (URLs end up in logs); send it in the "
                                 "Authorization header instead: `Authorization: Bearer <token>`.",
                            kind="authentication_error", code="token_in_query")
        header = request.headers.get("Authorization", "")
        if not header:
            raise HttpError(401, f"Missing token: send `Authorization: Bearer <token>` with {TOKEN_HINT}.",
                            kind="authentication_error", code="missing_token")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
            raise HttpError(401, f"Wrong token: use {TOKEN_HINT}, as `Authorization: Bearer <token>`.",
                            kind="authentication_error", code="invalid_token")

    def _models(self) -> list[dict[str, Any]]:
        return [{"id": name, "object": "model", "created": self.created, "owned_by": "nanoagent"}
                for name in dict.fromkeys(["nanoagent", self.model])]

    # --- chat completions ------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        from nanoagent.web.api_chat import BodyStalled, read_body

        try:
            data = await read_body(request, MAX_BODY)
        except BodyStalled:
            raise HttpError(408, "The request's body stopped coming; send the request again.", close=True) from None
        if data is None:
            raise _too_large(request.content_length or MAX_BODY + 1)
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise HttpError(400, f"The body is not valid JSON ({e}); send a JSON object.") from None
        except RecursionError:
            raise HttpError(400, "The body's JSON is nested too deeply.") from None
        if not isinstance(body, dict):
            raise HttpError(400, "The body must be a JSON object with `messages`.")
        if body.get("tools") or body.get("functions"):
            raise HttpError(400, "`tools` are not taken: nanoagent runs its own tools and cannot call a client's; "
                                 "send the request without them.", code="unsupported_tools")
        said = UserInput.of(body.get("messages"))
        key = session_key(body.get("user"), request.headers.get("X-Nanoagent-Session"))
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise HttpError(400, "`stream` must be true or false.", code="invalid_stream")
        incognito = _incognito(body.get("incognito"), request.headers.get("X-Nanoagent-Incognito"))
        hub = self.hub
        if incognito:  # its own session beside the name's saved one, temporary: see docs/gateway.md
            try:
                key = check_session_key(f"{key}:incognito")
            except NanoagentError:
                raise HttpError(400, "The session name is too long for a temporary chat; use a shorter one.",
                                code="invalid_session") from None
            hub.start_incognito(key)
        images: list[ImageBlock] = []
        if said.images:
            try:
                hub.check_images(key, [])  # a model that takes none: refused before anything is stored
            except AttachmentError as e:
                raise HttpError(400, str(e), code="invalid_image") from None
            images = await asyncio.to_thread(said.store, hub.workspace, self.max_image_bytes)
        reply = Reply(f"chatcmpl-{secrets.token_hex(12)}", hub.model_for(hub.session(key)), int(time.time()))
        headers = {"X-Nanoagent-Ignored": "system"} if said.system else {}
        if incognito:
            headers["X-Nanoagent-Incognito"] = "temporary chat: not archived, Dreamed or searchable; deleted when it ends"
        if stream:
            return await self._stream(reply, request, key, said.text, images, headers)
        streamed = _Streamed()
        turn = await self._send(request, key, said.text, images, streamed.sink(lambda text: None), None)
        if turn is not None and turn.result is not None and turn.result.error is not None:
            raise HttpError(502, turn.reply, kind="server_error", code="turn_failed", headers=NO_RETRY)
        streamed.missing(JOINED.format(key=key) if turn is None else turn.reply)  # the same text a stream shows
        return _json(reply.completion(streamed.text, turn), headers=headers)

    async def _stream(self, reply: Reply, request: web.Request, key: str, text: str, images: list[ImageBlock],
                      headers: dict[str, str]) -> web.StreamResponse:
        out = await EventStream.open(request, headers)
        out.data(reply.chunk({"role": "assistant", "content": ""}))
        streamed = _Streamed(lambda name: out.comment(f"tool {name}"))
        on_event = streamed.sink(lambda text: out.data(reply.chunk({"content": text})))
        try:
            turn = await self._send(request, key, text, images, on_event, out)
        except HttpError as e:
            out.data(e.body())
        except ClientGone:
            return out.response
        else:
            if turn is not None and turn.result is not None and turn.result.error is not None:
                out.data(HttpError(502, turn.reply, kind="server_error", code="turn_failed").body())
            else:
                missing = JOINED.format(key=key) if turn is None else streamed.missing(turn.reply)
                if missing:
                    out.data(reply.chunk({"content": missing}))
                out.data(reply.chunk({}, finish=reply.finish_reason(turn), usage=reply.usage(turn)))
        out.data("[DONE]")
        await out.end()
        return out.response

    async def _send(self, request: web.Request, key: str, text: str, images: list[ImageBlock],
                    on_event: ev.EventSink, out: EventStream | None) -> ev.TurnResult | None:
        """hub.send for one request, watching its client: a stream `out` is flushed as events come and gets a
        comment line every KEEPALIVE seconds of silence. A client that goes away (its connection closed: aiohttp
        cancels the handler; or a stream it stopped reading) cancels the turn it started; a turn that could not
        run is an HttpError. None: the message joined the session's running turn."""
        watch = _TurnWatch(on_event)
        send = asyncio.create_task(self.hub.send(key, text, sink=watch, ask=None, images=images or None),
                                   name=f"http {key}")
        try:
            while not send.done():
                if out is None:
                    await asyncio.wait({send})
                    continue
                added = asyncio.create_task(out.wait(KEEPALIVE))
                done, _ = await asyncio.wait({send, added}, return_when=asyncio.FIRST_COMPLETED)
                added.cancel()
                if not out.pending and send not in done:
                    out.comment("keep-alive")
                if not await out.flush():
                    raise ClientGone
        except (asyncio.CancelledError, ClientGone):
            if _client_gone(request, out) and watch.running and not send.done():
                self.hub.cancel(key)
            raise
        finally:
            if not send.done():
                send.cancel()  # our wait only: the turn belongs to the hub
            await asyncio.gather(send, return_exceptions=True)
        if send.cancelled():
            raise HttpError(503, "The turn was stopped before it finished (/stop, or the gateway is shutting down).",
                            kind="server_error", code="turn_cancelled", headers=NO_RETRY)
        try:
            return send.result()
        except HubClosed as e:
            raise HttpError(503, str(e), kind="server_error", code="shutting_down") from None
        except AttachmentError as e:  # a model that takes no images, an image that changed meanwhile
            raise HttpError(400, str(e), code="invalid_image") from None
        except NanoagentError as e:
            raise HttpError(500, str(e), kind="server_error", headers=NO_RETRY) from None
        except Exception as e:  # noqa: BLE001 - the client gets a reply; the log gets the kind of failure
            log.error(_record("http_turn_failed", error=type(e).__name__))
            raise HttpError(500, f"The turn failed inside the gateway ({type(e).__name__}); see the gateway's log.",
                            kind="server_error", headers=NO_RETRY) from None


def _client_gone(request: web.Request, out: EventStream | None) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing() or (out is not None and out.gone)


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(data, status=status, headers=headers, dumps=_dumps)


def _too_large(length: int) -> HttpError:
    return HttpError(413, f"The body is {length:,} bytes, over the limit of {MAX_BODY // (1024 * 1024)} MB; send a "
                          "smaller one.", code="body_too_large", close=True)


def _answer(request: web.Request, error: HttpError) -> web.Response:
    """A refusal of the limits: OpenAI-shaped under /v1 and /health, as the app's API answers elsewhere."""
    if not request.path.startswith(("/v1", "/health")) and error.status in (408, 413, 421, 503):
        return _app_error(error)
    return error.response()


def _app_error(error: HttpError) -> web.Response:
    """A refusal of the limits for the app's routes: `{"error": "..."}`, as the app's API answers."""
    response = web.json_response({"error": error.message}, status=error.status, headers=error.headers)
    if error.close:
        response.force_close()
    return response


def _quiet() -> logging.Logger:
    """aiohttp's own logger for the listener: a malformed request is the client's problem, not a traceback in the
    gateway's log (it is answered 400); the handlers log what matters as structured lines."""
    quiet = logging.getLogger("nanoagent.gateway.http.wire")
    quiet.setLevel(logging.CRITICAL)
    return quiet


@dataclass
class Reply:
    """The ids and shapes of one chat completion, whole or as chunks."""

    id: str
    model: str
    created: int

    def completion(self, content: str, turn: ev.TurnResult | None) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": self.finish_reason(turn), "logprobs": None}],
                "usage": self.usage(turn)}

    def chunk(self, delta: dict[str, Any], finish: str | None = None,
              usage: dict[str, Any] | None = None) -> dict[str, Any]:
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        return chunk if usage is None else {**chunk, "usage": usage}

    @staticmethod
    def finish_reason(turn: ev.TurnResult | None) -> str:
        run = turn.result if turn is not None else None
        return "length" if run is not None and run.stop is ev.StopReason.MAX_TOKENS else "stop"

    @staticmethod
    def usage(turn: ev.TurnResult | None) -> dict[str, Any]:
        """The turn's tokens over all its model calls (zero for a slash command or a joined message)."""
        run = turn.result if turn is not None else None
        if run is None:
            return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        used = run.usage
        return {"prompt_tokens": used.prompt_tokens, "completion_tokens": used.output_tokens,
                "total_tokens": used.prompt_tokens + used.output_tokens,
                "prompt_tokens_details": {"cached_tokens": used.cache_read_tokens}}


class _TurnWatch:
    """The sink of one request: passes events on and notes whether the turn it started is running."""

    def __init__(self, sink: ev.EventSink):
        self.sink = sink
        self.running = False

    def __call__(self, event: ev.Event) -> None:
        if not event.agent and isinstance(event, ev.TurnStarted | ev.TurnEnded):
            self.running = isinstance(event, ev.TurnStarted)
        self.sink(event)


class _Streamed:
    """The text of one reply as a stream shows it: a break between the text before and after tool calls (or a
    message that joined the turn), and at the end what did not stream (a slash command's answer). A reply without streaming is the same text."""

    def __init__(self, tool: Callable[[str], None] = lambda name: None) -> None:
        self.text = ""
        self.after_tool = False
        self.tool = tool

    def sink(self, write: Callable[[str], None]) -> ev.EventSink:
        """The events of the turn: its text goes to `write`, piece by piece, as it is added."""

        def on_event(event: ev.Event) -> None:
            if event.agent:
                return  # a sub-agent's work is tool activity of this turn
            if isinstance(event, ev.TextDelta) and event.text:
                write(self.add(event.text))
            elif isinstance(event, ev.ToolStarted):
                self.tool(event.name)
                self.after_tool = True
            elif isinstance(event, ev.Injected):
                self.after_tool = True  # the model answers again, the joined message too: a paragraph of its own

        return on_event

    def add(self, text: str) -> str:
        if self.after_tool and self.text and not self.text.endswith("\n\n"):
            text = ("\n" if self.text.endswith("\n") else "\n\n") + text
        self.after_tool = False
        self.text += text
        return text

    def missing(self, reply: str) -> str:
        if not reply.strip() or self.text.rstrip().endswith(reply.strip()):
            return ""
        return self.add(("\n\n" if self.text else "") + reply)


@dataclass
class UserInput:
    """What a request says for the agent: the last user message's text and images (data: URLs, decoded, not yet
    stored); `system`: the request carried system messages, which the agent does not take (it has its own
    prompt, from the workspace), said in the reply's X-Nanoagent-Ignored header."""

    text: str
    images: list[tuple[bytes, str]]  # (bytes, media type)
    system: bool

    @classmethod
    def of(cls, messages: Any) -> UserInput:
        """The agent keeps the session's history itself, so the last user message is all it needs."""
        if not isinstance(messages, list) or not messages:
            raise HttpError(400, "`messages` must be a non-empty list.", code="invalid_messages")
        system = any(isinstance(m, dict) and m.get("role") in ("system", "developer") for m in messages)
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                text, images = _parts(message.get("content"))
                if not text.strip():
                    raise HttpError(400, "The last user message has no text; nanoagent answers text (send images "
                                         "with some).", code="invalid_messages")
                return cls(text, images, system)
        raise HttpError(400, "No user message in `messages`; nanoagent answers the last one.",
                        code="invalid_messages")

    def store(self, workspace: Path, max_bytes: int) -> list[ImageBlock]:
        """The images kept under the workspace's media/, as references for the turn (413 for one too large)."""
        for data, _ in self.images:
            if len(data) > max_bytes:
                raise HttpError(413, f"An image is {len(data):,} bytes, over the {max_bytes:,} limit "
                                     "(tools.attachments.maxImageBytes).", code="image_too_large")
        return [store_image(workspace, data, media_type, "image") for data, media_type in self.images]


def _parts(content: Any) -> tuple[str, list[tuple[bytes, str]]]:
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise HttpError(400, "A message's `content` must be a string or a list of parts.", code="invalid_messages")
    texts, images = [], []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            images.append(_image(part.get("image_url")))
        else:
            raise HttpError(400, f"A content part of type {str(kind)[:40]!r} is not taken; nanoagent takes `text` "
                                 "and `image_url` (a data: URL) parts.", code="unsupported_content")
    return "\n".join(texts), images


def _image(value: Any) -> tuple[bytes, str]:
    """An image_url part's image: a base64 data: URL of a PNG, JPEG, GIF or WebP image."""
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url.startswith("data:"):
        raise HttpError(400, "Images must come as data: URLs (`data:image/png;base64,...`); nanoagent does not "
                             "fetch image URLs.", code="invalid_image")
    head, comma, payload = url.partition(",")
    try:
        if not comma or not head.endswith(";base64"):
            raise ValueError
        data = base64.b64decode(payload, validate=True)
    except (ValueError, binascii.Error):
        raise HttpError(400, "An image's data: URL is not base64 (`data:image/png;base64,...`).",
                        code="invalid_image") from None
    media_type = sniff(data[:16])
    if media_type is None:
        raise HttpError(400, "An image is not a PNG, JPEG, GIF or WebP image; only those go to the model.",
                        code="invalid_image")
    return data, media_type


def _incognito(field: Any, header: str | None) -> bool:
    """A temporary chat was asked for: `"incognito": true` in the body, or the X-Nanoagent-Incognito header."""
    if field is not None and not isinstance(field, bool):
        raise HttpError(400, "`incognito` must be true or false.", code="invalid_incognito")
    if header is not None and header.strip().lower() not in ("1", "true", "yes", "0", "false", "no", ""):
        raise HttpError(400, "X-Nanoagent-Incognito must be 1 or 0.", code="invalid_incognito")
    return bool(field) or (header is not None and header.strip().lower() in ("1", "true", "yes"))


def session_key(user: Any, header: str | None) -> str:
    """`http:<name>`: the name from the X-Nanoagent-Session header, else a string `user` field, else `default`."""
    name = header.encode("latin-1").decode("utf-8", errors="replace") if header else user
    if not isinstance(name, str) or not name.strip():
        name = "default"
    name = name.strip()
    key = f"http:{name}"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise HttpError(400, "The session name (X-Nanoagent-Session or `user`) must be a short line of text.",
                        code="invalid_session")
    try:
        return check_session_key(key)
    except NanoagentError as e:
        raise HttpError(400, f"{str(e)[:-1]} in X-Nanoagent-Session or `user`.", code="invalid_session") from None




def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise HttpError(405, f"Use {allowed} here.", code="method_not_allowed", headers={"Allow": allowed})


def _record(event: str, **fields: Any) -> str:
    """A structured log line; never a token or message contents."""
    return json.dumps({"event": event, **fields}, ensure_ascii=False)


def url(host: str, port: int) -> str:
    """The endpoint's base URL, as clients are given it."""
    shown = f"[{host}]" if ":" in host else host or "*"
    return f"http://{shown}:{port}/v1"


__all__ = ["Endpoint", "HttpError", "Listener", "http_component", "is_loopback", "load_token", "url"]


CHANNEL_PREFIX = "/channels/"  # a channel's own routes (`Channel.routes`): `/channels/<name>/<path>`


def add_channel_routes(app: web.Application, config: Config) -> None:
    """The routes each enabled channel declares (an app that posts to a webhook), under `/channels/<name>/`. They need
    no token and no sign-in (the app cannot have either): each handler checks the app's signature before anything
    else. The Host allow-list and the connection limits hold for them as for every route."""
    import nanoagent.channels.registry as registry

    for name in registry.names():
        channel = registry.get(name)
        settings = channel.settings(config)
        if not settings.enabled:
            continue
        for route in getattr(channel, "routes", lambda settings: [])(settings):
            app.router.add_route(route.method, f"{CHANNEL_PREFIX}{name}/{route.path.lstrip('/')}", route.handler)

