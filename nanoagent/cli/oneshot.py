"""`nanoagent agent -m`: the parts that need no typer and no event loop. They check the message and stdin,
send the message through a running gateway, and print the reply or --json.

`entry.main` calls `attached(argv)` before typer loads. A plain one-shot to a running gateway, the common case
from scripts and other programs, then costs little more than starting Python. Anything else goes to the full
command line in app.py, which uses the same functions: other options, piped input, or no gateway. That path
also explains a command line that is wrong.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
from collections.abc import Iterator

from nanoagent.errors import NanoagentError, Stopped

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the one-shot fast path loads no typing)
if TYPE_CHECKING:
    from typing import Any

    from nanoagent.agent.events import TurnResult
    from nanoagent.cli.render import OneShotRenderer
    from nanoagent.messages import ImageBlock
    from nanoagent.paths import Paths


class Plain:
    """A one-shot the fast path takes: a message, a session and whether to print JSON. A plain class: importing
    dataclasses (inspect, ast, dis) before the message is sent cost more than this module."""

    __slots__ = ("message", "session", "json_output")

    def __init__(self, message: str, session: str = "cli:direct", json_output: bool = False):
        self.message, self.session, self.json_output = message, session, json_output

    def _values(self) -> tuple[str, str, bool]:
        return self.message, self.session, self.json_output

    def __eq__(self, other: object) -> bool:
        return self._values() == other._values() if isinstance(other, Plain) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"Plain(message={self.message!r}, session={self.session!r}, json_output={self.json_output!r})"


def parse(argv: list[str]) -> Plain | None:
    """`agent` with a message (-m TEXT, or TEXT alone) and at most -s KEY and --json. Anything else is None:
    other options, a message that starts with "-" (`-m -` reads stdin), a repeated option, or --debug."""
    if argv[:1] != ["agent"] or os.environ.get("NANOAGENT_DEBUG"):
        return None
    found: dict[str, Any] = {}
    rest = iter(argv[1:])
    for arg in rest:
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        field = {"-m": "message", "--message": "message", "-s": "session", "--session": "session"}.get(name)
        if field is not None:
            value = inline if eq else next(rest, None)
            if value is None or value.startswith("-") or field in found:
                return None
            found[field] = value
        elif arg == "--json" and "json_output" not in found:
            found["json_output"] = True
        elif arg.startswith("-") or "prompt" in found:
            return None
        else:
            found["prompt"] = arg
    if ("prompt" in found) == ("message" in found):  # both: the full command line says to give it once
        return None
    message = found.pop("prompt") if "prompt" in found else found.pop("message")
    return Plain(message, **found)


def attached(argv: list[str]) -> bool:
    """Answer `argv` through a running gateway if it is a plain one-shot; False when the full command line
    should take it (not a plain one-shot, something piped in, or no gateway answering)."""
    plain = parse(argv)
    if plain is None or stdin_has_data():
        return False
    check_message(plain.message)
    from nanoagent.gateway.oneshot import sending, settings_differ
    from nanoagent.gateway.protocol import NoGateway
    from nanoagent.paths import Paths

    paths = Paths.from_env()
    key = session_key(plain.session)
    if settings_differ(paths.run_dir):  # a model or key of its own: answered here, as with --model
        return False
    try:
        with _signals_stop(), sending(paths.gateway_socket, key, plain.message) as sent:
            # the message is on its way: what draws the reply loads while the gateway starts the turn
            from nanoagent.cli.render import OneShotRenderer

            renderer = OneShotRenderer(quiet_reply=plain.json_output)
            renderer.warm_up()
            turn = sent.wait(renderer, ask_terminal if stdin_is_terminal() else None)
    except NoGateway:  # raised only while connecting: nothing was sent
        return False
    finish(paths, turn, renderer, plain.json_output)
    return True


def session_key(session: str) -> str:
    """The key of -s NAME (`cli:NAME` unless it names a channel); NanoagentError for a name no file can carry."""
    from nanoagent.paths import check_session_key

    return check_session_key(session if ":" in session else f"cli:{session}")


def through_gateway(paths: Paths, key: str, message: str, renderer: OneShotRenderer,
                    images: list[ImageBlock] | None = None, workdir: str = "") -> TurnResult:
    """Send the message to the gateway's session `key` and draw its events; a person at the terminal can
    approve a command. Ctrl-C, SIGTERM or SIGHUP cancel the turn there."""
    from nanoagent.gateway.oneshot import send_one

    with _signals_stop():
        return send_one(paths.gateway_socket, key, message, renderer, ask_terminal if stdin_is_terminal() else None,
                        images, workdir)


def ask_terminal(question: str) -> str:
    """The question on stderr, the answer from stdin; no answer (or no stdin) declines."""
    from nanoagent.cli.render import terminal_safe  # the question quotes the model's command

    print(terminal_safe(question), end="", file=sys.stderr, flush=True)
    try:
        line = sys.stdin.readline()
    except (OSError, ValueError):
        line = ""
    return line or "n"


def stop_signals() -> list[signal.Signals]:
    """The signals that end a command as Ctrl-C does: SIGTERM, and SIGHUP unless it is ignored on purpose
    (under nohup)."""
    return [sig for sig in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(sig) is not signal.SIG_IGN]


@contextlib.contextmanager
def _signals_stop() -> Iterator[None]:
    """SIGTERM and SIGHUP end the wait as Ctrl-C does (the turn is cancelled, not left running unwatched)."""

    def stop(number: int, frame: object) -> None:
        raise Stopped.by(signal.Signals(number).name)

    try:
        saved = {sig: signal.signal(sig, stop) for sig in stop_signals()}
    except ValueError:  # not the main thread: signals stay as they are
        saved = {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def finish(paths: Paths, turn: TurnResult, renderer: OneShotRenderer, json_output: bool) -> None:
    """Print the reply (or --json) and exit 1 when the turn failed or a command refused."""
    if turn.result is not None and turn.result.error is not None:
        from nanoagent.cli.logs import log, start_log

        start_log(paths.logs_dir)
        log.error("turn failed in session %s: %s", turn.session, turn.result.error)
    if json_output:
        print(json.dumps(turn_json(turn), ensure_ascii=False))
    else:
        renderer.finish(turn.reply, turn.failed)
    if turn.failed:  # a turn that ended in an error, or a slash command that could not do what was asked
        raise SystemExit(1)


def turn_json(turn: TurnResult) -> dict[str, Any]:
    from nanoagent.usage import turn_cost

    result = turn.result
    data: dict[str, Any] = {"reply": turn.reply, "session": turn.session, "model": turn.model}
    if turn.refused:
        data["refused"] = True
    if result is not None:
        data.update(
            stop=result.stop.value,
            error=result.error,
            usage=result.usage.to_dict(),
            cost=turn_cost(turn.model, result.usage),  # USD at the listed price; null for a model without one
            tool_calls=[{"name": c.name, "arguments": c.arguments, "ok": c.ok, "elapsed": round(c.elapsed, 3)}
                        for c in result.tool_calls],
        )
    return data


def check_message(message: str) -> None:
    """A message the model can be sent: not blank, and text (argv that is not UTF-8 arrives as surrogates)."""
    if not message.strip():
        raise NanoagentError("Nothing to send: the message after -m is empty; give it some text.")
    try:
        message.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(message[e.start])
        byte = f" (byte 0x{code - 0xdc00:02x})" if 0xdc80 <= code <= 0xdcff else ""
        raise NanoagentError(f"The message is not valid UTF-8{byte}; set your terminal and locale to UTF-8 "
                             "(e.g. LANG=C.UTF-8) and send it again.") from None


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()  # None: started with stdin closed (`<&-`)


def stdin_has_data() -> bool:
    """Whether stdin is a pipe or a file (something was piped in), not a terminal, /dev/null or a socket."""
    import io

    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return _unread(sys.stdin)  # no descriptor: an in-process runner's stream
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def _unread(stream: Any) -> bool:
    """Whether a stream with no descriptor still holds something to read (one that cannot tell: assume so)."""
    buffer = getattr(stream, "buffer", stream)
    if stream is None or stream.isatty() or not buffer.seekable():
        return stream is not None and not stream.isatty()
    here = buffer.tell()
    end = buffer.seek(0, 2)
    buffer.seek(here)
    return end > here
