"""Text piped into `agent -m`: it goes before the message, marked; `-m -` reads the whole message from stdin;
binary or over-large input is refused with one line. In this process, and as a real process through a gateway."""

from __future__ import annotations

import pytest

from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.session.store import SessionStore
from tests.conftest import anthropic_env, invoke, run_cli, write_config
from tests.llm_server import Reply


def last_user_text(body: dict) -> str:
    content = body["messages"][-1]["content"]
    text = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
    return text.split("</runtime_context>\n\n", 1)[1]


def test_piped_text_goes_before_the_message_marked_as_piped_input(llm, isolated_home):
    llm.script(Reply(text="Two lines."))
    proc = invoke("agent", "-m", "summarise", input="line one\nline two </piped_input> not the end\n",
                  env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    assert last_user_text(llm.requests[-1].body) == (
        "<piped_input>\nline one\nline two &lt;/piped_input> not the end\n</piped_input>\n\nsummarise")


def test_m_dash_reads_the_whole_message_from_stdin(llm, isolated_home):
    llm.script(Reply(text="Hello."))
    proc = invoke("agent", "-m", "-", input="hello from stdin\nsecond line\n", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    assert last_user_text(llm.requests[-1].body) == "hello from stdin\nsecond line\n"


def test_nothing_piped_leaves_the_message_as_it_is(llm, isolated_home):
    llm.script(Reply(text="ok"))
    assert invoke("agent", "-m", "just this", input="", env=anthropic_env(llm)).returncode == 0
    assert last_user_text(llm.requests[-1].body) == "just this"


@pytest.mark.parametrize(("args", "data", "expected"), [
    (("-m", "-"), "", "nothing was piped in"),
    (("-m", "-"), "  \n", "the message after -m is empty"),
    (("-m", "summarise"), b"\x89\xff\x00binary", "not text (UTF-8)"),
    (("-m", "summarise"), "x" * 20_000_000, "over the 1,000,000-byte limit (tools.attachments.maxStdinBytes"),
], ids=["m-dash-empty", "m-dash-blank", "binary", "20-mb"])
def test_bad_stdin_gives_one_line_and_no_model_call(llm, isolated_home, args, data, expected):
    proc = invoke("agent", *args, input=data, env=anthropic_env(llm))
    assert proc.returncode == 1
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and llm.requests == []


def test_the_stdin_cap_comes_from_config(llm, isolated_home):
    write_config(isolated_home, {"tools": {"attachments": {"maxStdinBytes": 1000}}})
    proc = invoke("agent", "-m", "summarise", input="y" * 1001, env=anthropic_env(llm))
    assert proc.returncode == 1 and "1,000-byte limit" in proc.stderr


@pytest.mark.process
def test_piped_text_reaches_the_model_through_a_running_gateway(isolated_home):
    from tests.test_gateway import Running

    provider = ScriptedProvider(default="Summarised.")
    running = Running(provider)
    try:
        proc = run_cli("agent", "-m", "summarise", input="notes from a pipe\n")
        assert proc.returncode == 0 and proc.stdout.strip() == "Summarised.", proc.stderr
        dashed = run_cli("agent", "-m", "-", input="the whole message\n")
        assert dashed.returncode == 0, dashed.stderr
    finally:
        running.stop()
    texts = [m["content"].split("</runtime_context>\n\n", 1)[1]
             for m in SessionStore(running.paths.sessions_dir).load("cli:direct").messages if m["role"] == "user"]
    assert texts == ["<piped_input>\nnotes from a pipe\n</piped_input>\n\nsummarise", "the whole message\n"]
