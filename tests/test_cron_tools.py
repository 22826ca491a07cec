"""The agent's cron and message tools, driven by scripted turns: the job goes to the chat it was asked from, times
are said back resolved in the user's zone, and messages reach only the user's own chats."""

from __future__ import annotations

import asyncio
import json

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config, TelegramConfig
from nanoagent.cron.store import JobStore
from nanoagent.messages import is_tool
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply

ANN = 42


def turn(key: str, *calls: tuple[str, dict], config: Config | None = None) -> list[str]:
    """Run one turn in session `key` whose model makes `calls`; the tool results it got."""
    provider = ScriptedProvider([ScriptedReply(tool_calls=list(calls)), "Done."])
    loop = build_agent(config or Config(), Paths.from_env(), provider=provider)
    start = len(loop.session(key).messages)
    asyncio.run(loop.handle("please", key))
    return [m["content"] for m in loop.session(key).messages[start:] if is_tool(m)]


def jobs():
    return JobStore(Paths.from_env().cron_jobs_file).read().jobs


def test_a_job_made_in_a_telegram_chat_replies_there_and_the_tool_says_the_resolved_time():
    config = Config()
    config.agents.defaults.timezone = "Europe/Berlin"
    [result] = turn("telegram:42", ("cron", {"action": "add", "message": "Remind the user to call mom.",
                                              "at": "2099-05-04 09:00", "name": "mom"}), config=config)
    [job] = jobs()
    assert job.target == "telegram:42" and job.created_by == "telegram:42" and job.name == "mom"
    assert f"Added job {job.id}." in result
    assert "next run Mon 2099-05-04 09:00 CEST" in result and "replies go to telegram:42" in result
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


def test_a_job_for_someone_elses_chat_is_refused():
    [result] = turn("cli:direct", ("cron", {"action": "add", "message": "spam", "every": "1h",
                                            "to": "telegram:999"}))
    assert "telegram:999 is not one of the user's own chats" in result and jobs() == []


def test_the_message_tool_reaches_the_users_own_telegram_chat_and_refuses_others(api):
    config = Config()
    config.channels.telegram = TelegramConfig(token=api.token, allow_from=[str(ANN)], api_base=api.url)
    results = turn("cli:direct", ("message", {"text": "The download is **done**.", "to": "telegram"}),
                   ("message", {"text": "hi", "to": "telegram:999"}),
                   ("message", {"text": "hi", "to": "cli:direct"}), config=config)
    assert "Sent to telegram:42." in results[0]
    assert api.texts(ANN) == ["The download is done."]
    assert "not one of the user's own chats" in results[1]
    assert "That is this conversation" in results[2]


def test_the_message_tool_writes_to_a_terminal_session_as_the_agents_note():
    [result] = turn("telegram:42", ("message", {"text": "Build finished.", "to": "cli:direct"}))
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
