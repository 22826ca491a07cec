"""Shared fixtures: an isolated home for every test, the local LLM server, and a CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def anthropic_env(server) -> dict:
    return {"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": server.url,
            "NANOAGENT_MODEL": "anthropic/claude-test"}


def openai_env(server) -> dict:
    return {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.url + "/v1", "NANOAGENT_MODEL": "openai/gpt-test"}
