"""Session files written by earlier versions read into the typed records unchanged, and new writes keep the
format: a header, messages, meta and usage lines as before."""

from __future__ import annotations

import json

from nanoagent.messages import user
from nanoagent.session.store import SessionStore
from nanoagent.usage import Usage, UsageRecord

# What nanoagent 0.x (format 1) wrote for one turn with a tool call, a /model switch, consolidation and a
# Message Batches usage line.
EARLIER_VERSION = "\n".join(json.dumps(r) for r in [
    {"type": "header", "version": 1, "key": "cli:direct", "created": "2026-11-20T10:00:00+00:00"},
    {"type": "message", "message": {"role": "user", "content": "<runtime_context>\ntime: x\n</runtime_context>\n\nhi"}},
    {"type": "message", "message": {"role": "assistant", "content": "", "tool_calls": [
        {"id": "toolu_1", "name": "read_file", "arguments": "{\"path\": \"a.txt\"}"}]}},
    {"type": "message", "message": {"role": "tool", "tool_call_id": "toolu_1", "name": "read_file",
                                    "content": "Error: no such file", "is_error": True}},
    {"type": "message", "message": {"role": "assistant", "content": "There is no a.txt."}},
    {"type": "usage", "ts": "2026-11-20T10:00:05+00:00", "model": "anthropic/claude-sonnet-4-5", "purpose": "turn",
     "input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 0, "cache_write_tokens": 100},
    {"type": "meta", "model": "openai/gpt-4.1"},
    {"type": "meta", "last_consolidated": 4},
    {"type": "usage", "ts": "2026-11-20T11:00:00+00:00", "model": "anthropic/claude-sonnet-4-5", "purpose": "dream",
     "input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 0, "cache_write_tokens": 0, "price_factor": 0.5},
]) + "\n"


def test_a_session_written_by_the_earlier_version_reads_into_typed_records(tmp_path):
    store = SessionStore(tmp_path)
    store.path_for("cli:direct").write_text(EARLIER_VERSION)
    warnings: list[str] = []
    session = SessionStore(tmp_path, warn=warnings.append).load("cli:direct")
    assert warnings == []
    assert [m["role"] for m in session.messages] == ["user", "assistant", "tool", "assistant"]
    assert session.messages[1]["tool_calls"][0] == {"id": "toolu_1", "name": "read_file",
                                                    "arguments": "{\"path\": \"a.txt\"}"}
    assert session.messages[2].get("is_error") is True
    assert (session.meta.created, session.meta.model, session.last_consolidated) == (
        "2026-11-20T10:00:00+00:00", "openai/gpt-4.1", 4)
    assert session.usage == [
        UsageRecord("anthropic/claude-sonnet-4-5", Usage(120, 30, 0, 100), "turn", "2026-11-20T10:00:05+00:00"),
        UsageRecord("anthropic/claude-sonnet-4-5", Usage(10, 5, 0, 0), "dream", "2026-11-20T11:00:00+00:00", 0.5),
    ]


def test_new_records_are_written_in_the_same_format(tmp_path):
    store = SessionStore(tmp_path)
    session = store.load("cli:direct")
    store.add_messages(session, [user("hi")])
    store.add_usage(session, UsageRecord("m", Usage(1, 2, 3, 4), "turn", "2026-11-20T10:00:05+00:00", 0.5))
    store.set_model(session, "openai/gpt-4.1")
    store.set_consolidated(session, 1)
    lines = [json.loads(line) for line in session.path.read_text().splitlines()]
    assert lines[1:] == [
        {"type": "message", "message": {"role": "user", "content": "hi"}},
        {"type": "usage", "ts": "2026-11-20T10:00:05+00:00", "model": "m", "purpose": "turn", "input_tokens": 1,
         "output_tokens": 2, "cache_read_tokens": 3, "cache_write_tokens": 4, "price_factor": 0.5},
        {"type": "meta", "model": "openai/gpt-4.1"},
        {"type": "meta", "last_consolidated": 1},
    ]
    again = SessionStore(tmp_path).load("cli:direct")
    assert (again.meta.model, again.last_consolidated, again.usage) == ("openai/gpt-4.1", 1, session.usage)
