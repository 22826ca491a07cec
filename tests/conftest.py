"""Shared fixtures: an isolated home for every test, the local LLM server, the CLI runners, and the process split.

`invoke` runs the `nanoagent` command in this process (fast: the SDKs are imported once); `run_cli` runs it
as a real process, for what needs one (kill -9, two writers, import time, a terminal).

A test that starts a real process (a Python interpreter: nanoagent, a gateway, an MCP server, a helper script;
tmux; a pseudo-terminal; a fork) carries `@pytest.mark.process`; `make test-fast` leaves those out. A test
without the mark that starts one fails, naming what it started. Commands the code under test runs as its work
(git for the memory's history, the shell and bwrap for exec) are not processes in this sense: they cost
milliseconds.

Waits: a test waits on the event itself (a file appears, a process ends, a reply arrives) for up to PATIENCE
seconds. That deadline only ends a test that is broken; a slow, loaded machine never reaches it.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import pty
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROVIDER_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                "OPENROUTER_API_KEY", "NANOAGENT_MODEL", "NANOAGENT_DEBUG", "OLLAMA_API_BASE")


PATIENCE = 120.0  # seconds any wait for an event may take; only a broken test reaches it (pytest-timeout: 240 s)


def wait_until(check: Callable[[], object], what: str, timeout: float = PATIENCE, every: float = 0.02) -> object:
    """Poll `check` until it returns something true, and return that; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"still waiting for {what} after {timeout:g} s"
        time.sleep(every)
    return result


async def until(check: Callable[[], object], what: str, timeout: float = PATIENCE) -> Any:
    """`wait_until` inside an event loop: the loop runs on while `check` is polled."""
    import asyncio

    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"still waiting for {what} after {timeout:g} s"
        await asyncio.sleep(0.02)
    return result


def pytest_configure(config: pytest.Config) -> None:
    """Let Python keep bytecode for this run, whatever PYTHONDONTWRITEBYTECODE says: otherwise every worker
    rewrites every test module and every nanoagent subprocess compiles the package from source. The package
    is compiled once here, in the process that starts the workers, before any of them runs."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):
        import compileall

        compileall.compile_dir(ROOT / "nanoagent", quiet=1)


# Fixtures that start a real process: a test using one is marked `process` without saying so itself.
PROCESS_FIXTURES = frozenset({"term", "tmux"})  # tests/test_interactive.py: a pseudo-terminal, tmux


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)


class UnmarkedProcess(Exception):  # noqa: N818 - named for what the test did
    """A test without `@pytest.mark.process` started one (not an OSError: nothing on the way may swallow it)."""


def _program(args: object, executable: object) -> str:
    if executable:
        return os.fsdecode(executable)
    if isinstance(args, (str, bytes)):
        return os.fsdecode(args).split()[0] if args.strip() else ""
    first = next(iter(args), "")
    return os.fsdecode(first)


def _is_real_process(program: str) -> bool:
    """A Python interpreter (nanoagent, a gateway, an MCP server, a script), a console script of the venv, tmux."""
    name = Path(program).name
    in_venv = Path(program).parent == Path(sys.executable).parent
    return in_venv or name.startswith("python") or name in ("nanoagent", "tmux")


@pytest.fixture(autouse=True)
def processes_are_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test without `@pytest.mark.process` may not start a real process (see the module's docstring)."""
    if request.node.get_closest_marker("process") is not None:
        yield None
        return
    started: list[str] = []  # what the test started: yielded, so a test of this guard can look

    def refuse(what: str) -> UnmarkedProcess:
        started.append(what)
        return UnmarkedProcess(f"{request.node.nodeid} starts {what}: mark it @pytest.mark.process "
                               "(or run it in this process with `invoke`)")

    execute_child = subprocess.Popen._execute_child

    def guarded(self, args, executable, *rest, **kw):
        program = _program(args, executable)
        if _is_real_process(program):
            raise refuse(program)
        return execute_child(self, args, executable, *rest, **kw)

    def no_fork(name: str) -> Callable[..., object]:
        def refused(*args: object, **kwargs: object) -> object:
            raise refuse(f"a {name}")
        return refused

    monkeypatch.setattr(subprocess.Popen, "_execute_child", guarded)
    monkeypatch.setattr(os, "fork", no_fork("fork"))
    monkeypatch.setattr(os, "forkpty", no_fork("pseudo-terminal"))
    monkeypatch.setattr(pty, "fork", no_fork("pseudo-terminal"))
    yield started
    if started:
        pytest.fail(f"started {', '.join(started)} without @pytest.mark.process", pytrace=False)


@pytest.fixture(autouse=True)
def no_spend_scope_left():
    """A test that sets the spend scope resets it: a leftover scope would charge the next test's calls to its session."""
    from nanoagent.spend import current_scope

    yield
    if current_scope.get() is not None:
        current_scope.set(None)
        pytest.fail("the test left nanoagent.spend.current_scope set; reset it with the token set() returned",
                    pytrace=False)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads or writes the real home directory or sees the developer's keys."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("NANOAGENT_HOME", str(home))
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(scope="session")
def llm_server():
    from tests.llm_server import start_server

    server = start_server()
    yield server
    server.close()


@pytest.fixture
def llm(llm_server):
    llm_server.reset()
    yield llm_server
    llm_server.reset()


@pytest.fixture
def api():
    """The local Telegram Bot API stand-in, over real HTTP."""
    from tests.telegram_server import BotAPI

    server = BotAPI()
    yield server
    server.close()


def write_config(home: Path, data: dict) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def linger_past_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp reads on for a request's unread body before closing (10 s by default): made longer than any test
    waits, so a connection that closes within a test's deadline closed by itself, not when the linger ran out."""
    from aiohttp.web_protocol import RequestHandler

    made = RequestHandler.__init__

    def longer(self: RequestHandler, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **{**kwargs, "lingering_time": 2 * PATIENCE})

    monkeypatch.setattr(RequestHandler, "__init__", longer)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (free when asked)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fast_retries(**extra) -> dict:
    """Config defaults that keep retry tests quick."""
    return {"agents": {"defaults": {"retryBaseDelay": 0.01, "maxRetries": 2, "streamIdleTimeout": 2, **extra}}}


def run_cli(*args: str, env: dict | None = None, timeout: float = PATIENCE, cwd: Path | None = None,
            input: str | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "nanoagent", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd or ROOT, input=input)


@dataclass
class Ran:
    """What an in-process run left: the same names as a finished subprocess."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        """stderr's lines that hold something."""
        return [line for line in self.stderr.splitlines() if line.strip()]


def invoke(*args: str, env: dict | None = None, input: str | None = None) -> Ran:
    """Run `nanoagent ARGS` in this process through its console-script entry point (`main`, the one error
    boundary), inside typer's CliRunner isolation: stdin is `input` (not a terminal), stdout and stderr are
    captured, `env` overrides the environment for this run only.

    Logging starts as in a new process: no handlers on the root logger (pytest's are set aside), so a record
    nothing handles reaches stderr through logging's last resort. A run leaves no state behind for the next
    one: the environment (the CLI sets variables such as TIKTOKEN_CACHE_DIR) and the "nanoagent" logger (it
    opens its log file once per process, in the home of that run) are put back as they were, and its garbage
    is collected while no event loop runs, as at a process exit (an SDK client left open would otherwise be
    closed from the next run's event loop, and fail there). What survives that collection is frozen
    (`gc.freeze`): the next run's collection, and Python's own, walk only what was made since, not the SDKs'
    and the tests' modules again (most of the cost of a run otherwise). An exception that escapes `main` propagates, as
    a traceback would end a real process."""
    from typer.testing import CliRunner

    from nanoagent.cli import logs  # noqa: F401 - its NullHandler is part of the logger state saved below
    from nanoagent.cli.entry import main

    logger, root = logging.getLogger("nanoagent"), logging.getLogger()
    saved_env, saved_argv, saved_root = dict(os.environ), sys.argv, list(root.handlers)
    saved_log = (list(logger.handlers), logger.level, logger.propagate)
    root.handlers[:] = []
    try:
        with CliRunner().isolation(input=input, env=env) as (out, err, _):
            sys.argv = ["nanoagent", *args]
            try:
                main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            return Ran(code, out.getvalue().decode(), err.getvalue().decode("utf-8", "backslashreplace"))
    finally:
        gc.collect()
        gc.freeze()
        sys.argv = saved_argv
        root.handlers[:] = saved_root
        os.environ.clear()
        os.environ.update(saved_env)
        for handler in logger.handlers:
            if handler not in saved_log[0]:
                handler.close()
        logger.handlers[:] = saved_log[0]
        logger.setLevel(saved_log[1])
        logger.propagate = saved_log[2]


def anthropic_env(server) -> dict:
    return {"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": server.url,
            "NANOAGENT_MODEL": "anthropic/claude-test"}


def openai_env(server) -> dict:
    return {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.url + "/v1", "NANOAGENT_MODEL": "openai/gpt-test"}


def start_gateway_process(env: dict) -> subprocess.Popen:
    """`nanoagent gateway` as a process of its own on env's home, once its socket answers. Its log goes to a file
    beside the home (`gateway.stderr`), never to a pipe nobody reads: a full pipe would stall the gateway."""
    from nanoagent.gateway.oneshot import gateway_answers

    home = Path(env["NANOAGENT_HOME"])
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / "gateway.stderr", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "nanoagent", "gateway"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + PATIENCE
    while not gateway_answers(home / "run" / "gateway.sock"):
        assert proc.poll() is None and time.monotonic() < deadline, (home.parent / "gateway.stderr").read_text()
        time.sleep(0.05)
    return proc
