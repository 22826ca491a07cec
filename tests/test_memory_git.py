"""The git log of long-term memory, on real git repositories in tmp_path."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.errors import NanoagentError
from nanoagent.memory.gitlog import MemoryGit, RestoreConflict
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from tests.conftest import ROOT, invoke

MEMORY_LINES = [f"- fact {i}" for i in range(12)]


def workspace(tmp_path: Path) -> tuple[MemoryGit, Path]:
    paths = Paths.from_env(tmp_path / "ws")
    ws = paths.workspace
    (ws / "memory").mkdir(parents=True)
    (ws / "SOUL.md").write_text("I am helpful.\n")
    (ws / "USER.md").write_text("Name: Ada\nLikes: tea\n")
    (ws / "memory" / "MEMORY.md").write_text("\n".join(MEMORY_LINES) + "\n")
    return MemoryGit(ws, paths.memory_git_dir), ws


def git(mg: MemoryGit, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={mg.git_dir}", f"--work-tree={mg.workspace}", *args],
                          capture_output=True, text=True, check=True).stdout


def replace_line(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def state(mg: MemoryGit) -> dict:
    """Everything a failed restore must leave alone: every workspace file, HEAD, the index and the log."""
    files = {str(p.relative_to(mg.workspace)): p.read_bytes() for p in mg.workspace.rglob("*") if p.is_file()}
    return {"files": files, "head": git(mg, "rev-parse", "HEAD"), "index": (mg.git_dir / "index").read_bytes(),
            "log": git(mg, "log", "--format=%H")}


def test_constructing_memory_git_touches_nothing_and_an_empty_history_lists_nothing(tmp_path):
    mg, _ = workspace(tmp_path)
    assert mg.log() == []
    assert not mg.git_dir.exists()


def test_ensure_records_existing_memory_files_without_any_global_git_config(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    mg.ensure()  # idempotent
    [first] = mg.log()
    assert first.author == "init"
    assert first.files == ("SOUL.md", "USER.md", "memory/MEMORY.md")
    assert git(mg, "config", "user.name").strip() == "nanoagent"
    assert not (ws / ".git").exists()


def test_ensure_on_a_missing_workspace_says_how_to_create_it(tmp_path):
    mg = MemoryGit(tmp_path / "nowhere", tmp_path / "home" / "git" / "x.git")
    with pytest.raises(NanoagentError, match="onboard"):
        mg.ensure()


def test_each_commit_is_separate_and_names_its_file(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    (ws / "USER.md").write_text("Name: Ada\nLikes: coffee\n")
    replace_line(ws / "memory" / "MEMORY.md", "- fact 3", "- fact three")
    user = mg.commit(["USER.md"], "Learned the user now likes coffee")
    memory = mg.commit(["memory/MEMORY.md"], "memory/MEMORY.md: reworded fact 3")
    assert user is not None and memory is not None
    assert (user.files, user.summary, user.author) == (
        ("USER.md",), "Learned the user now likes coffee (USER.md)", "dream")
    assert (memory.files, memory.summary) == (("memory/MEMORY.md",), "memory/MEMORY.md: reworded fact 3")
    assert [c.sha for c in mg.log()][:2] == [memory.sha, user.sha]


def test_committing_an_unchanged_file_makes_no_commit(tmp_path):
    mg, _ = workspace(tmp_path)
    mg.ensure()
    assert mg.commit(["USER.md"], "nothing new") is None
    assert len(mg.log()) == 1


def test_only_memory_files_are_ever_staged(tmp_path):
    mg, ws = workspace(tmp_path)
    (ws / "notes.txt").write_text("private\n")
    (ws / ".env").write_text("TOKEN=secret\n")
    (ws / "memory" / "history.jsonl").write_text("{}\n")
    (ws / "skills" / "tea" / "deep").mkdir(parents=True)
    (ws / "skills" / "tea" / "SKILL.md").write_text("---\nname: tea\n---\nBrew.\n")
    (ws / "skills" / "tea" / "notes.md").write_text("scratch\n")
    (ws / "skills" / "tea" / "deep" / "SKILL.md").write_text("not a skill file\n")
    (ws / ".gitignore").write_text("*.md\n")  # memory files are recorded even when ignored
    mg.ensure()
    (ws / "notes.txt").write_text("changed\n")
    (ws / "USER.md").write_text("Name: Ada Lovelace\n")
    mg.snapshot_user_edits()
    with pytest.raises(NanoagentError, match="not a memory file"):
        mg.commit(["notes.txt"], "sneak it in")
    assert git(mg, "ls-files").split() == ["SOUL.md", "USER.md", "memory/MEMORY.md", "skills/tea/SKILL.md"]


def test_restoring_the_first_of_two_edits_keeps_the_second(tmp_path):
    # Regression: a restore that reset the files to the old commit's state threw away every later change.
    mg, ws = workspace(tmp_path)
    mg.ensure()
    memory = ws / "memory" / "MEMORY.md"
    replace_line(memory, "- fact 1\n", "- fact one\n")
    first = mg.commit(["memory/MEMORY.md"], "reworded fact 1")
    replace_line(memory, "- fact 10\n", "- fact ten\n")
    (ws / "SOUL.md").write_text("I am helpful and brief.\n")
    mg.commit(["memory/MEMORY.md"], "reworded fact 10")
    mg.commit(["SOUL.md"], "be brief")
    assert first is not None

    undo = mg.restore(first.short)

    expected = MEMORY_LINES.copy()
    expected[10] = "- fact ten"
    assert memory.read_text() == "\n".join(expected) + "\n"
    assert (ws / "SOUL.md").read_text() == "I am helpful and brief.\n"
    assert (undo.author, undo.files) == ("restore", ("memory/MEMORY.md",))
    assert undo.summary == f"Restore: undo {first.short} reworded fact 1 (memory/MEMORY.md)"
    assert mg.log()[0].sha == undo.sha and len(mg.log()) == 5


def append(path: Path, line: str) -> None:
    """Add one line at the end the way Dream's append_to_file does."""
    text = path.read_bytes().decode()
    path.write_bytes((text + ("" if text.endswith("\n") or not text else "\n") + line + "\n").encode())


def memory(*lines: str, drop: tuple[str, ...] = (), swap: dict[str, str] | None = None) -> bytes:
    """MEMORY.md's lines less `drop`, each of `swap`'s keys replaced by its value (lines, "" drops), `lines` appended."""
    kept = [(swap or {}).get(line, line) for line in MEMORY_LINES if line not in drop]
    return "".join(f"{line}\n" for line in [*kept, *lines] if line).encode()


@dataclass
class Undo:
    """A file's first state and the states committed after it, one commit each; then the `restore`-th of those
    commits (0: the first) is undone: the file is `after` then, or, where `after` is a str, the restore is a
    RestoreConflict matching it that changes nothing."""

    file: str
    states: list[bytes]
    restore: int
    after: bytes | str


UNDOS = {
    # regression: git merge-file called neighbouring appends a conflict, so the usual Dream undo failed
    "the first of two adjacent appends removes its line and keeps the second": Undo(
        "memory/MEMORY.md", [memory(), memory("- Boat: Gull"), memory("- Boat: Gull", "- Lives in Porto")], 0,
        memory("- Lives in Porto")),
    "the middle of three appends keeps the first and the third": Undo(
        "memory/MEMORY.md", [memory(), memory("- one"), memory("- one", "- two"), memory("- one", "- two", "- three")],
        1, memory("- one", "- three")),
    "an append whose line was edited since conflicts and changes nothing": Undo(
        "memory/MEMORY.md", [memory(), memory("- Boat: Gull"), memory("- Boat: Gull", "- Lives in Porto"),
                             memory("- Boat: Gull (sold in May)", "- Lives in Porto")], 0,
        "memory/MEMORY.md changed again since then in the same lines"),
    "a commit whose lines were split by a later insertion conflicts": Undo(
        "memory/MEMORY.md", [memory(), memory("- Boat: Gull", "- Boat colour: blue"),
                             memory("- Boat: Gull", "- Boat is fast", "- Boat colour: blue")], 0,
        "Nothing was changed"),
    "a deletion undone puts the lines back where they were after a later append": Undo(
        "memory/MEMORY.md", [memory(), memory(drop=("- fact 4", "- fact 5")),
                             memory("- fact 12", drop=("- fact 4", "- fact 5"))], 0, memory("- fact 12")),
    "a deletion whose line above was reworded goes back above the line below": Undo(
        "memory/MEMORY.md", [memory(), memory(drop=("- fact 4", "- fact 5")),
                             memory(drop=("- fact 4", "- fact 5"), swap={"- fact 3": "- fact three"})], 0,
        memory(swap={"- fact 3": "- fact three"})),
    "a deletion whose lines above and below both changed conflicts": Undo(
        "memory/MEMORY.md", [memory(), memory(drop=("- fact 4",)),
                             memory(drop=("- fact 4", "- fact 5"), swap={"- fact 3": "- facts 3 and 5, merged"})], 0,
        "Nothing was changed"),
    "an append to a file without a trailing newline keeps the later line": Undo(
        "memory/MEMORY.md", [b"# Memory\n- fact", b"# Memory\n- fact\n- Boat: Gull\n",
                             b"# Memory\n- fact\n- Boat: Gull\n- Lives in Porto\n"], 0,
        b"# Memory\n- fact\n- Lives in Porto\n"),
    "CRLF line endings are kept even where the last line had none": Undo(
        "USER.md", [b"Name: Ada\r\nLikes: tea", b"Name: Ada\r\nLikes: tea\r\n- Boat: Gull\r\n",
                    b"Name: Ada\r\nLikes: tea\r\n- Boat: Gull\r\n- Lives in Porto\r\n"], 0,
        b"Name: Ada\r\nLikes: tea\r\n- Lives in Porto\r\n"),
    "a file that is not UTF-8 works line by line too": Undo(
        "memory/MEMORY.md", [b"- caf\xe9 on the corner\n", b"- caf\xe9 on the corner\n- Boat: Gull\n",
                             b"- caf\xe9 on the corner\n- Boat: Gull\n- Lives in Porto\n"], 0,
        b"- caf\xe9 on the corner\n- Lives in Porto\n"),
}


@pytest.mark.parametrize("case", list(UNDOS.values()), ids=list(UNDOS))
def test_restoring_one_commit_undoes_its_lines_alone_or_conflicts_changing_nothing(tmp_path, case: Undo):
    mg, ws = workspace(tmp_path)
    path = ws / case.file
    path.write_bytes(case.states[0])
    mg.ensure()
    made = []
    for number, content in enumerate(case.states[1:]):
        path.write_bytes(content)
        made.append(mg.commit([case.file], f"edit {number}"))
    assert None not in made
    undone = made[case.restore]
    before = state(mg)

    if isinstance(case.after, str):
        with pytest.raises(RestoreConflict, match=case.after):
            mg.restore(undone.short)
        assert state(mg) == before
        return
    undo = mg.restore(undone.short)

    assert path.read_bytes() == case.after
    assert (undo.author, undo.files) == ("restore", (case.file,))
    assert [c.sha for c in mg.log()][:len(made) + 1] == [undo.sha, *(c.sha for c in reversed(made))]


def test_restoring_one_of_two_identical_placeholder_lines_replaces_the_right_one(tmp_path):
    mg, ws = workspace(tmp_path)
    memory = ws / "memory" / "MEMORY.md"
    memory.write_text("# Memory\n## Facts\n- (nothing yet)\n## People\n- (nothing yet)\n")
    mg.ensure()
    memory.write_text("# Memory\n## Facts\n- Boat: Gull\n## People\n- (nothing yet)\n")
    facts = mg.commit(["memory/MEMORY.md"], "add: boat Gull")
    memory.write_text("# Memory\n## Facts\n- Boat: Gull\n## People\n- Sister: Eve\n")
    people = mg.commit(["memory/MEMORY.md"], "add: sister Eve")
    assert facts is not None and people is not None

    mg.restore(facts.short)
    assert memory.read_text() == "# Memory\n## Facts\n- (nothing yet)\n## People\n- Sister: Eve\n"
    mg.restore(people.short)
    assert memory.read_text() == "# Memory\n## Facts\n- (nothing yet)\n## People\n- (nothing yet)\n"


def test_restoring_a_restore_brings_the_change_back(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    (ws / "USER.md").write_text("Name: Ada\nLikes: coffee\n")
    edit = mg.commit(["USER.md"], "coffee")
    assert edit is not None
    undo = mg.restore(edit.short)
    assert (ws / "USER.md").read_text() == "Name: Ada\nLikes: tea\n"
    mg.restore(undo.short)
    assert (ws / "USER.md").read_text() == "Name: Ada\nLikes: coffee\n"


def test_a_conflicting_restore_changes_nothing(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    memory = ws / "memory" / "MEMORY.md"
    replace_line(memory, "- fact 5\n", "- fact five\n")
    first = mg.commit(["memory/MEMORY.md"], "reworded fact 5")
    replace_line(memory, "- fact five\n", "- fact 5, confirmed twice\n")
    mg.commit(["memory/MEMORY.md"], "confirmed fact 5")
    (ws / "USER.md").write_text("Name: Ada\nLikes: green tea\n")  # an uncommitted hand edit stays uncommitted
    assert first is not None
    before = state(mg)

    with pytest.raises(RestoreConflict) as caught:
        mg.restore(first.short)

    assert "memory/MEMORY.md" in str(caught.value) and "Nothing was changed" in str(caught.value)
    assert state(mg) == before


def test_a_hand_edit_is_committed_as_the_users_before_a_restore_and_survives_it(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    memory = ws / "memory" / "MEMORY.md"
    replace_line(memory, "- fact 0\n", "- fact zero\n")
    dream = mg.commit(["memory/MEMORY.md"], "reworded fact 0")
    replace_line(memory, "- fact 11\n", "- fact 11 (the user wrote this)\n")
    (ws / "USER.md").write_text("Name: Ada\nLikes: tea\nWrote this by hand.\n")
    assert dream is not None

    undo = mg.restore(dream.short)

    restore, user = mg.log()[:2]
    assert restore.sha == undo.sha and undo.files == ("memory/MEMORY.md",)
    assert (user.author, user.summary) == ("user", "Your edit: USER.md, memory/MEMORY.md")
    assert "Wrote this by hand." in (ws / "USER.md").read_text()
    assert memory.read_text().startswith("- fact 0\n")
    assert "- fact 11 (the user wrote this)\n" in memory.read_text()


def test_hand_deletions_and_new_skills_are_snapshotted_as_the_users(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    (ws / "SOUL.md").unlink()
    (ws / "skills" / "tea").mkdir(parents=True)
    (ws / "skills" / "tea" / "SKILL.md").write_text("---\nname: tea\n---\nBrew.\n")
    made = mg.snapshot_user_edits()
    assert made is not None
    assert (made.author, made.summary) == ("user", "Your edit: deleted SOUL.md, added skills/tea/SKILL.md")
    assert mg.snapshot_user_edits() is None
    mg.restore(made.short)  # a hand deletion can be undone too
    assert (ws / "SOUL.md").read_text() == "I am helpful.\n"
    assert not (ws / "skills" / "tea" / "SKILL.md").exists()


def test_restoring_a_new_file_deletes_it_unless_it_was_edited_since(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    skill = ws / "skills" / "tea" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: tea\n---\nBrew.\n")
    added = mg.commit(["skills/tea/SKILL.md"], "new skill tea")
    skill.write_text("---\nname: tea\n---\nBrew for 3 minutes.\n")
    mg.commit(["skills/tea/SKILL.md"], "timing for tea")
    assert added is not None
    with pytest.raises(RestoreConflict):
        mg.restore(added.short)
    assert skill.exists()


def test_restoring_the_first_commit_or_an_unknown_sha_is_a_clear_error(tmp_path):
    mg, _ = workspace(tmp_path)
    mg.ensure()
    [init] = mg.log()
    with pytest.raises(NanoagentError, match="start of the memory history"):
        mg.restore(init.short)
    for bad in ("deadbeef", "--all", ""):
        with pytest.raises(NanoagentError, match="dream-log"):
            mg.restore(bad)
        with pytest.raises(NanoagentError, match="dream-log"):
            mg.show(bad)


def test_restoring_an_edit_already_undone_by_hand_says_there_is_nothing_to_undo(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    (ws / "USER.md").write_text("Name: Ada\nLikes: coffee\n")
    edit = mg.commit(["USER.md"], "coffee")
    (ws / "USER.md").write_text("Name: Ada\nLikes: tea\n")
    assert edit is not None
    with pytest.raises(NanoagentError, match="nothing to undo"):
        mg.restore(edit.short)


def test_show_gives_the_unified_diff_of_one_commit(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    (ws / "USER.md").write_text("Name: Ada\nLikes: coffee\n")
    edit = mg.commit(["USER.md"], "coffee")
    assert edit is not None
    diff = mg.show(edit.short)
    assert diff.startswith(f"commit {edit.sha}\nAuthor: dream\n")
    assert "diff --git a/USER.md b/USER.md" in diff and "-Likes: tea\n+Likes: coffee" in diff


def test_line_ages_come_from_blame_and_uncommitted_lines_have_none(tmp_path):
    mg, ws = workspace(tmp_path)
    assert mg.line_ages("memory/MEMORY.md")[0] == ("- fact 0", None)  # no history yet
    mg.ensure()
    (ws / "memory" / "MEMORY.md").write_text("- fact 0\n- brand new\n")
    ages = mg.line_ages("memory/MEMORY.md", now=mg.log()[0].time + timedelta(days=3, hours=1))
    assert ages == [("- fact 0", 3), ("- brand new", None)]
    assert mg.line_ages("memory/missing.md") == []


def test_a_workspace_inside_another_git_repo_works_and_the_outer_repo_is_untouched(tmp_path):
    outer = tmp_path / "project"
    outer.mkdir()
    ident = ["-c", "user.name=someone", "-c", "user.email=someone@example.com"]
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    (outer / "README.md").write_text("outer\n")
    subprocess.run(["git", "-C", str(outer), *ident, "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(outer), *ident, "commit", "-qm", "outer"], check=True)
    outer_head = subprocess.run(["git", "-C", str(outer), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    outer_index = (outer / ".git" / "index").read_bytes()

    paths = Paths.from_env(outer / "ws")
    (paths.workspace / "memory").mkdir(parents=True)
    (paths.workspace / "USER.md").write_text("Name: Ada\n")
    mg = MemoryGit(paths.workspace, paths.memory_git_dir)
    mg.ensure()
    (paths.workspace / "USER.md").write_text("Name: Ada Lovelace\n")
    edit = mg.commit(["USER.md"], "full name")
    assert edit is not None
    mg.restore(edit.short)

    assert [c.author for c in mg.log()] == ["restore", "dream", "init"]
    assert (paths.workspace / "USER.md").read_text() == "Name: Ada\n"
    assert not (paths.workspace / ".git").exists()
    assert subprocess.run(["git", "-C", str(outer), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout == outer_head
    assert (outer / ".git" / "index").read_bytes() == outer_index
    status = subprocess.run(["git", "-C", str(outer), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == "?? ws/\n"


def test_a_missing_git_binary_says_install_git(tmp_path, monkeypatch):
    mg, _ = workspace(tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(NanoagentError, match="install git"):
        mg.ensure()


def test_concurrent_writers_each_get_their_own_commit(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    errors: list[BaseException] = []

    def writer(relpath: str) -> None:
        own = MemoryGit(mg.workspace, mg.git_dir)  # its own lock file descriptor, like another process
        try:
            for i in range(5):
                (ws / relpath).write_text(f"version {i}\n")
                own.commit([relpath], f"{relpath} version {i}")
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("USER.md", "SOUL.md")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    commits = mg.log(50)
    assert len(commits) == 11 and all(len(c.files) == 1 for c in commits[:-1])


# ---- the CLI --------------------------------------------------------------------------------------


def test_dream_log_says_so_when_there_is_no_history(tmp_path):
    _, ws = workspace(tmp_path)
    proc = invoke("dream-log", "-w", str(ws))
    assert proc.returncode == 0
    assert "No memory edits recorded yet" in proc.stdout


def test_dream_log_lists_commits_and_shows_one_diff(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    (ws / "USER.md").write_text("Name: Ada\nLikes: coffee\n")
    edit = mg.commit(["USER.md"], "Learned the user likes coffee")
    assert edit is not None

    table = invoke("dream-log", "-n", "5", "-w", str(ws), env={"COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith(edit.short))
    assert "USER.md" in row and "Learned the user likes coffee" in row
    assert mg.log()[-1].short in table.stdout

    diff = invoke("dream-log", edit.short, "-w", str(ws))
    assert diff.returncode == 0, diff.stderr
    assert "+Likes: coffee" in diff.stdout and "-Likes: tea" in diff.stdout
    assert "\x1b[" not in diff.stdout  # plain when not a terminal

    missing = invoke("dream-log", "abc1234", "-w", str(ws))
    assert missing.returncode == 1 and "No memory commit 'abc1234'" in missing.stderr


def test_dream_restore_undoes_a_commit_and_a_conflict_exits_1_changing_nothing(tmp_path):
    mg, ws = workspace(tmp_path)
    mg.ensure()
    (ws / "USER.md").write_text("Name: Ada\nLikes: coffee\n")
    coffee = mg.commit(["USER.md"], "coffee")
    (ws / "USER.md").write_text("Name: Ada\nLikes: cocoa\n")
    cocoa = mg.commit(["USER.md"], "cocoa")
    assert coffee is not None and cocoa is not None
    before = state(mg)

    conflict = invoke("dream-restore", coffee.short, "-w", str(ws))
    assert conflict.returncode == 1
    assert conflict.stderr.count("\n") == 1 and conflict.stderr.startswith("Error: Cannot undo")
    assert state(mg) == before

    done = invoke("dream-restore", cocoa.short, "-w", str(ws))
    assert done.returncode == 0, done.stderr
    assert f"Restore: undo {cocoa.short} cocoa" in done.stdout
    assert (ws / "USER.md").read_text() == "Name: Ada\nLikes: coffee\n"


# ---- slash commands ---------------------------------------------------------------------------------


def agent_loop(tmp_path: Path):
    paths = Paths.from_env(tmp_path / "ws")
    loop = build_agent(Config(), paths, provider=ScriptedProvider([]))
    return loop, paths.workspace


def test_slash_dream_log_and_dream_restore_work_on_a_built_agent(tmp_path):
    loop, ws = agent_loop(tmp_path)
    mg = loop.commands.memory_git
    assert mg is not None
    assert not mg.git_dir.exists()  # building the agent does not touch the memory history
    assert asyncio.run(loop.handle("/dream-log")).reply == "No memory edits recorded yet."
    mg.ensure()
    (ws / "USER.md").write_text("Name: Ada\n")
    edit = mg.commit(["USER.md"], "Learned the user's name")
    assert edit is not None

    listing = asyncio.run(loop.handle("/dream-log 5")).reply
    assert listing.splitlines()[0].startswith(edit.short) and "USER.md  Learned the user's name" in listing
    assert "+Name: Ada" in asyncio.run(loop.handle(f"/dream-log {edit.short}")).reply

    restored = asyncio.run(loop.handle(f"/dream-restore {edit.short}")).reply
    assert restored.startswith(f"Restore: undo {edit.short}") and "Name: Ada" not in (ws / "USER.md").read_text()
    assert "Cannot restore" in asyncio.run(loop.handle("/dream-restore nosuchsha")).reply
    help_text = asyncio.run(loop.handle("/help")).reply
    assert "/dream-log" in help_text and "/dream-restore" in help_text


def test_slash_commands_say_when_there_is_no_memory_history(tmp_path):
    loop, _ = agent_loop(tmp_path)
    loop.commands.memory_git = None
    assert "not kept here" in asyncio.run(loop.handle("/dream-log")).reply
    assert "not kept here" in asyncio.run(loop.handle("/dream-restore abc1234")).reply


@pytest.mark.process
def test_building_an_agent_does_not_import_gitpython():
    code = ("import sys; from nanoagent.agent.build import build_agent; from nanoagent.config.schema import Config;"
            "from nanoagent.paths import Paths; from nanoagent.providers.scripted import ScriptedProvider;"
            "build_agent(Config(), Paths.from_env(), provider=ScriptedProvider([]));"
            "print('git' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
