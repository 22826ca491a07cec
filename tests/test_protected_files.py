"""The file tools leave nanoagent's own memory files alone, and refuse files with a second name (hard links)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.memory.history import HistoryLog
from nanoagent.paths import PROTECTED_FILES, Paths, is_protected
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.templates import seed_workspace
from nanoagent.tools import ToolContext, ToolError, ToolRegistry, file_tools


def agent_turn(paths: Paths, name: str, arguments: dict) -> dict:
    """Run one turn in which the model calls one tool; return that call's result message."""
    provider = ScriptedProvider([ScriptedReply(tool_calls=[(name, arguments)]), "done"])
    loop = build_agent(Config(), paths, provider=provider)
    asyncio.run(loop.handle("go", "cli:direct"))
    return [m for m in loop.session("cli:direct").messages if m["role"] == "tool"][-1]


@pytest.fixture
def paths() -> Paths:
    paths = Paths.from_env()
    seed_workspace(paths.workspace)
    history = HistoryLog(paths.memory_dir)
    history.append("cli:direct", "- the user's boat is called Gull")
    history.set_dream_cursor(1)
    return paths


def memory_state(paths: Paths) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in paths.memory_dir.iterdir() if p.is_file()}


def test_protected_paths_are_history_and_every_dot_file_in_memory():
    assert set(PROTECTED_FILES) >= {"memory/history.jsonl", "memory/.cursor", "memory/.dream_cursor",
                                    "memory/.dream.lock"}
    assert all(is_protected(p) for p in PROTECTED_FILES)
    assert is_protected("memory/.something-later") and is_protected("./memory/../memory/History.JSONL")
    assert not is_protected("memory/MEMORY.md") and not is_protected("notes/history.jsonl")
    assert not is_protected("memory/sub/.cursor")


def test_write_file_of_history_is_refused_and_history_keeps_every_entry(paths):
    before = memory_state(paths)
    result = agent_turn(paths, "write_file", {"path": "memory/history.jsonl", "content": ""})
    assert result.get("is_error") is True
    assert "memory/history.jsonl, which nanoagent keeps for itself" in result["content"]
    assert "history only grows" in result["content"]
    assert memory_state(paths) == before


def test_write_and_edit_of_the_dream_cursor_are_refused_and_the_cursor_stays(paths):
    before = memory_state(paths)
    written = agent_turn(paths, "write_file", {"path": "memory/.dream_cursor", "content": "0\n"})
    edited = agent_turn(paths, "edit_file", {"path": "memory/.dream_cursor", "old_text": "1", "new_text": "0"})
    for result in (written, edited):
        assert result.get("is_error") is True and "memory/.dream_cursor, which nanoagent keeps" in result["content"]
    assert memory_state(paths) == before
    assert HistoryLog(paths.memory_dir).dream_cursor == 1


def test_a_symlink_or_dot_dot_to_history_is_refused_too(paths):
    ws = paths.workspace
    (ws / "notes.jsonl").symlink_to(paths.memory_dir / "history.jsonl")
    (ws / "mem").symlink_to(paths.memory_dir, target_is_directory=True)
    (ws / "docs").mkdir()
    before = memory_state(paths)
    for target in ("notes.jsonl", "mem/history.jsonl", "docs/../memory/history.jsonl", "mem/.cursor"):
        result = agent_turn(paths, "write_file", {"path": target, "content": "{}\n"})
        assert result.get("is_error") is True and "keeps for itself" in result["content"], target
    assert memory_state(paths) == before
    assert (ws / "notes.jsonl").is_symlink()


def test_read_file_may_read_history(paths):
    result = agent_turn(paths, "read_file", {"path": "memory/history.jsonl"})
    assert result.get("is_error") is None and "boat is called Gull" in result["content"]


def test_protected_files_stay_protected_without_restrict_to_workspace(paths):
    ctx = ToolContext(paths.workspace, restrict_to_workspace=False)
    tools = ToolRegistry(file_tools())
    os.link(paths.memory_dir / "history.jsonl", paths.workspace / "second-name.jsonl")
    before = memory_state(paths)
    for target in (str(paths.memory_dir / ".cursor"), "second-name.jsonl"):
        with pytest.raises(ToolError, match="keeps for itself"):
            asyncio.run(tools.get("write_file").call(ctx, {"path": target, "content": "0"}))
    assert memory_state(paths) == before


def test_a_hard_link_to_the_config_file_is_refused_and_the_key_never_shows(paths):
    config = paths.config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"providers": {"anthropic": {"apiKey": "sk-ant-SECRET-123"}}}))
    os.link(config, paths.workspace / "settings.json")
    before = config.read_bytes()

    read = agent_turn(paths, "read_file", {"path": "settings.json"})
    assert read.get("is_error") is True and "has 2 hard links" in read["content"]
    assert "replace it with a copy" in read["content"]
    written = agent_turn(paths, "write_file", {"path": "settings.json", "content": "{}"})
    edited = agent_turn(paths, "edit_file", {"path": "settings.json", "old_text": "apiKey", "new_text": "x"})
    assert written.get("is_error") is True and edited.get("is_error") is True
    found = agent_turn(paths, "grep", {"pattern": "apiKey"})
    assert "sk-ant-SECRET-123" not in found["content"]
    assert "sk-ant-SECRET-123" not in paths.session_file("cli:direct").read_text()  # nothing of it reached the model
    assert config.read_bytes() == before and os.stat(config).st_nlink == 2


def test_a_file_with_one_name_reads_and_writes_as_before(paths):
    assert agent_turn(paths, "write_file", {"path": "notes.md", "content": "hello\n"}).get("is_error") is None
    assert "hello" in agent_turn(paths, "read_file", {"path": "notes.md"})["content"]
    assert (paths.workspace / "notes.md").read_text() == "hello\n"


def test_the_refusals_are_checked_on_real_paths_in_a_workspace_reached_through_a_link(tmp_path: Path):
    real = tmp_path / "real-ws"
    (real / "memory").mkdir(parents=True)
    (real / "memory" / "history.jsonl").write_text("")
    (tmp_path / "ws-link").symlink_to(real, target_is_directory=True)
    ctx = ToolContext(tmp_path / "ws-link")
    with pytest.raises(ToolError, match="keeps for itself"):
        asyncio.run(ToolRegistry(file_tools()).get("write_file").call(ctx, {"path": "memory/history.jsonl",
                                                                             "content": "x"}))
    assert (real / "memory" / "history.jsonl").read_text() == ""
