"""`nanoagent channels list|add|remove` and `nanoagent pairing` across channels, run in-process through the CLI's
entry point, with the test's fifth channel (`tests/channels/fifth/`) and its API stand-in. `channels add` asks on a
terminal: here its terminal check answers yes and its reader takes the answers from the test's input, one a line."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import time
from pathlib import Path

import pexpect
import pytest

from nanoagent.channels.base import Question
from nanoagent.channels.state import state_file
from nanoagent.cli import channels_cmd
from nanoagent.paths import Paths
from tests import channel_folders, fifth_server
from tests.conftest import PATIENCE, invoke, write_config


@pytest.fixture(autouse=True)
def fifth(monkeypatch: pytest.MonkeyPatch) -> None:
    channel_folders.add(monkeypatch, "fifth")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """`channels add` on a terminal whose person types the test's input; the prompts asked (and whether secret)."""
    asked: list[tuple[str, bool]] = []

    def read(prompt: str, secret: bool) -> str:
        asked.append((prompt, secret))
        return input()

    monkeypatch.setattr("nanoagent.cli.oneshot.stdin_is_terminal", lambda: True)
    monkeypatch.setattr(channels_cmd, "read_answer", read)
    return asked


def config(home) -> dict:
    return json.loads((home / "config.json").read_text())


def test_an_unknown_channel_is_one_line_naming_the_registered_ones():
    for command in (("add", "nope"), ("remove", "nope")):
        ran = invoke("channels", *command)
        assert ran.returncode == 1
        assert len(ran.error_lines) == 1 and "There is no channel named 'nope'; the channels are " in ran.stderr
        assert "fifth" in ran.stderr.split("the channels are ")[1]  # in alphabetical order
    ran = invoke("pairing", "approve", "ABCD-EFGH", "--channel", "nope")
    assert ran.returncode == 1 and "There is no channel named 'nope'" in ran.stderr


def test_channels_add_without_a_terminal_says_to_run_it_on_one_or_edit_config_json(isolated_home):
    ran = invoke("channels", "add", "fifth", input="whatever\n")
    assert ran.returncode == 1
    assert ran.error_lines == [f"Error: `nanoagent channels add fifth` asks for its settings on a terminal: run it on "
                               f"one, or write them under channels.fifth in {isolated_home / 'config.json'} (its guide: "
                               "docs/channels/fifth.md)."]
    assert not (isolated_home / "config.json").exists()


def test_channels_add_asks_checks_the_token_and_writes_config_json_private_keeping_other_keys(isolated_home, terminal):
    write_config(isolated_home, {"agents": {"defaults": {"model": "openai/gpt-4o"}},
                                 "channels": {"fifth": {"streaming": "kept as written"}}})
    with fifth_server.stand_in() as url:
        ran = invoke("channels", "add", "fifth", input=f"{url}\n{fifth_server.TOKEN}\nu-1, u-2\n")
    assert ran.returncode == 0, ran.stderr
    assert [secret for _, secret in terminal] == [False, True, False]
    assert terminal[0][0] == "API base URL [https://fifth.invalid]: "
    written = config(isolated_home)
    assert written["agents"] == {"defaults": {"model": "openai/gpt-4o"}}
    assert written["channels"]["fifth"] == {"streaming": "kept as written", "apiBase": url,
                                            "token": fifth_server.TOKEN, "allowFrom": ["u-1", "u-2"],
                                            "enabled": True}
    assert stat.S_IMODE(os.stat(isolated_home / "config.json").st_mode) == 0o600
    assert "Checked: Fifth knows these credentials (@fifthbot)." in ran.stdout
    assert "Next: start the gateway: `nanoagent gateway`." in ran.stdout
    assert "`nanoagent pairing approve CODE` lets you in" in ran.stdout
    assert fifth_server.TOKEN not in ran.stdout + ran.stderr
    assert [log for log in (isolated_home / "logs").rglob("*") if log.is_file()
            and fifth_server.TOKEN in log.read_text(errors="replace")] == []


@pytest.mark.process
def test_channels_add_on_a_real_terminal_hides_the_token_checks_it_and_writes_config(isolated_home, api):
    write_config(isolated_home, {"channels": {"telegram": {"apiBase": api.url}}})  # the Bot API stand-in
    shown = io.StringIO()
    child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "channels", "add", "telegram"],
                          cwd=str(Path(__file__).parent.parent), encoding="utf-8", timeout=PATIENCE,
                          dimensions=(30, 120), env={**os.environ, "TERM": "xterm-256color",
                                                     "PROMPT_TOOLKIT_NO_CPR": "1"})
    child.logfile_read = shown
    try:
        child.expect(r"[Tt]oken[^\n]*:")
        child.sendline(api.token)
        child.expect(r"user id[^\n]*:")
        child.sendline("1001")
        child.expect(r"Is 1001 you\?")
        child.sendline("")  # yes: the owner, whose private chat sees all their memory
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, shown.getvalue()
    assert "Checked: Telegram knows these credentials (@" in shown.getvalue()
    assert api.token not in shown.getvalue()
    assert config(isolated_home)["channels"]["telegram"] == {"apiBase": api.url, "token": api.token,
                                                             "allowFrom": ["1001"], "owner": ["1001"],
                                                             "enabled": True}


def test_channels_add_again_keeps_a_secret_on_enter_and_shows_it_nowhere(isolated_home, terminal):
    with fifth_server.stand_in() as url:
        write_config(isolated_home, {"channels": {"fifth": {"apiBase": url, "token": fifth_server.TOKEN}}})
        ran = invoke("channels", "add", "fifth", input="\n\n\n")
    assert ran.returncode == 0, ran.stderr
    assert [prompt for prompt, _ in terminal][:2] == [f"API base URL [{url}]: ",
                                                      "Bot token [Enter keeps the current one]: "]
    assert config(isolated_home)["channels"]["fifth"] == {"apiBase": url, "token": fifth_server.TOKEN,
                                                          "enabled": True}


def test_channels_add_writes_a_nested_setting_where_the_file_spells_it_in_snake_case_too(isolated_home, terminal,
                                                                                        monkeypatch):
    questions = [Question("imap.host", "IMAP server"), Question("imap.loginName", "Login")]
    channel_folders.add_like(monkeypatch, "mailish", pairing=False, questions=questions)
    write_config(isolated_home, {"channels": {"mailish": {"imap": {"login_name": "old", "port": 993}}}})
    ran = invoke("channels", "add", "mailish", input="imap.example.com\nada\nn\n")
    assert ran.returncode == 1  # the check (the fifth's: no token) failed, and nothing was saved without a yes
    assert "The check failed: no token: set channels.fifth.token" in ran.stdout
    ran = invoke("channels", "add", "mailish", input="imap.example.com\nada\ny\n")
    assert ran.returncode == 0, ran.stderr
    assert config(isolated_home)["channels"]["mailish"] == {
        "imap": {"port": 993, "host": "imap.example.com", "loginName": "ada"}, "enabled": True}
    assert "Only senders in channels.mailish.allowFrom get an answer (Mailish has no pairing)." in ran.stdout


def test_channels_add_with_a_refused_token_writes_nothing_unless_told_to(isolated_home, terminal):
    with fifth_server.stand_in() as url:
        ran = invoke("channels", "add", "fifth", input=f"{url}\nwrong-token\nu-1\nn\n")
        assert ran.returncode == 1
        assert "The check failed: Fifth refused the token (HTTP 401)" in ran.stdout
        assert ran.error_lines == ["Error: Nothing was written; run `nanoagent channels add fifth` again once it is "
                                   "fixed."]
        assert not (isolated_home / "config.json").exists()
        ran = invoke("channels", "add", "fifth", input=f"{url}\nwrong-token\nu-1\ny\n")
    assert ran.returncode == 0
    assert config(isolated_home)["channels"]["fifth"]["token"] == "wrong-token"
    assert "wrong-token" not in ran.stdout


def test_channels_remove_takes_out_the_block_after_asking_and_keeps_the_rest(isolated_home):
    write_config(isolated_home, {"gateway": {"shutdownGrace": 3}, "channels": {"fifth": {"token": "t"}}})
    ran = invoke("channels", "remove", "fifth")
    assert ran.returncode == 1 and ran.error_lines == [
        "Error: Not removing channels.fifth without asking; add --yes to remove it from a script."]
    assert "fifth" in config(isolated_home)["channels"]
    ran = invoke("channels", "remove", "fifth", "--yes")
    assert ran.returncode == 0, ran.stderr
    assert config(isolated_home) == {"gateway": {"shutdownGrace": 3}, "channels": {}}
    assert stat.S_IMODE(os.stat(isolated_home / "config.json").st_mode) == 0o600
    ran = invoke("channels", "remove", "fifth", "--yes")
    assert ran.returncode == 1 and "has no channels.fifth" in ran.stderr


def pair(name: str, user: str, who: str) -> str:
    code = state_file(Paths.from_env(), name).update(lambda state: state.pair(user, f"chat-{user}", who, time.time()))
    assert code is not None
    return code


def test_a_code_pending_on_two_channels_needs_channel_and_approves_on_that_one_only(monkeypatch, isolated_home):
    channel_folders.add_like(monkeypatch, "sixth")
    code = pair("fifth", "u-1", "Ada")
    state_file(Paths.from_env(), "sixth").update(lambda state: state.pairing.append(
        state_file(Paths.from_env(), "fifth").read().pairing[0]))  # the same code on both (astronomically rare)
    ran = invoke("pairing", "approve", code)
    assert ran.returncode == 1
    assert ran.error_lines == [f"Error: The pairing code {code} is pending on fifth and sixth; say which with "
                               "--channel, e.g. `--channel fifth`."]
    assert invoke("pairing", "approve", code, "--channel", "sixth").returncode == 0
    paths = Paths.from_env()
    assert state_file(paths, "sixth").read().allowed == {"u-1": "Ada"}
    assert state_file(paths, "fifth").read().allowed == {}  # approved for one channel, not for all
    assert invoke("pairing", "approve", code).returncode == 0  # now pending on fifth alone
    ran = invoke("pairing", "revoke", "u-1")
    assert ran.error_lines == ["Error: User u-1 is approved on fifth and sixth; say which with --channel, e.g. "
                               "`--channel fifth`."]
    assert invoke("pairing", "revoke", "u-1", "--channel", "fifth").returncode == 0
    assert state_file(paths, "fifth").read().allowed == {}
    assert state_file(paths, "sixth").read().allowed == {"u-1": "Ada"}
    assert invoke("pairing", "revoke", "u-1").returncode == 0
    ran = invoke("pairing", "revoke", "u-1")
    assert ran.returncode == 1 and "User u-1 was not approved by pairing" in ran.stderr


def test_pairing_deny_drops_a_pending_code_on_whichever_channel_holds_it(monkeypatch, isolated_home):
    channel_folders.add_like(monkeypatch, "sixth")
    code = pair("sixth", "u-9", "Mallory")
    ran = invoke("pairing", "deny", code.lower())
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"Denied {code[:4]}-{code[4:]}: Mallory (Sixth user id u-9) stays out of Sixth.\n"
    assert state_file(Paths.from_env(), "sixth").read().pairing == []
    ran = invoke("pairing", "deny", code)
    assert ran.error_lines == [f"Error: The pairing code {code} is not pending; ask them to message the bot again "
                               "for a new one, and see `nanoagent pairing list`."]


def test_pairing_list_shows_every_channels_codes_and_approvals(monkeypatch, isolated_home):
    channel_folders.add_like(monkeypatch, "sixth")
    assert invoke("pairing", "list").stdout == "No pending pairing codes.\nNobody approved by pairing yet.\n"
    first, second = pair("fifth", "u-1", "Ada"), pair("sixth", "u-2", "Bob")
    assert invoke("pairing", "approve", first).returncode == 0
    lines = invoke("pairing", "list").stdout.splitlines()
    assert lines[:2] == ["pending codes:", f"  {second[:4]}-{second[4:]}  sixth  Bob (user id u-2), 0 min ago"]
    assert lines[2:] == ["approved:", "  fifth  u-1  Ada"]


def test_a_channel_without_pairing_says_so_when_asked(monkeypatch, isolated_home):
    channel_folders.add_like(monkeypatch, "letters", pairing=False)
    ran = invoke("pairing", "approve", "ABCD-EFGH", "--channel", "letters")
    assert ran.returncode == 1
    assert ran.error_lines == ["Error: Letters has no pairing: only senders in channels.letters.allowFrom get an "
                               "answer; add theirs there."]
    write_config(isolated_home, {"channels": {"fifth": {"enabled": True}}})  # letters shares fifth's settings
    assert invoke("pairing", "list").stdout.splitlines()[-1] == (
        "Letters has no pairing: only senders in channels.letters.allowFrom get an answer; add theirs there.")
