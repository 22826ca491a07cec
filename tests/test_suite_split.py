"""The split between `make test-fast` and `make test`: a test that starts a real process says so with
`@pytest.mark.process`, and one that does not say so cannot start one unnoticed."""

import os
import pty
import subprocess
import sys

import pytest

from tests.conftest import UnmarkedProcess


def test_an_unmarked_test_that_starts_python_or_a_terminal_fails_naming_what_it_started(processes_are_marked):
    with pytest.raises(UnmarkedProcess, match=r"starts .*python.*: mark it @pytest.mark.process"):
        subprocess.run([sys.executable, "-m", "nanoagent", "--version"], capture_output=True)
    with pytest.raises(UnmarkedProcess, match="starts a pseudo-terminal"):
        pty.fork()
    with pytest.raises(UnmarkedProcess, match="starts a fork"):
        os.fork()
    assert len(processes_are_marked) == 3  # each fails the test at its end too, even if the caller caught it
    processes_are_marked.clear()  # here that was the point


def test_commands_that_code_runs_as_its_work_need_no_mark(processes_are_marked):
    assert subprocess.run(["git", "--version"], capture_output=True).returncode == 0
    assert subprocess.run("echo hi", shell=True, capture_output=True, text=True).stdout == "hi\n"
    assert processes_are_marked == []


@pytest.mark.process
def test_a_marked_test_starts_what_it_needs():
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0

