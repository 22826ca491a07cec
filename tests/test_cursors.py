"""Cursor files that are not what they should be never brick memory: a warning names the file and history.jsonl's
own cursors take over."""

from __future__ import annotations

import json

import pytest

from nanoagent.memory.history import HistoryLog
from tests.conftest import anthropic_env, invoke
from tests.llm_server import Reply

HUGE = "1" + "0" * 26  # far past SQLite's largest integer


def remember(home, *facts: str) -> HistoryLog:
    log = HistoryLog(home / "workspace" / "memory")
    for fact in facts:
        log.append("cli:direct", fact)
    return log


def memory_file(home, name: str):
    return home / "workspace" / "memory" / name


def cursors_in_history(home) -> list[int]:
    return [json.loads(line)["cursor"] for line in memory_file(home, "history.jsonl").read_text().splitlines()]


def test_a_huge_cursor_file_is_recovered_from_history_and_search_keeps_working(isolated_home, llm):
    remember(isolated_home, "- the user likes tea", "- the user lives in Leith")
    memory_file(isolated_home, ".cursor").write_text(HUGE + "\n")
    env = anthropic_env(llm)
    llm.script(Reply(text="Gull is a fine name."))
    assert invoke("agent", "-m", "my boat is called Gull", env=env).returncode == 0
    llm.script(Reply(text="DONE"), Reply(text="The user named their boat Gull."))  # the memory flush; the summary
    ran = invoke("agent", "-m", "/new", env=env)
    assert ran.returncode == 0, ran.stderr
    path = memory_file(isolated_home, ".cursor")
    assert [line for line in ran.error_lines if str(path) in line] == [
        f"warning: {path} holds '{HUGE}', not a cursor from 0 to 2 (the last in history.jsonl); using 2; "
        "the next entry rewrites it"]
    assert cursors_in_history(isolated_home) == [1, 2, 3]
    assert path.read_text().strip() == "3"
    found = invoke("memory", "search", "boat Gull", "--json")
    assert found.returncode == 0, found.stderr
    assert "history#3" in [hit["source"].split()[0] for hit in json.loads(found.stdout)]


def test_a_history_line_with_a_cursor_too_big_for_sqlite_is_skipped_by_search(isolated_home):
    remember(isolated_home, "- the user likes tea")
    with memory_file(isolated_home, "history.jsonl").open("a") as f:
        f.write(json.dumps({"cursor": int(HUGE), "timestamp": "", "session": "x", "content": "tea again"}) + "\n")
    found = invoke("memory", "search", "tea", "--json")
    assert found.returncode == 0, found.stderr
    assert [hit["source"].split()[0] for hit in json.loads(found.stdout)] == ["history#1"]
    assert remember(isolated_home, "- and biscuits").cursor == 2


@pytest.mark.parametrize("content", ["soon", "-5", "2.5"])
def test_a_dream_cursor_that_is_not_a_number_warns_and_dream_reads_all_history(isolated_home, llm, content):
    remember(isolated_home, "- the user likes tea", "- the user lives in Leith")
    path = memory_file(isolated_home, ".dream_cursor")
    path.write_text(content)
    llm.script(Reply(text="Nothing to keep."))
    ran = invoke("dream", "--dry-run", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert ran.error_lines == [
        f"warning: {path} holds {content!r}, not a cursor from 0 to 2 (the last in history.jsonl); using 0, so Dream "
        "reads all of history again; write the last cursor Dream processed into the file to skip that"]
    assert "Entries 1-2 (2)" in ran.stdout
    assert "likes tea" in json.dumps(llm.requests[0].body["messages"])


def test_a_dream_cursor_past_the_end_warns_and_new_history_is_still_dreamed(isolated_home, llm):
    log = remember(isolated_home, "- the user likes tea", "- the user lives in Leith")
    path = memory_file(isolated_home, ".dream_cursor")
    path.write_text(HUGE)
    env = anthropic_env(llm)
    ran = invoke("dream", env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.error_lines == [f"warning: {path} holds '{HUGE}', not a cursor from 0 to 2 (the last in "
                               "history.jsonl); using 2 and wrote that there, so Dream takes the entries after it"]
    assert path.read_text().strip() == "2"
    assert "Nothing new" in ran.stdout and llm.requests == []
    log.append("cli:direct", "- the user bought a boat")
    llm.script(Reply(text="Nothing to keep."))
    ran = invoke("dream", "--dry-run", env=env)
    assert ran.returncode == 0, ran.stderr
    assert "Entries 3-3 (1)" in ran.stdout
