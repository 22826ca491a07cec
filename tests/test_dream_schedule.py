"""Dream unattended: from the scheduler (`scheduled_dream`) and from the system's crontab (`nanoagent dream`).

It must not lose findings quietly, must not raise false alarms, and must not need a key when it has nothing to do."""

import asyncio

from nanoagent.agent.build import build_dream
from nanoagent.agent.scheduled_dream import scheduled_dream
from nanoagent.fsutil import file_lock
from nanoagent.memory.dream import MAX_STALLS, describe
from nanoagent.providers.base import ProviderError
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from tests.conftest import anthropic_env, invoke
from tests.llm_server import Reply
from tests.test_dream import setup as dream_setup

ANALYSIS = "## memory/MEMORY.md\n- ADD: the user's sister is called Ines"
NO_EDIT = "I looked at the files and will leave them as they are."


def setup(*facts: str, batch_size: int = 20):
    return dream_setup(facts, batch_size)


def dream_once(paths, config, provider, **run):
    dream = build_dream(config, paths, sink=lambda e: None, provider=provider)
    results = asyncio.run(dream.run(**run))
    return results, describe(results, dream.history.dream_cursor)


def append(text):
    return ScriptedReply(tool_calls=[("append_to_file", {"path": "memory/MEMORY.md", "text": text, "summary": "add"})])


def dream_log(paths) -> str:
    return (paths.logs_dir / "dream.log").read_text()


def test_an_editing_phase_that_makes_no_edit_keeps_the_cursor_and_says_so(tmp_path):
    paths, config, log = setup("the user's sister is called Ines")
    results, text = dream_once(paths, config, ScriptedProvider([ANALYSIS, NO_EDIT]))
    assert log.dream_cursor == 0
    assert results[0].stalls == 1 and not results[0].moved_on
    assert f"tried again next run (try 1 of {MAX_STALLS}" in text
    assert "dream-restore" not in text  # no edit, so nothing to undo
    # the next run sees the same entries again, and saves them this time
    provider = ScriptedProvider([ANALYSIS, append("- Sister: Ines"), "done"])
    _, text = dream_once(paths, config, provider)
    assert "Undo any edit with `nanoagent dream-restore SHA`" in text
    assert "the user's sister is called Ines" in provider.requests[0].messages[0]["content"]
    assert log.dream_cursor == 1 and "- Sister: Ines" in (paths.memory_dir / "MEMORY.md").read_text()


def test_after_the_bound_of_runs_without_an_edit_dream_moves_on_and_prints_the_lost_findings(tmp_path):
    paths, config, log = setup("the user's sister is called Ines")
    for run in range(1, MAX_STALLS):
        dream_once(paths, config, ScriptedProvider([ANALYSIS, NO_EDIT]))
        assert log.dream_cursor == 0, f"run {run} moved the cursor"
    results, text = dream_once(paths, config, ScriptedProvider([ANALYSIS, NO_EDIT]))
    assert log.dream_cursor == 1 and results[0].moved_on
    assert f"no edit in {MAX_STALLS} runs" in text and "moving on" in text
    assert "the user's sister is called Ines" in text  # the findings reach the log, not the void


def test_the_count_starts_again_for_a_batch_after_one_was_saved(tmp_path):
    paths, config, log = setup("sister Ines", batch_size=1)
    dream_once(paths, config, ScriptedProvider([ANALYSIS, NO_EDIT]))
    dream_once(paths, config, ScriptedProvider([ANALYSIS, append("- Sister: Ines"), "done"]))
    log.append("cli:direct", "- brother Tomas")
    results, _ = dream_once(paths, config, ScriptedProvider([ANALYSIS, NO_EDIT]))
    assert results[0].stalls == 1 and log.dream_cursor == 1


def test_all_stops_at_a_kept_batch_instead_of_trying_it_again_at_once(tmp_path):
    paths, config, log = setup("sister Ines", "brother Tomas", batch_size=1)
    provider = ScriptedProvider([ANALYSIS, NO_EDIT])
    results, _ = dream_once(paths, config, provider, all_entries=True)
    assert len(results) == 1 and len(provider.requests) == 2 and log.dream_cursor == 0


def test_an_analysis_of_nothing_still_moves_the_cursor_at_once(tmp_path):
    paths, config, log = setup("the weather was nice")
    results, _ = dream_once(paths, config, ScriptedProvider(["NOTHING"]))
    assert log.dream_cursor == 1 and results[0].stalls == 0


# --- nanoagent dream from the system's crontab -------------------------------------------------------------

def test_a_dream_that_finds_another_running_exits_0_with_one_line(llm, isolated_home):
    paths, _, _ = setup("sister Ines")
    paths.memory_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(paths.memory_dir / ".dream.lock"):
        ran = invoke("dream", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("=== nanoagent dream ")
    assert "Another Dream is already running" in lines[1]
    assert ran.stderr == "" and llm.requests == []


def test_each_run_not_on_a_terminal_starts_with_a_timestamped_line(llm, isolated_home):
    ran = invoke("dream", env=anthropic_env(llm))
    first, *rest = ran.stdout.splitlines()
    stamp = first.removeprefix("=== nanoagent dream ").removesuffix(" ===")
    from datetime import datetime

    assert datetime.fromisoformat(stamp).tzinfo is not None
    assert "Nothing new" in rest[0]


def test_with_nothing_new_dream_needs_no_api_key_and_makes_no_request(llm, isolated_home):
    ran = invoke("dream", env={"ANTHROPIC_BASE_URL": llm.url})  # no ANTHROPIC_API_KEY, as under cron
    assert ran.returncode == 0, ran.stderr
    assert "Nothing new" in ran.stdout and "API key" not in ran.stdout + ran.stderr
    assert llm.requests == []


def test_with_something_new_and_no_key_dream_says_which_key_is_missing(llm, isolated_home):
    setup("sister Ines")
    ran = invoke("dream", env={"ANTHROPIC_BASE_URL": llm.url})
    assert ran.returncode == 1
    assert "No API key for anthropic" in ran.stderr and "Traceback" not in ran.stderr
    assert llm.requests == []


def test_the_cli_keeps_the_cursor_when_the_editing_phase_makes_no_edit(llm, isolated_home):
    paths, _, log = setup("sister Ines")
    llm.script(Reply(text=ANALYSIS), Reply(text=NO_EDIT))
    ran = invoke("dream", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stderr
    assert "tried again next run" in ran.stdout and log.dream_cursor == 0


# --- scheduled_dream, for the gateway's scheduler and `cron tick` -----------------------------------------

def test_a_scheduled_dream_with_nothing_new_needs_no_key_and_notifies_nobody(tmp_path):
    paths, config, _ = setup()
    assert asyncio.run(scheduled_dream(config, paths)) is None  # the configured provider has no key
    log = dream_log(paths)
    assert log.startswith("=== scheduled dream ") and "Nothing new" in log


def test_a_scheduled_dream_saves_findings_and_logs_the_commits(tmp_path):
    paths, config, log = setup("sister Ines")
    provider = ScriptedProvider([ANALYSIS, append("- Sister: Ines"), "done"])
    assert asyncio.run(scheduled_dream(config, paths, provider=provider)) is None
    assert log.dream_cursor == 1 and "memory/MEMORY.md: add" in dream_log(paths)


def test_a_failing_scheduled_dream_returns_a_notice_and_logs_the_error(tmp_path):
    paths, config, log = setup("sister Ines")
    provider = ScriptedProvider([ScriptedReply(error=ProviderError("401 invalid key"))])
    notice = asyncio.run(scheduled_dream(config, paths, provider=provider))
    assert notice is not None and "Scheduled Dream failed" in notice and "401 invalid key" in notice
    assert "Error: Dream's analysis failed: 401 invalid key" in dream_log(paths)
    assert log.dream_cursor == 0


def test_a_scheduled_dream_that_finds_another_running_does_nothing_and_notifies_nobody(tmp_path):
    paths, config, log = setup("sister Ines")
    provider = ScriptedProvider()
    with file_lock(paths.memory_dir / ".dream.lock"):
        assert asyncio.run(scheduled_dream(config, paths, provider=provider)) is None
    assert provider.requests == [] and "already running" in dream_log(paths)


def test_a_scheduled_dream_notifies_when_it_moves_past_findings_it_could_not_save(tmp_path):
    paths, config, log = setup("sister Ines")
    notices = [asyncio.run(scheduled_dream(config, paths, provider=ScriptedProvider([ANALYSIS, NO_EDIT])))
               for _ in range(MAX_STALLS)]
    assert notices[:-1] == [None] * (MAX_STALLS - 1)
    assert notices[-1] is not None and "entries 1-1 without saving its findings" in notices[-1]
    assert log.dream_cursor == 1 and dream_log(paths).count("=== scheduled dream ") == MAX_STALLS
