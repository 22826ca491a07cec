"""`agent -C DIR` and `--here`: the file tools and exec work in the person's folder, confined there as they are to the
workspace, while identity, memory and sessions stay in the workspace; the folder names its sessions and travels with
the turn through the gateway, into sub-agents and into cron jobs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from nanoagent.cli.workdir import folder_key
from nanoagent.cron.store import JobStore
from nanoagent.gateway.oneshot import send_one
from nanoagent.keys import parse
from nanoagent.paths import Paths, check_session_key
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from nanoagent.tools.sandbox import check_bwrap
from tests.conftest import PATIENCE, anthropic_env, invoke, start_gateway_process
from tests.llm_server import Reply


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A code project with a file of its own, and a secret beside it that must stay out of reach."""
    folder = tmp_path / "my project"
    folder.mkdir()
    (folder / "main.py").write_text("print('hello')\n")
    (tmp_path / "secret.txt").write_text("the secret beside the project\n")
    return folder


def tool_results(home: Path, key: str) -> list[str]:
    return [str(m["content"]) for m in SessionStore(home / "sessions").load(key).messages if m["role"] == "tool"]


def key_of(folder: Path) -> str:
    return folder_key(os.path.realpath(folder))


def test_the_file_tools_work_in_the_folder_and_refuse_dotdot_symlink_and_home_escapes(llm, isolated_home, project):
    (project / "escape").symlink_to(project.parent)  # a link inside the folder that leads out of it
    Path(os.path.expanduser("~")).mkdir(parents=True, exist_ok=True)
    Path(os.path.expanduser("~/.profile")).write_text("export SECRET=the secret in the home\n")
    llm.script(Reply(tool_calls=[("read_file", {"path": "main.py"}), ("write_file", {"path": "notes/plan.md",
                                                                                    "content": "the plan\n"}),
                                 ("read_file", {"path": "../secret.txt"}),
                                 ("read_file", {"path": "escape/secret.txt"}),
                                 ("write_file", {"path": "escape/planted.txt", "content": "x"}),
                                 ("read_file", {"path": "~/.profile"})]),
               Reply(text="done"))
    ran = invoke("agent", "-C", str(project), "-m", "look at the code", "--json", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["session"] == key_of(project)
    read, wrote, dotdot, link, planted, home = tool_results(isolated_home, key_of(project))
    assert "print('hello')" in read and "Wrote 9 bytes to notes/plan.md" in wrote
    for refused in (dotdot, link, planted, home):
        assert f"is outside the working folder {os.path.realpath(project)}" in refused, refused
    assert "the secret" not in dotdot + link + home
    assert not (project.parent / "planted.txt").exists()
    # nothing is written into the folder but what the tool wrote: no session, memory, log or seed file
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*")) == [
        "escape", "main.py", "notes", "notes/plan.md"]
    assert (isolated_home / "workspace" / "SOUL.md").exists()  # the workspace is where it was


def test_memory_stays_in_the_workspace_reached_by_its_absolute_path(llm, isolated_home, project):
    workspace = Path(os.path.realpath(isolated_home / "workspace"))
    memory = workspace / "memory" / "MEMORY.md"
    llm.script(Reply(tool_calls=[("write_file", {"path": str(memory), "content": "# Memory\n\n- It prints hello.\n"})]),
               Reply(text="noted"))
    ran = invoke("agent", "-C", str(project), "-m", "remember what it does", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert memory.read_text() == "# Memory\n\n- It prints hello.\n"
    log = invoke("dream-log", env={"COLUMNS": "200"}).stdout  # the agent's commit, as from the workspace
    assert f"memory/MEMORY.md: write_file by the agent (session {key_of(project)})" in log
    first = llm.requests[0].body["messages"][0]["content"]
    opening = first if isinstance(first, str) else first[0]["text"]
    assert f"working folder: {os.path.realpath(project)}" in opening and str(workspace) in opening
    assert sorted(p.name for p in project.iterdir()) == ["main.py"]


def test_exec_runs_in_the_folder_and_the_sandbox_shows_it_and_the_workspace_only(llm, isolated_home, project):
    sandboxed = check_bwrap().ok
    secret = project.parent / "secret.txt"
    llm.script(Reply(tool_calls=[("exec", {"command": "pwd; touch built.txt; cat main.py"}),
                                 ("exec", {"command": f"cat '{secret}'"}),
                                 ("exec", {"command": "pwd", "workdir": ".."})]),
               Reply(text="ran"))
    ran = invoke("agent", "-C", str(project), "-m", "build it", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    here, outside, parent = tool_results(isolated_home, key_of(project))
    assert os.path.realpath(project) in here and "print('hello')" in here and (project / "built.txt").exists()
    assert "is outside the working folder" in parent  # a workdir out of the folder is refused
    if sandboxed:  # the sandbox binds the folder and the workspace; what lies beside them is not there
        assert "No such file or directory" in outside and "the secret" not in outside


def test_a_working_folder_must_be_a_folder_outside_nanoagents_home(isolated_home, tmp_path):
    missing = invoke("agent", "-C", str(tmp_path / "nowhere"), "-m", "hi")
    assert missing.returncode == 1 and missing.error_lines == [
        f"Error: The working folder {tmp_path / 'nowhere'} is not a folder (it does not exist): give a folder "
        "that exists."]
    holds_home = invoke("agent", "-C", str(tmp_path), "-m", "hi")
    assert holds_home.returncode == 1 and "holds nanoagent's home" in holds_home.stderr
    both = invoke("agent", "-C", str(tmp_path), "--here", "-m", "hi")
    assert both.returncode == 1 and "give one of them" in both.stderr


def test_a_project_folder_given_with_w_off_a_terminal_is_refused_with_one_line_naming_C(isolated_home, project):
    ran = invoke("agent", "-w", str(project), "-m", "hi")
    assert ran.returncode == 1 and len(ran.error_lines) == 1
    assert f"use `nanoagent agent -C {project}`" in ran.stderr
    assert sorted(p.name for p in project.iterdir()) == ["main.py"]


def test_each_folder_has_its_own_sessions_and_c_continues_that_folders_latest(llm, isolated_home, tmp_path,
                                                                            monkeypatch):
    one, two = tmp_path / "a" / "app", tmp_path / "b" / "app"  # two folders of one name
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    env = anthropic_env(llm)
    keys = [json.loads(invoke("agent", *args, "-m", "hi", "--json", env=env).stdout)["session"]
            for args in (("-C", str(one)), ("-C", str(two)), ())]
    assert keys[0] != keys[1] and keys[2] == "cli:direct"
    assert re.fullmatch(r"cli:app-[0-9a-f]{8}", keys[0]) and check_session_key(keys[0]) == keys[0]
    for name in ("my project", "проект", "..", "x" * 300):  # any folder's name makes a key of the grammar
        key = folder_key(f"/somewhere/{name}")
        assert parse(key) is not None and parse(key).channel == "cli" and len(key) <= 4 + 32 + 9, key
    assert Paths.from_env().session_file(keys[0]).name == f"{keys[0].replace(':', '__')}.jsonl"
    again = json.loads(invoke("agent", "-C", str(one), "-c", "-m", "more", "--json", env=env).stdout)
    assert again["session"] == keys[0]  # not cli:direct, the most recent of all
    plain = json.loads(invoke("agent", "-c", "-m", "more", "--json", env=env).stdout)
    assert plain["session"] == "cli:direct"  # without -C a folder's session is not continued out of its folder
    monkeypatch.chdir(two)
    here = json.loads(invoke("agent", "--here", "-c", "-m", "more", "--json", env=env).stdout)
    assert here["session"] == keys[1]
    thread = json.loads(invoke("agent", "--here", "-s", "refactor", "-m", "/status", "--json", env=env).stdout)
    assert thread["session"] == f"{keys[1]}:refactor"
    empty = tmp_path / "c"
    empty.mkdir()
    none = invoke("agent", "-C", str(empty), "-c", "-m", "hi", env=env)
    assert none.returncode == 1 and f"No earlier conversation in {os.path.realpath(empty)}" in none.stderr


def test_status_names_the_folder_the_agent_works_in(isolated_home, project):
    ran = invoke("agent", "-C", str(project), "-m", "/status")
    assert ran.returncode == 0, ran.stderr
    assert f"folder:   {os.path.realpath(project)} (file tools and exec work here" in ran.stdout
    assert "folder:" not in invoke("agent", "-m", "/status").stdout


def test_a_one_shot_through_a_gateway_works_in_the_folder_it_was_sent_from(isolated_home, project):
    from tests.test_gateway import Running

    provider = ScriptedProvider([ScriptedReply("", tool_calls=[("write_file", {"path": "from-gateway.txt",
                                                                               "content": "hi"})]), "Written."])
    running = Running(provider)
    try:
        ran = invoke("agent", "-C", str(project), "-m", "write it", "--json")
        status = send_one(running.paths.gateway_socket, key_of(project), "/status", lambda e: None,
                          workdir=os.path.realpath(project))
    finally:
        running.stop()
    assert ran.returncode == 0 and json.loads(ran.stdout)["reply"] == "Written.", ran.stderr
    assert (project / "from-gateway.txt").read_text() == "hi"
    assert not (isolated_home / "workspace" / "from-gateway.txt").exists()
    assert f"folder:   {os.path.realpath(project)}" in status.reply


def test_a_gateway_refuses_a_working_folder_inside_its_home(isolated_home):
    from nanoagent.errors import NanoagentError
    from tests.test_gateway import Running

    running = Running(ScriptedProvider(["never"]))
    try:
        with pytest.raises(NanoagentError, match="holds nanoagent's home"):
            send_one(running.paths.gateway_socket, "cli:direct", "hi", lambda e: None, workdir=str(isolated_home))
    finally:
        running.stop()


def test_a_sub_agent_started_in_a_folder_works_there(isolated_home, project):
    from tests.test_gateway import Running

    provider = ScriptedProvider([
        ScriptedReply("", tool_calls=[("spawn", {"task": "write the file"})]),
        ScriptedReply("", tool_calls=[("write_file", {"path": "from-child.txt", "content": "child"})]),
        "child done", "parent done"])
    running = Running(provider)
    try:
        turn = send_one(running.paths.gateway_socket, key_of(project), "delegate", lambda e: None,
                        workdir=os.path.realpath(project))
    finally:
        running.stop()
    assert turn.reply == "parent done"
    assert (project / "from-child.txt").read_text() == "child"


def test_a_cron_job_made_in_a_folder_runs_there(llm, isolated_home, project):
    env = anthropic_env(llm)
    llm.script(Reply(tool_calls=[("cron", {"action": "add", "message": "write the report", "every": "1d"})]),
               Reply(text="scheduled"))
    assert invoke("agent", "-C", str(project), "-m", "every day, write a report", env=env).returncode == 0
    [job] = JobStore(Paths.from_env().cron_jobs_file).read().jobs
    assert job.workdir == os.path.realpath(project)
    llm.script(Reply(tool_calls=[("write_file", {"path": "report.md", "content": "all well\n"})]),
               Reply(text="reported"))
    ran = invoke("cron", "run", job.id, env=env)
    assert ran.returncode == 0, ran.stderr
    assert (project / "report.md").read_text() == "all well\n"


@pytest.mark.process
def test_an_attached_terminal_works_in_its_folder_and_its_banner_and_status_say_so(llm, isolated_home, project):
    from tests.test_interactive import PROMPT, spawn_agent

    gateway = start_gateway_process({**os.environ, **anthropic_env(llm)})
    child = spawn_agent(llm, "-C", str(project))
    try:
        child.expect_exact(PROMPT)
        banner = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", child.before)
        assert f"in {os.path.realpath(project)}" in " ".join(banner.split()) and "(through the gateway)" in banner
        llm.script(Reply(tool_calls=[("write_file", {"path": "attached.txt", "content": "from the terminal"})]),
                   Reply(text="Wrote it."))
        child.send("write it\r")
        child.expect_exact("Wrote it.")
        child.send("/status\r")
        child.expect_exact("folder:")
        child.expect_exact(PROMPT)
    finally:
        child.terminate(force=True)
        gateway.terminate()
        gateway.communicate(timeout=PATIENCE)
    assert (project / "attached.txt").read_text() == "from the terminal"
    assert sorted(p.name for p in project.iterdir()) == ["attached.txt", "main.py"]


def test_the_help_names_the_folder_dir_and_each_option_fits_at_80_columns(isolated_home):
    shown = invoke("agent", "--help", env={"COLUMNS": "80"}).stdout
    assert "  -C, --dir DIR " in shown and "  --here " in shown and "{" not in shown
    assert all(len(line) <= 80 for line in shown.splitlines())


@pytest.fixture
def umask_022():
    """The common umask, whatever the test runner's: restored after."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_files_written_in_the_folder_follow_the_umask_and_keep_their_mode_while_the_workspace_stays_private(
        llm, isolated_home, project, umask_022):
    os.chmod(project / "main.py", 0o644)
    (project / "run.sh").write_text("echo old\n")
    os.chmod(project / "run.sh", 0o750)
    scratch = Path(os.path.realpath(isolated_home / "workspace")) / "scratch.md"
    llm.script(Reply(tool_calls=[("write_file", {"path": "notes.txt", "content": "beside main.py\n"}),
                                 ("write_file", {"path": "docs/plan.md", "content": "the plan\n"}),
                                 ("edit_file", {"path": "run.sh", "old_text": "old", "new_text": "new"}),
                                 ("write_file", {"path": str(scratch), "content": "mine\n"})]),
               Reply(text="done"))
    ran = invoke("agent", "-C", str(project), "-m", "write the notes", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert (project / "run.sh").read_text() == "echo new\n"
    assert {name: mode(project / name) for name in ("main.py", "notes.txt", "docs", "docs/plan.md", "run.sh")} == {
        "main.py": 0o644, "notes.txt": 0o644, "docs": 0o755, "docs/plan.md": 0o644, "run.sh": 0o750}
    assert mode(scratch) == 0o600
    assert not [p for p in project.rglob("*.tmp")]
