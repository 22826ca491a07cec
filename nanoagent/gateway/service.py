"""The gateway as a service: `nanoagent gateway start` (in the background, under `supervisor.py`), `stop`, `restart`,
and who runs the gateway that answers (a supervisor, systemd, or a terminal)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nanoagent.errors import NanoagentError
from nanoagent.fsutil import private_dir
from nanoagent.gateway import supervisor
from nanoagent.gateway.oneshot import gateway_answers
from nanoagent.paths import Paths

UNIT = "nanoagent-gateway.service"


def gateway_pid(paths: Paths) -> int | None:
    try:
        return int((paths.run_dir / "gateway.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def under_systemd(pid: int) -> bool:
    """The process runs in the systemd unit `gateway install` writes (its cgroup names the unit)."""
    try:
        return UNIT in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def start(paths: Paths, args: list[str], wait: float) -> tuple[int, bool]:
    """Start the gateway in the background under a supervisor, once its socket answers: (its pid, True); (the running
    one's pid, False) when one already answers. A gateway that exits before it answers is one line: why."""
    if gateway_answers(paths.gateway_socket):
        return gateway_pid(paths) or 0, False
    if supervisor.running(paths):
        raise NanoagentError(f"The gateway's supervisor for {paths.home} is starting it again after a failure; see "
                             "`nanoagent gateway status` and `nanoagent gateway logs`, or stop it with "
                             "`nanoagent gateway stop`.")
    private_dir(paths.run_dir)
    env = {**os.environ, "NANOAGENT_HOME": str(paths.home)}
    proc = subprocess.Popen([sys.executable, "-m", "nanoagent.gateway.supervisor", *args], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # no terminal: Ctrl-C or a closed terminal does not reach it
    deadline = time.monotonic() + wait
    while not gateway_answers(paths.gateway_socket):
        found = supervisor.state(paths) or {}
        failed = found.get("last_exit")
        if failed:
            _end(paths, proc)
            said = str(failed.get("said") or "").removeprefix("Error: ")
            raise NanoagentError(f"The gateway did not start (exit {failed.get('code')}): {said or 'it said nothing'}"
                                 + ("" if said else "; run `nanoagent gateway` to see it in the foreground."))
        if proc.poll() is not None:
            raise NanoagentError(f"The gateway's supervisor ended at once (exit {proc.returncode}); run "
                                 "`nanoagent gateway` to see why in the foreground.")
        if time.monotonic() > deadline:
            _end(paths, proc)
            raise NanoagentError(f"The gateway did not answer within {wait:g} s, so it was stopped; see "
                                 "`nanoagent gateway logs`.")
        time.sleep(0.05)
    proc.returncode = 0  # not waited for: it runs on, no child of ours once this process ends
    return gateway_pid(paths) or 0, True


def _end(paths: Paths, proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)


def stop(paths: Paths, wait: float) -> int:
    """SIGTERM to the supervisor (which stops its gateway) or else to the gateway; once gone, the pid signalled.
    NanoagentError when none runs (`code` 3) or it is still finishing after `wait` seconds."""
    found = supervisor.state(paths)
    if found is not None:
        pid = int(found.get("gateway_pid") or found["pid"])
        _send(paths, int(found["pid"]), signal.SIGTERM)
        gone = lambda: not supervisor.running(paths)  # noqa: E731
    else:
        pid = gateway_pid(paths) or 0
        if not pid:
            raise NotRunning(f"No gateway is running for {paths.home}.")
        _send(paths, pid, signal.SIGTERM)
        gone = lambda: not (paths.run_dir / "gateway.pid").exists()  # noqa: E731
    deadline = time.monotonic() + wait
    while not gone():
        if time.monotonic() > deadline:
            raise NanoagentError(f"The gateway (pid {pid}) is still finishing after {wait:g} s; check "
                                 "`nanoagent gateway status`, or kill it.")
        time.sleep(0.05)
    return pid


def restart(paths: Paths, args: list[str], wait: float) -> int:
    """A new gateway process: the supervisor's (SIGHUP: it stops the gateway and starts it again), or one started in
    the background after the running one stops. The new gateway's pid once it answers."""
    found = supervisor.state(paths)
    old = gateway_pid(paths)
    if old and under_systemd(old):
        raise NanoagentError("This gateway runs under systemd: restart it with "
                             "`systemctl --user restart nanoagent-gateway`.")
    if found is None:
        with contextlib.suppress(NotRunning):
            stop(paths, wait)
        return start(paths, args, wait)[0]
    _send(paths, int(found["pid"]), signal.SIGHUP)
    deadline = time.monotonic() + wait
    while not ((pid := gateway_pid(paths)) and pid != old and gateway_answers(paths.gateway_socket)):
        if time.monotonic() > deadline or not supervisor.running(paths):
            raise NanoagentError(f"The gateway did not answer again within {wait:g} s; see "
                                 "`nanoagent gateway status` and `nanoagent gateway logs`.")
        time.sleep(0.05)
    return pid


class NotRunning(NanoagentError):
    exit_code = 3


def _send(paths: Paths, pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        raise NotRunning(f"No gateway is running for {paths.home} (pid {pid} is gone; its files are cleaned up at the "
                         "next start).") from None
