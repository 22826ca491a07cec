"""The agent's cron and message tools, driven by scripted turns: the job goes to the chat it was asked from, times
are said back resolved in the user's zone, and messages reach only the user's own chats, in whichever channel (Pigeon,
the tests' channel, stands for any registered one)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from nanoagent.agent.build import build_agent
from nanoagent.channels.state import state_file
from nanoagent.config.schema import Config
from nanoagent.cron.store import JobStore
from nanoagent.messages import is_tool
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from tests import pigeon_channel

ANN = 42


@pytest.fixture
def loft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pigeon registered; its app's folder."""
    pigeon_channel.register(monkeypatch)
    return tmp_path / "loft"


def pigeon_config(loft: Path, allow_from: tuple[str, ...] = (str(ANN),)) -> Config:
    config = Config()
    pigeon_channel.configure(config, loft, list(allow_from))
    return config


def turn(key: str, *calls: tuple[str, dict], config: Config | None = None) -> list[str]:
    """Run one turn in session `key` whose model makes `calls`; the tool results it got."""
    provider = ScriptedProvider([ScriptedReply(tool_calls=list(calls)), "Done."])
    loop = build_agent(config or Config(), Paths.from_env(), provider=provider)
    start = len(loop.session(key).messages)
    asyncio.run(loop.handle("please", key))
    return [m["content"] for m in loop.session(key).messages[start:] if is_tool(m)]


def jobs():
    return JobStore(Paths.from_env().cron_jobs_file).read().jobs


def test_a_job_made_in_a_channels_chat_replies_there_and_the_tool_says_the_resolved_time(loft):
    config = pigeon_config(loft)
    config.agents.defaults.timezone = "Europe/Berlin"
    [result] = turn("pigeon:42", ("cron", {"action": "add", "message": "Remind the user to call mom.",
                                            "at": "2099-05-04 09:00", "name": "mom"}), config=config)
    [job] = jobs()
    assert job.target == "pigeon:42" and job.created_by == "pigeon:42" and job.name == "mom"
    assert f"Added job {job.id}." in result
    assert "next run Mon 2099-05-04 09:00 CEST" in result and "replies go to pigeon:42" in result
    assert "No scheduler has run lately" in result  # and it tells the model the job needs one


def test_a_job_made_in_a_terminal_writes_to_that_terminal_session():
    turn("cli:work", ("cron", {"action": "add", "message": "Stretch.", "every": "2h"}))
    assert [j.target for j in jobs()] == ["cli:work"]


def test_list_update_and_remove_work_from_a_conversation():
    turn("cli:direct", ("cron", {"action": "add", "message": "Water the plants.", "cron": "0 8 * * *",
                                 "tz": "UTC"}))
    job_id = jobs()[0].id
    [listing] = turn("cli:direct", ("cron", {"action": "list"}))
    assert job_id in listing and "At 08:00 every day (UTC)" in listing
    [updated] = turn("cli:direct", ("cron", {"action": "update", "job_id": job_id, "enabled": False}))
    assert "paused" in updated and not jobs()[0].enabled
    [removed] = turn("cli:direct", ("cron", {"action": "remove", "job_id": job_id}))
    assert f"Removed job {job_id}" in removed and jobs() == []


def test_bad_schedules_come_back_to_the_model_as_errors_it_can_fix():
    results = turn("cli:direct", ("cron", {"action": "add", "message": "x", "cron": "99 * * * *"}),
                   ("cron", {"action": "add", "message": "x", "at": "2001-01-01 10:00"}),
                   ("cron", {"action": "add", "message": "x", "cron": "0 9 * * *", "tz": "Nowhere/Land"}))
    assert "Invalid cron expression" in results[0]
    assert "is in the past" in results[1]
    assert "Unknown time zone 'Nowhere/Land'" in results[2]
    assert jobs() == []


def test_a_job_for_someone_elses_chat_is_refused_naming_the_users_own(loft):
    [result] = turn("cli:direct", ("cron", {"action": "add", "message": "spam", "every": "1h",
                                            "to": "pigeon:999"}), config=pigeon_config(loft))
    assert "pigeon:999 is not one of the user's own chats (Pigeon: pigeon:42; terminal sessions cli:<name>)" in result
    assert jobs() == []


def test_the_message_tool_reaches_the_users_own_chat_by_the_channels_name_and_refuses_others(loft):
    results = turn("cli:direct", ("message", {"text": "The download is **done**.", "to": "pigeon"}),
                   ("message", {"text": "hi", "to": "pigeon:999"}),
                   ("message", {"text": "hi", "to": "cli:direct"}), config=pigeon_config(loft))
    assert "Sent to pigeon:42." in results[0]
    assert pigeon_channel.arrived(loft, "pigeon:42") == ["The download is **done**."]
    assert "not one of the user's own chats" in results[1] and pigeon_channel.arrived(loft, "pigeon:999") == []
    assert "That is this conversation" in results[2]


def test_the_message_tool_reaches_the_users_own_telegram_chat_through_the_bot_api(api):
    from nanoagent.channels.telegram.settings import TelegramConfig

    config = Config()
    config.channels.blocks["telegram"] = TelegramConfig(token=api.token, allow_from=[str(ANN)], owner=[str(ANN)],
                                              api_base=api.url)
    results = turn("cli:direct", ("message", {"text": "The download is **done**.", "to": "telegram"}),
                   ("message", {"text": "hi", "to": "telegram:999"}), config=config)
    assert "Sent to telegram:42." in results[0]
    assert api.texts(ANN) == ["The download is done."] and api.chat(ANN)[0].raw == "The download is <b>done</b>."
    assert "telegram:999 is not one of the user's own chats (Telegram: telegram:42;" in results[1]
    assert api.texts(999) == []


def test_the_owner_may_write_to_a_guest_approved_by_pairing_and_a_channels_name_alone_is_the_owners_chat(loft):
    state_file(Paths.from_env(), "pigeon").update(lambda state: state.allowed.update({"7": "Bea"}))
    results = turn("cli:direct", ("message", {"text": "Hello Bea.", "to": "pigeon:7"}),
                   ("message", {"text": "Hello?", "to": "pigeon"}), config=pigeon_config(loft))
    assert "Sent to pigeon:7." in results[0] and pigeon_channel.arrived(loft, "pigeon:7") == ["Hello Bea."]
    assert "Sent to pigeon:42." in results[1]  # the owner's own chat, not the guest's
    assert pigeon_channel.arrived(loft, "pigeon:42") == ["Hello?"]


def guests_with_every_tool(loft: Path) -> Config:
    config = pigeon_config(loft, ("42", "7", "8"))
    config.tools.guest_profile = "full"
    return config


def test_a_guests_chat_writes_only_to_itself_not_to_the_owner_nor_another_guest(loft):
    results = turn("pigeon:7", ("message", {"text": "psst", "to": "pigeon:42"}),
                   ("message", {"text": "psst", "to": "pigeon:8"}),
                   ("cron", {"action": "add", "message": "spam", "every": "1h", "to": "cli:direct"}),
                   ("message", {"text": "hi", "to": "pigeon:7"}), config=guests_with_every_tool(loft))
    for refused in results[:3]:
        assert "from a guest's chat the agent writes only to that chat (pigeon:7)" in refused
    assert pigeon_channel.arrived(loft, "pigeon:42") == [] and pigeon_channel.arrived(loft, "pigeon:8") == []
    assert jobs() == []


def test_a_channels_name_alone_without_an_owner_says_how_to_name_one(loft):
    [result] = turn("cli:direct", ("message", {"text": "hi", "to": "pigeon"}), config=pigeon_config(loft, ()))
    assert "no Pigeon user is named as you yet (channels.pigeon.owner, or `nanoagent channels add pigeon`)" in result


def test_a_target_that_is_no_place_names_the_registered_channels(loft):
    results = turn("cli:direct", ("message", {"text": "hi", "to": "fax:42"}),
                   ("message", {"text": "hi", "to": "none"}), config=pigeon_config(loft))
    assert "Cannot deliver to 'fax:42': use <channel>:<chat id>" in results[0] and "pigeon" in results[0]
    assert "Say where: to=<channel>:<chat id>" in results[1] and "pigeon" in results[1]


def test_the_tools_schemas_name_the_registered_channels(loft):
    import nanoagent.channels.registry as registry
    from nanoagent.agent.build import build_outbox
    from nanoagent.cron.targets import Access
    from nanoagent.cron.tools import cron_tools

    paths, config = Paths.from_env(), Config()
    tools = cron_tools(JobStore(paths.cron_jobs_file), build_outbox(config, paths), Access(config, paths), None)
    for tool in tools:
        to = tool.spec().parameters["properties"]["to"]["description"]
        assert f"<channel>:<chat id> (<channel>: {', '.join(registry.names())})" in to and "pigeon" in to, tool.name


def test_the_message_tool_writes_to_a_terminal_session_as_the_agents_note(loft):
    [result] = turn("pigeon:42", ("message", {"text": "Build finished.", "to": "cli:direct"}),
                    config=pigeon_config(loft))
    assert "Sent to cli:direct." in result
    lines = [json.loads(x) for x in Paths.from_env().session_file("cli:direct").read_text().splitlines()]
    [note] = [r["message"] for r in lines if r["type"] == "message"]
    assert note["role"] == "assistant" and note["content"].endswith("Build finished.")


def test_a_schedule_that_never_comes_or_overflows_is_an_error_the_model_sees_and_no_job_is_stored():
    results = turn("cli:direct", ("cron", {"action": "add", "message": "x", "at": "in 0 minutes"}),
                   ("cron", {"action": "add", "message": "x", "every": "99999999999d"}),
                   ("cron", {"action": "add", "message": "x", "at": "in 99999999999d"}))
    assert "is now, not later" in results[0]
    assert "longer than 10 years" in results[1] and "longer than 10 years" in results[2]
    assert all(r.startswith("Error") for r in results), results
    assert jobs() == []


def test_the_tool_lists_a_jobs_budget_and_why_a_run_was_skipped_and_an_update_keeps_the_budget():
    from datetime import UTC, datetime

    from nanoagent.cron.store import RunRecord

    turn("cli:direct", ("cron", {"action": "add", "message": "Check the prices.", "every": "1h"}))
    job_id = jobs()[0].id

    def capped(store_jobs):
        job = store_jobs.get(job_id)
        job.budget = 0.2  # set by the person (`cron add --budget`): the tool has no way to
        job.record(RunRecord(started=datetime.now(UTC), status="skipped",
                             note="budget: daily cap $1.00 reached, resets 00:00"))

    JobStore(Paths.from_env().cron_jobs_file).update(capped)
    [listing] = turn("cli:direct", ("cron", {"action": "list"}))
    assert "at most $0.20 a run" in listing and "(budget: daily cap $1.00 reached, resets 00:00)" in listing
    turn("cli:direct", ("cron", {"action": "update", "job_id": job_id, "message": "Check the prices twice."}))
    assert jobs()[0].budget == 0.2 and jobs()[0].message == "Check the prices twice."
