"""The interactive session against the local LLM server: what is about what it shows or answers runs in this process
(`screen`: prompt_toolkit on a pipe, its output in a buffer, the agent here or through a running gateway); what only
a terminal shows (Ctrl-C and Esc during a turn, resize, the status line, a prompt redrawn after a turn) runs in a
real pseudo-terminal or tmux. The slash commands behind it are the same for `agent -m` and are checked in-process in
test_cli_agent.py.
"""

import asyncio
import contextlib
import functools
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pexpect
import pytest

from nanoagent.cli.interactive import ESC_WAIT
from nanoagent.session.store import SessionStore
from tests.conftest import (
    PATIENCE,
    PROVIDER_ENV,
    ROOT,
    anthropic_env,
    invoke,
    start_gateway_process,
    wait_until,
)
from tests.llm_server import Reply

PROMPT = "›"
SGR = r"(?:\x1b\[[0-9;]*m)*"  # colour codes between rendered words


def styled(*words: str) -> str:
    """A regex matching words separated by single spaces, with any colour codes around them."""
    return SGR + (SGR + " " + SGR).join(re.escape(w) for w in words) + SGR


class Way(NamedTuple):
    """How a test's terminal reaches the agent: what its banner says about it, the home it works in, and the
    session key it talks in."""
    said: str
    home: Path
    key: str


@pytest.fixture(scope="module")
def shared_gateway(llm_server, tmp_path_factory) -> Iterator[Path]:
    """One `nanoagent gateway` process for the module, on a home of its own; yields that home. A test talking to
    it uses a fresh session key, so it sees only its own conversation; a test that needs a clean home, its own
    config or a gateway it may stop starts its own."""
    home = tmp_path_factory.mktemp("shared-gateway") / "home"
    env = {name: value for name, value in os.environ.items() if name not in PROVIDER_ENV}
    env = {**env, "HOME": str(home.parent / "user"), "NANOAGENT_HOME": str(home), **anthropic_env(llm_server)}
    gateway = start_gateway_process(env)
    yield home
    gateway.terminate()
    gateway.communicate(timeout=PATIENCE)


@pytest.fixture
def way(request, llm, isolated_home, monkeypatch):
    """How the terminal reaches the agent: in its own process (the default), or through a running gateway for
    the key cases marked `both_ways` (the module's shared gateway, in a session of the test's own) or
    `both_ways_own_gateway` (a gateway of the test's own on its isolated home)."""
    param = getattr(request, "param", "in-process")
    if param == "in-process":
        yield Way("", isolated_home, "cli:direct")
        return
    if param == "gateway":
        home = request.getfixturevalue("shared_gateway")
        monkeypatch.setenv("NANOAGENT_HOME", str(home))
        key = f"cli:{uuid.uuid4().hex[:6]}"  # as long as cli:direct: the banner wraps where it did
        yield Way(" (through the gateway)", home, key)
        return
    gateway = start_gateway_process({**os.environ, **anthropic_env(llm)})
    yield Way(" (through the gateway)", isolated_home, "cli:direct")
    gateway.terminate()
    gateway.communicate(timeout=PATIENCE)


both_ways = pytest.mark.parametrize(
    "way", ["in-process", pytest.param("gateway", marks=pytest.mark.process)], indirect=True)
both_ways_own_gateway = pytest.mark.parametrize(
    "way", ["in-process", pytest.param("own-gateway", marks=pytest.mark.process)], indirect=True)


def spawn_agent(llm, *args: str, width: int = 80, **env: str) -> pexpect.spawn:
    """`nanoagent agent ARGS` in a pseudo-terminal 30 lines high and `width` wide, talking to `llm`; `env`
    overrides any of its environment."""
    env = {**os.environ, **anthropic_env(llm), "TERM": "xterm-256color", "COLUMNS": str(width), "LINES": "30",
           "PROMPT_TOOLKIT_NO_CPR": "1", **env}  # pexpect does not answer cursor-position requests
    return pexpect.spawn(sys.executable, ["-m", "nanoagent", "agent", *args], cwd=str(ROOT), env=env,
                         encoding="utf-8", timeout=PATIENCE, dimensions=(30, width))


@pytest.fixture
def term(llm, isolated_home, way):
    children = []

    def spawn(*args):
        session = ("-s", way.key) if way.key != "cli:direct" and "-s" not in args else ()
        child = spawn_agent(llm, *session, *args)
        child.expect_exact(PROMPT)
        assert ("(through the gateway)" in child.before) == bool(way.said), child.before  # the way the test asked for
        children.append(child)
        return child

    yield spawn
    for child in children:
        child.terminate(force=True)


class Screen:
    """The interactive session run in this process, for what is about rendering: prompt_toolkit reads keys from a
    pipe and writes, as to a vt100 terminal `width` columns wide, into a buffer; the lines printed above the prompt
    reach it through the same output. `expect` and `before` read it as pexpect reads a pseudo-terminal."""

    def __init__(self, key: str = "cli:direct", width: int = 80, remote: bool = False):
        from prompt_toolkit.input import create_pipe_input

        self.output = io.StringIO()
        self.seen = 0  # where the next `expect` starts looking
        self.before = self.after = ""
        self._pipe_input = create_pipe_input()
        self.pipe = self._pipe_input.__enter__()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(key, width, remote), daemon=True)
        self.thread.start()

    def _run(self, key: str, width: int, remote: bool) -> None:
        try:
            asyncio.run(self._session(key, width, remote))
        except BaseException as e:  # noqa: BLE001 - reported by `expect` and `close` in the test's thread
            self.failure = e

    async def _session(self, key: str, width: int, remote: bool) -> None:
        """What `nanoagent agent` runs on a terminal (cli/app.py's _interactive), on this screen: the agent here,
        or the running gateway's when `remote`."""
        from prompt_toolkit.application import create_app_session
        from prompt_toolkit.data_structures import Size
        from prompt_toolkit.output.vt100 import Vt100_Output

        from nanoagent.cli.app import _local, _saved
        from nanoagent.cli.attach import LocalAgent, RemoteAgent, connect
        from nanoagent.cli.common import open_paths, read_config
        from nanoagent.cli.interactive import TerminalUI, run_interactive

        paths = open_paths(None, seeds=True)
        here = functools.partial(_local, read_config(paths), paths, None)
        output = Vt100_Output(self.output, lambda: Size(rows=30, columns=width), term="xterm-256color",
                              enable_cpr=False)
        # the banner, printed before the prompt takes over the output, reaches the screen as on a terminal
        with create_app_session(input=self.pipe, output=output), contextlib.redirect_stdout(self.output):
            ui = TerminalUI(width, False)
            agent: LocalAgent | RemoteAgent = await connect(paths.gateway_socket, key, ui, local=here) if remote \
                else here()
            saved = _saved(paths, key) if isinstance(agent, RemoteAgent) else agent.loop.session(key)
            try:
                await run_interactive(agent, key, paths.home / "history" / "cli_history", ui,
                                      " (through the gateway)" if remote else "", saved=saved)
            finally:
                await agent.aclose()

    def send(self, text: str) -> None:
        self.pipe.send_text(text)

    def expect(self, pattern: str) -> re.Match:
        """Wait for `pattern` (a regex) in what was written since the last match, and move past it."""
        deadline = time.monotonic() + PATIENCE
        while not (match := re.compile(pattern).search(self.output.getvalue(), self.seen)):
            assert self.failure is None and time.monotonic() < deadline, (self.failure, self.output.getvalue())
            time.sleep(0.01)
        self.before, self.after = match.string[self.seen:match.start()], match.group()
        self.seen = match.end()
        return match

    def expect_exact(self, text: str) -> re.Match:
        return self.expect(re.escape(text))

    def ended(self) -> bool:
        self.thread.join(PATIENCE)
        return not self.thread.is_alive() and self.failure is None

    def close(self) -> None:
        if self.thread.is_alive():
            self.send("\x04")  # Ctrl-D
            self.thread.join(PATIENCE)
        self._pipe_input.__exit__(None, None, None)
        assert not self.thread.is_alive() and self.failure is None, self.failure


@pytest.fixture
def screen(llm, way, monkeypatch):
    """Opens in-process sessions (`screen(key=..., width=...)`), at the prompt, against `llm`, reaching the agent
    the `way` the test asks for."""
    for name, value in anthropic_env(llm).items():
        monkeypatch.setenv(name, value)
    opened = []

    def open_one(**options) -> Screen:
        opened.append(Screen(**{"key": way.key, "remote": bool(way.said), **options}))
        opened[-1].expect_exact(PROMPT)
        assert ("(through the gateway)" in opened[-1].before) == bool(way.said)  # the way the test asked for
        return opened[-1]

    yield open_one
    for one in opened:
        one.close()


def wait_for_requests(llm, count, timeout=PATIENCE):
    wait_until(lambda: len(llm.requests) >= count, "the model to be called", timeout)


def messages(home, key="cli:direct"):
    return SessionStore(home / "sessions").load(key).messages


@both_ways
def test_a_reply_streams_in_and_is_rendered(screen, llm):
    llm.script(Reply(text="First paragraph here.\n\nSecond **bold** paragraph.", chunk_delay=0.05))
    child = screen()
    child.send("hello" + "\r")  # Enter is CR; LF (Ctrl-J) adds a new line
    child.expect_exact("First paragraph here.")
    child.expect(styled("Second", "bold", "paragraph."))  # Markdown rendered: no asterisks


@both_ways_own_gateway
def test_tool_activity_shows_as_a_compact_line(screen, llm, isolated_home):
    (isolated_home / "workspace").mkdir(parents=True, exist_ok=True)
    (isolated_home / "workspace" / "notes.md").write_text("remember the milk\n")
    llm.script(Reply(tool_calls=[("read_file", {"path": "notes.md"})]), Reply(text="You must remember the milk."))
    child = screen()
    child.send("what do my notes say?" + "\r")
    child.expect("✓" + styled("", "read_file", "path=notes.md") + r" \d+\.\d\ds")
    child.expect_exact("You must remember the milk.")


@both_ways_own_gateway
def test_a_commands_output_and_each_edits_changes_show_folded_under_their_tool_lines(screen, llm, isolated_home):
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.md").write_text("milk\neggs\nbread\n")
    llm.script(Reply(tool_calls=[("exec", {"command": "seq 1 12; printf '\\033]0;pwned\\007'; exit 3"})]),
               Reply(tool_calls=[("edit_file", {"path": "notes.md", "old_text": "eggs\n",
                                                "new_text": "butter\ncheese\n"})]),
               Reply(tool_calls=[("write_file", {"path": "new.txt", "content": "line one\nline two\n"})]),
               Reply(text="All done."))
    child = screen()
    child.send("go" + "\r")
    child.expect_exact("All done.")
    shown = visible(child.before)
    assert re.search(r"✓ exec .*\n    1\n    2\n    3\n    4\n    … 8 more lines\n    exit code 3\n", shown), shown
    assert "\x1b]0;" not in child.before  # the output is shown terminal-safe: no escape sequence retitles the window
    assert re.search(r"✓ edit_file .*\n    @@ -2 \+2,2 @@\n    -eggs\n    \+butter\n    \+cheese\n", shown), shown
    assert re.search(r"✓ write_file .*\n    \+line one\n    \+line two\n", shown), shown
    assert re.search(SGR + r"\x1b\[31m-eggs", child.before) and re.search(r"\x1b\[32m\+butter", child.before)
    sent = json.dumps(llm.requests[2].body["messages"][-1])  # the model sees the edit's diff too
    assert "+1 -0" not in sent and "-eggs" in sent and "+cheese" in sent


def test_a_failed_tool_line_shows_its_arguments_and_error_within_80_columns(screen, llm):
    path = "a/very/deep/folder/" * 6 + "missing.md"
    llm.script(Reply(tool_calls=[("read_file", {"path": path, "offset": 3})]), Reply(text="No such file."))
    child = screen()
    child.send("read it" + "\r")
    child.expect(r"✗[^\r\n]*")
    line = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.after)
    assert len("  " + line) <= 80, line
    assert re.match(r"✗ read_file path=a/very/deep/\S*… \d+\.\d\ds File 'a/very", line), line
    child.expect_exact("No such file.")


@both_ways
def test_ctrl_c_cancels_a_slow_turn_and_the_next_message_works(term, llm, way):
    llm.script(Reply(text="too late", delay=30), Reply(text="Back in business."))
    child = term()
    child.send("take your time" + "\r")
    wait_for_requests(llm, 1)  # the model call is under way
    child.sendcontrol("c")
    child.expect_exact("Cancelled.")
    child.send("are you there?" + "\r")
    child.expect_exact("Back in business.")
    roles = [m["role"] for m in messages(way.home, way.key)]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert "cancelled" in messages(way.home, way.key)[1]["content"]


@contextlib.contextmanager
def a_turn_under_way(term, llm):
    """A terminal whose turn waits on the model until the block ends (its reply then comes too late); the next
    reply is "Back in business."."""
    release = threading.Event()
    llm.script(Reply(text="too late", release=release), Reply(text="Back in business."))
    child = term()
    try:
        child.send("take your time" + "\r")
        wait_for_requests(llm, 1)  # the model call is under way
        yield child
    finally:
        release.set()


@both_ways
def test_esc_cancels_a_running_turn_and_alt_enter_meanwhile_still_adds_a_line(term, llm, way):
    with a_turn_under_way(term, llm) as child:
        child.send("first" + "\x1b\r" + "second")  # Alt-Enter (Esc Enter) while the turn runs
        child.expect_exact("second")
        time.sleep(ESC_WAIT + 0.2)  # long enough for an Esc to count alone, had it been taken for one
        assert len(messages(way.home, way.key)) == 1  # the turn still runs: only its user message is in the session
        child.send("\x1b")
        child.expect_exact("Cancelled.")
    child.send("\r")  # what was typed meanwhile is still there, on two lines
    child.expect_exact("Back in business.")
    assert sent_text(llm.requests[-1]).endswith("first\nsecond")
    assert [m["role"] for m in messages(way.home, way.key)] == ["user", "assistant", "user", "assistant"]


@both_ways
def test_slash_stop_typed_during_a_turn_cancels_it_as_esc_does(term, llm, way):
    with a_turn_under_way(term, llm) as child:
        child.send("/stop" + "\r")
        child.expect_exact("Cancelled.")
    child.send("/stop" + "\r")
    child.expect_exact("Nothing is running.")
    child.send("hello again" + "\r")
    child.expect_exact("Back in business.")
    assert [m["role"] for m in messages(way.home, way.key)][-2:] == ["user", "assistant"]
    assert "too late" not in str(messages(way.home, way.key))


@both_ways_own_gateway
def test_a_message_typed_during_a_turn_joins_it(screen, llm, isolated_home):
    # The tool runs until the test lets it finish, after the prompt has taken the second message.
    workspace = isolated_home / "workspace"
    command = "touch started; while [ ! -e release ]; do sleep 0.02; done"
    llm.script(Reply(tool_calls=[("exec", {"command": command})]), Reply(text="Handled both."))
    child = screen()
    child.send("start something slow" + "\r")
    wait_until((workspace / "started").exists, "the exec tool to start")
    child.send("and also this" + "\r")
    history = isolated_home / "history" / "cli_history"  # the prompt writes a line there as it accepts it
    wait_until(lambda: "+and also this" in history.read_text().splitlines(), "the prompt to take the message")
    assert not (workspace / "release").exists() and len(llm.requests) == 1  # the tool is still running
    (workspace / "release").touch()
    child.expect_exact("joined the turn here: and also this")
    child.expect_exact("Handled both.")
    sent = llm.requests[-1].body["messages"]
    assert "and also this" in json.dumps(sent[-1])
    assert len(llm.requests) == 2


def test_ctrl_c_at_an_empty_prompt_warns_and_a_second_quits(term):
    child = term()
    child.sendcontrol("c")
    child.expect_exact("Press Ctrl-C again")
    child.sendcontrol("c")
    child.expect(pexpect.EOF)


@both_ways
def test_ctrl_d_and_exit_quit(term):
    child = term()
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child = term()
    child.send("/exit" + "\r")
    child.expect(pexpect.EOF)


def test_text_piped_into_agent_is_one_message_with_a_plain_reply(llm, isolated_home):
    llm.script(Reply(text="Plain **one**."))
    proc = invoke("agent", input="def f():\n    return 1\n", env=anthropic_env(llm))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Plain **one**.\n"
    assert len(llm.requests) == 1 and sent_text(llm.requests[0]).rstrip().endswith("def f():\n    return 1")


def sent_text(request):
    """The text of the last message the server received, as the model sees it."""
    content = request.body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


def processes():
    """Every live process as pid -> (parent pid, process group, command line); zombies left out."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()  # state, parent, group after the name
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
        if stat[0] != "Z":
            found[int(entry.name)] = (int(stat[1]), int(stat[2]), command)
    return found


def descendant_running(pid, command):
    """(pid, process group) of a live process started, at any depth, by `pid` and running `command`."""
    table = processes()
    for child, (_, group, line) in table.items():
        ancestor = child
        while ancestor in table and ancestor != pid:
            ancestor = table[ancestor][0]
        if ancestor == pid and child != pid and line == command:
            return child, group
    return None


def test_input_history_persists_and_up_recalls_it_in_a_new_session(term, llm, isolated_home):
    child = term()
    child.send("the parrot is blue" + "\r")
    child.expect_exact("ok")
    child.expect_exact(PROMPT)
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    assert "+the parrot is blue" in (isolated_home / "history" / "cli_history").read_text().splitlines()
    child = term()
    child.send("\x1b[A")  # Up
    child.expect_exact("the parrot is blue")
    child.send("\r")
    wait_for_requests(llm, 2)
    assert sent_text(llm.requests[-1]).endswith("\n\nthe parrot is blue")


def test_ctrl_j_and_alt_enter_add_a_line_instead_of_sending(screen, llm):
    child = screen()
    child.send("first line")
    child.send("\n")  # Ctrl-J
    child.send("second line")
    child.send("\x1b\r")  # Esc Enter, which is also what Alt-Enter sends
    child.send("third line" + "\r")
    child.expect_exact("ok")
    assert len(llm.requests) == 1
    assert sent_text(llm.requests[0]).endswith("\n\nfirst line\nsecond line\nthird line")


def test_tab_completes_a_slash_command(screen, llm):
    child = screen()
    child.send("/sta")
    child.expect_exact("/status")  # the completion menu offers it
    child.send("\t")
    child.send("\r")
    child.expect(r"session:\s+cli:direct \(0 messages")
    assert llm.requests == []


def test_a_pasted_block_of_lines_arrives_as_one_message(screen, llm):
    child = screen()
    child.send("\x1b[200~" + "line one\rline two\r\rline four" + "\x1b[201~")  # a terminal pastes Enter as CR
    child.send("\r")
    child.expect_exact("ok")
    assert len(llm.requests) == 1
    assert sent_text(llm.requests[0]).endswith("\n\nline one\nline two\n\nline four")


def test_ctrl_c_while_a_tool_runs_kills_it_and_leaves_a_consistent_session(term, llm, isolated_home):
    llm.script(Reply(tool_calls=[("exec", {"command": "sleep 30"})]), Reply(text="Back after the tool."))
    child = term()
    child.send("run the slow command" + "\r")
    sleeper = wait_until(lambda: descendant_running(child.pid, "sleep 30"), "the exec tool to start sleep 30")
    started = time.monotonic()
    child.sendcontrol("c")
    child.expect_exact("Cancelled.")
    assert time.monotonic() - started < 5
    group = sleeper[1]
    assert [pid for pid, (_, g, _) in processes().items() if g == group] == []  # the whole process group is gone
    assert descendant_running(child.pid, "sleep 30") is None
    child.send("are you there?" + "\r")
    child.expect_exact("Back after the tool.")
    roles = [m["role"] for m in messages(isolated_home)]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    call = messages(isolated_home)[1]["tool_calls"][0]
    result = messages(isolated_home)[2]
    assert result["tool_call_id"] == call["id"] and "interrupted" in result["content"] and result["is_error"]
    assert len(llm.requests) == 2


class Tmux:
    """The interactive session in tmux, a real terminal emulator: it answers cursor-position requests, so the
    status line under the prompt is drawn as on screen."""

    def __init__(self, llm, home):
        self.tmux = ["tmux", "-L", f"nanoagent-test-{uuid.uuid4().hex}", "-f", "/dev/null"]  # a server of its own
        env = " ".join(f"{k}={v}" for k, v in {**anthropic_env(llm), "NANOAGENT_HOME": str(home)}.items())
        subprocess.run([*self.tmux, "new-session", "-d", "-s", "test", "-x", "80", "-y", "24", "-c", str(ROOT),
                        f"env {env} {sys.executable} -m nanoagent agent"], cwd=str(ROOT), check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "test"], capture_output=True,
                              text=True).stdout

    def wait_for(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + PATIENCE
        while not (match := re.search(pattern, self.screen())):
            assert time.monotonic() < deadline, self.screen()
            time.sleep(0.05)
        return match

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "test", *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


@pytest.fixture
def tmux(llm, isolated_home):
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux (.ci/run installs it)")
    session = Tmux(llm, isolated_home)
    yield session
    session.close()


SPINNER = r"([⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏])"


def test_the_status_line_shows_a_spinner_and_what_runs_while_the_model_thinks(tmux, llm):
    # The model answers only once the test has seen the spinner and the clock move.
    release = threading.Event()
    llm.script(Reply(text="done thinking", release=release))
    spinner = SPINNER + r" thinking (\d+\.\d)s"
    try:
        tmux.wait_for(PROMPT)
        tmux.keys("think slowly", "Enter")
        first = tmux.wait_for(spinner + r"\s+\(Esc or Ctrl-C cancels\)")
        later = first
        deadline = time.monotonic() + PATIENCE
        while later.group(1) == first.group(1) or later.group(2) == first.group(2):
            assert time.monotonic() < deadline, tmux.screen()
            time.sleep(0.05)
            later = tmux.wait_for(spinner)
        assert float(later.group(2)) > float(first.group(2))  # the clock and the spinner move while it works
        assert len(llm.requests) == 1
        release.set()
        tmux.wait_for("done thinking")
    finally:
        release.set()


def test_esc_cancels_a_dream_that_shows_its_progress_and_memory_stays_as_it_was(tmux, llm, isolated_home):
    from nanoagent.memory.history import HistoryLog
    from nanoagent.paths import Paths

    release = threading.Event()
    llm.script(Reply(text="## memory/MEMORY.md\n- ADD: the user's sister is called Ines", release=release),
               Reply(text="NOTHING"))
    tmux.wait_for(PROMPT)  # the workspace is seeded
    paths = Paths.from_env()
    history = HistoryLog(paths.memory_dir)
    history.append("cli:direct", "- the user's sister is called Ines")
    memory = (paths.memory_dir / "MEMORY.md").read_text()
    try:
        tmux.keys("/dream", "Enter")
        tmux.wait_for(SPINNER + r" dream: analysing 1 history entry \d+\.\ds\s+\(Esc or Ctrl-C cancels\)")
        wait_for_requests(llm, 1)
        tmux.keys("Escape")
        tmux.wait_for("Cancelled /dream.")
    finally:
        release.set()
    assert history.dream_cursor == 0 and (paths.memory_dir / "MEMORY.md").read_text() == memory
    tmux.keys("/dream", "Enter")  # the cancelled run let go of Dream's lock
    tmux.wait_for("no changes to long-term memory")
    assert history.dream_cursor == 1


@pytest.mark.process
def test_ctrl_c_while_a_reply_streams_ends_it_with_no_prompt_line_inside(tmux, llm):
    # The stream stops halfway through its second paragraph and waits: the first is on screen, the second in hand.
    first = "The first paragraph of a reply that streams in slowly."
    llm.script(Reply(text=f"{first}\n\nThe second paragraph was cut off here and the rest never came.",
                     stall_after=4),
               Reply(text="Back after Ctrl-C."))
    tmux.wait_for(PROMPT)
    tmux.keys("write at length", "Enter")
    tmux.wait_for(re.escape(first))
    tmux.keys("C-c")
    tmux.wait_for("Cancelled.")
    tmux.keys("are you there?", "Enter")
    tmux.wait_for("Back after Ctrl-C.")
    lines = [line.rstrip() for line in tmux.screen().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if "write at length" in line)
    end = next(i for i, line in enumerate(lines) if "Cancelled." in line)
    assert not [line for line in lines[start + 1:end] if line.lstrip().startswith(PROMPT)], lines
    assert any(first in line for line in lines[start + 1:end]) and any(
        "The second paragraph" in line for line in lines[start + 1:end]), lines  # the partial reply shown whole
    assert lines[end + 1].startswith(PROMPT) and "are you there?" in lines[end + 1], lines  # the next prompt after


@pytest.mark.process
def test_a_one_shot_reply_is_rendered_as_markdown_on_a_terminal(llm, isolated_home):
    llm.script(Reply(text="Some **bold** words.\n\n- first point\n- second point"))
    child = spawn_agent(llm, "-m", "hi")
    child.expect(pexpect.EOF)
    output = child.before
    assert "**" not in output and "bold" in output
    assert re.search(r"•\s*" + SGR + "first point", output) or "• first point" in output


@pytest.fixture
def approve_always(isolated_home):
    """Every command waits for a person's yes (set before a gateway starts, so it reads it too)."""
    isolated_home.mkdir(parents=True, exist_ok=True)
    (isolated_home / "config.json").write_text(json.dumps({"tools": {"exec": {"approve": "always"}}}))


@both_ways_own_gateway
def test_a_command_that_needs_approval_is_asked_here_and_runs_after_yes(approve_always, term, llm, isolated_home):
    llm.script(Reply(tool_calls=[("exec", {"command": "echo approved > approved.txt"})]), Reply(text="It ran."))
    child = term()
    child.send("write the file" + "\r")
    child.expect_exact("echo approved > approved.txt")
    child.expect_exact("[a]lways")
    assert not (isolated_home / "workspace" / "approved.txt").exists()  # nothing runs before the answer
    child.send("y" + "\r")
    child.expect_exact("It ran.")
    assert (isolated_home / "workspace" / "approved.txt").read_text() == "approved\n"


@both_ways
def test_a_slash_command_answers_in_the_session(screen, llm):
    child = screen()
    child.send("/status" + "\r")
    child.expect_exact("claude-test")
    child.send("/nonsense" + "\r")
    child.expect_exact("/help")
    assert llm.requests == []  # commands never reach the model


def test_help_lists_the_commands_only_a_terminal_has(screen):
    child = screen()
    child.send("/help" + "\r")
    child.expect_exact("/attach PATH")
    child.expect_exact("/exit, /quit")
    child.send("/quit" + "\r")
    assert child.ended()


def visible(text: str) -> str:
    """What the screen shows of pty output, roughly: escape sequences and carriage returns dropped."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r", "", text)


@pytest.mark.process
def test_the_banner_status_and_budget_wrap_at_words_within_the_terminals_width(llm, isolated_home):
    child = spawn_agent(llm, width=60)
    try:
        child.expect_exact(PROMPT)
        shown = visible(child.before)  # the banner
        for command, last in (("/status", "policy:"), ("/budget", "budget")):
            child.send(command + "\r")
            child.expect_exact(last)
            shown += visible(child.before)
            child.expect_exact(PROMPT)
            shown += visible(child.before)
        lines = [line for line in shown.splitlines() if "›" not in line]
        assert max(len(line) for line in lines) <= 60, lines
        assert "read_file" in shown and "list_dir" in shown  # words whole, not cut at the edge
        assert "Ctrl-D to quit." in " ".join(shown.split())
    finally:
        child.terminate(force=True)


def test_replies_wrap_at_the_width_the_terminal_has_after_a_resize(term, llm):
    words = [f"word{i:02d}" for i in range(40)]
    llm.script(Reply(text="First reply."), Reply(text=" ".join(words) + " end."))
    child = term()
    child.send("hello" + "\r")
    child.expect_exact("First reply.")
    child.expect_exact(PROMPT)
    child.setwinsize(30, 40)  # narrower than when the session started
    child.send("again" + "\r")
    child.expect_exact("end.")
    runs = re.findall(r"word\d\d(?: word\d\d)*", visible(child.before))  # the reply's words, line by line
    assert len(runs) > 1 and all(len(run) <= 40 for run in runs), runs
    assert " ".join(runs).split() == words  # no word broken in two, none lost


@both_ways_own_gateway
def test_ctrl_c_cancels_new_while_it_archives_and_the_conversation_goes_on(term, llm, isolated_home):
    release = threading.Event()
    llm.script(Reply(text="First answer."), Reply(text="- the user said hello", release=release),
               Reply(text="Still the same conversation."))
    child = term()
    child.send("remember this" + "\r")
    child.expect_exact("First answer.")
    child.expect_exact(PROMPT)
    try:
        child.send("/new" + "\r")
        wait_for_requests(llm, 2)  # the summary call is under way
        child.sendcontrol("c")
        child.expect_exact("Cancelled /new.")
    finally:
        release.set()
    child.send("are you there?" + "\r")
    child.expect_exact("Still the same conversation.")
    assert "remember this" in json.dumps(llm.requests[-1].body["messages"])  # nothing was reset
    session = SessionStore(isolated_home / "sessions").load("cli:direct")
    assert session.last_consolidated == 0 and len(session.messages) == 4
    assert not (isolated_home / "workspace" / "memory" / "history.jsonl").exists() or \
        "hello" not in (isolated_home / "workspace" / "memory" / "history.jsonl").read_text()


def test_new_says_it_is_archiving_while_it_runs_and_what_it_cost_after(screen, llm):
    release = threading.Event()
    llm.script(Reply(text="First answer."), Reply(text="ok", release=release))
    child = screen()
    child.send("remember this" + "\r")
    child.expect_exact("First answer.")
    try:
        child.send("/new" + "\r")
        child.expect_exact("archiving 2 messages to memory (notes first, then a summary)…")
        wait_for_requests(llm, 2)  # shown while the archive's first call is still unanswered
    finally:
        release.set()
    child.expect(r"Archiving took 2 model\s+calls \(no listed price for\s+anthropic/claude-test\)\.")


def _one_shots(llm, *exchanges: tuple[str, str], session: str = "cli:direct") -> None:
    for said, reply in exchanges:
        llm.script(Reply(text=reply))
        ran = invoke("agent", "-s", session, "-m", said, env=anthropic_env(llm))
        assert ran.returncode == 0, ran.stderr


@both_ways_own_gateway
def test_the_banner_says_which_conversation_a_session_continues_and_how_much_it_carries(screen, llm, isolated_home):
    _one_shots(llm, ("what is 2+2?", "4"), ("and 3+3?", "6"))
    child = screen()
    shown = visible(child.before)
    assert re.search(r"continuing cli:direct · 2 turns answered · last \d\d:\d\d · /new starts fresh", shown), shown
    assert "what is 2+2?" not in shown  # no replay unless a conversation was picked (-c, --resume)
    child.send("/new\r")
    child.expect_exact("Started a fresh conversation")
    fresh = screen(key="cli:elsewhere")
    assert "continuing" not in visible(fresh.before)
    again = screen()  # after /new nothing is carried over
    assert "continuing" not in visible(again.before)


def test_the_banner_counts_the_turns_answered_and_a_failed_turn_apart(llm, isolated_home):
    from nanoagent.cli.interactive import continuing

    _one_shots(llm, ("what is 2+2?", "4"))
    llm.script(Reply(status=400, error_message="the request was refused"))
    assert invoke("agent", "-m", "and 3+3?", env=anthropic_env(llm)).returncode == 1
    _one_shots(llm, ("and 4+4?", "8"))
    line = continuing(SessionStore(isolated_home / "sessions").load("cli:direct"))
    assert line is not None and line.startswith("continuing cli:direct · 2 turns answered, 1 failed · last ")


@pytest.mark.process
def test_resume_shows_the_last_exchanges_of_the_conversation_it_picks(llm, isolated_home):
    _one_shots(llm, ("first question", "first answer"), ("second question", "second answer"),
               ("third question", "third answer"), ("fourth question", "fourth answer " + "long " * 40),
               session="cli:project")
    _one_shots(llm, ("elsewhere", "ok"), session="cli:other")
    child = spawn_agent(llm, "--resume")
    try:
        child.expect_exact("Continue which")
        child.send("2\r")
        child.expect_exact(PROMPT)
        shown = visible(child.before)
        assert "session cli:project" in shown
        assert "first question" not in shown and "first answer" not in shown  # the last three exchanges
        replay = shown[shown.rindex("\n", 0, shown.index("second question")):]
        lines = [line.strip() for line in replay.splitlines() if line.strip()]
        assert lines[:6] == ["you:   second question", "agent: second answer", "you:   third question",
                             "agent: third answer", "you:   fourth question", lines[5]]
        assert lines[5].startswith("agent: fourth answer long") and lines[5].endswith("…") and len(lines[5]) < 80
        assert re.match(r"continuing cli:project · 4 turns answered · last \d\d:\d\d · /new starts fresh", lines[6])
    finally:
        child.terminate(force=True)


def test_retry_is_offered_only_after_a_message_that_reached_the_model_failed(screen, llm, isolated_home,
                                                                             monkeypatch):
    from tests.conftest import fast_retries, free_port, write_config

    write_config(isolated_home, fast_retries(maxRetries=0))
    llm.script(Reply(status=500, error_message="upstream exploded"), Reply(text="second time lucky"))
    child = screen()
    child.send("hello" + "\r")
    child.expect_exact("upstream exploded")
    child.expect_exact("/retry sends it once more")
    child.send("/retry" + "\r")
    child.expect_exact("second time lucky")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{free_port()}")
    unreachable = screen(key="cli:other", width=100)
    unreachable.send("hello" + "\r")
    unreachable.expect_exact("check ANTHROPIC_BASE_URL")  # nothing was sent: no /retry to offer
    unreachable.send("/status" + "\r")
    unreachable.expect_exact("model:")  # what the terminal printed after the error, up to the next answer
    assert "/retry" not in visible(unreachable.before)


def test_a_session_whose_model_is_unknown_opens_says_where_the_model_came_from_and_new_works(screen, llm,
                                                                                          isolated_home):
    _one_shots(llm, ("remember heron", "noted"))
    store = SessionStore(isolated_home / "sessions")
    store.set_model(store.load("cli:direct"), "nosuch/provider-x")
    child = screen()
    child.send("hello" + "\r")
    child.expect_exact("This session's model nosuch/provider-x was set with /model and cannot be used")
    child.expect_exact("Type /model anthropic/claude-test to switch this session back")
    child.send("/new" + "\r")
    child.expect_exact("Started a fresh conversation. The previous 2 messages stay in")
    child.send("/model anthropic/claude-test" + "\r")
    child.expect_exact("This session now uses anthropic/claude-test")
    llm.script(Reply(text="working again"))
    child.send("hello" + "\r")
    child.expect_exact("working again")


@pytest.mark.process
def test_a_terminal_whose_gateway_stops_says_so_at_once_and_answers_the_next_message_here(llm, isolated_home):
    gateway = start_gateway_process({**os.environ, **anthropic_env(llm)})
    child = spawn_agent(llm)
    try:
        child.expect_exact(PROMPT)
        assert "(through the gateway)" in child.before
        llm.script(Reply(text="Said by the gateway."))
        child.send("first\r")
        child.expect_exact("Said by the gateway.")
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(30) == 0
        child.expect(styled("The", "gateway", "has", "stopped."))  # at once, before anything is typed
        llm.script(Reply(text="Said in this process."))
        child.send("second\r")
        child.expect_exact("Said in this process.")
        assert "Said by the gateway." in json.dumps(llm.requests[-1].body["messages"])  # the same conversation
        child.send("/exit\r")
        child.expect(pexpect.EOF)
    finally:
        child.terminate(force=True)
        if gateway.poll() is None:
            gateway.kill()
    log = (isolated_home.parent / "gateway.stderr").read_text()
    assert "Traceback" not in log and "CancelledError" not in log, log
