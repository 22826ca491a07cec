"""Bad values from the user or the disk get one line saying what is wrong and how to fix it, never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nanoagent.errors import NanoagentError
from tests.conftest import PATIENCE, anthropic_env, invoke, write_config
from tests.llm_server import Reply


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nanoagent cannot write: chmod for a normal user; root ignores modes, so it gets a read-only tmpfs."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("running as root without permission to mount a read-only tmpfs")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_home_that_is_a_file_is_one_line_naming_it(tmp_path, llm):
    home = tmp_path / "home-file"
    home.write_text("not a folder\n")
    ran = invoke("agent", "-m", "hi", env={**anthropic_env(llm), "NANOAGENT_HOME": str(home)})
    assert ran.returncode == 1
    assert ran.error_lines == [f"Error: NANOAGENT_HOME {home} is a file, not a folder: move the file away, or set "
                               "NANOAGENT_HOME to a folder."]
    assert home.read_text() == "not a folder\n" and llm.requests == []


def test_a_read_only_home_is_one_line_naming_it_and_its_fix(read_only_folder, llm):
    ran = invoke("agent", "-m", "hi", env={**anthropic_env(llm), "NANOAGENT_HOME": str(read_only_folder)})
    assert ran.returncode == 1
    assert len(ran.error_lines) == 1 and "Traceback" not in ran.stderr
    assert f"NANOAGENT_HOME {read_only_folder} is " in ran.stderr and "set NANOAGENT_HOME to a folder" in ran.stderr
    assert llm.requests == []


def test_a_home_that_cannot_be_created_is_one_line(read_only_folder, llm):
    home = read_only_folder / "home"
    ran = invoke("status", env={"NANOAGENT_HOME": str(home)})
    assert ran.returncode == 1
    assert ran.error_lines[0].startswith(f"Error: Cannot create NANOAGENT_HOME {home} (")
    assert len(ran.error_lines) == 1


def test_a_read_only_sessions_folder_is_one_line_naming_the_session_file(isolated_home, read_only_folder, llm):
    write_config(isolated_home, {})
    os.symlink(read_only_folder, isolated_home / "sessions")
    ran = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert ran.returncode == 1
    session = isolated_home / "sessions" / "cli__direct.jsonl"
    assert len(ran.error_lines) == 1 and ran.error_lines[0].startswith(f"Error: Cannot write {session}")
    assert "folder you can write" in ran.stderr or "writable disk" in ran.stderr


def test_a_full_disk_is_one_line_naming_the_file_and_keeps_the_config(isolated_home, llm):
    config = write_config(isolated_home, {"agents": {"defaults": {"maxTokens": 1000}}})
    before = config.read_bytes()
    (isolated_home / "sessions").mkdir()
    session = isolated_home / "sessions" / "cli__direct.jsonl"
    os.symlink("/dev/full", session)  # every write to it fails with ENOSPC, as on a full disk
    llm.script(Reply(text="never stored"))
    ran = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert ran.returncode == 1
    assert ran.error_lines == [f"Error: Cannot write {session}: No space left on device; free some space on that "
                               "disk and run it again."]
    assert config.read_bytes() == before


def test_a_workspace_flag_naming_a_file_is_one_line(tmp_path, llm):
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    ran = invoke("agent", "-m", "hi", "-w", str(target), env=anthropic_env(llm))
    assert ran.returncode == 1
    assert ran.error_lines == [f"Error: The workspace {target} is a file, not a folder: pass a folder with -w "
                               "(a missing one is created)."]
    assert target.read_text() == "mine\n" and llm.requests == []


@pytest.mark.parametrize("message", ["", "   ", "\n\t"])
def test_an_empty_message_is_nothing_to_send_and_calls_no_model(isolated_home, llm, message):
    ran = invoke("agent", "-m", message, env=anthropic_env(llm))
    assert ran.returncode == 1
    assert ran.error_lines == ["Error: Nothing to send: the message after -m is empty; give it some text."]
    assert llm.requests == []
    assert not (isolated_home / "sessions").exists()


def test_a_message_that_is_not_utf8_is_one_line_naming_the_byte(isolated_home, llm):
    # argv bytes that are not UTF-8 reach Python as surrogate escapes: b"caf\xe9" becomes "caf\udce9"
    ran = invoke("agent", "-m", "caf\udce9", env=anthropic_env(llm))
    assert ran.returncode == 1
    assert ran.error_lines == ["Error: The message is not valid UTF-8 (byte 0xe9); set your terminal and locale to "
                               "UTF-8 (e.g. LANG=C.UTF-8) and send it again."]
    assert llm.requests == [] and not (isolated_home / "sessions").exists()


def test_debug_before_or_after_the_command_lets_the_traceback_through(isolated_home):
    write_config(isolated_home, [])  # a config that is not an object: an expected error
    assert invoke("status").error_lines[0].startswith("Error: ")
    with pytest.raises(NanoagentError):
        invoke("--debug", "status")
    with pytest.raises(NanoagentError):
        invoke("agent", "-m", "hi", "--debug")
    with pytest.raises(NanoagentError):
        invoke("status", env={"NANOAGENT_DEBUG": "1"})


def test_a_message_reading_debug_is_sent_not_taken_for_the_flag(isolated_home, llm):
    llm.script(Reply(echo=True))
    ran = invoke("agent", "-m", "--debug", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert len(llm.requests) == 1


def test_doctor_names_a_home_that_is_a_file_and_the_fix(tmp_path):
    home = tmp_path / "home-file"
    home.write_text("not a folder\n")
    ran = invoke("doctor", env={"NANOAGENT_HOME": str(home)})
    assert ran.returncode == 1
    assert f"FIX   home {home} is a file, not a folder\n      -> move it away, or set NANOAGENT_HOME to a folder" \
        in ran.stdout
    assert home.read_text() == "not a folder\n"


@pytest.mark.process
def test_a_command_started_with_stdin_closed_reads_it_as_empty(isolated_home, llm):
    import sys

    from tests.conftest import ROOT

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nanoagent", *args], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, **anthropic_env(llm)}, timeout=PATIENCE,
                              preexec_fn=lambda: os.close(0))  # as `nanoagent ... <&-`

    onboarded = run("onboard")  # no terminal to ask on: the defaults
    assert onboarded.returncode == 0 and "Traceback" not in onboarded.stderr, onboarded.stderr
    llm.script(Reply(text="hello"))
    answered = run("agent", "-m", "hi")
    assert answered.returncode == 0 and answered.stdout.strip() == "hello", answered.stderr
