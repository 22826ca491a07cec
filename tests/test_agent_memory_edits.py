"""The agent's own edits of memory files (with write_file and edit_file) are commits in the memory history."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner

from nanoagent.agent.build import build_agent
from nanoagent.cli.app import app
from nanoagent.config.schema import Config
from nanoagent.memory.gitlog import MemoryGit
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply


def turn(paths: Paths, *calls: tuple[str, dict], key: str = "cli:direct", warn=lambda message: None) -> list[dict]:
    """One turn in which the model makes these tool calls; returns their results."""
    provider = ScriptedProvider([ScriptedReply(tool_calls=list(calls)), "done"])
    loop = build_agent(Config(), paths, provider=provider, warn=warn)
    asyncio.run(loop.handle("remember that", key))
    return [m for m in loop.session(key).messages if m["role"] == "tool"][-len(calls):]


def memory_git(paths: Paths) -> MemoryGit:
    return MemoryGit(paths.workspace, paths.memory_git_dir)


def test_an_edit_of_user_md_is_the_agents_commit_and_dream_restore_undoes_it():
    paths = Paths.from_env()
    [result] = turn(paths, ("edit_file", {"path": "USER.md", "old_text": "# User", "new_text": "# User\n\nName: Ada"}))
    assert result.get("is_error") is None
    assert "Name: Ada" in (paths.workspace / "USER.md").read_text()

    newest = memory_git(paths).log(1)[0]
    assert newest.author == "agent" and newest.files == ("USER.md",)
    assert newest.summary == "USER.md: edit_file by the agent (session cli:direct)"

    runner = CliRunner()
    listing = runner.invoke(app, ["dream-log", "-w", str(paths.workspace)], env={"COLUMNS": "200"})
    assert listing.exit_code == 0, listing.output
    assert newest.short in listing.output and "edit_file by the agent (session cli:direct)" in listing.output
    restored = runner.invoke(app, ["dream-restore", newest.short, "-w", str(paths.workspace)])
    assert restored.exit_code == 0, restored.output
    assert "Name: Ada" not in (paths.workspace / "USER.md").read_text()
    assert memory_git(paths).log(1)[0].author == "restore"


def test_a_hand_edit_made_before_the_agents_edit_stays_the_users_and_survives_the_undo():
    paths = Paths.from_env()
    turn(paths)  # the workspace exists and the memory history starts from its files
    mg = memory_git(paths)
    mg.ensure()
    memory = paths.workspace / "memory" / "MEMORY.md"
    memory.write_text(memory.read_text() + "- typed by hand\n")
    turn(paths, ("write_file", {"path": "memory/MEMORY.md", "content": memory.read_text() + "- the agent's note\n"}))

    agent, user = mg.log(2)
    assert (agent.author, user.author) == ("agent", "user")
    assert agent.summary.startswith("memory/MEMORY.md: write_file by the agent")
    mg.restore(agent.short)
    assert memory.read_text().endswith("- typed by hand\n")


def test_a_skill_the_agent_writes_is_committed_and_other_files_are_not():
    paths = Paths.from_env()
    skill = "---\nname: tea\ndescription: how the user likes tea\n---\nSteep four minutes.\n"
    turn(paths, ("write_file", {"path": "skills/tea/SKILL.md", "content": skill}),
         ("write_file", {"path": "notes.md", "content": "not memory\n"}), key="cli:work")
    newest = memory_git(paths).log(1)[0]
    assert newest.author == "agent" and newest.files == ("skills/tea/SKILL.md",)
    assert "session cli:work" in newest.summary
    assert all("notes.md" not in c.files for c in memory_git(paths).log())


def test_without_git_the_edit_is_still_made_with_a_warning(monkeypatch):
    paths = Paths.from_env()
    warnings: list[str] = []
    empty = paths.home / "empty-path"
    empty.mkdir(parents=True)
    monkeypatch.setenv("PATH", str(empty))  # no git binary to be found
    [result] = turn(paths, ("edit_file", {"path": "USER.md", "old_text": "# User", "new_text": "# User\n\nName: Bo"}),
                    warn=warnings.append)
    assert result.get("is_error") is None
    assert "Name: Bo" in (paths.workspace / "USER.md").read_text()
    assert any("not in the memory history" in w and "git" in w for w in warnings)
