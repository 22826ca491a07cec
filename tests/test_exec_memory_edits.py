"""A command (exec) that edits USER.md or memory/MEMORY.md is the agent's edit in the memory history, as the file
tools' edits are: `dream-log` says so, and a hand edit made before it stays the user's own."""

from __future__ import annotations

import asyncio

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.memory.gitlog import MemoryGit
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.tools.sandbox import check_bwrap
from tests.conftest import invoke

BWRAP = check_bwrap()
MODES = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP.ok, reason=f"no sandbox here: "
                                                                  f"{BWRAP.explain()}"))]


def exec_turn(paths: Paths, command: str, mode: str = "none") -> str:
    config = Config()
    config.tools.exec.sandbox = mode
    config.tools.exec.approve = "never"
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("exec", {"command": command})]), "done"])
    loop = build_agent(config, paths, provider=provider)
    asyncio.run(loop.handle("remember that", "cli:direct"))
    return [m for m in loop.session("cli:direct").messages if m["role"] == "tool"][-1]["content"]


def memory_git(paths: Paths) -> MemoryGit:
    return MemoryGit(paths.workspace, paths.memory_git_dir)


@pytest.mark.parametrize("mode", MODES)
def test_a_command_that_edits_user_md_and_memory_md_is_the_agents_edit_in_dream_log(mode):
    paths = Paths.from_env()
    result = exec_turn(paths, "echo 'Name: Ada' >> USER.md && echo '- likes tea' >> memory/MEMORY.md", mode)
    assert "[exit code: 0]" in result

    newest = memory_git(paths).log(1)[0]
    assert newest.author == "agent" and set(newest.files) == {"USER.md", "memory/MEMORY.md"}
    listing = invoke("dream-log", "-w", str(paths.workspace), env={"COLUMNS": "250"})
    assert listing.returncode == 0, listing.stderr
    first = next(line for line in listing.stdout.splitlines() if line.startswith(newest.short))
    assert "exec by the agent (session cli:direct)" in first and "Your edit" not in listing.stdout


def test_a_hand_edit_made_before_the_command_stays_the_users_and_survives_undoing_the_command():
    paths = Paths.from_env()
    exec_turn(paths, "true")  # the workspace and its memory history exist
    user_md = paths.workspace / "USER.md"
    user_md.write_text(user_md.read_text() + "hand line\n")

    exec_turn(paths, "echo 'agent line' >> USER.md")

    agents, users = memory_git(paths).log(2)
    assert (agents.author, users.author) == ("agent", "user")
    assert users.summary == "Your edit: USER.md"
    assert "+agent line" in memory_git(paths).show(agents.short)
    assert "agent line" not in memory_git(paths).show(users.short)
    restored = invoke("dream-restore", agents.short, "-w", str(paths.workspace))
    assert restored.returncode == 0, restored.stderr
    assert user_md.read_text().endswith("hand line\n")


def test_a_command_that_changes_no_memory_file_adds_no_commit():
    paths = Paths.from_env()
    exec_turn(paths, "true")
    before = memory_git(paths).log(50)
    exec_turn(paths, "echo notes > notes.txt")
    assert memory_git(paths).log(50) == before
