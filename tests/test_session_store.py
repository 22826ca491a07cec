import json
import os
import signal
import subprocess
import sys
import time

import pytest

from nanoagent.session.store import SessionStore
from tests.conftest import PATIENCE


def store_at(tmp_path, warnings=None):
    return SessionStore(tmp_path / "sessions", warn=(warnings.append if warnings is not None else None))


def test_messages_survive_a_reload(tmp_path):
    store = store_at(tmp_path)
    s = store.load("cli:direct")
    with store.lock(s):
        store.add_messages(s, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], sync=True)
    again = store_at(tmp_path).load("cli:direct")
    assert [m["content"] for m in again.messages] == ["hi", "hello"]
    assert again.meta.created


def test_file_starts_with_a_versioned_header(tmp_path):
    store = store_at(tmp_path)
    s = store.load("telegram:42")
    store.add_messages(s, [{"role": "user", "content": "x"}])
    header = json.loads(s.path.read_text().splitlines()[0])
    assert header == {"type": "header", "version": 1, "key": "telegram:42", "created": header["created"]}
    assert store.keys() == ["telegram:42"]


def test_metadata_updates_append_and_never_rewrite_messages(tmp_path):
    store = store_at(tmp_path)
    s = store.load("cli:direct")
    store.add_messages(s, [{"role": "user", "content": "a" * 1000}])
    before = s.path.read_bytes()
    store.set_consolidated(s, 1)
    after = s.path.read_bytes()
    assert after.startswith(before) and len(after) - len(before) < 100
    assert store_at(tmp_path).load("cli:direct").last_consolidated == 1


def test_a_torn_last_line_is_skipped_with_a_warning_and_cut_before_the_next_append(tmp_path):
    store = store_at(tmp_path)
    s = store.load("cli:direct")
    store.add_messages(s, [{"role": "user", "content": "kept"}])
    with open(s.path, "ab") as f:
        f.write(b'{"type": "message", "message": {"role": "assistant", "content": "tor')
    warnings = []
    reader = store_at(tmp_path, warnings)
    s2 = reader.load("cli:direct")
    assert [m["content"] for m in s2.messages] == ["kept"]
    assert any("incomplete last line" in w for w in warnings)
    reader.add_messages(s2, [{"role": "user", "content": "next"}])
    fresh = store_at(tmp_path).load("cli:direct")
    assert [m["content"] for m in fresh.messages] == ["kept", "next"]
    assert all(json.loads(line) for line in s.path.read_text().splitlines())


def test_a_corrupt_line_in_the_middle_is_skipped_and_later_messages_kept(tmp_path):
    store = store_at(tmp_path)
    s = store.load("cli:direct")
    store.add_messages(s, [{"role": "user", "content": "one"}])
    with open(s.path, "ab") as f:
        f.write(b"garbage that is not json\n")
    store.add_messages(s, [{"role": "user", "content": "two"}])
    warnings = []
    s2 = store_at(tmp_path, warnings).load("cli:direct")
    assert [m["content"] for m in s2.messages] == ["one", "two"]
    assert any("corrupt line" in w for w in warnings)


def test_refresh_reads_only_what_another_writer_appended(tmp_path):
    a, b = store_at(tmp_path), store_at(tmp_path)
    sa, sb = a.load("k:1"), b.load("k:1")
    a.add_messages(sa, [{"role": "user", "content": "from a"}])
    b.add_messages(sb, [{"role": "user", "content": "from b"}])  # b notices a's line first
    assert [m["content"] for m in sb.messages] == ["from a", "from b"]
    with a.lock(sa):
        pass
    assert [m["content"] for m in sa.messages] == ["from a", "from b"]


WRITER = r"""
import sys
from pathlib import Path
from nanoagent.session.store import SessionStore
store = SessionStore(Path(sys.argv[1]))
s = store.load("cli:race")
for i in range(50):
    with store.lock(s):
        store.add_messages(s, [{"role": "user", "content": f"{sys.argv[2]}-{i}-" + "x" * 5000},
                               {"role": "assistant", "content": f"{sys.argv[2]}-{i}"}])
"""


@pytest.mark.process
def test_two_processes_writing_the_same_session_never_interleave(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "sessions"), name])
             for name in ("a", "b")]
    assert [p.wait(timeout=PATIENCE) for p in procs] == [0, 0]
    s = store_at(tmp_path).load("cli:race")
    assert len(s.messages) == 200
    for user, reply in zip(s.messages[::2], s.messages[1::2], strict=True):
        assert user["content"].startswith(reply["content"] + "-")


RECORD = 4_000_000  # characters a record: writing one takes long enough to be caught in the middle
KILLED_WRITER = r"""
import sys
from pathlib import Path
from nanoagent.session.store import SessionStore
store = SessionStore(Path(sys.argv[1]))
s = store.load("cli:kill")
for i in range(50):
    store.add_messages(s, [{"role": "user", "content": f"{sys.argv[2]}-{i}:" + "y" * int(sys.argv[3])}])
"""


def record_line(name: str, i: int) -> bytes:
    """The line the writer appends for its record `i`."""
    message = {"role": "user", "content": f"{name}-{i}:" + "y" * RECORD}
    return json.dumps({"type": "message", "message": message}, ensure_ascii=False).encode() + b"\n"


def mid_append(path, past: int) -> bool:
    """The file is longer than `past` bytes and ends inside a line: a record is being written."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            return size > past and os.pread(f.fileno(), 1, size - 1) != b"\n"
    except FileNotFoundError:
        return False


def kill_mid_append(sessions, name: str) -> bytes:
    """Start a writer, let it complete at least one record, kill -9 it while it writes another, and return the
    file as the kill left it: ending in a torn record."""
    path = sessions / "cli__kill.jsonl"
    deadline = time.monotonic() + PATIENCE
    while True:
        assert time.monotonic() < deadline, "the writer was never killed in the middle of an append"
        past = (path.stat().st_size if path.exists() else 0) + len(record_line(name, 0))
        proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(sessions), name, str(RECORD)])
        try:
            while not mid_append(path, past):
                assert proc.poll() is None, "the writer ended before it was caught mid-append"
                assert time.monotonic() < deadline, "the writer never got past its first record"
                time.sleep(0.0005)  # an append lasts milliseconds
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            return data
        # the record was finished in the instant between seeing it half written and the kill: again


@pytest.mark.process
def test_kill_9_mid_append_loses_at_most_the_torn_record(tmp_path):
    sessions = tmp_path / "sessions"
    kill_mid_append(sessions, "a")
    data = kill_mid_append(sessions, "b")  # this writer first cut the record "a" left torn
    lines = data.split(b"\n")
    whole, torn = lines[:-1], lines[-1]
    names = [json.loads(line)["message"]["content"].split(":")[0] for line in whole[1:]]
    first_b = names.index("b-0")
    assert names == [f"a-{i}" for i in range(first_b)] + [f"b-{i}" for i in range(len(names) - first_b)]
    assert first_b >= 1 and len(names) - first_b >= 1
    next_line = record_line("b", len(names) - first_b)
    assert 0 < len(torn) < len(next_line) and next_line.startswith(torn)  # killed in the middle of this one

    warnings = []
    store = store_at(tmp_path, warnings)
    s = store.load("cli:kill")
    assert [m["content"].split(":")[0] for m in s.messages] == names  # every whole record, nothing else
    assert len(warnings) == 1 and "incomplete last line" in warnings[0]
    store.add_messages(s, [{"role": "assistant", "content": "after"}])
    again = store_at(tmp_path).load("cli:kill")
    assert [m["content"].split(":")[0] for m in again.messages] == [*names, "after"]
    assert all(json.loads(line) for line in (sessions / "cli__kill.jsonl").read_bytes().splitlines())
