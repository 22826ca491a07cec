"""Shared fixtures: an isolated home for every test, the local LLM server, and two CLI runners.

`invoke` runs the `nanoagent` command in this process (fast: the SDKs are imported once); `run_cli` runs it
as a real process, for what needs one (kill -9, two writers, import time, a terminal).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROVIDER_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                "OPENROUTER_API_KEY", "NANOAGENT_MODEL", "NANOAGENT_DEBUG", "OLLAMA_API_BASE")


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


def fast_retries(**extra) -> dict:
    """Config defaults that keep retry tests quick."""
    return {"agents": {"defaults": {"retryBaseDelay": 0.01, "maxRetries": 2, "streamIdleTimeout": 2, **extra}}}


def run_cli(*args: str, env: dict | None = None, timeout: float = 60, cwd: Path | None = None,
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


def invoke(*args: str, env: dict | None = None, input: str | None = None) -> Ran:
    """Run `nanoagent ARGS` in this process through its console-script entry point (`main`, the one error
    boundary), inside typer's CliRunner isolation: stdin is `input` (not a terminal), stdout and stderr are
    captured, `env` overrides the environment for this run only.

    Logging starts as in a new process: no handlers on the root logger (pytest's are set aside), so a record
    nothing handles reaches stderr through logging's last resort. A run leaves no state behind for the next
    one: the environment (the CLI sets variables such as TIKTOKEN_CACHE_DIR) and the "nanoagent" logger (it
    opens its log file once per process, in the home of that run) are put back as they were, and its garbage
    is collected while no event loop runs, as at a process exit (an SDK client left open would otherwise be
    closed from the next run's event loop, and fail there). An exception that escapes `main` propagates, as
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
    deadline = time.monotonic() + 20
    while not gateway_answers(home / "run" / "gateway.sock"):
        assert proc.poll() is None and time.monotonic() < deadline, (home.parent / "gateway.stderr").read_text()
        time.sleep(0.05)
    return proc
