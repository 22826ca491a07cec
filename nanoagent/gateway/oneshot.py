"""One message to a running gateway over a blocking socket: what `nanoagent agent -m` uses when a gateway runs.

No event loop and no SDK: a one-shot through the gateway should cost little more than starting Python. The
interactive terminal, which listens and types at once, uses the asyncio client in `client.py`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator, Mapping

from nanoagent.errors import NanoagentError, Stopped
from nanoagent.gateway import protocol
from nanoagent.gateway.protocol import GONE_MID_TURN, GatewayGone, check_features, unreachable

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the one-shot fast path loads no typing)
if TYPE_CHECKING:
    from io import BufferedIOBase
    from pathlib import Path

    from nanoagent.agent import events as ev
    from nanoagent.messages import ImageBlock

REQUEST = "r1"  # the id of the one message a connection sends
SETTINGS_FILE = "gateway.env"  # in run/: what the running gateway's model and provider variables stand for


def settings_mac(salt: bytes, value: str) -> str:
    """A keyed hash of one setting (an API key among them), so run/gateway.env holds no secret."""
    try:
        from _blake2 import blake2b  # CPython's own: importing hashlib would load OpenSSL first (~5 ms)
    except ImportError:  # pragma: no cover - another Python
        from hashlib import blake2b
    return blake2b(value.encode("utf-8", "surrogatepass"), key=salt, digest_size=16).hexdigest()


def settings_differ(run_dir: Path, env: Mapping[str, str] = os.environ) -> list[str]:
    """The model and provider variables (NANOAGENT_MODEL, ANTHROPIC_API_KEY, ...) set here to something the
    running gateway does not use: a command that has any runs in its own process, as with --model. A variable
    not set here changes nothing (this process would read config.json, as the gateway did)."""
    try:
        data = json.loads((run_dir / SETTINGS_FILE).read_text(encoding="utf-8"))
        salt, values = bytes.fromhex(data["salt"]), dict(data["values"])
    except (OSError, ValueError, KeyError, TypeError):
        return []  # none written (an older gateway, or none running): nothing to compare
    return [name for name, mac in values.items() if env.get(name) and settings_mac(salt, env[name]) != mac]


def gateway_answers(path: Path, timeout: float = 0.2) -> bool:
    """True when a gateway listens on the socket (a stale socket file from a killed gateway does not count)."""
    import socket

    if not path.exists():
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def tell(path: Path, message: dict, timeout: float = 0.5) -> bool:
    """Send the gateway a message that needs no answer (such as jobs_changed); False when none listens."""
    import socket

    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(path))
            conn.sendall(protocol.encode(message))
        except OSError:
            return False
    return True


def deliver(path: Path, target: str, text: str, source: str, timeout: float = 300.0) -> None:
    """Have the running gateway deliver `text` to `target` (a session key) as the message tool does, marked as from
    `source`; the caller has checked the target. NoGateway when nothing listens; DeliveryError saying why it did not
    arrive."""
    import socket

    from nanoagent.channels.base import DeliveryError

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(path))
        except OSError as e:
            raise unreachable(path, e) from None
        with conn.makefile("rwb") as stream:
            _write(stream, protocol.encode({"type": "deliver", "id": "d1", "target": target, "text": text,
                                            "source": source}))
            while (message := _read(stream)) is not None:
                if message.get("type") == "delivered" and message.get("id") == "d1":
                    return
                if message.get("type") == "error":  # ours, or an older gateway's "unknown type"
                    raise DeliveryError(str(message.get("message", "")))
    raise GatewayGone("The gateway closed the connection before it said the message was delivered; see its log.")


def send_one(path: Path, session: str, text: str, on_event: Callable[[ev.Event], None],
             ask: Callable[[str], str] | None = None, images: list[ImageBlock] | None = None,
             workdir: str = "", source: str = "") -> ev.TurnResult:
    """Send one message or slash command to `session` and wait for its turn to end. Every event of the session
    goes to `on_event`; `ask` answers approval questions (None: each is declined). Ctrl-C or a signal (Stopped)
    cancels the turn in the gateway; any other end of the wait leaves the turn to finish there. NoGateway when
    nothing listens on the socket. `source`: the kind of work its spend counts as ("" a person's turn)."""
    with sending(path, session, text, images, workdir, source) as message:
        return message.wait(on_event, ask)


@contextlib.contextmanager
def sending(path: Path, session: str, text: str, images: list[ImageBlock] | None = None,
            workdir: str = "", source: str = "") -> Iterator[Sending]:
    """Connect and send the message at once, before the caller loads what it draws the reply with (the gateway
    starts the turn meanwhile); `wait` on what this yields. Without images the hello and the message go in one
    write; with images or a working folder (`workdir`) the welcome is read first, to check the gateway takes them. Ctrl-C or a signal (Stopped)
    inside the block cancels the turn in the gateway. NoGateway when nothing listens on the socket."""
    send = protocol.encode(protocol.send(REQUEST, session, text, images, workdir=workdir, source=source))
    if len(send) > protocol.MAX_LINE:
        raise NanoagentError(f"The message is too large for the gateway ({len(send):,} bytes as sent, over "
                             f"{protocol.MAX_LINE:,}); send less, or use --local.")
    try:
        import _socket  # the socket module's C part: socket.py loads selectors and array too (~6 ms a one-shot)
    except ImportError:  # pragma: no cover - another Python
        import socket as _socket  # type: ignore[no-redef]
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            conn.connect(str(path))
        except OSError as e:
            raise unreachable(path, e) from None
        # what conn.makefile("rwb") gives, over plain reads and writes of the descriptor (no timeout is set)
        reader, writer = (io.FileIO(conn.fileno(), mode, closefd=False) for mode in "rw")
        with io.BufferedRWPair(reader, writer) as stream:
            hello = protocol.encode(protocol.hello(session))
            message = Sending(stream, session)
            if images or workdir:
                _write(stream, hello)
                check_features(message.welcome(), images, workdir)
                _write(stream, send)
            else:
                _write(stream, hello + send)
            try:
                yield message
            except (KeyboardInterrupt, Stopped):
                _write(stream, protocol.encode({"type": "cancel", "session": session}), quiet=True)
                raise
    finally:
        conn.close()


class Sending:
    """A message sent to the gateway: its welcome, then the session's events and the message's result."""

    def __init__(self, stream: BufferedIOBase, session: str):
        self.stream = stream
        self.session = session
        self._welcome: dict | None = None

    def welcome(self) -> dict:
        if self._welcome is None:
            welcome = _read(self.stream)
            if welcome is not None and welcome.get("type") == "error":
                raise NanoagentError(f"The gateway refused the message: {welcome.get('message')}")
            if welcome is None or welcome.get("type") != "welcome":
                raise GatewayGone("The gateway closed the connection at once; see its log in logs/.")
            self._welcome = welcome
        return self._welcome

    def wait(self, on_event: Callable[[ev.Event], None], ask: Callable[[str], str] | None = None) -> ev.TurnResult:
        """The turn's result once it ends; its events go to `on_event`, approval questions to `ask`."""
        from nanoagent.agent import events as ev

        self.welcome()
        reply = _wait_for_result(self.stream, on_event, ask)
        if reply["type"] == "error":
            raise NanoagentError(f"The gateway refused the message: {reply.get('message')}")
        return protocol.result_from_wire(reply) or ev.TurnResult("", self.session)  # None: it joined a running turn


def _wait_for_result(stream: BufferedIOBase, on_event: Callable[[ev.Event], None],
                     ask: Callable[[str], str] | None) -> dict:
    said = ""  # an error the gateway sent about the connection itself (it closes the connection after some)
    while (message := _read(stream)) is not None:
        kind = message.get("type")
        if kind == "event":
            event = protocol.event_from_wire(message.get("event") or {})
            if event is not None:
                on_event(event)
        elif kind in ("result", "error") and message.get("id") == REQUEST:
            return message
        elif kind == "error":
            said = str(message.get("message", ""))
        elif kind == "ask":
            answer = ask(str(message.get("question", ""))) if ask else "n"
            _write(stream, protocol.encode({"type": "answer", "id": message.get("id"), "text": answer}))
    raise GatewayGone(f"The gateway closed the connection: {said}" if said else GONE_MID_TURN)


def _read(stream: BufferedIOBase) -> dict | None:
    """The next message; None at the end (or a broken connection). A line that does not decode is skipped;
    one over the limit is GatewayGone (the rest of it cannot be read as messages)."""
    try:
        while line := stream.readline(protocol.MAX_EVENT_LINE + 1):
            if len(line) > protocol.MAX_EVENT_LINE:
                raise GatewayGone(f"The gateway sent a line over {protocol.MAX_EVENT_LINE:,} bytes, more than this "
                                  "client reads; the turn goes on there. Use --local for this one.")
            try:
                return protocol.decode(line)
            except ValueError:
                continue
    except OSError:
        pass
    return None


def _write(stream: BufferedIOBase, line: bytes, quiet: bool = False) -> None:
    try:
        stream.write(line)
        stream.flush()
    except OSError:
        if not quiet:
            raise GatewayGone(GONE_MID_TURN) from None
