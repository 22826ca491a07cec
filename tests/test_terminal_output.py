"""What reaches the terminal: text from a model or a tool cannot drive it, and a one-shot streams its reply
and keeps every text block, on a terminal and piped."""

import io
import json
import os
import sys

import pexpect
import pytest

from nanoagent.cli.render import EscapeFilter, terminal_safe
from tests.conftest import ROOT, anthropic_env, invoke
from tests.llm_server import Reply

RETITLE = "\x1b]0;pwned\x07"  # OSC 0: set the window title
CLEAR = "\x1b[2J\x1b[H"  # erase the screen, cursor home


def test_escape_and_control_sequences_are_dropped_and_text_is_kept():
    assert terminal_safe(f"a{RETITLE}b{CLEAR}c\rd\x9b31me\x1bPq#0\x1b\\f\x07g\x1b(Bh") == "abcdefgh"
    assert terminal_safe("tabs\tand\nnewlines, é 中 ✓") == "tabs\tand\nnewlines, é 中 ✓"
    assert terminal_safe("crlf\r\nline") == "crlf\nline"
    # a sequence split between streamed pieces is held back until it is whole, then dropped whole
    pieces = EscapeFilter()
    shown = [pieces.feed(p) for p in ("before \x1b", "]0;ti", "tle\x07after \x1b[3", "1mred")] + [pieces.flush()]
    assert "".join(shown) == "before after red"
    assert shown[0] == "before " and pieces.feed("end \x1b") == "end " and pieces.flush() == ""


def test_a_piped_one_shot_prints_no_escape_sequence_from_the_model_or_a_tool(llm, isolated_home):
    command = "printf '\\033]0;from-tool\\007'; exit 3"
    llm.script(Reply(text=f"Running it.{RETITLE}", tool_calls=[("exec", {"command": command + CLEAR})]),
               Reply(text=f"{CLEAR}Done{RETITLE} here."))
    ran = invoke("agent", "-m", "go", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert "\x1b" not in ran.stdout + ran.stderr and "\x07" not in ran.stdout + ran.stderr
    assert ran.stdout == "Running it.\n\nDone here.\n"  # the text is kept, only the sequences go (split ones too)
    assert "exit 3" in ran.stderr


def test_a_piped_one_shot_keeps_text_written_before_a_tool_call_as_its_own_block(llm, isolated_home):
    (isolated_home / "workspace").mkdir(parents=True)
    (isolated_home / "workspace" / "notes.md").write_text("milk\n")
    llm.script(Reply(text="Let me look at your notes.", tool_calls=[("read_file", {"path": "notes.md"})]),
               Reply(text="You need milk."))
    ran = invoke("agent", "-m", "what do I need?", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "Let me look at your notes.\n\nYou need milk.\n"


def spawn_one_shot(llm, *args):
    env = {**os.environ, **anthropic_env(llm), "TERM": "xterm-256color", "COLUMNS": "80"}
    return pexpect.spawn(sys.executable, ["-m", "nanoagent", "agent", *args], cwd=str(ROOT), env=env,
                         encoding="utf-8", timeout=20, dimensions=(30, 80))


def test_a_one_shot_on_a_terminal_streams_blocks_as_they_finish_and_keeps_text_before_a_tool(llm, isolated_home):
    (isolated_home / "workspace").mkdir(parents=True)
    (isolated_home / "workspace" / "notes.md").write_text("milk\n")
    llm.script(Reply(text="Let me **look** first.\n\n", tool_calls=[("read_file", {"path": "notes.md"})]),
               Reply(text="First finding.\n\nSecond finding after a pause.", chunk_delay=0.5))
    child = spawn_one_shot(llm, "-m", "go")
    child.logfile_read = screen = io.StringIO()
    child.expect("First finding.")  # on screen while the rest of the reply is still coming
    assert child.isalive()
    child.expect(pexpect.EOF)
    output = screen.getvalue()
    assert "Second finding after a pause." in output
    assert "**" not in output and "Let me" in output and "look" in output  # kept, and rendered as Markdown


def test_a_one_shot_on_a_terminal_shows_a_spinner_while_the_model_thinks(llm, isolated_home):
    llm.script(Reply(text="Thought about it.", delay=1.0))
    child = spawn_one_shot(llm, "-m", "think")
    child.expect("thinking")
    child.expect("Thought about it.")
    child.expect(pexpect.EOF)


def test_an_interactive_session_shows_no_escape_sequence_from_the_model(llm, isolated_home):
    llm.script(Reply(text=f"Hello{RETITLE} there.{CLEAR}"))
    env = {**os.environ, **anthropic_env(llm), "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "agent"], cwd=str(ROOT), env=env, encoding="utf-8",
                          timeout=20, dimensions=(30, 80))
    child.expect_exact("›")
    child.send("hi\r")
    child.expect("there.")
    child.expect_exact("›")
    child.terminate(force=True)
    assert "pwned" not in child.before and "\x1b]0;" not in child.before


def test_json_carries_the_cost_of_the_turn_at_the_listed_price(llm, isolated_home):
    llm.script(Reply(text="priced"))
    env = {**anthropic_env(llm), "NANOAGENT_MODEL": "anthropic/claude-sonnet-4-5"}
    data = json.loads(invoke("agent", "-m", "hi", "--json", env=env).stdout)
    usage = data["usage"]
    expected = (usage["input_tokens"] * 3 + usage["output_tokens"] * 15 + usage["cache_read_tokens"] * 0.3
                + usage["cache_write_tokens"] * 3.75) / 1e6
    assert data["cost"] == pytest.approx(expected) and data["cost"] > 0
    llm.script(Reply(text="unpriced"))
    assert json.loads(invoke("agent", "-m", "hi", "--json", env=anthropic_env(llm)).stdout)["cost"] is None


def test_an_interactive_reply_is_followed_by_its_tokens_and_cost(llm, isolated_home):
    llm.script(Reply(text="Here you are."))
    env = {**os.environ, **anthropic_env(llm), "NANOAGENT_MODEL": "anthropic/claude-sonnet-4-5", "TERM": "xterm-256color",
           "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "agent"], cwd=str(ROOT), env=env, encoding="utf-8",
                          timeout=20, dimensions=(30, 80))
    child.expect_exact("›")
    child.send("hi\r")
    child.expect_exact("Here you are.")
    child.expect(r"[\d,]+ in(?: \([\d,]+ cached\))? · [\d,]+ out · \$0\.\d{4}")
    child.terminate(force=True)


def test_a_tool_detail_is_folded_cut_to_the_width_and_terminal_safe():
    from nanoagent.cli.render import tool_detail
    from nanoagent.messages import wrap_untrusted

    output = "\x1b]0;retitled\x07first " + "x" * 100 + "\nsecond\n\x1b[2Jthird\nfourth\nfifth\n[exit code: 0]"
    lines = tool_detail("exec", {"command": "make"}, wrap_untrusted("exec", output), 40)
    assert lines[0] == "    [dim]first " + "x" * 29 + "…[/dim]"  # 4 columns of indent + 35 + the ellipsis
    assert [line.strip() for line in lines[1:]] == ["[dim]second[/dim]", "[dim]third[/dim]", "[dim]fourth[/dim]",
                                                    "[dim]… 1 more line[/dim]"]  # exit code 0 is not shown
    assert tool_detail("read_file", {"path": "a"}, wrap_untrusted("read_file", "text"), 40) == []


def test_an_mcp_tool_line_in_the_interactive_session_shows_the_first_lines_of_its_result_as_exec_does(capsys):
    from nanoagent.agent import events as ev
    from nanoagent.cli.interactive import TerminalUI
    from nanoagent.messages import wrap_untrusted

    ui = TerminalUI(60, plain=True)
    ui.start_turn()
    result = "\x1b]0;retitled\x07line one\nline two\nline three\nline four\nline five\nline six"
    ui(ev.ToolStarted("c1", "mcp__notes__search", {"query": "cats"}, session="cli:direct"))
    ui(ev.ToolFinished("c1", "mcp__notes__search", wrap_untrusted("mcp__notes__search", result), 0.25,
                       session="cli:direct"))

    shown = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    at = next(i for i, line in enumerate(shown) if "✓ mcp__notes__search query=cats" in line)
    assert shown[at + 1:at + 6] == ["    line one", "    line two", "    line three", "    line four",
                                    "    … 2 more lines"]
    assert "retitled" not in "\n".join(shown)
