"""The one-shot fast path (`cli/oneshot.py`) reads a command line before typer loads: whatever it takes, it must
read exactly as the full command line does, and whatever it cannot read the same way it leaves to typer."""

from __future__ import annotations

import pytest

from nanoagent.cli.oneshot import Plain, parse
from tests.conftest import PATIENCE

TAKEN = [
    (["agent", "-m", "hi"], Plain("hi")),
    (["agent", "--message", "hi there"], Plain("hi there")),
    (["agent", "--message=hi"], Plain("hi")),
    (["agent", "what is on my list?"], Plain("what is on my list?")),
    (["agent", "-m", "hi", "--json"], Plain("hi", json_output=True)),
    (["agent", "--json", "-s", "work", "-m", "hi"], Plain("hi", session="work", json_output=True)),
    (["agent", "--session=tg:42", "hi"], Plain("hi", session="tg:42", json_output=False)),
    (["agent", "-m", ""], Plain("")),  # refused by the same check either way: "Nothing to send"
    (["agent", "-m", "a = b"], Plain("a = b")),
]

LEFT_TO_TYPER = [
    ["agent"],  # interactive
    ["agent", "-m", "-"],  # reads stdin
    ["agent", "-m", "-5 degrees?"],
    ["agent", "-m", "hi", "--local"],
    ["agent", "-m", "hi", "--incognito"],  # a temporary chat runs in its own process, never the gateway's
    ["agent", "-m", "hi", "-w", "/tmp/x"],
    ["agent", "-m", "hi", "-C", "/tmp/x"],  # a working folder: its session key and check are the full path's
    ["agent", "--here", "-m", "hi"],
    ["agent", "-m", "hi", "--model", "openai/gpt-4o"],
    ["agent", "-m", "hi", "-a", "photo.png"],
    ["agent", "-m", "hi", "-c"],
    ["agent", "-m", "hi", "--debug"],
    ["agent", "-m", "hi", "-m", "again"],
    ["agent", "-m", "hi", "there"],  # the message twice: typer explains
    ["agent", "one", "two"],
    ["agent", "-m"],
    ["agent", "-m", "hi", "--json", "--json"],
    ["agent", "--help"],
    ["agent", "-mhi"],
    ["--debug", "agent", "-m", "hi"],
    ["sessions", "list"],
    [],
]


def typer_reads(argv: list[str]) -> dict:
    import typer.main

    from nanoagent.cli.app import app

    group = typer.main.get_command(app)
    with group.make_context("nanoagent", list(argv[:1])) as root:
        command = group.get_command(root, argv[0])
        with command.make_context(argv[0], list(argv[1:]), parent=root) as ctx:
            return dict(ctx.params)


@pytest.mark.parametrize(("argv", "plain"), TAKEN, ids=[" ".join(a) for a, _ in TAKEN])
def test_a_plain_one_shot_is_read_as_the_full_command_line_reads_it(argv, plain):
    assert parse(argv) == plain
    params = typer_reads(argv)
    assert (params["prompt"] if params["prompt"] is not None else params["message"]) == plain.message
    assert (params["session"], params["json_output"]) == (plain.session, plain.json_output)
    rest = {k: v for k, v in params.items() if k not in ("prompt", "message", "session", "json_output")}
    assert rest == {"continue_last": False, "resume": False, "model": None, "attach": (), "workspace": None,
                    "folder": None, "here": False, "local": False, "incognito": False}


@pytest.mark.parametrize("argv", LEFT_TO_TYPER, ids=[" ".join(a) or "(none)" for a in LEFT_TO_TYPER])
def test_anything_else_is_left_to_the_full_command_line(argv):
    assert parse(argv) is None


def test_nanoagent_debug_in_the_environment_leaves_it_to_the_full_command_line(monkeypatch):
    monkeypatch.setenv("NANOAGENT_DEBUG", "1")
    assert parse(["agent", "-m", "hi"]) is None


@pytest.mark.process
def test_the_fast_path_can_send_its_message_before_it_loads_the_event_types_and_the_renderer():
    import subprocess
    import sys

    code = ("import sys; from nanoagent.cli import oneshot; from nanoagent.gateway.oneshot import sending, "
            "settings_differ; from nanoagent.paths import Paths; print(sorted(m for m in sys.modules if "
            "m.startswith(('nanoagent.agent', 'nanoagent.cli.render', 'nanoagent.usage', 'rich', 'asyncio'))))")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PATIENCE)
    assert ran.returncode == 0 and ran.stdout.strip() == "[]", ran.stdout + ran.stderr
