"""What the CLI prints on a terminal narrower than its lines: wrapped at words to the terminal's width, never
broken mid-word at the terminal's edge or cut with an ellipsis. `nanoagent usage` keeps its own layout (it never
cuts a figure: tests/test_setup_commands.py)."""

from __future__ import annotations

import re
import time

import pytest

from nanoagent.channels.state import state_file
from nanoagent.paths import Paths
from nanoagent.session.store import SessionStore
from tests import channel_folders
from tests.conftest import invoke, write_config

WIDTH = 60
LONG = ("a description long enough that it cannot stay on one line of a narrow terminal and must wrap somewhere "
        "between its words")
RULES = "┏┓┗┛┃━│─┡┩└┘┌┐┳┻╇╈┼┬┴├┤╍"


def on_terminal(*args: str) -> str:
    """`nanoagent ARGS` as a terminal WIDTH columns wide shows it (rich's TTY_COMPATIBLE and COLUMNS), unstyled."""
    ran = invoke(*args, env={"COLUMNS": str(WIDTH), "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert ran.returncode == (1 if args[0] == "doctor" else 0), ran.stderr  # doctor: no key is one thing to fix
    return re.sub(r"\x1b\[[0-9;]*m", "", ran.stdout)


def words(text: str) -> set[str]:
    return set(re.findall(rf"[^\s{RULES}]+", text))


def fits(shown: str) -> None:
    """Every line within WIDTH, but for one word longer than a whole line (a path), which keeps a line of its own."""
    for line in shown.splitlines():
        assert len(line) <= WIDTH or len(line.split()) == 1, f"{len(line)} columns: {line!r}\n{shown}"
    assert "…" not in shown, shown


def whole(shown: str, *texts: str) -> None:
    """Every word of `texts` is on screen whole: none broken across two lines, none cut."""
    tokens = words(shown)
    missing = {word for text in texts for word in text.split() if not any(word in token for token in tokens)}
    assert not missing, f"{missing} not whole in:\n{shown}"


@pytest.fixture
def seeded(monkeypatch, isolated_home):
    """A home with something long to show in every list."""
    channel_folders.add(monkeypatch, "fifth")
    channel_folders.add_like(monkeypatch, "sixth")
    write_config(isolated_home, {
        "budget": {"daily": 1.0, "monthly": 20.0, "sessions": {"telegram:*": 0.5}},
        "mcpServers": {"notes": {"command": "/usr/local/bin/a-notes-server", "enabled": False,
                                 "args": ["--root", "/srv/notes/and/a/rather/deep/folder", "--read-only"]}}})
    paths = Paths.from_env()
    store = SessionStore(paths.sessions_dir)
    store.append(store.load("sixth:1234567890123:a-thread-with-a-long-name"), [{"type": "message", "message": {"role": "user", "content": "hi"}}])
    skill = paths.workspace / "skills" / "narrow"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: narrow\ndescription: {LONG}\n---\nSteps.\n")
    paths.memory_dir.mkdir(parents=True, exist_ok=True)
    (paths.memory_dir / "MEMORY.md").write_text(f"- The dentist appointment is {LONG}.\n")
    state_file(paths, "sixth").update(lambda state: state.pair("u-2", "chat-u-2", "Bob " + "Longname" * 3,
                                                               time.time()))
    assert invoke("cron", "add", "--every", "15m", "-m", "Check the build.", "--name",
                  "check the build and tell me what broke since yesterday morning").returncode == 0
    return paths


@pytest.mark.parametrize("command", [
    ("sessions", "list"), ("skills", "list"), ("cron", "list"), ("pairing", "list"), ("mcp", "list"),
    ("channels", "list"), ("budget",), ("status",), ("memory", "search", "dentist"), ("doctor", "--offline")])
def test_every_list_wraps_at_words_to_a_narrow_terminal(seeded, command):
    shown = on_terminal(*command)
    fits(shown)
    whole(shown, SHOWN[command[0]])


SHOWN = {  # what each command has to show whole
    "sessions": "sixth:1234567890123:a-thread-with-a-long-name",
    "skills": LONG, "memory": LONG, "cron": "check the build and tell me what broke since yesterday morning",
    "pairing": "Bob LongnameLongnameLongname (user id u-2)",
    "mcp": "/usr/local/bin/a-notes-server --root /srv/notes/and/a/rather/deep/folder --read-only",
    "channels": "not configured (`nanoagent channels add sixth`)",
    "budget": "sessions `telegram:*`: $0.0000 spent of $0.50 (0%); Raise it: `budget.sessions.\"telegram:*\"`.",
    "status": "missing (set ANTHROPIC_API_KEY or run `nanoagent onboard` (or put it in config.json under",
    "doctor": "ANTHROPIC_API_KEY",
}


def test_piped_lists_keep_each_line_whole_for_scripts(seeded):
    shown = invoke("budget", env={"COLUMNS": str(WIDTH)}).stdout
    assert "sessions `telegram:*`: $0.0000 spent of $0.50 (0%); resets 00:00 (local). Raise it: " \
        "`budget.sessions.\"telegram:*\"`." in shown.splitlines()
    rows = invoke("skills", "list", env={"COLUMNS": str(WIDTH)}).stdout.splitlines()
    assert any(line.split()[:1] == ["narrow"] and LONG in line for line in rows), rows
