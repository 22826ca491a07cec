"""Where runs' replies go: a chat in any registered channel through that channel's `deliver` (Pigeon, the tests'
channel, registered as a folder and a registry line would register it; Telegram through the Bot API stand-in over
real HTTP, no polling), a terminal session's log (shown live to a terminal attached through the gateway), and a chat
that no longer exists recorded as a delivery error while the job goes on."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nanoagent.agent import events as ev
from nanoagent.agent.build import build_agent, build_outbox
from nanoagent.agent.cron_runs import TurnRunner
from nanoagent.channels.telegram.settings import TelegramConfig
from nanoagent.config.schema import Config
from nanoagent.cron.deliver import NOTE_MARK, recent_notes
from nanoagent.cron.schedule import Schedule
from nanoagent.cron.scheduler import Scheduler, Settings
from nanoagent.cron.store import Job, JobStore
from nanoagent.gateway.cron import cron_component
from nanoagent.gateway.hub import Hub
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from nanoagent.session.store import SessionStore
from tests import pigeon_channel
from tests.conftest import PATIENCE
from tests.telegram_server import BotAPI

ANN = 42


@pytest.fixture
def loft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pigeon registered; its app's folder."""
    pigeon_channel.register(monkeypatch)
    return tmp_path / "loft"


def pigeon_config(loft: Path, token: str | None = "pigeon-token") -> Config:
    config = Config()
    pigeon_channel.configure(config, loft, [str(ANN)], token)
    return config


def add_due(target: str, job_id: str = "tea", kind: str = "every") -> JobStore:
    now = datetime.now(UTC)
    store = JobStore(Paths.from_env().cron_jobs_file)
    schedule = Schedule.every("1h", now - timedelta(hours=1)) if kind == "every" else Schedule.at(now, "UTC")

    def change(jobs):
        jobs.jobs.append(Job(id=job_id, name="Tea", message="Remind me to drink tea.", schedule=schedule,
                             target=target, created=now, next_run=now - timedelta(seconds=1)))

    store.update(change)
    return store


def tick(config: Config, provider: ScriptedProvider) -> None:
    paths = Paths.from_env()
    outbox = build_outbox(config, paths)
    loop = build_agent(config, paths, provider=provider, outbox=outbox)
    runner = TurnRunner(lambda key, text: loop.handle(text, key), outbox, UTC)
    asyncio.run(Scheduler(JobStore(paths.cron_jobs_file), runner, Settings()).tick())


def test_a_reply_for_a_channels_chat_goes_through_that_channel_and_into_the_chats_session(loft):
    store = add_due("pigeon:42")
    tick(pigeon_config(loft), ScriptedProvider(["Time for **tea**!"]))
    assert pigeon_channel.arrived(loft, "pigeon:42") == ["Time for **tea**!"]
    job = store.read().get("tea")
    assert job is not None and job.runs[-1].status == "ok" and job.runs[-1].delivery is None
    session = SessionStore(Paths.from_env().sessions_dir).load("pigeon:42")
    assert [m["role"] for m in session.messages] == ["assistant"]  # the conversation knows, as the agent's words
    assert session.messages[0]["content"].startswith(f"{NOTE_MARK}Scheduled job tea «Tea»")
    assert session.messages[0]["content"].endswith("Time for **tea**!")


def test_a_chat_that_no_longer_exists_is_a_delivery_error_and_the_job_goes_on(loft):
    store = add_due("pigeon:gone")
    tick(pigeon_config(loft), ScriptedProvider(["Time for tea!"]))
    job = store.read().get("tea")
    assert job is not None and job.enabled and job.next_run is not None and job.next_run > datetime.now(UTC)
    last = job.runs[-1]
    assert last.status == "ok" and last.delivery == "Pigeon found no chat gone"
    assert not SessionStore(Paths.from_env().sessions_dir).load("pigeon:gone").messages


def test_without_a_token_a_delivery_says_what_the_channel_needs(loft):
    store = add_due("pigeon:42")
    tick(pigeon_config(loft, token=None), ScriptedProvider(["Time for tea!"]))
    job = store.read().get("tea")
    assert job is not None and job.runs[-1].delivery == "no Pigeon token: set channels.pigeon.token"
    assert pigeon_channel.arrived(loft, "pigeon:42") == []


def test_a_target_in_a_channel_nanoagent_does_not_have_is_a_delivery_error_naming_the_channels(loft):
    store = add_due("fax:42")
    tick(pigeon_config(loft), ScriptedProvider(["Time for tea!"]))
    job = store.read().get("tea")
    delivery = job.runs[-1].delivery if job else None
    assert delivery is not None and delivery.startswith("Cannot deliver to 'fax:42': use <channel>:<chat id>")
    assert "pigeon" in delivery and "cli:<session>" in delivery


def test_a_failed_one_off_still_brings_its_message_to_the_chat(loft):
    from nanoagent.providers.base import ProviderError
    from nanoagent.providers.scripted import ScriptedReply

    store = add_due("pigeon:42", kind="at")
    tick(pigeon_config(loft), ScriptedProvider([ScriptedReply(error=ProviderError("invalid key", status=401))]))
    [text] = pigeon_channel.arrived(loft, "pigeon:42")
    assert "Remind me to drink tea." in text
    job = store.read().get("tea")
    assert job is not None and not job.enabled and job.runs[-1].status == "error"


# Telegram's deliver is the channel's own: python-telegram-bot, the client its gateway component uses

def telegram_config(api: BotAPI) -> Config:
    config = Config()
    config.channels.blocks["telegram"] = TelegramConfig(token=api.token, allow_from=[str(ANN)], api_base=api.url)
    return config


def test_a_reply_for_a_telegram_chat_goes_through_the_bot_api_as_html_and_into_that_chats_session(api):
    store = add_due("telegram:42")
    tick(telegram_config(api), ScriptedProvider(["Time for **tea**!"]))
    shown = api.chat(ANN)
    assert [s.text for s in shown] == ["Time for tea!"] and shown[0].raw == "Time for <b>tea</b>!"
    assert not api.calls_to("getUpdates")  # delivered without polling
    job = store.read().get("tea")
    assert job is not None and job.runs[-1].status == "ok" and job.runs[-1].delivery is None
    session = SessionStore(Paths.from_env().sessions_dir).load("telegram:42")
    assert session.messages[0]["content"].startswith(f"{NOTE_MARK}Scheduled job tea «Tea»")


def test_a_telegram_chat_that_no_longer_exists_is_a_delivery_error(api):
    store = add_due("telegram:42")
    api.fail("sendMessage", 400, "Bad Request: chat not found")
    tick(telegram_config(api), ScriptedProvider(["Time for tea!"]))
    job = store.read().get("tea")
    assert job is not None and job.enabled and job.runs[-1].status == "ok"
    assert job.runs[-1].delivery == "Telegram refused the message to chat 42: Chat not found"
    assert not SessionStore(Paths.from_env().sessions_dir).load("telegram:42").messages


def test_without_a_bot_token_a_telegram_delivery_says_how_to_set_one():
    store = add_due("telegram:42")
    tick(Config(), ScriptedProvider(["Time for tea!"]))
    job = store.read().get("tea")
    assert job is not None and "no Telegram bot token" in (job.runs[-1].delivery or "")


def test_markup_telegram_refuses_is_sent_again_as_plain_text(api):
    add_due("telegram:42")
    tick(telegram_config(api), ScriptedProvider([f"Tea {api.reject_marker} now"]))
    assert api.texts(ANN) == [f"Tea {api.reject_marker} now"] and api.chat(ANN)[0].parse_mode is None


def test_in_the_gateway_a_run_goes_through_the_hub_and_a_watching_terminal_sees_the_reply_live():
    add_due("cli:direct")
    paths, config = Paths.from_env(), Config()
    outbox = build_outbox(config, paths)
    hub = Hub(build_agent(config, paths, provider=ScriptedProvider(["Tea time!"]), outbox=outbox))
    seen: list[ev.Event] = []
    cron_seen: list[ev.Event] = []
    hub.watch("cli:direct", seen.append)
    hub.watch("cron:tea", cron_seen.append)
    component = cron_component(config, paths, hub, outbox)

    async def scenario() -> None:
        task = asyncio.create_task(component.run())
        deadline = time.monotonic() + PATIENCE
        while not any(isinstance(e, ev.Notice) for e in seen):
            assert time.monotonic() < deadline, "the note never reached the watcher"
            await asyncio.sleep(0.02)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    notice = next(e for e in seen if isinstance(e, ev.Notice))
    assert notice.text.startswith(f"{NOTE_MARK}Scheduled job tea") and notice.text.endswith("Tea time!")
    assert any(isinstance(e, ev.TurnStarted) for e in cron_seen)  # the run was a hub turn in session cron:tea
    assert recent_notes(paths.session_file("cli:direct")) == [notice.text]


def test_a_terminal_opening_its_session_is_shown_the_notes_since_the_users_last_message():
    from nanoagent import messages as msg

    sessions = SessionStore(Paths.from_env().sessions_dir)
    session = sessions.load("cli:direct")
    with sessions.lock(session):
        sessions.add_messages(session, [msg.assistant(f"{NOTE_MARK}Scheduled job a «old»\n\nseen already"),
                                        msg.user("thanks"), msg.assistant("You're welcome."),
                                        msg.assistant(f"{NOTE_MARK}Scheduled job b «tea»\n\nTea time!")])
    assert recent_notes(session.path) == [f"{NOTE_MARK}Scheduled job b «tea»\n\nTea time!"]
