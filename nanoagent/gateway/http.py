"""The gateway's OpenAI-compatible endpoint (`gateway.http`, off by default): a channel for Open WebUI, the openai
SDK and anything else that speaks Chat Completions. See README "OpenAI-compatible endpoint".

- `POST /v1/chat/completions` (streamed as server-sent events or one JSON reply), `GET /v1/models`, and
  `GET /health` (no token; says only that it is up).
- Every other request needs `Authorization: Bearer <token>`, the token in `run/http-token` (0600, made at the
  first start). A token in the URL is refused: URLs end up in logs and browser histories.
- The agent keeps each session's history itself, so only the LAST user message of a request is sent; the
  session is `http:<name>` from the `X-Nanoagent-Session` header, else the `user` field, else `http:default`.
  With `"incognito": true` (or `X-Nanoagent-Incognito: 1`) it is `http:<name>:incognito`, a temporary session.
- The last user message's `text` parts and `image_url` parts (base64 data: URLs, stored under media/) go to
  the agent; `tools` is refused (400); system messages are ignored, said in the X-Nanoagent-Ignored header.
  A reply's text is the same streamed or not.
- Nobody can approve a command over HTTP: commands that need approval are refused. Tool activity is not
  content: a stream carries it as comment lines. A client that goes away cancels the turn it started (what
  closing an OpenAI stream does); a message that joined a running turn is answered with a short note.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import ipaddress
import json
import logging
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nanoagent.agent import events as ev
from nanoagent.attachments import AttachmentError, sniff, store_image
from nanoagent.config.schema import HttpConfig
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import fsync_dir, private_dir
from nanoagent.gateway import httpwire as wire
from nanoagent.gateway.httpwire import HttpError, Request
from nanoagent.gateway.hub import Hub, HubClosed
from nanoagent.gateway.server import Component
from nanoagent.messages import ImageBlock
from nanoagent.paths import Paths, check_session_key

log = logging.getLogger("nanoagent.gateway.http")

TOKEN_FILE = "http-token"
TOKEN_HINT = "the token in $NANOAGENT_HOME/run/http-token"
QUERY_TOKEN_NAMES = {"api_key", "api-key", "apikey", "key", "token", "access_token", "auth", "authorization"}
MIN_TOKEN = 32  # characters a token needs to be served beyond loopback (a made one has 43)
MAX_CONNECTIONS = 64  # connections that sent an authenticated request; one more is answered 503
MAX_UNAUTHENTICATED = 256  # connections yet to send one; beyond this the oldest of them is dropped
AUTH_DEADLINE = 5.0  # seconds from connecting to an authenticated request's headers; then the connection closes
KEEPALIVE = 15.0  # seconds of silence in a stream before a comment line keeps proxies from timing it out
JOINED = ("Your message joined the turn already running in session {key}; the reply to both comes in the "
          "response to the message that started it.")
NO_RETRY = {"x-should-retry": "false"}  # the openai SDK would send the message again: a second turn


class ClientGone(Exception):
    """The HTTP client closed the connection (or stopped reading) before its reply was complete."""


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches: 127.0.0.0/8, ::1, localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
                   max_image_bytes: int = 5_000_000) -> Component:
    """The endpoint as a gateway component. The token is read (or made) now, so a gateway that could not check
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
    endpoint = Endpoint(hub, token, hub.loop.models.default, max_image_bytes)
    return Component("http", lambda: endpoint.serve(settings.host, settings.port, listening))


def _no_token(settings: HttpConfig, path: Path, error: Exception) -> str:
    why = f"{path}: {error.strerror}" if isinstance(error, OSError) and error.strerror else f"{path}: {error}"
    if not is_loopback(settings.host):
        return (f"Refusing to serve HTTP on {settings.host}:{settings.port}, which is not loopback, without a token "
                f"({why}); fix that file or its folder, or set gateway.http.host to 127.0.0.1.")
    return (f"Cannot start the HTTP endpoint: it needs a token and cannot read or make one ({why}); fix that file "
            "or its folder, or set gateway.http.enabled to false.")


class Endpoint:
    def __init__(self, hub: Hub, token: str, model: str, max_image_bytes: int = 5_000_000):
        self.hub = hub
        self.max_image_bytes = max_image_bytes
        self.token = token.encode()
        self.model = model
        self.created = int(time.time())
        self._connections: set[asyncio.Task[None]] = set()
        # oldest first, each with its deadline and its writer (closing it ends the connection)
        self._unauthenticated: dict[asyncio.Task[None], tuple[float, asyncio.StreamWriter]] = {}
        self._authenticated: set[asyncio.Task[None]] = set()

    async def serve(self, host: str, port: int, listening: Callable[[str, int], None]) -> None:
        """Listen until cancelled; then close every connection."""
        try:
            server = await asyncio.start_server(self._connection, host, port, limit=wire.MAX_HEAD)
        except OSError as e:
            log.error(_record("http_cannot_listen", host=host, port=port, error=e.strerror or type(e).__name__,
                              fix="set gateway.http.port to a free port or gateway.http.host to an address here"))
            raise
        bound = server.sockets[0].getsockname()[1]
        log.info(_record("http_listening", url=url(host, bound), loopback=is_loopback(host),
                         token_file="$NANOAGENT_HOME/run/http-token"))
        try:
            listening(host, bound)
            await asyncio.Event().wait()  # until cancelled
        finally:
            server.close()
            for connection in list(self._connections):
                connection.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection. Until it sends an authenticated request it holds no slot: it must do so within
        AUTH_DEADLINE, and the oldest such connection is dropped when MAX_UNAUTHENTICATED wait, so silent or
        tokenless connections can never keep out a client with the token."""
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._unauthenticated[task] = (asyncio.get_running_loop().time() + AUTH_DEADLINE, writer)
        if len(self._unauthenticated) > MAX_UNAUTHENTICATED:
            oldest = next(iter(self._unauthenticated))
            self._unauthenticated.pop(oldest)[1].close()  # its reader sees the end: the connection ends quietly
        try:
            while await self._exchange(reader, writer, task):
                pass
            await wire.close(reader, writer)
        except asyncio.CancelledError:  # the endpoint is stopping: end quietly (asyncio's server would log a
            writer.close()              # cancelled connection as an unhandled exception, with a traceback)
        except ConnectionError:
            writer.close()
        except Exception as e:  # noqa: BLE001 - one connection's failure is that connection's alone
            log.error(_record("http_connection_failed", error=type(e).__name__))
            writer.close()
        finally:
            self._connections.discard(task)
            self._unauthenticated.pop(task, None)
            self._authenticated.discard(task)

    def _authenticate(self, task: asyncio.Task[None]) -> None:
        """The connection sent the token: it takes one of MAX_CONNECTIONS slots for the rest of its life."""
        if task in self._authenticated:
            return
        if len(self._authenticated) >= MAX_CONNECTIONS:
            raise HttpError(503, f"Too many connections ({MAX_CONNECTIONS} clients with the token); try again "
                                 "shortly.", kind="server_error", close=True, headers={"Retry-After": "1"})
        self._unauthenticated.pop(task, None)
        self._authenticated.add(task)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        task: asyncio.Task[None]) -> bool:
        """Answer one request; True when the connection stays open for the next."""
        request: Request | None = None
        try:
            waiting = self._unauthenticated.get(task)
            request = await wire.read_head(reader, waiting[0] if waiting else None)
            if request is None:
                return False
            refusal = self._refusal(request)
            if refusal is None and request.path != "/health":
                self._authenticate(task)
            if refusal is not None and request.expects_continue:
                refusal.close = True  # the client holds its body back until we say continue: answer and close
                raise refusal
            if not await wire.read_body(reader, writer, request):
                return False
            if refusal is not None:
                raise refusal
            return await self._route(request, reader, writer) and request.keep_alive
        except HttpError as e:
            close = e.close or request is None or not request.keep_alive
            headers = {**e.headers, **({"WWW-Authenticate": "Bearer"} if e.status == 401 else {})}
            await wire.send(writer, wire.response(e.status, e.body(), close=close, headers=headers))
            return not close
        except (ConnectionError, ClientGone):
            return False

    def _refusal(self, request: Request) -> HttpError | None:
        """Why a request is refused before its body is read: a missing, wrong or misplaced token."""
        if request.path == "/health":
            return None
        if any(name.lower() in QUERY_TOKEN_NAMES or hmac.compare_digest(value.encode(), self.token)
               for name, value in request.query):
            return HttpError(401, "A token in the URL is not accepted (URLs end up in logs); send it in the "
                                  "Authorization header instead: `Authorization: Bearer <token>`.",
                             kind="authentication_error", code="token_in_query")
        header = request.headers.get("authorization", "")
        if not header:
            return HttpError(401, f"Missing token: send `Authorization: Bearer <token>` with {TOKEN_HINT}.",
                             kind="authentication_error", code="missing_token")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
            return HttpError(401, f"Wrong token: use {TOKEN_HINT}, as `Authorization: Bearer <token>`.",
                             kind="authentication_error", code="invalid_token")
        return None

    async def _route(self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        path, method = request.path.rstrip("/") or "/", request.method
        if path == "/health":
            _allow(method, "GET")
            await wire.send(writer, wire.response(200, {"status": "ok"}))
        elif path == "/v1/models":
            _allow(method, "GET")
            await wire.send(writer, wire.response(200, {"object": "list", "data": self._models()}))
        elif path.startswith("/v1/models/"):
            _allow(method, "GET")
            found = [m for m in self._models() if m["id"] == path.removeprefix("/v1/models/")]
            if not found:
                raise HttpError(404, "No such model; GET /v1/models lists them.", code="model_not_found")
            await wire.send(writer, wire.response(200, found[0]))
        elif path == "/v1/chat/completions":
            _allow(method, "POST")
            return await self._chat(request, reader, writer)
        else:
            raise HttpError(404, f"Nothing at {path[:100]}; this endpoint serves POST /v1/chat/completions, "
                                 "GET /v1/models and GET /health.", kind="not_found_error")
        return True

    def _models(self) -> list[dict[str, Any]]:
        return [{"id": name, "object": "model", "created": self.created, "owned_by": "nanoagent"}
                for name in dict.fromkeys(["nanoagent", self.model])]

    # --- chat completions ------------------------------------------------------------------------

    async def _chat(self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        body = request.json()
        if not isinstance(body, dict):
            raise HttpError(400, "The body must be a JSON object with `messages`.")
        if body.get("tools") or body.get("functions"):
            raise HttpError(400, "`tools` are not taken: nanoagent runs its own tools and cannot call a client's; "
                                 "send the request without them.", code="unsupported_tools")
        said = UserInput.of(body.get("messages"))
        key = session_key(body.get("user"), request.headers.get("x-nanoagent-session"))
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise HttpError(400, "`stream` must be true or false.", code="invalid_stream")
        incognito = _incognito(body.get("incognito"), request.headers.get("x-nanoagent-incognito"))
        loop = self.hub.loop
        if incognito:  # its own session beside the name's saved one, temporary: see README
            try:
                key = check_session_key(f"{key}:incognito")
            except NanoagentError:
                raise HttpError(400, "The session name is too long for a temporary chat; use a shorter one.",
                                code="invalid_session") from None
            loop.start_incognito(key)
        images: list[ImageBlock] = []
        if said.images:
            try:
                loop.check_images(key, [])  # a model that takes none: refused before anything is stored
            except AttachmentError as e:
                raise HttpError(400, str(e), code="invalid_image") from None
            images = await asyncio.to_thread(said.store, loop.tool_context.workspace, self.max_image_bytes)
        reply = Reply(f"chatcmpl-{secrets.token_hex(12)}", loop.model_for(loop.session(key)), int(time.time()))
        headers = {"X-Nanoagent-Ignored": "system"} if said.system else {}
        if incognito:
            headers["X-Nanoagent-Incognito"] = "temporary chat: not archived, Dreamed or searchable; deleted when it ends"
        if stream:
            return await self._stream(reply, request, key, said.text, images, headers, reader, writer)
        streamed = _Streamed()
        turn = await self._send(request, key, said.text, images, reader, streamed.sink(lambda text: None),
                                _still_here)
        if turn is not None and turn.result is not None and turn.result.error is not None:
            raise HttpError(502, turn.reply, kind="server_error", code="turn_failed", headers=NO_RETRY)
        streamed.missing(JOINED.format(key=key) if turn is None else turn.reply)  # the same text a stream shows
        await wire.send(writer, wire.response(200, reply.completion(streamed.text, turn), headers=headers))
        return True

    async def _stream(self, reply: Reply, request: Request, key: str, text: str, images: list[ImageBlock],
                      headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        out = wire.EventStream(writer, request)
        out.start(headers)
        out.data(reply.chunk({"role": "assistant", "content": ""}))
        streamed = _Streamed(lambda name: out.comment(f"tool {name}"))
        on_event = streamed.sink(lambda text: out.data(reply.chunk({"content": text})))

        async def tick() -> bool:
            out.comment("keep-alive")
            await out.flush()
            return not out.gone

        try:
            turn = await self._send(request, key, text, images, reader, on_event, tick)
        except HttpError as e:
            out.data(e.body())
        else:
            if turn is not None and turn.result is not None and turn.result.error is not None:
                out.data(HttpError(502, turn.reply, kind="server_error", code="turn_failed").body())
            else:
                missing = JOINED.format(key=key) if turn is None else streamed.missing(turn.reply)
                if missing:
                    out.data(reply.chunk({"content": missing}))
                out.data(reply.chunk({}, finish=reply.finish_reason(turn), usage=reply.usage(turn)))
        out.data("[DONE]")
        out.end()
        await out.flush()
        return out.chunked and not out.gone

    async def _send(self, request: Request, key: str, text: str, images: list[ImageBlock],
                    reader: asyncio.StreamReader, on_event: ev.EventSink,
                    tick: Callable[[], Awaitable[bool]]) -> ev.TurnResult | None:
        """hub.send for one request, watching its client: `tick` runs every KEEPALIVE seconds (False: the client
        is gone). A client that goes away cancels the turn it started and raises ClientGone; a turn that could
        not run is an HttpError. None: the message joined the session's running turn."""
        watch = _TurnWatch(on_event)
        send = asyncio.create_task(self.hub.send(key, text, sink=watch, ask=None, images=images or None),
                                   name=f"http {key}")
        eof: asyncio.Task[bool] = asyncio.create_task(_closed(reader))
        try:
            while not send.done():
                done, _ = await asyncio.wait({send, eof}, timeout=KEEPALIVE, return_when=asyncio.FIRST_COMPLETED)
                if send in done:
                    break
                if eof in done and not eof.result():  # it sent more (pipelining): close after this reply
                    request.spoiled = True
                    eof = asyncio.create_task(_forever())
                elif eof in done or not await tick():
                    if watch.running and not send.done():
                        self.hub.cancel(key)
                    raise ClientGone
        finally:
            eof.cancel()
            if not send.done():
                send.cancel()  # our wait only: the turn belongs to the hub
            await asyncio.gather(send, eof, return_exceptions=True)
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


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Watch a client that waits for its reply: True when it closed its side (or reset), False when it sent more
    (a pipelined request, which no OpenAI client sends; its first byte is lost, so the connection must close)."""
    try:
        return not await reader.read(1)
    except ConnectionError:
        return True


async def _forever() -> bool:
    await asyncio.Event().wait()
    return False


async def _still_here() -> bool:
    return True


def _record(event: str, **fields: Any) -> str:
    """A structured log line; never a token or message contents."""
    return json.dumps({"event": event, **fields}, ensure_ascii=False)


def url(host: str, port: int) -> str:
    """The endpoint's base URL, as clients are given it."""
    shown = f"[{host}]" if ":" in host else host or "*"
    return f"http://{shown}:{port}/v1"


__all__ = ["Endpoint", "http_component", "is_loopback", "load_token", "url"]
