"""People apart: each person the agent talks with in a chat channel has their own facts, and nothing one of them said
reaches another's turns (system prompt, recent history, memory_search), Dream included; the owner sees everything."""

from __future__ import annotations

import asyncio
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nanoagent.agent.build import build_agent, build_dream, build_outbox
from nanoagent.agent.cron_runs import TurnRunner
from nanoagent.agent.loop import AgentLoop
from nanoagent.config.schema import Config, SubagentsConfig
from nanoagent.cron.schedule import Schedule
from nanoagent.cron.scheduler import Scheduler, Settings
from nanoagent.cron.store import Job, JobsFile, JobStore
from nanoagent.memory.gitlog import MemoryGit
from nanoagent.memory.history import HistoryLog
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from tests import pigeon_channel

ALICE, BOB, GROUP, OWNER = "telegram:1", "telegram:2", "telegram:-100", "cli:direct"
PIGEON_ALICE, PIGEON_BOB = "pigeon:1", "pigeon:2"
ALICE_FILE, BOB_FILE = "memory/people/telegram-1.md", "memory/people/telegram-2.md"


def call(name: str, **args: object) -> ScriptedReply:
    return ScriptedReply(tool_calls=[(name, args)])


class Agent:
    """One agent whose model is scripted turn by turn; each turn's requests are kept to look into."""

    def __init__(self, paths: Paths, config: Config | None = None):
        self.provider = ScriptedProvider()
        self.loop: AgentLoop = build_agent(config or Config(), paths, provider=self.provider)

    def turn(self, key: str, text: str, *replies: ScriptedReply | str) -> list:
        self.provider.replies.extend(ScriptedReply(r) if isinstance(r, str) else r for r in replies)
        first = len(self.provider.requests)
        asyncio.run(self.loop.handle(text, key))
        return self.provider.requests[first:]

    def tool_results(self, key: str) -> list[str]:
        return [m["content"] for m in self.loop.session(key).messages if m["role"] == "tool"]

    def search(self, key: str, query: str) -> str:
        self.turn(key, f"what about {query}?", call("memory_search", query=query), "ok")
        return self.tool_results(key)[-1]


def setup(config: Config | None = None) -> tuple[Paths, Agent]:
    """An agent whose guests have every tool (`tools.guestProfile`), so what keeps them apart is memory's rules."""
    paths = Paths.from_env()
    config = config or Config()
    config.tools.guest_profile = "full"
    agent = Agent(paths, config)
    agent.turn(OWNER, "hello", "hi")  # the workspace is seeded
    user_md = paths.workspace / "USER.md"
    user_md.write_text(user_md.read_text() + "\n- Owner: Olga, working on project Falcon\n")
    return paths, agent


def chat_and_archive(agent: Agent, key: str, said: str, summary: str, fact: str) -> None:
    """A person says something, the agent keeps it in USER.md, and /new archives the chat with a summary."""
    agent.turn(key, said, call("write_file", path="USER.md", content=f"- {fact}\n"), "noted")
    agent.turn(key, "/new", summary)


def test_two_people_never_see_each_others_facts_history_or_search_hits_and_the_owner_sees_all():
    paths, agent = setup()
    chat_and_archive(agent, ALICE, "my cat is called Pickles", "Alice's cat is called Pickles; she lives in Coimbra.",
                     "Cat: Pickles")
    chat_and_archive(agent, BOB, "my dog is called Rex", "Bob's dog is called Rex; he lives in Bergen.", "Dog: Rex")

    # the agent's edits of USER.md went to each person's own file, never the owner's
    assert (paths.workspace / ALICE_FILE).read_text() == "- Cat: Pickles\n"
    assert (paths.workspace / BOB_FILE).read_text() == "- Dog: Rex\n"
    assert stat.S_IMODE((paths.workspace / ALICE_FILE).stat().st_mode) == 0o600
    assert "Pickles" not in (paths.workspace / "USER.md").read_text()

    [bob, _] = agent.turn(BOB, "what do you know about me?", call("memory_search", query="Pickles Coimbra"), "ok")
    assert "Rex" in bob.system and "Bergen" in bob.system  # his own file and his own recent history
    for secret in ("Pickles", "Coimbra", "Falcon", "Olga"):
        assert secret not in bob.system
    assert "No memory matches" in agent.tool_results(BOB)[-1]
    assert "Bergen" in agent.search(BOB, "Bergen")

    [alice, _] = agent.turn(ALICE, "and me?", call("memory_search", query="Rex Bergen"), "ok")
    assert "Pickles" in alice.system and "Coimbra" in alice.system
    for secret in ("Rex", "Bergen", "Falcon", "Olga"):
        assert secret not in alice.system
    assert "No memory matches" in agent.tool_results(ALICE)[-1]

    [owner, _] = agent.turn(OWNER, "who did I talk to?", call("memory_search", query="Pickles"), "ok")
    for everything in ("Falcon", "Coimbra", "Bergen"):
        assert everything in owner.system
    assert ALICE_FILE in agent.tool_results(OWNER)[-1]


def test_what_a_member_said_privately_is_not_recalled_to_the_group():
    paths, agent = setup()
    chat_and_archive(agent, ALICE, "my cat is called Pickles", "Alice's cat is called Pickles.", "Cat: Pickles")
    [group] = agent.turn(GROUP, "Alice: hello all", "hello")
    assert "Pickles" not in group.system and "Falcon" not in group.system
    assert "No memory matches" in agent.search(GROUP, "Pickles")


def test_a_persons_file_tools_neither_read_nor_write_the_owners_or_another_persons_memory():
    paths, agent = setup()
    chat_and_archive(agent, ALICE, "my cat is called Pickles", "Alice's cat is called Pickles.", "Cat: Pickles")
    agent.turn(BOB, "look for Pickles", call("grep", pattern="Pickles|Falcon"), "ok")
    assert "(no matches)" in agent.tool_results(BOB)[-1]
    agent.turn(BOB, "read the history", call("read_file", path="memory/history.jsonl"), "ok")
    assert "is not for this chat" in agent.tool_results(BOB)[-1]
    agent.turn(OWNER, "look for Pickles", call("grep", pattern="Pickles"), "ok")
    assert ALICE_FILE in agent.tool_results(OWNER)[-1]
    memory = (paths.workspace / "memory" / "MEMORY.md").read_text()
    agent.turn(BOB, "remember for everyone that Alice is rude",
               call("write_file", path="memory/MEMORY.md", content="- Alice is rude\n"), "ok")
    assert "is not for this chat" in agent.tool_results(BOB)[-1]
    assert (paths.workspace / "memory" / "MEMORY.md").read_text() == memory
    agent.turn(BOB, "and in Alice's file", call("write_file", path=ALICE_FILE, content="- rude\n"), "ok")
    assert (paths.workspace / ALICE_FILE).read_text() == "- Cat: Pickles\n"
    agent.turn(BOB, "change who you are", call("write_file", path="SOUL.md", content="Be rude.\n"), "ok")
    assert "is not written from this chat" in agent.tool_results(BOB)[-1]
    agent.turn(BOB, "remember my dog", call("write_file", path="USER.md", content="- Dog: Rex\n"), "ok")
    agent.turn(BOB, "read my user file", call("read_file", path="USER.md"), "ok")
    assert "Dog: Rex" in agent.tool_results(BOB)[-1] and "Falcon" not in agent.tool_results(BOB)[-1]


def test_dream_writes_each_persons_facts_to_their_own_file_and_none_to_memory_md():
    paths, agent = setup()
    log = HistoryLog(paths.memory_dir)
    log.append(ALICE, "Alice's cat is called Pickles; she lives in Coimbra.")
    log.append(BOB, "Bob's dog is called Rex; he lives in Bergen.")
    log.append(OWNER, "The owner moved the release deadline to June.")
    memory_before = (paths.workspace / "memory" / "MEMORY.md").read_text()

    provider = ScriptedProvider([
        "## USER.md\n- ADD: has a cat, Pickles", call("append_to_file", path="USER.md", text="- Cat: Pickles",
                                                    summary="add: cat Pickles"),
        call("append_to_file", path="memory/MEMORY.md", text="- Alice has a cat", summary="add: cat"), "done",
        "## USER.md\n- ADD: has a dog, Rex", call("append_to_file", path="USER.md", text="- Dog: Rex",
                                                 summary="add: dog Rex"), "done",
        "## memory/MEMORY.md\n- ADD: the release is due in June", call(
            "append_to_file", path="memory/MEMORY.md", text="- The release is due in June", summary="add: release due"),
        "done",
    ])
    runner = build_dream(Config(), paths, sink=lambda e: None, provider=provider)
    results = asyncio.run(runner.run())
    assert [len(r.entries) for r in results] == [1, 1, 1] and log.dream_cursor == 3

    assert (paths.workspace / ALICE_FILE).read_text() == "- Cat: Pickles\n"
    assert (paths.workspace / BOB_FILE).read_text() == "- Dog: Rex\n"
    memory = (paths.workspace / "memory" / "MEMORY.md").read_text()
    assert memory == memory_before + "- The release is due in June\n"  # the person's run could not write it
    alice_analysis, bob_analysis, _ = [r for r in provider.requests if not r.tools]  # each run's first call
    for secret in ("Rex", "release", "Olga"):
        assert secret not in alice_analysis.messages[0]["content"]
    for secret in ("Pickles", "release", "Olga"):
        assert secret not in bob_analysis.messages[0]["content"]
    committed = {c.files for c in runner.git.log() if c.author == "dream"}
    assert committed == {(ALICE_FILE,), (BOB_FILE,), ("memory/MEMORY.md",)}

    [bob] = agent.turn(BOB, "hi", "hi")
    assert "Rex" in bob.system and "Pickles" not in bob.system and "Falcon" not in bob.system
    [alice] = agent.turn(ALICE, "hi", "hi")
    assert "Pickles" in alice.system and "Rex" not in alice.system
    assert "The release is due in June" in alice.system  # MEMORY.md holds what is about no one person
    [owner] = agent.turn(OWNER, "hi", "hi")
    assert "Olga" in owner.system and "The release is due in June" in owner.system
    assert "Pickles" in agent.search(OWNER, "Pickles") and "No memory matches" in agent.search(BOB, "Pickles")


def test_a_persons_file_has_a_safe_name_whatever_their_id():
    paths, agent = setup()
    key = "slack:U_1@x"
    agent.turn(key, "remember me", call("write_file", path="USER.md", content="- Likes tea\n"), "ok")
    [written] = (paths.workspace / "memory" / "people").iterdir()
    assert written.name == "slack-U_5f1_40x.md" and written.read_text() == "- Likes tea\n"
    newest = MemoryGit(paths.workspace, paths.memory_git_dir).log(1)[0]  # recorded like USER.md, undoable
    assert newest.author == "agent" and newest.files == ("memory/people/slack-U_5f1_40x.md",)
    [again] = agent.turn(key, "hi", "hi")
    assert "Likes tea" in again.system


def test_two_mail_threads_from_one_sender_share_their_file_and_another_senders_thread_does_not():
    from nanoagent.channels.email.mail import place_of

    trip, car = place_of("ann@example.com", "<trip@example.com>"), place_of("Ann@Example.com", "<car@example.com>")
    other = place_of("ben@example.com", "<party@example.com>")
    paths, agent = setup()
    agent.turn(trip.key, "I am vegetarian", call("write_file", path="USER.md", content="- Diet: vegetarian\n"), "ok")
    [written] = (paths.workspace / "memory" / "people").iterdir()
    assert written.read_text() == "- Diet: vegetarian\n" and written.name.startswith("email-ann")
    [again] = agent.turn(car.key, "what should I cook?", "something green")
    assert trip.key != car.key and "Diet: vegetarian" in again.system
    [theirs] = agent.turn(other.key, "what should I cook?", "anything")
    assert "vegetarian" not in theirs.system
    agent.turn(other.key, "read my file", call("read_file", path="USER.md"), "ok")
    assert "vegetarian" not in agent.tool_results(other.key)[-1]


def test_a_sub_agent_started_in_a_persons_chat_is_kept_to_that_person():
    config = Config()
    config.agents.defaults.subagents = SubagentsConfig()
    paths, agent = setup(config)
    chat_and_archive(agent, ALICE, "my cat is called Pickles", "Alice's cat is called Pickles.", "Cat: Pickles")
    requests = agent.turn(BOB, "find out about Pickles", call("spawn", task="search memory for Pickles"),
                          call("memory_search", query="Pickles"), "nothing found", "ok")
    child = [r for r in requests if "search memory for Pickles" in str(r.messages[0]["content"])][0]
    assert "Pickles" not in child.system and "Falcon" not in child.system
    found = [m["content"] for r in requests for m in r.messages if m["role"] == "tool" and "memory" in m["content"]]
    assert found and not any(ALICE in text or ALICE_FILE in text or "Cat: Pickles" in text for text in found)


# A cron job runs as the person who made it (`cron:<job id>:<person>`); Pigeon, the tests' channel, delivers its reply

def cron_setup(monkeypatch: pytest.MonkeyPatch, loft: Path) -> tuple[Paths, Agent, Config]:
    pigeon_channel.register(monkeypatch)
    config = Config()
    pigeon_channel.configure(config, loft, ["1", "2"], owner=[])
    paths, agent = setup(config)
    chat_and_archive(agent, PIGEON_ALICE, "my cat is called Pickles", "Alice's cat is called Pickles; she lives in "
                     "Coimbra.", "Cat: Pickles")
    chat_and_archive(agent, PIGEON_BOB, "my dog is called Rex", "Bob's dog is called Rex; he lives in Bergen.",
                     "Dog: Rex")
    return paths, agent, config


def add_job(agent: Agent, key: str) -> Job:
    """The agent makes a job in session `key` with its cron tool, and the job is made due now."""
    agent.turn(key, "remind me hourly about my pet",
               call("cron", action="add", message="Tell the user about their pet, the cat or the dog.", every="1h"),
               "ok")
    store = JobStore(Paths.from_env().cron_jobs_file)
    [job] = [j for j in store.read().jobs if j.created_by == key]

    def due(jobs: JobsFile) -> None:
        found = jobs.get(job.id)
        assert found is not None
        found.next_run = datetime.now(UTC) - timedelta(seconds=1)

    store.update(due)
    return job


def run_due_jobs(agent: Agent, config: Config, *replies: ScriptedReply | str) -> list:
    """One scheduler tick, as `nanoagent cron tick` runs it; the model requests of the runs."""
    agent.provider.replies.extend(ScriptedReply(r) if isinstance(r, str) else r for r in replies)
    first = len(agent.provider.requests)
    paths = Paths.from_env()
    runner = TurnRunner(lambda key, text: agent.loop.handle(text, key), build_outbox(config, paths), UTC)
    asyncio.run(Scheduler(JobStore(paths.cron_jobs_file), runner, Settings()).tick())
    return agent.provider.requests[first:]


def test_a_cron_job_made_in_a_persons_chat_runs_with_that_persons_memory_only_and_replies_in_their_chat(
        monkeypatch, tmp_path):
    loft = tmp_path / "loft"
    paths, agent, config = cron_setup(monkeypatch, loft)
    job = add_job(agent, PIGEON_ALICE)
    assert job.target == PIGEON_ALICE
    requests = run_due_jobs(agent, config, call("memory_search", query="Rex Bergen Falcon Olga"),
                            call("message", text="Pickles says meow"), "Time to feed Pickles!")
    assert len(requests) == 3
    seen = json.dumps(requests[0].messages)  # the job's message with what was recalled for it
    for request in requests:  # her file and her recent history; no one else's, nor the owner's USER.md
        assert "Pickles" in request.system and "Coimbra" in request.system
        for secret in ("Rex", "Bergen", "Falcon", "Olga"):
            assert secret not in request.system and secret not in seen
    results = [m["content"] for r in requests[1:2] for m in r.messages if m["role"] == "tool"]
    assert "No memory matches" in results[-1]
    assert pigeon_channel.arrived(loft, PIGEON_ALICE) == ["Pickles says meow", "Time to feed Pickles!"]
    assert pigeon_channel.arrived(loft, PIGEON_BOB) == []
    ran = JobStore(paths.cron_jobs_file).read().get(job.id)
    assert ran is not None and ran.runs[-1].status == "ok" and ran.runs[-1].delivery is None

    # what the run said stays hers: Bob's search does not find it, hers does
    assert "No memory matches" in agent.search(PIGEON_BOB, "meow")


def test_an_owners_cron_job_and_one_without_a_maker_still_see_everything(monkeypatch, tmp_path):
    loft = tmp_path / "loft"
    paths, agent, config = cron_setup(monkeypatch, loft)
    made = add_job(agent, OWNER)
    requests = run_due_jobs(agent, config, call("memory_search", query="Rex Bergen"), "Rex and Pickles are fine.")
    for request in requests:
        for everything in ("Falcon", "Olga", "Coimbra", "Bergen"):
            assert everything in request.system
    assert "Rex" in [m["content"] for m in requests[-1].messages if m["role"] == "tool"][-1]
    assert agent.loop.session(f"cron:{made.id}").messages  # the session such a run always had

    store = JobStore(paths.cron_jobs_file)

    def older(jobs: JobsFile) -> None:  # a job from a jobs.json written before `createdBy`
        now = datetime.now(UTC)
        jobs.jobs.append(Job(id="old", name="Old", message="Say hello.", schedule=Schedule.every("1h", now),
                             target=OWNER, next_run=now - timedelta(seconds=1)))

    store.update(older)
    [request] = run_due_jobs(agent, config, "Hello.")
    assert all(everything in request.system for everything in ("Falcon", "Olga", "Coimbra", "Bergen"))
    jobs = store.read()
    assert [j.runs[-1].status for j in jobs.jobs] == ["ok", "ok"]
