"""`nanoagent web`: open the web app of the running gateway in a browser, signed in through a one-time link."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from nanoagent.cli.common import WorkspaceOpt, setup
from nanoagent.errors import NanoagentError


def register(app: typer.Typer) -> None:
    app.command("web")(web)


def web(
    open_browser: Annotated[bool, typer.Option("--open/--no-open",
                                               help="Open the link in the browser ($BROWSER is honoured).")] = True,
    workspace: WorkspaceOpt = None,
) -> None:
    """Open the web app of the running gateway in your browser.

    The link signs the browser in once: it is good for one minute and one use, and the browser keeps a
    session cookie. When the gateway's HTTP listener is off, it offers to turn it on (this machine only)
    until the gateway stops; set gateway.http.enabled to keep it on. To reach the app from a phone, set
    gateway.http.host (plain HTTP: see docs/gateway.md for a reverse proxy with TLS).

    Example: nanoagent web
    """
    from nanoagent.cli.oneshot import ask_terminal, stdin_is_terminal
    from nanoagent.gateway.oneshot import gateway_answers

    paths, _ = setup(workspace)
    socket_path = paths.gateway_socket
    if not gateway_answers(socket_path):
        raise NanoagentError(f"No gateway is running for {paths.home}; start one with `nanoagent gateway` (or "
                             "`nanoagent gateway install`), then run `nanoagent web` again.")
    answer = _signin(socket_path, enable=False)
    if answer.get("off"):
        port = answer.get("port")
        if not (stdin_is_terminal() and sys.stdout.isatty()):
            raise NanoagentError("The gateway's HTTP listener is off; set gateway.http.enabled to true in "
                                 "config.json and restart the gateway (or run `nanoagent web` on a terminal to "
                                 "turn it on until the gateway stops).")
        reply = ask_terminal(f"The gateway's HTTP listener is off. Turn it on at http://127.0.0.1:{port} (this "
                             "machine only) until the gateway stops? [y/N] ")
        if reply.strip().lower() not in ("y", "yes"):
            print("Left it off; set gateway.http.enabled to true in config.json to have it on from the start.")
            raise typer.Exit(1)
        answer = _signin(socket_path, enable=True)
    link = str(answer["url"])
    print(f"Sign-in link (good once, for one minute): {link}")
    if open_browser:
        import webbrowser

        if not webbrowser.open(link):
            print("No browser could be opened here; open the link above in one.")


def _signin(path: Path, enable: bool) -> dict[str, Any]:
    """The gateway's answer to a sign-in request (a NanoagentError with its message when it refuses)."""
    import json
    import socket

    from nanoagent.gateway.protocol import decode, encode

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(str(path))
            conn.sendall(encode({"type": "signin", "id": "w1", "enable": enable}))
            with conn.makefile("rb") as stream:
                line = stream.readline()
    except OSError as e:
        raise NanoagentError(f"Cannot reach the gateway at {path}: {e.strerror or e}; see `nanoagent gateway "
                             "status`.") from None
    try:
        answer = decode(line)
    except ValueError:
        raise NanoagentError("The gateway closed the connection without an answer; see its log in logs/.") from None
    if answer.get("type") == "error":
        message = str(answer.get("message"))
        if message.startswith("unknown type"):
            message = "it is older than this nanoagent; restart it (`nanoagent gateway stop`, then `nanoagent gateway`)"
        raise NanoagentError(f"The gateway could not open the web app: {message}.")
    if answer.get("type") != "signin":
        raise NanoagentError(f"Unexpected answer from the gateway: {json.dumps(answer)[:200]}")
    return answer


__all__ = ["register", "web"]
