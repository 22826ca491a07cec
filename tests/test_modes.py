"""Whatever the umask, what nanoagent keeps under its home is the user's alone: folders 0700, files 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nanoagent.cli.interactive import build_prompt
from nanoagent.memory.history import HistoryLog
from tests.conftest import anthropic_env, invoke, write_config
from tests.llm_server import Reply


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def modes(home: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(home.stat().st_mode)}
    for root, folders, files in os.walk(home):
        for name in folders + files:
            path = Path(root) / name
            found[str(path.relative_to(home))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def store_an_input_line(history_file: Path) -> None:
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    with create_pipe_input() as pipe:
        prompt = build_prompt(["/help"], lambda: "", history_file, input=pipe, output=DummyOutput())
        prompt.history.append_string("hello")


def test_everything_under_the_home_is_private_whatever_the_umask(umask, isolated_home, llm):
    env = anthropic_env(llm)
    assert invoke("onboard", "--provider", "anthropic", "--api-key", "sk-ant-" + "x" * 30).returncode == 0
    llm.script(Reply(tool_calls=[("memory_search", {"query": "boat"})]), Reply(text="Nothing about boats yet."))
    ran = invoke("agent", "-m", "what is my boat called?", env=env)
    assert ran.returncode == 0, ran.stderr
    HistoryLog(isolated_home / "workspace" / "memory").append("cli:direct", "- the user's boat is called Gull")
    llm.script(Reply(text="## memory/MEMORY.md\n- ADD: boat Gull"),
               Reply(tool_calls=[("append_to_file", {"path": "memory/MEMORY.md", "text": "- Boat: Gull",
                                                     "summary": "add: boat"})]), Reply(text="Added."))
    ran = invoke("dream", env=env)
    assert ran.returncode == 0, ran.stderr
    store_an_input_line(isolated_home / "history" / "cli_history")

    found = modes(isolated_home)
    expected_files = ["config.json", "logs/nanoagent.log", "sessions/cli__direct.jsonl", "history/cli_history",
                      "workspace/memory/history.jsonl", "workspace/memory/.cursor", "workspace/memory/.dream_cursor",
                      "workspace/memory/MEMORY.md"]
    assert all(name in found for name in expected_files), sorted(found)
    assert any(name.startswith("index/") and name.endswith(".sqlite") for name in found)
    assert any(name.startswith("git/") and name.endswith(".git") for name in found)
    folders = {name: mode for name, mode in found.items() if (isolated_home / name).is_dir()}
    files = {name: mode for name, mode in found.items() if name not in folders}
    assert {name: oct(mode) for name, mode in folders.items() if mode != 0o700} == {}
    git_own = {name for name in files if ".git/" in name}  # git's read-only objects (0400), sample hooks (0700)
    assert {name: oct(mode) for name, mode in files.items() if mode != 0o600 and name not in git_own} == {}
    assert {name: oct(mode) for name, mode in files.items() if name in git_own and mode & 0o077} == {}


def test_a_home_made_open_by_an_older_version_is_made_private_where_nanoagent_opens_it(isolated_home, llm):
    write_config(isolated_home, {})
    (isolated_home / "sessions").mkdir(mode=0o755)
    (isolated_home / "logs").mkdir(mode=0o755)
    session = isolated_home / "sessions" / "cli__direct.jsonl"
    log = isolated_home / "logs" / "nanoagent.log"
    for path in (session, log):
        path.write_text("")
        path.chmod(0o644)
    isolated_home.chmod(0o755)
    ran = invoke("agent", "-m", "hi", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert ran.error_lines == []  # tightening nanoagent's own files is expected, not news
    assert {name: oct(stat.S_IMODE(p.stat().st_mode)) for name, p in
            {"home": isolated_home, "session": session, "log": log}.items()} == {
        "home": "0o700", "session": "0o600", "log": "0o600"}
