"""`doctor` checks what is configured, not only that it is written down: every enabled channel's credentials (one
call to its API, e.g. the Telegram token with getMe at the configured Bot API), every MCP server (started, as `mcp
list` does), and a scheduler when jobs exist."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.conftest import PATIENCE, free_port, invoke, openai_env, start_gateway_process, write_config
from tests.llm_server import Reply
from tests.test_mcp import SERVERS

KEY = {"ANTHROPIC_API_KEY": "sk-ant-" + "x" * 30}


def doctor(live: bool = False, env: dict | None = None) -> tuple[int, list[str]]:
    """`doctor`, `--offline` unless `live` (most tests here are about what else it checks: the live request to the
    model's provider has tests of its own below)."""
    ran = invoke("doctor", *(() if live else ("--offline",)), env=KEY if env is None else env)
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran.returncode, ran.stdout.splitlines()


def line_with(lines: list[str], text: str) -> str:
    return next(line for line in lines if text in line)


def test_doctor_reports_a_bogus_telegram_token_and_passes_a_good_one(isolated_home, api):
    write_config(isolated_home, {"channels": {"telegram": {"enabled": True, "token": "123:bogus",
                                                           "apiBase": api.url}}})
    code, lines = doctor()
    assert code == 1 and "All good." not in lines
    assert line_with(lines, "telegram:") == "FIX   telegram: Telegram rejected the bot token: copy it again from @BotFather."
    assert "123:bogus" not in "\n".join(lines)
    write_config(isolated_home, {"channels": {"telegram": {"enabled": True, "token": api.token, "apiBase": api.url}}})
    code, lines = doctor()
    assert line_with(lines, "telegram:").startswith("ok    telegram: the credentials work (@")


def test_doctor_reports_an_unreachable_bot_api(isolated_home):
    write_config(isolated_home, {"channels": {"telegram": {"enabled": True, "token": "123:abc",
                                                           "apiBase": "http://127.0.0.1:9"}}})
    code, lines = doctor()
    assert code == 1
    assert line_with(lines, "telegram:").startswith("FIX   telegram: Telegram could not check the token (NetworkError")
    assert line_with(lines, "telegram:").endswith("check your network and channels.telegram.apiBase.")
    assert "123:abc" not in "\n".join(lines)


@pytest.mark.process
def test_doctor_starts_each_mcp_server_and_reports_a_dead_one(isolated_home):
    write_config(isolated_home, {"mcpServers": {
        "good": {"command": sys.executable, "args": [SERVERS, "basic"]},
        "dead": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]},
        "off": {"command": "/no/such/program", "enabled": False}}})
    code, lines = doctor()
    assert code == 1 and "All good." not in lines
    assert line_with(lines, "mcp server good").startswith("ok    mcp server good: connected, 9 tool(s)")
    assert line_with(lines, "mcp server dead").startswith("FIX   mcp server dead: ")
    assert not any("mcp server off" in line for line in lines)


def test_doctor_reports_jobs_no_scheduler_runs_until_one_has_ticked(isolated_home):
    assert invoke("cron", "add", "--every", "1h", "-m", "water the plants").returncode == 0
    code, lines = doctor()
    assert code == 1
    scheduler = line_with(lines, "scheduler:")
    assert scheduler.startswith("FIX   scheduler: 1 job(s) scheduled, but no scheduler has run lately")
    assert "nanoagent cron tick" in "\n".join(lines)
    assert invoke("cron", "tick", env=KEY).returncode == 0
    code, lines = doctor()
    assert line_with(lines, "scheduler:").startswith("ok    scheduler: running; 1 job(s) scheduled")


def test_doctor_with_nothing_configured_checks_no_channel_server_or_scheduler_and_is_all_good(isolated_home, llm):
    assert invoke("onboard", "--provider", "anthropic", "--api-key", KEY["ANTHROPIC_API_KEY"], "--api-base",
                  llm.url).returncode == 0
    code, lines = doctor(live=True)
    assert line_with(lines, "anthropic/claude-sonnet-4-5: anthropic answered").startswith("ok    ")
    assert not any(word in line for line in lines for word in ("telegram", "mcp server", "scheduler"))
    assert lines[-1] in ("All good.", "1 thing(s) to fix.")  # the sandbox may not work on this machine


@pytest.mark.process
def test_doctor_says_enabled_channels_serve_nobody_without_a_gateway_and_asks_a_running_ones_endpoint(
        isolated_home, llm):
    port = free_port()
    write_config(isolated_home, {"gateway": {"http": {"enabled": True, "port": port}}})
    code, lines = doctor()
    assert code == 1
    assert line_with(lines, "gateway:").startswith("FIX   gateway: not running, so gateway.http (enabled in config)")
    gateway = start_gateway_process({**os.environ, **openai_env(llm), "NANOAGENT_HOME": str(isolated_home)})
    try:
        log, deadline = isolated_home / "logs" / "gateway.log", time.monotonic() + PATIENCE
        while "http_listening" not in (log.read_text() if log.exists() else ""):  # just after the socket answers
            assert gateway.poll() is None and time.monotonic() < deadline, (isolated_home.parent / "gateway.stderr"
                                                                            ).read_text()
            time.sleep(0.05)
        code, lines = doctor()
        assert line_with(lines, "gateway:") == "ok    gateway: running"
        assert line_with(lines, "http endpoint:") == f"ok    http endpoint: http://127.0.0.1:{port}/health answers"
    finally:
        gateway.terminate()
        gateway.wait(timeout=PATIENCE)


# --- the live request to each configured provider ------------------------------------------------------------------


def providers_config(llm, anthropic_base: str, **defaults) -> dict:
    """The default model on Anthropic at `anthropic_base`, a fallback on OpenAI at the local server."""
    return {"agents": {"defaults": {"model": "anthropic/claude-test", "fallbackModels": ["openai/gpt-test"],
                                    **defaults}},
            "providers": {"anthropic": {"apiKey": KEY["ANTHROPIC_API_KEY"], "apiBase": anthropic_base},
                          "openai": {"apiKey": "sk-test", "apiBase": llm.url + "/v1"}}}


def test_doctor_asks_each_configured_provider_once_and_reports_a_refused_key_with_the_fix(isolated_home, llm):
    write_config(isolated_home, providers_config(llm, llm.url))
    llm.script(Reply(status=401, error_message="invalid x-api-key"))
    code, lines = doctor(live=True, env={})
    assert code == 1 and "All good." not in lines
    refused = lines.index("FIX   anthropic/claude-test: anthropic refused the key (401)")
    assert lines[refused + 1] == "      -> check providers.anthropic.apiKey in config.json, or run `nanoagent onboard`"
    assert line_with(lines, "openai/gpt-test: openai answered").startswith("ok    ")
    assert [(r.api, r.body["max_tokens"]) for r in llm.requests] == [("anthropic", 1), ("openai", 1)]


def test_doctor_reports_a_server_that_is_not_running_and_is_all_good_once_it_answers(isolated_home, llm):
    closed = f"http://127.0.0.1:{free_port()}"
    write_config(isolated_home, providers_config(llm, closed))
    code, lines = doctor(live=True, env={})
    assert code == 1
    problem = lines.index(f"FIX   anthropic/claude-test: cannot connect to {closed} (connection refused)")
    assert lines[problem + 1] == "      -> start the server, or fix providers.anthropic.apiBase"
    write_config(isolated_home, providers_config(llm, llm.url))
    code, lines = doctor(live=True, env={})
    assert not [line for line in lines if "claude-test" in line and line.startswith("FIX")]


def test_doctor_says_ollama_needs_no_key_and_names_a_model_it_has_not_pulled(isolated_home, llm):
    write_config(isolated_home, {"agents": {"defaults": {"model": "ollama/llama3.1"}},
                                 "providers": {"ollama": {"apiBase": llm.url + "/v1"}}})
    llm.models = ["qwen2.5:latest"]
    code, lines = doctor(live=True, env={})
    assert code == 1 and "All good." not in lines
    assert "ok    agents.defaults.model is ollama/llama3.1: ollama needs no key" in lines
    assert not any("API key for ollama" in line for line in lines)
    missing = lines.index(f"FIX   ollama/llama3.1: Ollama at {llm.url}/v1 does not have the model (it has qwen2.5:latest)")
    assert lines[missing + 1] == "      -> run `ollama pull llama3.1`, or choose a model it has"
    llm.models = ["qwen2.5:latest", "llama3.1:latest"]
    code, lines = doctor(live=True, env={})
    assert f"ok    ollama/llama3.1: Ollama at {llm.url}/v1 has the model" in lines
    assert [r.api for r in llm.requests] == ["models", "models"]  # no completion: it would load the model


def test_doctor_offline_makes_no_request_and_says_so_in_one_line(isolated_home, llm):
    write_config(isolated_home, providers_config(llm, llm.url))
    code, lines = doctor(env={})
    assert llm.requests == []
    assert [line for line in lines if "--offline" in line] == [
        "ok    providers not contacted (--offline); without it doctor makes one small request to each"]
