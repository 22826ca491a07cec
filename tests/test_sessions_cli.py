"""`nanoagent sessions`: conversations listed, read, exported and removed outside a session."""

import json

import pytest

from nanoagent.session.store import SessionStore
from tests.conftest import PATIENCE, anthropic_env, invoke
from tests.llm_server import Reply


def talk(llm, session, *replies):
    llm.script(*replies)
    ran = invoke("agent", "-m", "hello there", "-s", session, env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr


def test_list_shows_every_session_newest_first_with_messages_tokens_and_cost(llm, isolated_home):
    talk(llm, "older", Reply(text="first"))
    talk(llm, "newer", Reply(text="second"))
    listed = json.loads(invoke("sessions", "list", "--json").stdout)
    assert [row["key"] for row in listed] == ["cli:newer", "cli:older"]
    assert listed[0]["messages"] == 2 and listed[0]["tokens"] > 0
    assert listed[0]["cost"] is None and listed[0]["unpriced"]  # claude-test has no listed price
    table = invoke("sessions", "list").stdout
    assert "cli:newer" in table and "cli:older" in table


def test_list_json_gives_cost_as_a_number_in_usd_as_agent_json_does(llm, isolated_home):
    env = {**anthropic_env(llm), "NANOAGENT_MODEL": "anthropic/claude-sonnet-4-5"}
    llm.script(Reply(text="priced"))
    turn = json.loads(invoke("agent", "-m", "hi", "-s", "priced", "--json", env=env).stdout)
    [row] = json.loads(invoke("sessions", "list", "--json").stdout)
    assert isinstance(row["cost"], float) and row["cost"] > 0 and not row["unpriced"]
    assert row["cost"] == pytest.approx(turn["cost"])
    assert "$" in invoke("sessions", "list").stdout  # the table still shows it as money


def test_list_with_no_sessions_says_how_to_start_one(isolated_home):
    ran = invoke("sessions", "list")
    assert ran.returncode == 0 and "nanoagent agent" in ran.stdout


def test_show_renders_the_conversation_with_tool_calls_folded(llm, isolated_home):
    (isolated_home / "workspace").mkdir(parents=True)
    (isolated_home / "workspace" / "notes.md").write_text("milk\neggs\nbread\n")
    talk(llm, "shop", Reply(tool_calls=[("read_file", {"path": "notes.md"})]), Reply(text="You need **milk**."))
    shown = invoke("sessions", "show", "shop")
    assert shown.returncode == 0, shown.stderr
    assert "hello there" in shown.stdout and "You need **milk**." in shown.stdout
    assert "read_file path=notes.md" in shown.stdout  # the call on one line ...
    assert "eggs" not in shown.stdout  # ... its output folded away
    assert "<runtime" not in shown.stdout  # the user's own words, not the runtime block


def test_show_of_an_unknown_key_is_one_line_and_exit_1(isolated_home):
    ran = invoke("sessions", "show", "nope")
    assert ran.returncode == 1
    assert ran.stderr.strip().count("\n") == 0 and "sessions list" in ran.stderr


def test_export_as_markdown_and_json_holds_the_whole_conversation(llm, isolated_home, tmp_path):
    (isolated_home / "workspace").mkdir(parents=True)
    (isolated_home / "workspace" / "notes.md").write_text("milk\n")
    talk(llm, "shop", Reply(tool_calls=[("read_file", {"path": "notes.md"})]), Reply(text="You need milk."))
    markdown = invoke("sessions", "export", "cli:shop", "--format", "md").stdout
    assert markdown.startswith("# cli:shop") and "## User\n\nhello there" in markdown
    assert "<summary>read_file" in markdown and "milk" in markdown
    out = tmp_path / "shop.json"
    ran = invoke("sessions", "export", "shop", "-f", "json", "-o", str(out))
    assert ran.returncode == 0, ran.stderr
    data = json.loads(out.read_text())
    assert data["key"] == "cli:shop" and [m["role"] for m in data["messages"]] == ["user", "assistant", "tool",
                                                                                 "assistant"]
    assert data["usage"] and data["usage"][0]["type"] == "usage"
    assert data["model"] == data["usage"][-1]["model"] != ""  # the model the conversation used


def test_export_never_overwrites_a_file_without_force(llm, isolated_home, tmp_path):
    talk(llm, "shop", Reply(text="fine"))
    out = tmp_path / "keep.md"
    out.write_text("my own notes")
    ran = invoke("sessions", "export", "shop", "-o", str(out))
    assert ran.returncode == 1 and "--force" in ran.stderr
    assert out.read_text() == "my own notes"
    assert invoke("sessions", "export", "shop", "-o", str(out), "--force").returncode == 0
    assert out.read_text().startswith("# cli:shop")


def test_rm_asks_first_refuses_a_script_without_yes_and_keeps_the_memory_archive(llm, isolated_home):
    talk(llm, "old", Reply(text="bye"))
    history = isolated_home / "workspace" / "memory" / "history.jsonl"
    archived = history.read_text() if history.exists() else None
    refused = invoke("sessions", "rm", "old")  # stdin is not a terminal: no one to ask
    assert refused.returncode == 1 and "--yes" in refused.stderr
    assert "cli:old" in SessionStore(isolated_home / "sessions").keys()
    ran = invoke("sessions", "rm", "old", "--yes")
    assert ran.returncode == 0 and "stays" in ran.stdout
    assert "cli:old" not in SessionStore(isolated_home / "sessions").keys()
    assert (history.read_text() if history.exists() else None) == archived



def test_the_prompt_can_be_given_as_an_argument_like_m(llm, isolated_home):
    llm.script(Reply(text="hello back"))
    ran = invoke("agent", "hi there", env=anthropic_env(llm))
    assert ran.returncode == 0 and ran.stdout == "hello back\n"
    both = invoke("agent", "hi", "-m", "hi", env=anthropic_env(llm))
    assert both.returncode == 1 and "not both" in both.stderr


def test_continue_picks_up_the_most_recent_conversation_and_not_a_machine_session(llm, isolated_home):
    talk(llm, "project", Reply(text="noted"))
    store = SessionStore(isolated_home / "sessions")
    cron = store.load("cron:job1")
    store.add_messages(cron, [{"role": "user", "content": "scheduled"}], sync=True)  # newer, but not a conversation
    llm.script(Reply(text="continuing"))
    ran = invoke("agent", "-c", "-m", "where were we?", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert [m["role"] for m in SessionStore(isolated_home / "sessions").load("cli:project").messages] == [
        "user", "assistant", "user", "assistant"]


def test_continue_with_no_earlier_conversation_is_one_line(llm, isolated_home):
    ran = invoke("agent", "-c", "-m", "hi", env=anthropic_env(llm))
    assert ran.returncode == 1 and "No earlier conversation" in ran.stderr and llm.requests == []


def test_resume_off_a_terminal_says_to_use_c_or_s(llm, isolated_home):
    talk(llm, "project", Reply(text="noted"))
    ran = invoke("agent", "--resume", "-m", "hi", env=anthropic_env(llm))
    assert ran.returncode == 1 and "-c" in ran.stderr and "-s KEY" in ran.stderr


@pytest.mark.process
def test_resume_on_a_terminal_offers_recent_conversations_to_pick_from(llm, isolated_home):
    import os
    import sys

    import pexpect

    from tests.conftest import ROOT

    talk(llm, "older", Reply(text="a"))
    talk(llm, "newer", Reply(text="b"))
    llm.script(Reply(text="back in the older one"))
    env = {**os.environ, **anthropic_env(llm), "TERM": "xterm-256color"}
    child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "agent", "--resume", "-m", "and then?"], cwd=str(ROOT),
                          env=env, encoding="utf-8", timeout=PATIENCE, dimensions=(30, 120))
    child.expect(r"1\s+cli:newer")
    child.expect(r"2\s+cli:older")
    child.expect_exact("Continue which")
    child.send("2\r")
    child.expect_exact("back in the older one")
    child.expect(pexpect.EOF)
    assert len(SessionStore(isolated_home / "sessions").load("cli:older").messages) == 4


def test_show_and_export_fold_an_attached_file_and_piped_input_to_one_line_each(llm, isolated_home, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("milk\n" + "x" * 190_000 + "\n")  # 2 lines, near the 200 KB limit
    llm.script(Reply(text="Noted."))
    ran = invoke("agent", "-m", "what is on it?", "-a", str(notes), "-s", "shop", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    llm.script(Reply(text="Seen."))
    ran = invoke("agent", "-m", "and this?", "-s", "shop", input="one\ntwo\nthree\n", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert "x" * 1000 in json.dumps(llm.requests[0].body)  # the model got the whole file

    shown = invoke("sessions", "show", "shop").stdout
    markdown = invoke("sessions", "export", "shop", "-f", "md").stdout
    for replay in (shown, markdown):
        assert "[attached notes.txt, 2 lines]" in replay and "what is on it?" in replay
        assert "[piped input, 3 lines]" in replay and "and this?" in replay
        assert "xxxx" not in replay and "milk" not in replay and "two" not in replay
        assert len(replay) < 2000
    exported = json.loads(invoke("sessions", "export", "shop", "-f", "json").stdout)
    assert "x" * 190_000 in json.dumps(exported)  # JSON keeps every record whole
