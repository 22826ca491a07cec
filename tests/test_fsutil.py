"""The write helpers every store uses: appends that survive a killed writer, private modes, errors that name files."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from nanoagent.fsutil import append_lines, atomic_write, private_dir


def test_append_lines_cuts_a_torn_tail_and_returns_where_it_wrote(tmp_path):
    path = tmp_path / "log.jsonl"
    assert append_lines(path, b'{"n": 1}\n') == 0
    with open(path, "ab") as f:
        f.write(b'{"n": 2, "cut')  # a writer killed mid-line
    assert append_lines(path, b'{"n": 3}\n', sync=True) == 9
    assert path.read_bytes() == b'{"n": 1}\n{"n": 3}\n'


def test_append_lines_makes_its_file_and_folders_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        path = tmp_path / "a" / "b" / "log.jsonl"
        append_lines(path, b"{}\n")
    finally:
        os.umask(old)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (path, path.parent, path.parent.parent)] == [0o600, 0o700, 0o700]


def test_an_existing_file_is_made_private_when_appended_to(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"{}\n")
    path.chmod(0o644)
    append_lines(path, b"{}\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_private_dir_leaves_folders_that_exist_as_they_are(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    private_dir(shared / "mine")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "mine").stat().st_mode) == 0o700


def test_a_full_disk_during_an_append_names_the_file(tmp_path):
    path = tmp_path / "log.jsonl"
    os.symlink("/dev/full", path)  # every write fails with ENOSPC
    with pytest.raises(OSError) as info:
        append_lines(path, b"{}\n")
    assert (info.value.errno, info.value.filename) == (errno.ENOSPC, str(path))


def test_atomic_write_into_a_file_that_is_no_folder_names_the_target(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError) as info:
        atomic_write(blocker / "config.json", "{}")
    assert info.value.filename == str(blocker / "config.json")


def test_a_persons_own_file_follows_the_umask_and_a_replaced_one_keeps_its_mode(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "project" / "src" / "new.py", "x = 1\n", own=True)
        atomic_write(tmp_path / "private.json", "{}")
        (tmp_path / "project" / "tool.sh").write_text("old\n")
        os.chmod(tmp_path / "project" / "tool.sh", 0o755)
        atomic_write(tmp_path / "project" / "tool.sh", "new\n", own=True)
    finally:
        os.umask(old)
    modes = {p: (tmp_path / p).stat().st_mode & 0o777 for p in ("project/src", "project/src/new.py",
                                                                 "project/tool.sh", "private.json")}
    assert modes == {"project/src": 0o750, "project/src/new.py": 0o640, "project/tool.sh": 0o755,
                     "private.json": 0o600}
