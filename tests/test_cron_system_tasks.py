"""The heartbeat and Dream ride the scheduler as system tasks: claimed and recorded like jobs, in the gateway and
in `cron tick` alike."""

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from nanoagent.agent.build import build_outbox
from nanoagent.agent.cron_runs import system_tasks
from nanoagent.config.schema import Config, ProviderConfig
from nanoagent.cron.scheduler import RunOutcome, Scheduler, Settings
from nanoagent.cron.store import JobStore
from nanoagent.paths import Paths
from nanoagent.session.store import SessionStore
from tests.conftest import PATIENCE
from tests.llm_server import Reply


class Clock:
    def __init__(self) -> None:
        self.now = self.start = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


async def no_jobs(job, claim) -> RunOutcome:
    raise AssertionError("no job was added")


def setting_up(llm, **memory) -> tuple[Config, Paths]:
    config = Config()
    config.agents.defaults.model = "anthropic/claude-test"
    config.providers["anthropic"] = ProviderConfig(api_key="sk-ant-test", api_base=llm.url)
    for name, value in memory.items():
        setattr(config.memory, name, value)
    paths = Paths.from_env()
    paths.workspace.mkdir(parents=True, exist_ok=True)
    return config, paths


def scheduler(config: Config, paths: Paths, clock: Clock) -> Scheduler:
    tasks = system_tasks(config, paths, build_outbox(config, paths), clock.start)
    return Scheduler(JobStore(paths.cron_jobs_file), no_jobs, Settings(), tasks, clock=clock)


def test_the_heartbeat_and_dream_are_scheduled_and_an_empty_dream_schedule_turns_dream_off(llm, isolated_home):
    config, paths = setting_up(llm)
    names = [task.name for task in system_tasks(config, paths, build_outbox(config, paths))]
    assert names == ["heartbeat", "dream"]
    config.memory.dream_schedule = ""
    assert [t.name for t in system_tasks(config, paths, build_outbox(config, paths))] == [
        "heartbeat"]


def test_a_dream_schedule_that_cannot_be_read_is_logged_and_leaves_the_heartbeat_running(llm, isolated_home, caplog):
    config, paths = setting_up(llm, dream_schedule="every tuesday-ish")
    with caplog.at_level(logging.ERROR, logger="nanoagent.cron"):
        tasks = system_tasks(config, paths, build_outbox(config, paths))
    assert [t.name for t in tasks] == ["heartbeat"]
    assert "memory.dreamSchedule" in caplog.text


def test_a_due_heartbeat_runs_once_and_its_report_reaches_the_most_recent_chat(llm, isolated_home):
    config, paths = setting_up(llm, dream_schedule="")
    (paths.workspace / "HEARTBEAT.md").write_text("# Standing tasks\n- tell me if the build is red\n")
    store = SessionStore(paths.sessions_dir)
    store.add_messages(store.load("cli:direct"), [{"role": "user", "content": "hello"}], sync=True)
    llm.script(Reply(text="The build is red since 9:12."))
    clock = Clock()
    asyncio.run(scheduler(config, paths, clock).tick())  # first seen: scheduled from now
    assert llm.requests == []
    clock.now += timedelta(minutes=30)
    asyncio.run(scheduler(config, paths, clock).tick())
    asyncio.run(scheduler(config, paths, clock).tick())  # a second scheduler pass at the same time runs nothing
    assert len(llm.requests) == 1
    notes = [m["content"] for m in SessionStore(paths.sessions_dir).load("cli:direct").messages if m["role"] == "assistant"]
    assert len(notes) == 1 and "The build is red since 9:12." in notes[0]
    runs = JobStore(paths.cron_jobs_file).read().system["heartbeat"].runs
    assert [r.status for r in runs] == ["ok"]


def test_scheduled_dream_with_nothing_new_makes_no_model_call(llm, isolated_home):
    config, paths = setting_up(llm, dream_schedule="*/5 * * * *")
    clock = Clock()
    asyncio.run(scheduler(config, paths, clock).tick())
    clock.now += timedelta(minutes=6)
    asyncio.run(scheduler(config, paths, clock).tick())
    assert llm.requests == []
    runs = JobStore(paths.cron_jobs_file).read().system["dream"].runs
    assert [r.status for r in runs] == ["ok"]


def test_in_the_gateway_the_heartbeat_turn_waits_for_a_free_slot_among_its_turns(llm, isolated_home):
    from nanoagent.agent.build import build_agent
    from nanoagent.gateway.cron import cron_component
    from nanoagent.gateway.hub import Hub

    config, paths = setting_up(llm, dream_schedule="")
    (paths.workspace / "HEARTBEAT.md").write_text("- tell me if the build is red\n")
    llm.script(Reply(text="HEARTBEAT_OK"))

    async def scenario() -> tuple[int, int]:
        hub = Hub(build_agent(config, paths), max_turns=1)  # gateway.maxConcurrentTurns: 1
        scheduler = cron_component(config, paths, hub, build_outbox(config, paths)).run.__self__
        heartbeat = next(task for task in scheduler.tasks if task.name == "heartbeat")
        await hub.slots.acquire()  # a user's turn holds the only slot
        run = asyncio.create_task(heartbeat.run())
        for _ in range(50):
            await asyncio.sleep(0.01)
        calls_while_busy = len(llm.requests)
        hub.slots.release()  # the user's turn ends
        outcome = await asyncio.wait_for(run, PATIENCE)
        assert outcome is not None and outcome.status == "ok"
        return calls_while_busy, len(llm.requests)

    assert asyncio.run(scenario()) == (0, 1)


@pytest.mark.process
def test_in_the_gateway_the_heartbeat_is_a_turn_of_its_own_agent_and_starts_no_second_mcp_server(llm, isolated_home):
    import sys

    from nanoagent.agent.build import build_agent
    from nanoagent.agent.events import MessageAdded, TurnStarted
    from nanoagent.config.schema import McpServerConfig
    from nanoagent.gateway.cron import cron_component
    from nanoagent.gateway.hub import Hub
    from tests.conftest import ROOT

    config, paths = setting_up(llm, dream_schedule="")
    config.heartbeat.model = "anthropic/claude-heartbeat"
    config.mcp_servers["demo"] = McpServerConfig(command=sys.executable, args=[str(ROOT / "tests" / "mcp_stdio_server.py"),
                                                                               "basic"])
    (paths.workspace / "HEARTBEAT.md").write_text("- tell me if the build is red\n")
    log = paths.logs_dir / "mcp-demo.log"
    llm.script(Reply(text="hello"),  # a person's turn starts the gateway's MCP server
               Reply(tool_calls=[("mcp__demo__echo", {"text": "build status"})]), Reply(text="HEARTBEAT_OK"),
               Reply(text="HEARTBEAT_OK"))

    async def scenario() -> list:
        hub = Hub(build_agent(config, paths))
        seen: list = []
        hub.watch("heartbeat", seen.append)  # a terminal attached to the gateway's heartbeat session
        try:
            await hub.send("cli:direct", "hi")
            assert log.exists()
            log.unlink()
            scheduler = cron_component(config, paths, hub, build_outbox(config, paths)).run.__self__
            heartbeat = next(task for task in scheduler.tasks if task.name == "heartbeat")
            for _ in range(2):
                outcome = await asyncio.wait_for(heartbeat.run(), PATIENCE)
                assert outcome is not None and outcome.status == "ok"
        finally:
            await hub.loop.aclose()
        return seen

    seen = asyncio.run(scenario())
    assert not log.exists()  # the heartbeat's tool call went to the server the gateway had started
    assert "echo: build status" in json.dumps(llm.requests[2].body["messages"])
    assert [e.model for e in seen if isinstance(e, TurnStarted)] == ["anthropic/claude-heartbeat"] * 2
    assert [r.body["model"] for r in llm.requests] == ["claude-test"] + ["claude-heartbeat"] * 3
    assert sum(isinstance(e, MessageAdded) and e.message["role"] == "user" for e in seen) == 2
    session = SessionStore(paths.sessions_dir).load("heartbeat")  # started afresh by each run
    assert [m["role"] for m in session.messages] == ["user", "assistant"]
