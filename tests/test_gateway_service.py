"""The gateway as a service: `gateway start` runs it in the background under a supervisor that restarts it when it
fails, `restart`, `stop`, `status` and `logs`; the watchdog that ends a gateway whose event loop stopped answering."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanoagent.gateway import logfile, supervisor
from nanoagent.gateway.watchdog import Watchdog
from nanoagent.paths import Paths
from tests.conftest import PATIENCE, ROOT, anthropic_env, invoke, run_cli, wait_until, write_config


@pytest.fixture
def service(isolated_home: Path) -> Iterator[Paths]:
    """A home whose background gateway, if a test leaves one, is stopped (or its supervisor killed) at the end."""
    paths = Paths.from_env()
    yield paths
    found = supervisor.state(paths)
    if found is not None:
        run_cli("gateway", "stop")
        if supervisor.running(paths):
            for pid in (found.get("gateway_pid"), found["pid"]):
                if pid:
                    os.kill(int(pid), signal.SIGKILL)


def status(env: dict | None = None) -> subprocess.CompletedProcess:
    return run_cli("gateway", "status", env=env)


def gateway_pid(paths: Paths) -> int:
    return int((paths.run_dir / "gateway.pid").read_text())


@pytest.mark.process
def test_gateway_start_runs_it_detached_and_restart_logs_and_stop_manage_it(service, llm):
    from tests.llm_server import Reply

    env = anthropic_env(llm)
    started = run_cli("gateway", "start", env=env)
    assert started.returncode == 0, started.stderr
    first = gateway_pid(service)
    assert started.stdout == f"Started the gateway for {service.home} (pid {first}); `nanoagent gateway logs -f` " \
                             "follows its log.\n"
    boss = supervisor.state(service)
    assert boss is not None and boss["gateway_pid"] == first
    assert os.getsid(boss["pid"]) == boss["pid"] != os.getsid(0)  # its own session: no terminal's signals reach it
    again = run_cli("gateway", "start", env=env)
    assert (again.returncode, again.stdout) == (0, f"A gateway is already running for {service.home} (pid {first}).\n")

    llm.script(Reply(text="from the background"))
    answered = run_cli("agent", "-m", "are you there?", env=env)
    assert answered.stdout == "from the background\n", answered.stderr
    shown = status(env).stdout.splitlines()
    assert shown[0].startswith(f"gateway running: pid {first}, up ")
    assert "web: off (`nanoagent web` turns it on)" in shown
    assert f"supervisor: pid {boss['pid']}, restarts: 0" in shown

    restarted = run_cli("gateway", "restart", env=env)
    second = gateway_pid(service)
    assert restarted.returncode == 0 and second != first, restarted.stderr
    assert restarted.stdout == f"Restarted the gateway for {service.home} (pid {second}).\n"
    assert f"supervisor: pid {boss['pid']}, restarts: 0" in status(env).stdout  # asked for: not a failure

    human = run_cli("gateway", "logs").stdout.splitlines()
    assert [line.split(None, 2)[2].split(":")[0] for line in human if "gateway started" in line] == \
        ["gateway started", "gateway started"]
    assert not [line for line in human if line.lstrip().startswith("{")]
    records = [json.loads(line) for line in run_cli("gateway", "logs", "--json", "-n", "3").stdout.splitlines()]
    assert len(records) == 3 and records[-1]["event"] == "gateway_started" and records[-1]["pid"] == second

    stopped = run_cli("gateway", "stop")
    assert (stopped.returncode, stopped.stdout) == (0, f"Stopped the gateway (pid {second}).\n"), stopped.stderr
    assert not supervisor.running(service) and not (service.run_dir / "gateway.pid").exists()
    gone = status(env)
    assert gone.returncode == 3 and "No gateway is running" in gone.stdout
    assert run_cli("gateway", "logs", "-n", "1").stdout.split(None, 2)[2].startswith("supervisor stopped: restarts 0")


@pytest.mark.process
def test_a_gateway_start_that_fails_says_why_in_one_line_and_leaves_nothing_running(service):
    write_config(service.home, {"channels": {"telegram": {"enabled": True}}})
    ran = run_cli("gateway", "start", env={"OPENAI_API_KEY": "sk-test", "NANOAGENT_MODEL": "openai/gpt-test"})
    assert ran.returncode == 1
    assert ran.stderr.splitlines() == ["Error: The gateway did not start (exit 1): channels.telegram.enabled is true "
                                       "but there is no bot token: set TELEGRAM_BOT_TOKEN or channels.telegram.token "
                                       "(create a bot with @BotFather in Telegram)."]
    assert not supervisor.running(service)


# An installed channel whose link blocks the event loop once (a synchronous sleep in `connect`, as a plugin that
# calls a blocking library would), while `stall-once` is in the home.
STALLING = '''
import asyncio
import os
import time
from dataclasses import dataclass, field

from nanoagent.channels.base import Chunk


@dataclass
class SnailConfig:
    enabled: bool = False
    token: str | None = None
    allow_from: list[str] = field(default_factory=list)
    owner: list[str] = field(default_factory=list)


class SnailLink:
    def __init__(self, marker):
        self.marker = marker

    async def connect(self):
        if os.path.exists(self.marker):
            os.remove(self.marker)
            time.sleep(120)
        return "@snail"

    async def receive(self):
        await asyncio.Event().wait()
        yield []

    async def acknowledge(self, items):
        pass

    def rebuild(self, raw):
        return None

    async def close(self):
        pass


class Snail:
    name = "snail"
    title = "Snail"
    hint = "Snail: plain text"
    limit = 500
    edits = False
    pairing = False
    settings_class = SnailConfig
    env = {}

    def settings(self, config):
        return config.channels.of(self.name, SnailConfig, self.env)

    def routes(self, settings):
        return []

    def problem(self, settings):
        return None

    def allowed(self, settings, user):
        return user in settings.allow_from

    def home(self, user):
        return None

    def split(self, markdown):
        return [Chunk(markdown, markdown)]

    def link(self, settings, paths, timing):
        return SnailLink(str(paths.home / "stall-once"))

    async def verify(self, settings):
        return "@snail"

    async def deliver(self, settings, place, text, files=()):
        pass

    def questions(self):
        return []


CHANNEL = Snail()
'''


def stalling_package(site: Path) -> Path:
    (site / "nanoagent_snail").mkdir(parents=True)
    (site / "nanoagent_snail" / "__init__.py").write_text(STALLING, encoding="utf-8")
    info = site / "nanoagent_snail-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nanoagent-snail\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[nanoagent.channels]\nsnail = nanoagent_snail\n", encoding="utf-8")
    return site


@pytest.mark.process
def test_a_stalled_event_loop_ends_the_gateway_and_its_supervisor_starts_it_again_counting_the_restart(
        service, llm, tmp_path):
    site = stalling_package(tmp_path / "site")
    write_config(service.home, {"gateway": {"watchdogSeconds": 3}, "channels": {"snail": {"enabled": True}}})
    (service.home / "stall-once").write_text("")
    env = {**anthropic_env(llm), "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    started = run_cli("gateway", "start", env=env)
    assert started.returncode == 0, started.stderr
    first = gateway_pid(service)
    wait_until(lambda: (supervisor.state(service) or {}).get("restarts") == 1, "the supervisor's restart")
    wait_until(lambda: gateway_pid(service) != first and "snail (connected as @snail)" in status(env).stdout,
               "the restarted gateway with its channel connected")

    stall = next(json.loads(line) for line in logfile.last_lines(logfile.log_path(service.logs_dir), 100)
                 if '"event_loop_stalled"' in line)
    assert stall["level"] == "critical" and stall["exit"] == 70 and stall["seconds"] > 3
    assert stall["at"].startswith("nanoagent_snail/__init__.py:") and stall["at"].endswith(" in connect")
    human = run_cli("gateway", "logs").stdout
    assert "event loop stalled: seconds" in human and "gateway exited: code 70, said " in human
    shown = status(env).stdout
    assert "restarts: 1 (the last after exit 70 at " in shown and "event loop stalled" in shown


def test_the_watchdog_names_where_a_blocked_loop_is_stuck_and_leaves_a_busy_one_alone():
    stalls: list[tuple[float, str]] = []

    def blocked_for_a_while() -> None:
        time.sleep(1.0)  # a synchronous call on the event loop

    async def scenario() -> None:
        watchdog = Watchdog(0.4, stalled=lambda late, at: stalls.append((late, at)))
        watchdog.start()
        task = asyncio.create_task(watchdog.run())
        for _ in range(20):
            await asyncio.sleep(0.05)  # a loop that answers: no stall
        assert stalls == [] and watchdog.lag()["beats"] >= 5
        blocked_for_a_while()
        task.cancel()

    asyncio.run(scenario())
    assert len(stalls) == 1
    late, at = stalls[0]
    assert late > 0.4 and at.startswith("tests/test_gateway_service.py:") and at.endswith(" in blocked_for_a_while")


def test_the_log_moves_aside_past_its_size_and_logs_reads_on_from_the_older_file(isolated_home, monkeypatch):
    monkeypatch.setattr(logfile, "MAX_BYTES", 1000)  # a record is about 125 bytes: 8 a file
    path = logfile.log_path(Paths.from_env().logs_dir)
    for n in range(12):
        logfile.append(path, {"time": "2026-11-28T21:00:00.000Z", "level": "info", "source": "gateway",
                              "event": "component_crashed", "component": f"c{n}", "restart_in": 5})
    older = path.with_name("gateway.log.1")
    assert [json.loads(line)["component"] for line in older.read_text().splitlines()][-1] == "c7"
    assert path.stat().st_size < 1000 and path.stat().st_mode & 0o777 == older.stat().st_mode & 0o777 == 0o600
    ran = invoke("gateway", "logs", "-n", "7", "--json")
    assert [json.loads(line)["component"] for line in ran.stdout.splitlines()] == [f"c{n}" for n in range(5, 12)]
    shown = invoke("gateway", "logs", "-n", "1").stdout.strip()
    assert shown.endswith("  component crashed: component c11, restart in 5"), shown


def test_logs_follow_reads_on_across_the_move_aside(isolated_home, monkeypatch):
    path = logfile.log_path(Paths.from_env().logs_dir)
    logfile.append(path, {"event": "before"})
    lines = logfile.follow(path, every=0.01)
    logfile.append(path, {"event": "new"})
    usual = logfile.MAX_BYTES
    monkeypatch.setattr(logfile, "MAX_BYTES", 1)
    logfile.append(path, {"event": "moved"})  # the file moves aside once this is written
    monkeypatch.setattr(logfile, "MAX_BYTES", usual)
    logfile.append(path, {"event": "after"})
    assert [json.loads(line)["event"] for line in path.with_name("gateway.log.1").read_text().splitlines()] == \
        ["before", "new", "moved"]

    async def read() -> list[str]:
        return [await asyncio.to_thread(next, lines) for _ in range(3)]

    seen = asyncio.run(asyncio.wait_for(read(), PATIENCE))
    assert [json.loads(line)["event"] for line in seen] == ["new", "moved", "after"]


def test_a_session_idle_for_an_hour_is_let_go_of_and_its_next_turn_goes_on_from_its_file(isolated_home):
    from nanoagent.agent.build import build_agent
    from nanoagent.config.schema import Config
    from nanoagent.gateway.hub import Hub
    from nanoagent.providers.scripted import ScriptedProvider

    seen: list[int] = []

    def answer(request) -> str:  # noqa: ANN001 - a ChatRequest
        seen.append(len(request.messages))
        return f"answer {len(seen)}"

    async def scenario() -> None:
        hub = Hub(build_agent(Config(), Paths.from_env(), provider=ScriptedProvider(respond=answer)))
        first = await hub.send("email:ann__thread1", "hello")
        held = hub.session("email:ann__thread1")
        assert hub.forget_idle(time.time() + 60) == []  # a minute later it is still held
        assert hub.forget_idle(time.time() + 3601) == ["email:ann__thread1"]
        assert hub.session("email:ann__thread1") is not held  # read again from its file
        second = await hub.send("email:ann__thread1", "and again")
        assert (first.reply, second.reply) == ("answer 1", "answer 2")

    asyncio.run(scenario())
    assert seen[1] == seen[0] + 2  # the second request carried the first exchange: nothing was lost
