"""The gateway process: one per $NANOAGENT_HOME, hosting the agent for local clients (a Unix socket) and the
channels (components) it supervises.

Every long-running task belongs to the gateway: components run under a supervisor that logs a crash
(a structured line, no message contents) and restarts it with backoff; client connections are tasks
of the socket server. SIGTERM or SIGINT: stop taking messages, let running turns finish for `grace`
seconds, cancel the rest (each records its interrupted turn), then stop the components and exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nanoagent import keys
from nanoagent.agent import events as ev
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import atomic_write, file_lock, private_dir
from nanoagent.gateway import protocol
from nanoagent.gateway.hub import Hub, HubClosed
from nanoagent.gateway.oneshot import SETTINGS_FILE, settings_mac
from nanoagent.gateway.watchdog import Watchdog
from nanoagent.paths import Paths, check_session_key
from nanoagent.spend import SOURCES, working_as
from nanoagent.tools.fs import editor
from nanoagent.tools.policy import PROFILES

if TYPE_CHECKING:
    from nanoagent.cron.deliver import Outbox

log = logging.getLogger("nanoagent.gateway")
BACKOFF = (1.0, 2.0, 5.0, 15.0, 60.0)
FILE_WAIT = 30.0  # seconds a file tool waits for a client to give or take a file before using the disk


class GatewayBusy(NanoagentError):
    pass


@dataclass(eq=False)
class Component:
    """A channel or service the gateway runs for its whole life (a chat channel, the HTTP endpoint, the cron
    scheduler). `run` returns only when cancelled; an exception is a crash, and the supervisor restarts it.
    `health` is what the component says of itself, set by it as it runs ("" unknown, "connected as @bot",
    "failing: <reason>"); the status answer carries it to `gateway status` and `nanoagent channels list`."""

    name: str
    run: Callable[[], Awaitable[None]]
    health: str = ""


@dataclass
class Gateway:
    hub: Hub
    paths: Paths
    components: list[Component] = field(default_factory=list)
    grace: float = 10.0
    clock: Callable[[], float] = time.time
    settings: dict[str, str] = field(default_factory=dict)  # env variable -> what it stands for here (gateway.env)
    # `{"type": "signin", "enable": bool}` (from `nanoagent web`): a one-time sign-in link for the web app, turning
    # the HTTP listener on when asked to; None where the gateway has no HTTP side to offer
    signin: Callable[[bool], Awaitable[dict[str, Any]]] | None = None
    # `{"type": "devices_changed"}` (from `nanoagent web revoke`): the web app reads its devices file again, and a
    # revoked device's open streams end; None until the HTTP listener runs
    devices_changed: Callable[[], None] | None = None
    # `{"type": "deliver"}` (from `nanoagent mcp serve`): a message delivered as the message tool delivers it, through
    # the outbox whose notes the gateway's terminals are shown; None: this gateway delivers none
    outbox: Outbox | None = None
    watchdog: float = 0.0  # seconds the event loop may stop answering before the process exits (0: never)
    web: Callable[[], str] = lambda: ""  # the web app's address while the HTTP listener is on
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _clients: dict[asyncio.Task[None], Connection] = field(default_factory=dict)
    _started: float = 0.0
    _group: asyncio.TaskGroup | None = None
    _supervisors: list[asyncio.Task[None]] = field(default_factory=list)
    _watchdog: Watchdog | None = None
    _loop: asyncio.AbstractEventLoop | None = None  # the one `serve` runs on: `status` may be asked from a thread

    def stop(self) -> None:
        self._stop.set()

    async def serve(self, ready: Callable[[], None] = lambda: None, handle_signals: bool = True) -> None:
        """Run until `stop()` or (with `handle_signals`, in the main thread) SIGTERM or SIGINT."""
        run = self.paths.run_dir
        _private_run_dir(run)
        busy = GatewayBusy(f"A gateway is already running for {self.paths.home} (pid {_read_pid(run)}); "
                           "stop it with `nanoagent gateway stop`.")
        with file_lock(run / "gateway.lock", 0, busy):
            self._started = self.clock()
            self._loop = asyncio.get_running_loop()
            atomic_write(run / "gateway.pid", f"{os.getpid()}\n", mode=0o600)
            salt = os.urandom(16)
            atomic_write(run / SETTINGS_FILE, json.dumps({"salt": salt.hex(), "values": {
                name: settings_mac(salt, value) for name, value in self.settings.items()}}), mode=0o600)
            socket = self.paths.gateway_socket
            with contextlib.suppress(FileNotFoundError):
                socket.unlink()  # a stale socket left by a killed gateway: we hold the lock, so it is not live
            server = await asyncio.start_unix_server(self._client, path=str(socket), limit=protocol.MAX_LINE)
            os.chmod(socket, 0o600)
            loop = asyncio.get_running_loop()
            signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
            for sig in signals:
                loop.add_signal_handler(sig, self.stop)
            log.info(_record("gateway_started", pid=os.getpid(), socket=str(socket),
                             components=[c.name for c in self.components]),
                     extra={"terminal": False})  # a terminal gets the start line `ready` prints instead
            try:
                async with asyncio.TaskGroup() as group:
                    self._group = group
                    if self.watchdog > 0:
                        self._watchdog = Watchdog(self.watchdog)
                        self._watchdog.start()
                        self._supervisors.append(group.create_task(self._watchdog.run(), name="watchdog"))
                    self._supervisors += [group.create_task(self._supervise(c), name=c.name) for c in self.components]
                    ready()
                    await self._stop.wait()
                    server.close()  # no new clients
                    await self.hub.drain(self.grace)
                    self._group = None
                    for task in self._supervisors:
                        task.cancel()
            finally:
                for client in list(self._clients):
                    client.cancel()
                await asyncio.gather(*self._clients, return_exceptions=True)
                for sig in signals:
                    loop.remove_signal_handler(sig)
                for path in (socket, run / "gateway.pid", run / SETTINGS_FILE):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                log.info(_record("gateway_stopped"))

    def start_component(self, component: Component) -> bool:
        """Run one more component from now on, supervised like the others (False: the gateway is stopping)."""
        if self._group is None:
            return False
        self.components.append(component)
        self._supervisors.append(self._group.create_task(self._supervise(component), name=component.name))
        return True

    async def _supervise(self, component: Component) -> None:
        for attempt in itertools.count():
            started = time.monotonic()
            try:
                await component.run()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the crash boundary: log, wait, restart
                if time.monotonic() - started > 300:
                    attempt = 0  # it ran fine for a while: start the backoff over
                delay = BACKOFF[min(attempt, len(BACKOFF) - 1)]
                log.error(_record("component_crashed", component=component.name, error=type(e).__name__,
                                  restart_in=delay))
                await asyncio.sleep(delay)

    # --- local clients ---------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connection = self._clients[task] = Connection(self, reader, writer)
        try:
            await connection.serve()
        except asyncio.CancelledError:  # the gateway is stopping: end quietly (asyncio's server would log a
            pass                        # cancelled connection as an unhandled exception, with a traceback)
        except Exception as e:  # noqa: BLE001 - one client's failure is that client's alone
            log.error(_record("client_failed", error=type(e).__name__))
        finally:
            self._clients.pop(task, None)
            connection.close()

    def status(self) -> dict[str, Any]:
        """What `{"type": "status"}` answers. `clients` counts the connections watching a session (that said
        hello), not probes or the one asking; `health` maps a component's name to its `health`, where it set one;
        `tasks` counts the event loop's tasks and `lag_ms` is how late its watchdog's beats woke (when it has one)."""
        watching = sum(1 for connection in self._clients.values() if connection.watching)
        return {"type": "status", "pid": os.getpid(), "started": self._started, "running": self.hub.running(),
                "clients": watching, "components": [c.name for c in self.components],
                "health": {c.name: c.health for c in self.components if c.health}, "web": self.web(),
                "tasks": len(asyncio.all_tasks(self._loop)) if self._loop else 0, "lag_ms": self._watchdog.lag() if self._watchdog else {}}


class Connection:
    """One local client: it watches one session, sends messages and commands, answers approval questions."""

    def __init__(self, gateway: Gateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.gateway = gateway
        self.hub = gateway.hub
        self.reader = reader
        self.writer = writer
        self.session = "cli:direct"
        self.unwatch: Callable[[], None] = lambda: None
        self.watching = False  # said hello: a terminal or program following a session
        self.requests: set[asyncio.Task[None]] = set()
        self.questions: dict[str, asyncio.Future[Any]] = {}  # asks' answers and file answers, by id
        self.ids = itertools.count(1)

    async def serve(self) -> None:
        while True:
            try:
                line = await self.reader.readline()
            except (asyncio.LimitOverrunError, ValueError):
                self.write({"type": "error", "message": f"line longer than {protocol.MAX_LINE} bytes; closing"})
                return
            except ConnectionError:
                return
            if not line:
                return  # the client went away; its turns go on
            try:
                message = protocol.decode(line)
            except ValueError as e:
                self.write({"type": "error", "message": f"bad line: {e}"})
                continue
            self.dispatch(message)

    def dispatch(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "hello":
            self.attach(str(message.get("session") or self.session))
        elif kind == "send":
            request = asyncio.create_task(self.send(message))
            self.requests.add(request)
            request.add_done_callback(self.requests.discard)
        elif kind == "cancel":
            self.hub.cancel(str(message.get("session") or self.session))
        elif kind in ("answer", "file_answer"):
            question = self.questions.pop(str(message.get("id")), None)
            if question is not None and not question.done():
                question.set_result(message if kind == "file_answer" else str(message.get("text", "")))
        elif kind == "status":
            self.write(self.gateway.status())
        elif kind == "signin":
            request = asyncio.create_task(self.signin(message))
            self.requests.add(request)
            request.add_done_callback(self.requests.discard)
        elif kind == "deliver":
            request = asyncio.create_task(self.deliver(message))
            self.requests.add(request)
            request.add_done_callback(self.requests.discard)
        elif kind == "jobs_changed":  # another process wrote cron/jobs.json: the scheduler looks again now
            from nanoagent.cron.store import JobStore

            JobStore(self.gateway.paths.cron_jobs_file).changed()
        elif kind == "devices_changed":
            if self.gateway.devices_changed is not None:
                self.gateway.devices_changed()
        else:
            self.write({"type": "error", "message": f"unknown type {kind!r}"})

    def attach(self, key: str) -> None:
        try:
            model = self.hub.model_for(self.hub.session(key))
        except NanoagentError as e:  # a name no session file can carry: the client is told, the connection stays
            self.write({"type": "error", "message": str(e)})
            return
        self.watching = True
        self.unwatch()
        self.session = key
        self.unwatch = self.hub.watch(key, self.event)
        self.write({"type": "welcome", "v": protocol.VERSION, "session": key, "model": model,
                    "busy": self.hub.busy(key), "commands": self.hub.command_names(),
                    "features": list(protocol.FEATURES)})

    async def send(self, message: dict[str, Any]) -> None:
        request_id = str(message.get("id", ""))
        key = str(message.get("session") or self.session)
        text = message.get("text")
        if not isinstance(text, str):
            self.write({"type": "error", "id": request_id, "message": "send needs a string \"text\""})
            return
        images, problem = protocol.attachments_from_wire(message.get("attachments"))
        workdir, problem = self.workdir(message.get("workdir")) if not problem else ("", problem)
        profile = message.get("profile") or ""
        if not problem and profile not in ("", *PROFILES):
            problem = f"\"profile\" must be one of {', '.join(PROFILES)}"
        files = message.get("files") or []
        if not problem and (not isinstance(files, list) or not set(files) <= {"read", "write"}):
            problem = "\"files\" must be a list of \"read\" and \"write\""
        source = message.get("source") or "turn"
        if not problem and source not in SOURCES:
            problem = f"\"source\" must be one of {', '.join(SOURCES)}"
        if problem:
            self.write({"type": "error", "id": request_id, "message": problem})
            return
        if files:  # the turn this send starts inherits it: its file tools ask this client for the folder's files
            editor.set(ClientFiles(self, "read" in files, "write" in files, asyncio.get_running_loop()))
        try:
            key = check_session_key(key)
            with _counted_as(source, key):
                turn = await self.hub.send(key, text, ask=self.ask, images=images, workdir=workdir, profile=profile)
        except (HubClosed, NanoagentError) as e:
            self.write({"type": "error", "id": request_id, "message": str(e)})
            return
        except Exception as e:  # noqa: BLE001 - every send gets an answer; the log gets the kind of failure
            log.error(_record("send_failed", error=type(e).__name__))
            self.write({"type": "error", "id": request_id, "message": f"the message failed inside the gateway "
                                                                     f"({type(e).__name__}); see its log in logs/"})
            return
        self.write(protocol.result_to_wire(turn, request_id))

    async def signin(self, message: dict[str, Any]) -> None:
        request_id = str(message.get("id", ""))
        if self.gateway.signin is None:
            self.write({"type": "error", "id": request_id, "message": "this gateway serves no web app"})
            return
        try:
            answer = await self.gateway.signin(message.get("enable") is True)
        except NanoagentError as e:
            self.write({"type": "error", "id": request_id, "message": str(e)})
            return
        self.write({"type": "signin", "id": request_id, **answer})

    async def deliver(self, message: dict[str, Any]) -> None:
        """A message to a place (`"target"`, a session key), marked as from `"source"`: answered `delivered`, or an
        error saying why it was not."""
        request_id = str(message.get("id", ""))
        outbox, target = self.gateway.outbox, keys.parse(str(message.get("target", "")))
        text, source = message.get("text"), message.get("source")
        try:
            if outbox is None:
                raise NanoagentError("this gateway delivers no messages")
            if target is None or not isinstance(text, str) or not isinstance(source, str):
                raise NanoagentError("deliver needs a \"target\" session key, a \"text\" and a \"source\"")
            await outbox.send(target, text, source)
        except NanoagentError as e:  # a DeliveryError among them: why it did not arrive
            self.write({"type": "error", "id": request_id, "message": str(e)})
            return
        self.write({"type": "delivered", "id": request_id})

    def workdir(self, raw: Any) -> tuple[str, str]:
        """A send's working folder (`agent -C DIR`), checked as the terminal checked it, or ("", what is wrong)."""
        from nanoagent.tools.fs import working_folder

        if raw is None or raw == "":
            return "", ""
        if not isinstance(raw, str) or not raw.startswith("/"):
            return "", "\"workdir\" must be an absolute path"
        paths = self.gateway.paths
        try:
            return str(working_folder(raw, paths.home, paths.workspace)), ""
        except ValueError as e:
            return "", str(e)

    async def file(self, op: str, path: str, text: str | None = None) -> dict[str, Any]:
        """Ask this client for a file of its turn's working folder (`ClientFiles`); {} when it cannot answer."""
        file_id = f"f{next(self.ids)}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.questions[file_id] = future
        if not self.write({"type": "file", "id": file_id, "op": op, "path": path,
                           **({"text": text} if text is not None else {})}):
            self.questions.pop(file_id, None)
            return {}
        answer = await future
        return answer if isinstance(answer, dict) else {}

    async def ask(self, question: str) -> str:
        """An approval question for the person at this client; no answer (the client gone) is a no."""
        ask_id = f"q{next(self.ids)}"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.questions[ask_id] = future
        if not self.write({"type": "ask", "id": ask_id, "question": question}):
            return "n"
        return await future

    def event(self, event: ev.Event) -> None:
        self.write({"type": "event", "event": protocol.event_to_wire(event)})

    def write(self, message: dict[str, Any]) -> bool:
        if self.writer.is_closing():
            return False
        self.writer.write(protocol.encode(message))
        return True

    def close(self) -> None:
        self.unwatch()
        for question in self.questions.values():
            if not question.done():
                question.set_result("n")
        for request in self.requests:
            request.cancel()  # the turns themselves belong to the hub and go on
        self.writer.close()


class ClientFiles:
    """A client's files for the file tools (`tools.fs.Buffers`): an editor behind `nanoagent acp` holds the working
    folder's unsaved buffers. The tools call from a worker thread; the question goes over the client's connection.
    No answer in FILE_WAIT seconds, or the client gone: the disk."""

    def __init__(self, connection: Connection, reads: bool, writes: bool, loop: asyncio.AbstractEventLoop):
        self.connection = connection
        self.reads = reads
        self.writes = writes
        self.loop = loop

    def _ask(self, op: str, path: Path, text: str | None = None) -> dict[str, Any]:
        try:
            return asyncio.run_coroutine_threadsafe(self.connection.file(op, str(path), text), self.loop).result(
                FILE_WAIT)
        except Exception:  # noqa: BLE001 - whatever went wrong, the disk answers
            return {}

    def read(self, path: Path) -> str | None:
        text = self._ask("read", path).get("text") if self.reads else None
        return text if isinstance(text, str) else None

    def write(self, path: Path, text: str) -> bool:
        return self.writes and self._ask("write", path, text).get("ok") is True


def _counted_as(source: str, key: str) -> contextlib.AbstractContextManager[object]:
    """Where the message's spend is counted: a person's turn sets its own scope in the loop (a temporary chat's is
    private); another source (an MCP client's question) counts as its own kind against the session."""
    return working_as(source, key) if source != "turn" else contextlib.nullcontext()


def _private_run_dir(run: Path) -> None:
    """run/ holds the socket: ours alone. A folder another user owns is refused; one too open is tightened."""
    private_dir(run)
    info = run.stat()
    if info.st_uid != os.getuid():
        raise NanoagentError(f"{run} belongs to another user (uid {info.st_uid}); remove it and start again.")
    if stat.S_IMODE(info.st_mode) & 0o077:
        log.warning(_record("run_dir_tightened", mode=oct(stat.S_IMODE(info.st_mode))))
        os.chmod(run, 0o700)


def _read_pid(run: Path) -> str:
    try:
        return (run / "gateway.pid").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def _record(event: str, **fields: Any) -> str:
    """A structured log line: JSON with the event's name and its fields, never message contents or keys."""
    return json.dumps({"event": event, **fields}, ensure_ascii=False)
