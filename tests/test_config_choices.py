"""Settings with a fixed set of choices are checked in one place, where config is built (file or code), and Telegram
ids may be written as strings of digits, as nanobot's and OpenClaw's configs write them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nanoagent.channels import registry
from nanoagent.channels.telegram.settings import TelegramConfig
from nanoagent.config.loader import load_config
from nanoagent.config.schema import ExecConfig, WebSearchConfig
from nanoagent.errors import ConfigError
from tests.conftest import PATIENCE, ROOT, invoke, openai_env, write_config
from tests.llm_server import Reply

ANN = 42


@pytest.mark.parametrize("settings, key, choices", [
    ({"tools": {"exec": {"sandbox": "maybe"}}}, "tools.exec.sandbox", "auto, bwrap, none"),
    ({"tools": {"exec": {"approve": "sometimes"}}}, "tools.exec.approve", "never, unsandboxed, always"),
    ({"channels": {"telegram": {"groupPolicy": "everyone"}}}, "channels.telegram.groupPolicy", "mention, all, off"),
    ({"tools": {"web": {"search": {"provider": "google"}}}}, "tools.web.search.provider", "brave, tavily"),
])
def test_a_setting_outside_its_choices_is_one_line_naming_the_file_the_key_and_the_choices(
        isolated_home, llm, settings, key, choices):
    config = write_config(isolated_home, settings)
    ran = invoke("agent", "-m", "hi", env=openai_env(llm))
    assert ran.returncode == 1 and llm.requests == []
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith(f"Error: {config}: `{key}` is ") and f"use one of {choices}" in line


def test_settings_built_in_code_are_held_to_the_same_choices():
    for build in (lambda: ExecConfig(sandbox="maybe"), lambda: ExecConfig(approve="sometimes"),
                  lambda: TelegramConfig(group_policy="everyone"), lambda: WebSearchConfig(provider="google")):
        with pytest.raises(ConfigError, match="; use one of "):
            build()
    assert ExecConfig(approve=None).approve is None and WebSearchConfig().provider == ""


def test_allow_from_is_a_list_of_strings_for_every_channel_and_numbers_are_read_as_their_digits(tmp_path):
    path = write_config(tmp_path, {"channels": {"telegram": {"allowFrom": ["1001", 1002, " 1003 "]},
                                                "discord": {"allowFrom": [123456789012345678]}}})
    config = load_config(path, env={})[0]
    assert registry.get("telegram").settings(config).allow_from == ["1001", "1002", " 1003 "]  # the channel normalises them
    assert registry.get("discord").settings(config).allow_from == ["123456789012345678"]
    write_config(tmp_path, {"channels": {"slack": {"allowFrom": [True]}}})
    with pytest.raises(ConfigError, match=r"`channels\.slack\.allowFrom\[0\]` must be a string"):
        load_config(path, env={})
    write_config(tmp_path, {"agents": {"defaults": {"maxTokens": "1000"}}})  # only ids take strings
    with pytest.raises(ConfigError, match="must be a whole number, got"):
        load_config(path, env={})


@pytest.mark.process
def test_the_gateway_answers_a_telegram_user_allowed_by_a_string_id(api, llm, isolated_home, tmp_path):
    write_config(isolated_home, {"channels": {"telegram": {"enabled": True, "allowFrom": [str(ANN)],
                                                           "apiBase": api.url}}})
    llm.script(Reply(text="Hello, Ann."))
    log_path = tmp_path / "gateway.err"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "nanoagent", "gateway"], cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=log,
                                env={**os.environ, **openai_env(llm), "TELEGRAM_BOT_TOKEN": api.token})
    try:
        api.message("hi", user_id=ANN)
        deadline = time.monotonic() + PATIENCE
        while "Hello, Ann." not in api.texts(ANN):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(timeout=PATIENCE)
