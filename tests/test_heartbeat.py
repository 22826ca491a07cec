"""The heartbeat: standing tasks in HEARTBEAT.md, checked by a light turn that costs nothing while there are none,
keeps quiet when there is nothing to say, and otherwise reaches the user's chat."""

import asyncio
import json
import os
from datetime import UTC, datetime

import pytest

from nanoagent.agent.heartbeat import (
    NOTHING_TO_REPORT,
    SESSION,
    HeartbeatStatus,
    run_heartbeat,
    task_text,
    within_active_hours,
)
from nanoagent.config.schema import Config
from nanoagent.errors import ConfigError
from nanoagent.messages import assistant, user
from nanoagent.paths import Paths
from nanoagent.providers.base import ProviderError
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.resources import templates_dir
from nanoagent.session.store import SessionStore
from tests.conftest import anthropic_env, fast_retries, invoke, write_config
from tests.llm_server import Reply

TASKS = "# Heartbeat\n\n- Check that https://example.com is up; tell me when it is not.\n"
NOON = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


class Deliveries(list):
    """A real deliver callable: records each (target, text) it is handed."""

    async def __call__(self, target: str, text: str) -> None:
        self.append((target, text))


def workspace(tasks: str | None = TASKS) -> Paths:
    paths = Paths.from_env()
    paths.workspace.mkdir(parents=True, exist_ok=True)
    if tasks is not None:
        (paths.workspace / "HEARTBEAT.md").write_text(tasks)
    return paths


def chat(paths: Paths, key: str, mtime: float) -> None:
    """A session someone talked in, last written at `mtime`."""
    store = SessionStore(paths.sessions_dir)
    session = store.load(key)
    store.add_messages(session, [user("hi"), assistant("hello")])
    os.utime(session.path, (mtime, mtime))


def beat(paths, provider, config=None, deliver=None, now=NOON, **kw):
    return asyncio.run(run_heartbeat(config or Config(), paths, deliver, provider=provider, now=lambda: now, **kw))


def counts(paths: Paths) -> dict:
    return json.loads(paths.heartbeat_state.read_text())["counts"]


# --- what counts as a task ------------------------------------------------------------------------------------

def test_the_shipped_template_holds_no_task():
    assert task_text((templates_dir() / "workspace" / "HEARTBEAT.md").read_text()) == ""


def test_comments_headings_blank_lines_and_empty_bullets_are_not_tasks():
    text = "# Heartbeat\n\n<!-- - not this one\n-->\n## Daily\n-\n- [ ]\n\n  - Water the plants reminder\n<!-- open"
    assert task_text(text) == "  - Water the plants reminder"
    assert task_text("<!-- an unclosed comment hides the rest\n- task") == ""


# --- no tasks, or outside active hours: no model call --------------------------------------------------------

def test_a_heartbeat_without_tasks_makes_no_request_and_needs_no_key(llm, isolated_home):
    assert invoke("onboard").returncode == 0  # the workspace starts with the template's HEARTBEAT.md
    for _ in range(2):
        ran = invoke("heartbeat", env={"ANTHROPIC_BASE_URL": llm.url})  # no ANTHROPIC_API_KEY
        assert ran.returncode == 0, ran.stderr
        assert "No tasks" in ran.stdout and "no model call" in ran.stdout
    assert llm.requests == []
    paths = Paths.from_env()
    assert counts(paths) == {"no_tasks": 2}
    assert not paths.session_file(SESSION).exists()  # nothing logged but the counter
    assert paths.heartbeat_state.stat().st_mode & 0o777 == 0o600


def test_outside_active_hours_in_the_users_time_zone_nothing_runs():
    paths = workspace()
    config = Config()
    config.heartbeat.active_hours = "08:00-22:00"
    config.defaults.timezone = "Asia/Tokyo"  # UTC+9: 15:00 UTC is 00:00 there
    provider = ScriptedProvider([NOTHING_TO_REPORT])
    result = beat(paths, provider, config, now=datetime(2026, 1, 15, 15, 0, tzinfo=UTC))
    assert result.status is HeartbeatStatus.OUTSIDE_HOURS and provider.requests == []
    result = beat(paths, provider, config, now=datetime(2026, 1, 15, 23, 30, tzinfo=UTC))  # 08:30 in Tokyo
    assert result.status is HeartbeatStatus.NOTHING_TO_REPORT and len(provider.requests) == 1
    assert counts(paths) == {"outside_hours": 1, "nothing_to_report": 1}


def test_active_hours_may_span_midnight_and_end_at_24():
    at = [datetime(2026, 1, 15, h, m) for h, m in ((21, 59), (22, 0), (3, 0), (6, 0))]
    assert [within_active_hours("22:00-06:00", t) for t in at] == [False, True, True, False]
    assert within_active_hours("00:00-24:00", at[0]) and within_active_hours("", at[0])


@pytest.mark.parametrize("hours", ["8-22", "08:00", "25:00-26:00", "08:61-09:00", "a:bc-10:00"])
def test_malformed_active_hours_are_one_clear_config_error(hours, isolated_home):
    with pytest.raises(ConfigError, match="HH:MM-HH:MM"):
        Config().heartbeat.__class__(active_hours=hours)
    write_config(isolated_home, {"heartbeat": {"activeHours": hours}})
    ran = invoke("heartbeat")
    assert ran.returncode == 1 and "heartbeat.activeHours" in ran.stderr and "Traceback" not in ran.stderr


# --- the light turn and what it delivers ----------------------------------------------------------------------

def test_nothing_to_report_is_not_delivered():
    paths = workspace()
    chat(paths, "telegram:7", 1000)
    for reply in (NOTHING_TO_REPORT, f"`{NOTHING_TO_REPORT}`.", f"\n**{NOTHING_TO_REPORT}**\n"):
        deliveries = Deliveries()
        result = beat(paths, ScriptedProvider([reply]), deliver=deliveries)
        assert result.status is HeartbeatStatus.NOTHING_TO_REPORT and deliveries == []


def test_a_reply_goes_to_the_configured_target():
    paths = workspace()
    chat(paths, "cli:direct", 1000)
    config = Config()
    config.heartbeat.target = "telegram:42"
    deliveries = Deliveries()
    result = beat(paths, ScriptedProvider(["example.com is down (HTTP 503)."]), config, deliveries)
    assert deliveries == [("telegram:42", "example.com is down (HTTP 503).")]
    assert result.status is HeartbeatStatus.DELIVERED and result.target == "telegram:42"


def test_without_a_target_a_reply_goes_to_the_most_recently_active_chat_in_any_channel(monkeypatch):
    from tests import pigeon_channel

    pigeon_channel.register(monkeypatch)  # a channel added by a registry line counts as one a person talks in
    paths = workspace()
    chat(paths, "cli:direct", 1000)
    chat(paths, "pigeon:7", 2000)
    chat(paths, "cron:job1", 3000)  # not chats a person talks in, however recent
    chat(paths, "http:default", 3000)
    chat(paths, "fax:9", 3000)  # no registered channel
    deliveries = Deliveries()
    beat(paths, ScriptedProvider([f"example.com is down. {NOTHING_TO_REPORT}"]), deliver=deliveries)
    assert deliveries == [("pigeon:7", "example.com is down.")]


def test_with_no_chat_and_no_target_the_reply_is_kept_in_the_result():
    paths = workspace()
    deliveries = Deliveries()
    result = beat(paths, ScriptedProvider(["example.com is down."]), deliver=deliveries)
    assert result.status is HeartbeatStatus.UNDELIVERED and result.reply == "example.com is down."
    assert deliveries == []


def test_each_heartbeat_sends_only_the_prompt_and_tasks_never_earlier_runs():
    paths = workspace()
    provider = ScriptedProvider(default=NOTHING_TO_REPORT)
    for _ in range(3):
        beat(paths, provider)
    last = provider.requests[-1]
    assert len(last.messages) == 1 and "https://example.com" in last.messages[0]["content"]
    assert NOTHING_TO_REPORT in last.messages[0]["content"]
    session = SessionStore(paths.sessions_dir).load(SESSION)
    assert len(session.messages) == 2 and len(session.usage) == 3  # one run's messages, every run's tokens


def test_heartbeat_model_is_used_when_set():
    paths = workspace()
    config = Config()
    config.heartbeat.model = "anthropic/claude-haiku-test"
    provider = ScriptedProvider([NOTHING_TO_REPORT])
    beat(paths, provider, config)
    assert provider.requests[0].model == "anthropic/claude-haiku-test"


def test_a_failed_turn_is_reported_and_delivers_nothing():
    paths = workspace()
    deliveries = Deliveries()
    result = beat(paths, ScriptedProvider([ScriptedReply(error=ProviderError("529 overloaded"))]), deliver=deliveries)
    assert result.status is HeartbeatStatus.FAILED and "529 overloaded" in (result.error or "")
    assert deliveries == []


# --- through the CLI and the real SDK ------------------------------------------------------------------------

def test_heartbeat_tokens_show_in_usage_under_heartbeat_silent_runs_too(llm, isolated_home):
    workspace()
    llm.script(Reply(text=NOTHING_TO_REPORT, input_tokens=1200, output_tokens=5),
               Reply(text=NOTHING_TO_REPORT, input_tokens=1300, output_tokens=5))
    for _ in range(2):
        ran = invoke("heartbeat", env=anthropic_env(llm))
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "Nothing to report."
    assert len(llm.requests) == 2
    shown = invoke("usage", "-s", "heartbeat", env=anthropic_env(llm))
    row = next(line for line in shown.stdout.splitlines() if SESSION in line)
    day, key, model, calls, _, output, *_ = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert (key, model, calls, output) == (SESSION, "anthropic/claude-test", "2", "10")
    assert SESSION in invoke("usage", env=anthropic_env(llm)).stdout


def test_the_cli_prints_a_reply_and_adds_it_to_the_terminal_session(llm, isolated_home):
    paths = workspace()
    chat(paths, "cli:direct", 1000)
    llm.script(Reply(text="example.com is down (HTTP 503)."))
    ran = invoke("heartbeat", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "example.com is down (HTTP 503)."
    assert "added to session cli:direct" in ran.stderr
    session = SessionStore(paths.sessions_dir).load("cli:direct")
    assert session.messages[-1] == assistant("(heartbeat) example.com is down (HTTP 503).")


def test_the_cli_skips_outside_active_hours_unless_forced(llm, isolated_home):
    workspace()
    now = datetime.now().astimezone()
    start = (now.hour + 2) % 24  # a one-hour window that is not now
    write_config(isolated_home, {"heartbeat": {"activeHours": f"{start:02d}:00-{(start + 1) % 24:02d}:00"}})
    ran = invoke("heartbeat", env=anthropic_env(llm))
    assert ran.returncode == 0 and "Outside heartbeat.activeHours" in ran.stdout and llm.requests == []
    llm.script(Reply(text=NOTHING_TO_REPORT))
    assert "Nothing to report." in invoke("heartbeat", "--force", env=anthropic_env(llm)).stdout


def test_a_failing_heartbeat_exits_1_with_one_line(llm, isolated_home):
    write_config(isolated_home, fast_retries())
    workspace()
    llm.script(Reply(status=400, error_message="bad request from the test"))
    ran = invoke("heartbeat", env=anthropic_env(llm))
    assert ran.returncode == 1
    errors = [line for line in ran.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "The heartbeat failed" in errors[0] and "Traceback" not in ran.stderr


def test_a_target_that_names_no_chat_is_a_config_error(isolated_home):
    write_config(isolated_home, {"heartbeat": {"target": "bob"}})
    ran = invoke("heartbeat")
    assert ran.returncode == 1 and "heartbeat.target" in ran.stderr and "telegram:<chat id>" in ran.stderr
