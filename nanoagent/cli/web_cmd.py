"""`nanoagent web`: open the web app of the running gateway in a browser, signed in through a one-time link (`--qr`
shows it as a QR code for a phone); `web devices` and `web revoke ID`: the browsers signed in."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from nanoagent.cli.common import App, WorkspaceOpt, setup
from nanoagent.errors import NanoagentError

web_app = App(help="Open the web app of the running gateway in your browser.\n\nExample: nanoagent web",
              invoke_without_command=True)


@web_app.callback()
def web(
    ctx: typer.Context,
    open_browser: Annotated[bool, typer.Option("--open/--no-open",
                                               help="Open the link in the browser ($BROWSER is honoured).")] = True,
    qr: Annotated[bool, typer.Option("--qr", help="Show the link as a QR code for a phone to scan (and open "
                                                  "nothing here).")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Open the web app of the running gateway in your browser.

    The link signs the browser in once: it is good for one minute and one use, and the browser stays signed in
    (see `nanoagent web devices`). When the gateway's HTTP listener is off, it offers to turn it on, and writes
    gateway.http.enabled to config.json so it stays on. With --qr, a phone scans the link from the terminal; it
    needs a listener a phone can reach (gateway.http.host; plain HTTP: see docs/gateway.md for a reverse proxy).

    Example: nanoagent web --qr
    """
    if ctx.invoked_subcommand is not None:
        return
    paths, _ = setup(workspace)
    answer = _link(paths)
    if qr:
        _show_qr(answer)
        return
    link = str(answer["url"])
    print(f"Sign-in link (good once, for one minute): {link}")
    if answer.get("remote"):
        print("For a phone: `nanoagent web --qr` shows a link it can reach as a QR code.")
    if open_browser:
        import webbrowser

        if not webbrowser.open(link):
            print("No browser could be opened here; open the link above in one.")


@web_app.command("devices")
def devices(workspace: WorkspaceOpt = None) -> None:
    """List the browsers signed in to the web app.

    Each with its id, name (browser and platform), last use and where it signed in. A device unused for gateway.web.deviceIdleDays days (30 by default) is signed out by itself.

    Example: nanoagent web devices
    """
    import time

    from nanoagent.web.devices import DeviceStore

    paths, config = setup(workspace)
    idle = config.gateway.web.device_idle_days * 86_400
    now = time.time()
    found = [d for d in DeviceStore(paths.web_devices_file).read() if not d.expired(now, idle)]
    if not found:
        print("No device is signed in to the web app; `nanoagent web` signs this machine's browser in.")
        return
    for device in sorted(found, key=lambda d: -d.last_used):
        print(f"{device.id}  {device.name}  last used {_ago(now - device.last_used)}, signed in "
              f"{_when(device.created)} at {device.host or '?'}")
    print("Sign one out with `nanoagent web revoke ID`.")


@web_app.command("revoke")
def revoke(device_id: Annotated[str, typer.Argument(metavar="ID", help="The device's id (`nanoagent web devices`).")],
           workspace: WorkspaceOpt = None) -> None:
    """Sign a device out of the web app, its open pages at once.

    Its next request is refused and its open pages stop updating; a new sign-in link is needed to come back.

    Example: nanoagent web revoke 3f9a2c
    """
    from nanoagent.gateway.oneshot import tell
    from nanoagent.web.devices import DeviceStore

    paths, _ = setup(workspace)
    try:
        gone = DeviceStore(paths.web_devices_file).revoke(device_id)
    except TimeoutError as e:
        raise NanoagentError(f"{e}.") from None
    if gone is None:
        raise NanoagentError(f"No device {device_id!r} is signed in; `nanoagent web devices` lists them.")
    tell(paths.gateway_socket, {"type": "devices_changed"})  # a running gateway ends its streams now
    print(f"Signed out {gone.id} ({gone.name}).")


def _link(paths: Any) -> dict[str, Any]:
    """The gateway's sign-in answer, the listener turned on first (after asking) when it is off."""
    from nanoagent.cli.oneshot import ask_terminal, stdin_is_terminal
    from nanoagent.gateway.oneshot import gateway_answers

    socket_path = paths.gateway_socket
    if not gateway_answers(socket_path):
        raise NanoagentError(f"No gateway is running for {paths.home}; start one with `nanoagent gateway` (or "
                             "`nanoagent gateway install`), then run `nanoagent web` again.")
    answer = _signin(socket_path, enable=False)
    if not answer.get("off"):
        return answer
    host, port = answer.get("host") or "127.0.0.1", answer.get("port")
    where = "this machine only" if _loopback(str(host)) else "reachable from other machines, with a sign-in"
    if not (stdin_is_terminal() and sys.stdout.isatty()):
        raise NanoagentError("The gateway's HTTP listener is off; set gateway.http.enabled to true in "
                             "config.json and restart the gateway (or run `nanoagent web` on a terminal to "
                             "turn it on).")
    reply = ask_terminal(f"The gateway's HTTP listener is off. Turn it on at http://{_shown(str(host))}:{port} "
                         f"({where}), now and at every start? [y/N] ")
    if reply.strip().lower() not in ("y", "yes"):
        print("Left it off; set gateway.http.enabled to true in config.json to have it on from the start.")
        raise typer.Exit(1)
    answer = _signin(socket_path, enable=True)
    _keep_listener_on(paths.config_file)
    return answer


def _keep_listener_on(config_file: Path) -> None:
    """Write gateway.http.enabled: true into config.json, keeping everything else in it (and its host: loopback
    unless the person set one)."""
    import json

    from nanoagent.config import save_config

    try:
        text = config_file.read_text(encoding="utf-8") if config_file.exists() else ""
        data = json.loads(text) if text.strip() else {}
    except (OSError, ValueError) as e:
        raise NanoagentError(f"The listener is on until the gateway stops, but {config_file} could not be read "
                             f"({e}); set gateway.http.enabled to true there yourself.") from None
    gateway = data.setdefault("gateway", {}) if isinstance(data, dict) else None
    http = gateway.setdefault("http", {}) if isinstance(gateway, dict) else None
    if not isinstance(http, dict):
        raise NanoagentError(f"The listener is on until the gateway stops, but {config_file} has no gateway.http "
                             "object to write to; set gateway.http.enabled to true there yourself.")
    http["enabled"] = True
    save_config(config_file, data)
    print(f"Wrote gateway.http.enabled: true to {config_file}: the listener stays on at every start.")


def _show_qr(answer: dict[str, Any]) -> None:
    from nanoagent.web.pairing import LOOPBACK_ONLY, NO_QR, qr_text

    remote = [str(link) for link in answer.get("remote") or []]
    link = remote[0] if remote else str(answer["url"])
    try:
        print(qr_text(link), end="")
    except ImportError:
        raise NanoagentError(f"{NO_QR}; or open the link by hand: {link}") from None
    print(f"Scan it with the phone's camera (good once, for one minute): {link}")
    for other in remote[1:]:
        print(f"  or: {other}")
    if not remote:
        print(LOOPBACK_ONLY)


def _loopback(host: str) -> bool:
    from nanoagent.web.pairing import is_loopback

    return is_loopback(host)


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _ago(seconds: float) -> str:
    if seconds < 120:
        return "just now"
    if seconds < 7200:
        return f"{int(seconds // 60)} minutes ago"
    if seconds < 2 * 86_400:
        return f"{int(seconds // 3600)} hours ago"
    return f"{int(seconds // 86_400)} days ago"


def _when(stamp: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


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


__all__ = ["web", "web_app"]
