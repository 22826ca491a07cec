"""Errors that say the fix: a refused key, an unknown model, a server that is not there and a missing key are one
line naming the setting to change, sent once (retrying cannot fix them). Through the CLI, against the local server
and a closed port, for each provider path: the Anthropic Messages API and the OpenAI-compatible API over httpx, and litellm."""

import pytest

from tests.conftest import anthropic_env, free_port, invoke, openai_env, write_config
from tests.llm_server import Reply


def litellm_env(server) -> dict:
    return {**openai_env(server), "NANOAGENT_MODEL": "litellm/openai/gpt-test"}


PATHS = {  # provider path -> (environment for the local server, the settings an error names: the variables the
    # environment gave, base URL suffix)
    "anthropic": (anthropic_env, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ""),
    "openai": (openai_env, "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1"),
    "litellm": (litellm_env, "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1"),
}


def error_line(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1
    assert len(lines) == 1, proc.stderr  # one line: no retry notices, no traceback
    return lines[0]


@pytest.mark.parametrize("path", PATHS)
def test_a_refused_key_is_sent_once_and_names_the_key_settings(llm, path):
    env, keys, _, suffix = PATHS[path]
    llm.default_reply = Reply(status=401, error_message="invalid x-api-key")
    line = error_line(invoke("agent", "-m", "hi", env=env(llm)))
    assert f"401 from {llm.url}{suffix}: invalid x-api-key: the key for" in line
    assert f"({keys}) was refused; check it" in line
    assert len(llm.requests) == 1


@pytest.mark.parametrize("path", PATHS)
def test_an_unknown_model_is_sent_once_and_names_the_model_setting(llm, path):
    env, _, base_setting, suffix = PATHS[path]
    llm.default_reply = Reply(status=404, error_message="model: gpt-test")
    line = error_line(invoke("agent", "-m", "hi", env=env(llm)))
    assert f"404 from {llm.url}{suffix}: model: gpt-test: check the model name (agents.defaults.model" in line
    assert base_setting in line
    assert len(llm.requests) == 1


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("status", [400, 403])
def test_a_forbidden_or_bad_request_is_sent_once(llm, path, status):
    env = PATHS[path][0]
    llm.default_reply = Reply(status=status, error_message="not for you")
    line = error_line(invoke("agent", "-m", "hi", env=env(llm)))
    assert f"{status}" in line and "not for you" in line
    assert len(llm.requests) == 1


@pytest.mark.parametrize("path", PATHS)
def test_a_server_that_is_not_there_is_named_with_its_url_at_once(path):
    class Closed:  # stands in for the server: the same settings, a port nothing listens on
        url = f"http://127.0.0.1:{free_port()}"

    env, _, base_setting, suffix = PATHS[path]
    line = error_line(invoke("agent", "-m", "hi", env=env(Closed)))
    assert f"cannot connect to {Closed.url}{suffix} (connection refused): is the server running? " in line
    assert f"check {base_setting}" in line  # and no "retrying" line before it (error_line)


def test_a_litellm_provider_without_a_key_says_which_variable_and_sends_nothing(isolated_home, monkeypatch):
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    line = error_line(invoke("agent", "-m", "hi", "--model", "mistral/mistral-small-latest"))
    assert "No API key for mistral: set MISTRAL_API_KEY or providers.mistral.apiKey in config.json" in line
    assert "http" not in line  # no long URL: nothing was sent


def test_a_server_error_is_still_retried(llm):
    llm.script(Reply(status=503, headers={"retry-after": "0"}), Reply(text="back again"))
    proc = invoke("agent", "-m", "hi", env={**openai_env(llm)})
    assert proc.returncode == 0 and "back again" in proc.stdout
    assert len(llm.requests) == 2


def test_a_missing_key_for_a_model_given_with_model_suggests_the_keyed_providers_model(isolated_home, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    env = {"ANTHROPIC_API_KEY": "sk-ant-x", "NANOAGENT_MODEL": "anthropic/claude-test"}
    line = error_line(invoke("agent", "-m", "hi", "--model", "openai/gpt-4.1", env=env))
    assert "No API key for openai (model openai/gpt-4.1): set OPENAI_API_KEY" in line
    assert line.endswith("a key is set for anthropic: use one of its models instead, such as anthropic/claude-test.")


def test_a_missing_key_for_the_configured_model_names_the_setting_to_change(isolated_home, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    env = {"ANTHROPIC_API_KEY": "sk-ant-x", "NANOAGENT_MODEL": "openai/gpt-4.1"}
    line = error_line(invoke("agent", "-m", "hi", env=env))
    assert "No API key for openai (NANOAGENT_MODEL is openai/gpt-4.1)" in line
    assert "a key is set for anthropic: to use it, set NANOAGENT_MODEL to anthropic/claude-sonnet-4-5" in line


@pytest.mark.parametrize(("provider", "model", "suffix"), [("anthropic", "anthropic/claude-test", ""),
                                                          ("openai", "openai/gpt-test", "/v1")])
def test_a_key_and_url_from_config_json_are_named_as_its_settings_not_as_variables(llm, isolated_home, provider,
                                                                                     model, suffix):
    def configure(url: str) -> None:
        write_config(isolated_home, {"providers": {provider: {"apiKey": "sk-test", "apiBase": url + suffix}},
                                     "agents": {"defaults": {"model": model}}})

    configure(llm.url)
    llm.default_reply = Reply(status=401, error_message="invalid key")
    line = error_line(invoke("agent", "-m", "hi"))
    assert f"the key for {provider} (providers.{provider}.apiKey in config.json) was refused" in line
    assert "_API_KEY" not in line
    configure(f"http://127.0.0.1:{free_port()}")
    line = error_line(invoke("agent", "-m", "hi"))
    assert line.endswith(f"is the server running? check providers.{provider}.apiBase.") and "BASE_URL" not in line


def test_a_fallback_without_a_key_is_skipped_with_one_warning_and_the_primary_answers(llm, isolated_home, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keyless = "openai/gpt-keyless-fallback"  # warned about once per process: a name no other test uses
    write_config(isolated_home, {"agents": {"defaults": {"fallbackModels": [keyless, "anthropic/claude-spare"]}}})
    llm.default_reply = Reply(text="from the primary")
    proc = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    assert "from the primary" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    assert warnings == [f"warning: Fallback model {keyless} is skipped: no API key for openai; set OPENAI_API_KEY "
                        "(or providers.openai.apiKey in config.json) to use it, or remove it from "
                        "agents.defaults.fallbackModels."]
    proc = invoke("agent", "-m", "again", env=anthropic_env(llm))
    assert proc.returncode == 0 and "from the primary" in proc.stdout
    assert "warning" not in proc.stderr  # once per process
    assert len(llm.requests) == 2


def test_a_keyed_fallback_still_answers_when_a_keyless_one_is_skipped(llm, isolated_home, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    write_config(isolated_home, {"agents": {"defaults": {"maxRetries": 0,
                                                         "fallbackModels": ["openai/gpt-keyless-2", "anthropic/spare"]}}})
    llm.script(Reply(status=529), Reply(text="from the keyed fallback"))
    proc = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    assert "from the keyed fallback" in proc.stdout
    assert [r.body["model"] for r in llm.requests] == ["claude-test", "spare"]


def test_a_primary_without_a_key_still_fails_with_its_clear_error(isolated_home, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    write_config(isolated_home, {"agents": {"defaults": {"fallbackModels": ["anthropic/claude-test"]}}})
    env = {"ANTHROPIC_API_KEY": "sk-ant-x", "NANOAGENT_MODEL": "openai/gpt-4.1"}
    line = error_line(invoke("agent", "-m", "hi", env=env))
    assert line.startswith("Error: No API key for openai (NANOAGENT_MODEL is openai/gpt-4.1): set OPENAI_API_KEY")
