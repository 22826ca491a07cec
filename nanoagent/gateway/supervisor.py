"""`nanoagent gateway start`'s supervisor: a small process of its own (`python -m nanoagent.gateway.supervisor [-w DIR]`,
detached from the terminal) that runs `nanoagent gateway` and starts it again when it exits non-zero (a crash, the
watchdog, a kill), after a backoff (BACKOFF, from the start again once a run lasted five minutes), counting restarts.
A gateway that exits 0 (SIGTERM, `gateway stop`) ends the supervisor too.

Its state is `run/supervisor.json` (its pid, when it started, the restarts and the last exit), what `gateway status`
shows; `run/supervisor.lock`, held while it lives, says whether it does. Its records go to the gateway's log.
SIGTERM or SIGINT: the gateway is stopped (SIGTERM, its grace) and the supervisor ends; SIGHUP: the gateway is stopped
and started again at once (`gateway restart`), not counted as a restart.

It imports little (no agent, no SDK): it stays resident as long as the gateway.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import IO, Any

from nanoagent.fsutil import atomic_write, file_lock
from nanoagent.gateway import logfile
from nanoagent.paths import Paths

BACKOFF = (1.0, 2.0, 5.0, 15.0, 60.0)
STEADY = 300.0  # seconds a run must last for the backoff to start over
STATE = "supervisor.json"
LOCK = "supervisor.lock"


class Supervisor:
    def __init__(self, paths: Paths, args: list[str]):
        self.paths = paths
        self.command = [sys.executable, "-m", "nanoagent", "gateway", *args]
        self.state: dict[str, Any] = {"pid": os.getpid(), "started": time.time(), "restarts": 0, "last_exit": None}
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.again = False  # SIGHUP: stop the gateway and start it again, uncounted

    def run(self) -> int:
        run = self.paths.run_dir
        busy = RuntimeError(f"a supervisor already runs for {self.paths.home}")
        with file_lock(run / LOCK, 2, busy):  # not 0: `running` takes the lock for a moment to look
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stop())
            signal.signal(signal.SIGHUP, lambda *_: self._restart())
            self._save()
            self._log("supervisor_started", pid=os.getpid())
            try:
                self._loop()
            finally:
                with contextlib.suppress(FileNotFoundError):
                    (run / STATE).unlink()
                self._log("supervisor_stopped", restarts=self.state["restarts"])
        return 0

    def _loop(self) -> None:
        attempt = 0
        while not self.stopping:
            started = time.monotonic()
            code, said = self._run_once()
            if self.stopping or (code == 0 and not self.again):
                return
            if self.again:
                self.again, attempt = False, 0
                continue
            attempt = 0 if time.monotonic() - started > STEADY else attempt
            delay = BACKOFF[min(attempt, len(BACKOFF) - 1)]
            attempt += 1
            self.state["restarts"] += 1
            self.state["last_exit"] = {"code": code, "time": time.time(), "said": said}
            self._save()
            self._log("gateway_exited", code=code, said=said, restart_in=delay, restarts=self.state["restarts"],
                      level="error")
            self._sleep(delay)

    def _run_once(self) -> tuple[int, str]:
        """Run the gateway until it exits: its exit code (a signal's as 128 + its number) and its last line on stderr."""
        self.child = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE)
        if self.stopping:  # SIGTERM came between the loop's check and the start
            self.child.terminate()
        self.state["gateway_pid"] = self.child.pid
        self._save()
        tail: deque[str] = deque(maxlen=1)
        assert self.child.stderr is not None
        reader = threading.Thread(target=_keep_tail, args=(self.child.stderr, tail), daemon=True)
        reader.start()
        code = self.child.wait()
        reader.join(5)
        return (128 - code if code < 0 else code), (tail[0] if tail else "")

    def _stop(self) -> None:
        self.stopping = True
        self._end_child()

    def _restart(self) -> None:
        self.again = True
        self._end_child()

    def _end_child(self) -> None:
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.terminate()  # SIGTERM: the gateway's clean stop

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and not self.again and time.monotonic() < deadline:
            time.sleep(min(0.2, seconds))
        self.again = False

    def _save(self) -> None:
        atomic_write(self.paths.run_dir / STATE, json.dumps(self.state), mode=0o600)

    def _log(self, event: str, level: str = "info", **fields: Any) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z"
        with contextlib.suppress(OSError):
            logfile.append(logfile.log_path(self.paths.logs_dir),
                           {"time": stamp, "level": level, "source": "supervisor", "event": event, **fields})


def _keep_tail(stream: IO[bytes], tail: deque[str]) -> None:
    """Read the gateway's stderr to its end, keeping its last line that says something (never a full pipe)."""
    for raw in stream:
        line = raw.decode("utf-8", "replace").strip()
        if line and not line.startswith("nanoagent gateway: listening on "):  # the start line says no why
            tail.append(line[:500])


def state(paths: Paths) -> dict[str, Any] | None:
    """The running supervisor's state, or None when none runs for this home."""
    if not running(paths):
        return None
    try:
        found = json.loads((paths.run_dir / STATE).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def running(paths: Paths) -> bool:
    """A supervisor holds the lock (a pid file alone could name a process that ended, or another's reused pid)."""
    import fcntl

    try:
        fd = os.open(paths.run_dir / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def main(argv: list[str]) -> int:
    paths = Paths.from_env()
    try:
        return Supervisor(paths, argv).run()
    except RuntimeError:
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["Supervisor", "running", "state"]
