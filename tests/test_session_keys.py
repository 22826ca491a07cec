"""Each session key has its own file; sessions saved under the first key-to-file mapping still load."""

from __future__ import annotations

import json
import re

from nanoagent.paths import safe_key
from tests.conftest import anthropic_env, invoke
from tests.llm_server import Reply

TRICKY = ["x/y", "x_y", "x:y", "x__y", "x_:y", "x:_y", "_5f", "_2f", "a b", "a\tb", "x/_y", "x_/y", "é", "日本",
          "a\udce9", "", ":", "_", "__", "..", "x.y", "x-y"]


def write_session(path, key: str, *texts: str) -> None:
    lines = [{"type": "header", "version": 1, "key": key, "created": "2026-01-01T00:00:00+00:00"}]
    lines += [{"type": "message", "message": {"role": role, "content": text}}
              for text in texts for role in ("user", "assistant")]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_every_key_maps_to_its_own_file_name():
    names = [safe_key(f"cli:{key}") for key in TRICKY] + [safe_key(key) for key in TRICKY]
    assert len(set(names)) == len(names)
    assert all(c.isalnum() or c in "-._" for name in names for c in name)


def test_plain_keys_keep_the_file_name_they_always_had():
    assert [safe_key(key) for key in ("cli:direct", "telegram:42", "cli:work-2.b", "dream:Notes")] == [
        "cli__direct", "telegram__42", "cli__work-2.b", "dream__Notes"]


def test_keys_that_differ_only_in_slash_and_underscore_are_separate_conversations(isolated_home, llm):
    env = anthropic_env(llm)
    llm.default_reply = Reply(echo=True)
    for session, text in (("x/y", "first in slash"), ("x_y", "first in underscore"), ("x/y", "second in slash")):
        ran = invoke("agent", "-m", text, "-s", session, env=env)
        assert ran.returncode == 0, ran.stderr
    conversation = re.sub(r"<runtime_context>.*?</runtime_context>", "", json.dumps(llm.requests[-1].body["messages"]))
    assert "first in underscore" not in conversation  # (automatic recall may quote it, marked, in the runtime block)
    assert "first in slash" in conversation
    assert sorted(p.name for p in (isolated_home / "sessions").glob("*.jsonl")) == [
        "cli__x_2fy.jsonl", "cli__x_5fy.jsonl"]


def test_a_session_saved_under_the_old_name_keeps_its_file_and_history(isolated_home, llm):
    old = isolated_home / "sessions" / "cli__my_chat.jsonl"
    write_session(old, "cli:my_chat", "my boat is called Gull")
    llm.script(Reply(text="Gull, you said."))
    ran = invoke("agent", "-m", "what is my boat called?", "-s", "my_chat", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert "my boat is called Gull" in json.dumps(llm.requests[0].body["messages"])
    assert [p.name for p in old.parent.glob("*.jsonl")] == ["cli__my_chat.jsonl"]
    assert "Gull, you said." in old.read_text()


def test_an_old_file_of_another_key_is_not_taken_for_this_one(isolated_home, llm):
    old = isolated_home / "sessions" / "cli__x_y.jsonl"
    write_session(old, "cli:x_y", "underscore secrets")
    before = old.read_bytes()
    llm.script(Reply(text="Fresh."))
    ran = invoke("agent", "-m", "hello", "-s", "x/y", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert "underscore secrets" not in json.dumps(llm.requests[0].body["messages"])
    assert old.read_bytes() == before
    assert (isolated_home / "sessions" / "cli__x_2fy.jsonl").exists()
