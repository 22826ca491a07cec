import json
import os

import pytest

from nanoagent.config import load_config
from nanoagent.errors import ConfigError
from tests.conftest import invoke, write_config


def test_defaults_apply_when_there_is_no_config_file(tmp_path):
    config, warnings = load_config(tmp_path / "missing.json", env={})
    assert config.defaults.model == "anthropic/claude-sonnet-4-5"
    assert config.defaults.max_tool_iterations == 100
    assert config.tools.restrict_to_workspace is True
    assert warnings == []


def test_camel_case_and_snake_case_keys_are_both_read(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"agents": {"defaults": {"maxTokens": 100, "context_window_tokens": 5000}},
                                "tools": {"exec": {"timeout": 7}, "restrictToWorkspace": False}}))
    config, _ = load_config(path, env={})
    assert (config.defaults.max_tokens, config.defaults.context_window_tokens) == (100, 5000)
    assert config.tools.exec.timeout == 7
    assert config.tools.restrict_to_workspace is False


def test_unknown_keys_warn_but_never_refuse_to_start(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"agents": {"defaults": {"staleKey": 1}}, "gateway": {"port": 1}}))
    config, warnings = load_config(path, env={})
    assert config.defaults.max_tokens == 8192
    assert any("staleKey" in w for w in warnings) and any("gateway" in w for w in warnings)


def test_renamed_key_is_migrated_in_memory_with_a_warning(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"agents": {"defaults": {"maxToolIteration": 7}}}))
    config, warnings = load_config(path, env={})
    assert config.defaults.max_tool_iterations == 7
    assert any("renamed" in w for w in warnings)


def test_wrong_type_names_the_key_and_the_fix(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"agents": {"defaults": {"maxTokens": "lots"}}}))
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert "agents.defaults.maxTokens" in str(info.value) and "whole number" in str(info.value)


def test_invalid_json_names_file_and_position(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"agents": {"defaults": {"model": "x",}}}')
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert str(path) in str(info.value) and "line 1, column" in str(info.value)


def test_environment_overrides_the_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"agents": {"defaults": {"model": "openai/gpt-4.1"}},
                                "providers": {"anthropic": {"apiKey": "from-file"}}}))
    config, _ = load_config(path, env={"NANOAGENT_MODEL": "anthropic/claude-x", "ANTHROPIC_API_KEY": "from-env"})
    assert config.defaults.model == "anthropic/claude-x"
    assert config.provider("anthropic").api_key == "from-env"


def test_standard_variables_work_without_a_config_file(tmp_path):
    config, _ = load_config(tmp_path / "none.json",
                            env={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://x/v1"})
    assert config.provider("openai").api_key == "k"
    assert config.provider("openai").api_base == "http://x/v1"


def test_cli_reports_corrupt_config_in_one_line_and_leaves_the_file_alone(isolated_home):
    path = write_config(isolated_home, {})
    path.write_text("{not json")
    before = path.read_bytes()
    proc = invoke("agent", "-m", "hi")
    assert proc.returncode == 1
    assert "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert path.read_bytes() == before


def test_cli_reports_wrong_type_with_exit_code_1(isolated_home):
    write_config(isolated_home, {"tools": {"exec": {"timeout": "soon"}}})
    proc = invoke("status")
    assert proc.returncode == 1
    assert "tools.exec.timeout" in proc.stderr and "Traceback" not in proc.stderr


def test_wrong_type_is_one_stderr_line_and_leaves_the_file_byte_identical(isolated_home):
    path = write_config(isolated_home, {})
    path.write_bytes(b'{\n  "agents": {"defaults": {"maxTokens": "lots"}},\n  "tools": {}\n}\n')
    before = path.read_bytes()
    for args in (("status",), ("agent", "-m", "hi")):
        proc = invoke(*args)
        assert proc.returncode == 1
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, proc.stderr
        assert "agents.defaults.maxTokens" in lines[0] and "whole number" in lines[0] and str(path) in lines[0]
    assert path.read_bytes() == before


def test_unreadable_config_is_a_clear_error(isolated_home):
    if os.geteuid() == 0:
        path = write_config(isolated_home, {})
        path.unlink()
        path.mkdir()  # root can read any file, but not a directory as a file
    else:
        path = write_config(isolated_home, {})
        path.chmod(0)
    proc = invoke("status")
    assert proc.returncode == 1
    assert "Cannot read" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_key_names_the_variable_and_onboard(isolated_home):
    proc = invoke("agent", "-m", "hi")
    assert proc.returncode == 1
    assert "ANTHROPIC_API_KEY" in proc.stderr and "nanoagent onboard" in proc.stderr


def test_unknown_model_and_unknown_provider_are_clear_errors(isolated_home):
    proc = invoke("agent", "-m", "hi", "--model", "mystery-model")
    assert proc.returncode == 1 and "Unknown model 'mystery-model'" in proc.stderr
    proc = invoke("agent", "-m", "hi", "--model", "nosuchvendor/model-1")
    assert proc.returncode == 1 and "Unknown provider 'nosuchvendor'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_onboard_creates_private_config_and_workspace_without_overwriting(isolated_home):
    proc = invoke("onboard", "--provider", "anthropic", "--api-key", "sk-ant-secret-0123456789abcdef")
    assert proc.returncode == 0, proc.stderr
    config = isolated_home / "config.json"
    assert config.stat().st_mode & 0o777 == 0o600
    soul = isolated_home / "workspace" / "SOUL.md"
    soul.write_text("my own soul")
    proc = invoke("onboard")
    assert proc.returncode == 0
    assert soul.read_text() == "my own soul"
    assert json.loads(config.read_text())["providers"]["anthropic"]["apiKey"] == "sk-ant-secret-0123456789abcdef"
    assert "sk-ant-secret-0123456789abcdef" not in proc.stdout + proc.stderr


def test_status_shows_key_presence_but_never_the_key(isolated_home):
    proc = invoke("status", env={"ANTHROPIC_API_KEY": "sk-ant-very-secret"})
    assert proc.returncode == 0
    assert "api key:   set" in proc.stdout
    assert "sk-ant-very-secret" not in proc.stdout
    assert str(isolated_home / "sessions") in proc.stdout


def numeric_settings():
    """(camelCase path, field) for every number in the schema."""
    import dataclasses
    import typing

    from nanoagent.config.loader import to_camel
    from nanoagent.config.schema import Config

    def walk(cls, prefix):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            name = prefix + to_camel(f.name)
            if dataclasses.is_dataclass(tp):
                yield from walk(tp, name + ".")
            elif typing.get_origin(tp) not in (list, dict) and {int, float} & set(typing.get_args(tp) or (tp,)):
                yield name, f

    return list(walk(Config, ""))


def test_every_numeric_setting_has_a_range_holding_its_default():
    settings = numeric_settings()
    assert len(settings) >= 14
    for name, f in settings:
        assert "range" in f.metadata, name
        low, high = f.metadata["range"]
        assert f.default is None or low <= f.default <= high, name


@pytest.mark.parametrize(("key", "value", "range_text"), [
    ("agents.defaults.maxTokens", -5, "from 1 to 1000000, got -5"),
    ("tools.exec.timeout", -1, "from 1 to 86400, got -1"),
    ("agents.defaults.streamIdleTimeout", 0, "from 1 to 3600, got 0"),
    ("agents.defaults.maxRetries", 1000000, "from 0 to 20, got 1000000"),
    ("agents.defaults.temperature", 2.5, "from 0 to 2, got 2.5"),
    ("memory.dreamBatchSize", 0, "from 1 to 1000, got 0"),
])
def test_a_value_out_of_range_is_one_line_naming_the_key_and_range_and_the_file_stays_byte_identical(
        isolated_home, key, value, range_text):

    data: dict = {}
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    path = write_config(isolated_home, data)
    before = path.read_bytes()
    for args in (("status",), ("agent", "-m", "hi"), ("doctor", "--fix")):
        ran = invoke(*args, env={"ANTHROPIC_API_KEY": "sk-ant-test"})
        assert ran.returncode == 1, args
        problem = f"{path}: `{key}` must be {range_text}; fix the value or delete the key."
        if args[0] == "doctor":
            assert f"FIX   {problem}" in ran.stdout
        else:
            assert ran.error_lines == [f"Error: {problem}"]
    assert path.read_bytes() == before


def test_the_ends_of_a_range_are_accepted(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"agents": {"defaults": {"maxRetries": 0, "maxTokens": 1000000, "temperature": 0}},
                                "tools": {"exec": {"timeout": 86400}}}))
    config, _ = load_config(path, env={})
    assert (config.defaults.max_retries, config.defaults.max_tokens, config.tools.exec.timeout) == (0, 1000000, 86400)
