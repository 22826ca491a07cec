"""What a call may cost at most, as the spend check counts it: the output the provider really asks for (a thinking
budget raises it), the images and thinking blocks of the prompt, and the tools a group chat's cron job is given."""

from __future__ import annotations

import json

import pytest

from tests.conftest import anthropic_env, invoke, write_config
from tests.llm_server import Reply

MODEL = "claude-test"
OUT_ONLY = {"anthropic": {"prices": {MODEL: {"input": 0.0, "output": 100.0}}}}  # $100/M out, the prompt free
IN_ONLY = {"anthropic": {"prices": {MODEL: {"input": 1.0, "output": 0.0}}}}  # $1/M in: a token is a micro-dollar


def ledger_lines(home) -> list[dict]:
    path = home / "spend" / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_thinking_call_near_the_cap_is_refused_on_the_output_it_really_asks_for(llm, isolated_home):
    """maxTokens 1,000 with a thinking budget of 8,000: the provider asks for 9,024 tokens out ($0.90 at $100/M),
    so a $0.50 daily cap refuses the call before it is made; reserving maxTokens alone ($0.10) would let it through
    and the bill could reach $0.90."""
    write_config(isolated_home, {"agents": {"defaults": {"maxTokens": 1000, "thinkingBudget": 8000}},
                                 "budget": {"daily": 0.5}, "providers": OUT_ONLY})
    llm.default_reply = Reply(text="thought hard", output_tokens=9000)
    ran = invoke("agent", "-m", "think it over", env=anthropic_env(llm))
    assert ran.returncode == 1
    assert llm.requests == []
    assert "The daily budget ($0.5000) would be crossed" in ran.stdout + ran.stderr


def test_a_thinking_call_reserves_the_max_tokens_the_provider_sent(llm, isolated_home):
    write_config(isolated_home, {"agents": {"defaults": {"maxTokens": 1000, "thinkingBudget": 8000}},
                                 "budget": {"daily": 5.0}, "providers": OUT_ONLY})
    llm.default_reply = Reply(text="thought hard", output_tokens=10)
    ran = invoke("agent", "-m", "think it over", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    sent = llm.requests[0].body["max_tokens"]
    assert sent == 9024
    reserve = next(line for line in ledger_lines(isolated_home) if line["op"] == "reserve")
    assert reserve["usd"] == pytest.approx(sent * 100e-6)


def test_resolved_images_and_thinking_blocks_count_at_least_their_real_size_in_the_bound():
    from nanoagent import messages as msg
    from nanoagent.tokens import IMAGE_TOKENS, message_bound

    data = {"type": "image_data", "media_type": "image/png", "data": "iVBORw0KGgo="}
    attached = {"role": "user", "content": [{"type": "text", "text": "look"}, data, data]}
    screenshot = msg.tool_result("call_1", "browser", "the page")
    screenshot["images"] = [data]
    thought = "weighing the options at length " * 1300  # 40 KB of thinking
    thinking = msg.assistant("done", thinking=[{"type": "thinking", "thinking": thought, "signature": "s" * 400},
                                               {"type": "redacted_thinking", "data": "r" * 2000}])
    assert message_bound(attached) >= 2 * IMAGE_TOKENS
    assert message_bound(screenshot) >= IMAGE_TOKENS
    assert message_bound(thinking) >= len(thought) + 400 + 2000
    reference = msg.user("look", [msg.image_block("media/a.png", "0" * 64, "image/png")])
    assert message_bound(reference) >= IMAGE_TOKENS  # not yet resolved: counted the same


def test_a_call_carrying_screenshots_is_refused_when_its_images_would_cross_the_cap(llm, isolated_home, tmp_path):
    """Four screenshots (6,400 tokens at the image constant) on a message whose text alone fits the cap: the call
    is refused before it is made, where counting the resolved images as nothing let it through."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    shot = tmp_path / "screenshot.png"
    shot.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\x00" + b"\xff\x00\x00" * 2 + b"\x00" + b"\xff\x00\x00" * 2))
                     + chunk(b"IEND", b""))
    probe = tmp_path / "probe"  # the same message without the images, in a home of its own: its bound in dollars
    write_config(probe, {"providers": IN_ONLY})
    llm.default_reply = Reply(text="probe", input_tokens=1)
    assert invoke("agent", "-m", "what page is this?",
                  env={**anthropic_env(llm), "NANOAGENT_HOME": str(probe)}).returncode == 0
    text_only = next(line["usd"] for line in ledger_lines(probe) if line["op"] == "reserve")
    cap = round(text_only + 3200e-6, 6)  # room for the text and two images' worth more, not four
    write_config(isolated_home, {"budget": {"daily": cap}, "providers": IN_ONLY})
    llm.requests.clear()
    ran = invoke("agent", "-m", "what page is this?", *[arg for _ in range(4) for arg in ("-a", str(shot))],
                 env=anthropic_env(llm))
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert llm.requests == []
    assert "would be crossed" in ran.stdout + ran.stderr


# --- a group chat's cron job in a process with no channel ---------------------------------------------------------


def test_a_cron_job_made_in_a_group_runs_by_hand_in_a_fresh_process_with_the_group_profiles_tools_only(
        llm, isolated_home):
    """The gateway kept the group in the channel's state; `nanoagent cron run` connects no channel, yet the job a
    group made is offered `tools.groupProfile`'s tools, not the owner's full set."""
    from nanoagent.paths import Paths
    from nanoagent.tools.policy import MINIMAL

    write_config(isolated_home, {"tools": {"profile": "full", "groupProfile": "minimal"}})
    job_id = invoke("cron", "add", "--every", "1d", "-m", "Post the weather.").stdout.strip()
    paths = Paths.from_env()
    jobs = json.loads(paths.cron_jobs_file.read_text())
    for job in jobs["jobs"]:
        job["createdBy"] = "telegram:-100123"  # made in the group chat
    paths.cron_jobs_file.write_text(json.dumps(jobs))
    paths.channels_dir.mkdir(parents=True, exist_ok=True)
    (paths.channels_dir / "telegram.json").write_text(json.dumps({"version": 2, "groups": ["telegram:-100123"]}))
    llm.script(Reply(text="Sunny."))
    ran = invoke("cron", "run", job_id, env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    offered = {tool["name"] for tool in llm.requests[0].body.get("tools", [])}
    assert offered == set(MINIMAL)
    assert "exec" not in offered and "cron" not in offered


def test_a_cron_job_of_the_owners_chat_never_recorded_as_a_group_gets_tools_profile(llm, isolated_home):
    write_config(isolated_home, {"tools": {"profile": "full", "groupProfile": "minimal"},
                                 "channels": {"telegram": {"owner": [42]}}})
    job_id = invoke("cron", "add", "--every", "1d", "-m", "Post the weather.").stdout.strip()
    from nanoagent.paths import Paths

    paths = Paths.from_env()
    jobs = json.loads(paths.cron_jobs_file.read_text())
    jobs["jobs"][0]["createdBy"] = "telegram:42"
    paths.cron_jobs_file.write_text(json.dumps(jobs))
    paths.channels_dir.mkdir(parents=True, exist_ok=True)
    (paths.channels_dir / "telegram.json").write_text(json.dumps({"version": 2, "groups": ["telegram:-100123"]}))
    llm.script(Reply(text="Sunny."))
    ran = invoke("cron", "run", job_id, env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "exec" in {tool["name"] for tool in llm.requests[0].body.get("tools", [])}


def test_a_chat_once_recorded_as_a_group_keeps_its_cron_jobs_to_the_group_profile(isolated_home):
    """The safe rule: a job's chat counts as a group when it was ever recorded as one, whatever was said since."""
    from nanoagent.agent.build import build_agent
    from nanoagent.config.loader import load_config
    from nanoagent.paths import Paths
    from nanoagent.providers.scripted import ScriptedProvider
    from nanoagent.tools.policy import MINIMAL

    paths = Paths.from_env()
    paths.channels_dir.mkdir(parents=True, exist_ok=True)
    (paths.channels_dir / "telegram.json").write_text(json.dumps({"version": 2, "groups": ["telegram:-100123:7"]}))
    config = load_config(write_config(isolated_home, {"channels": {"telegram": {"owner": [42]}}}), env={})[0]
    loop = build_agent(config, paths, provider=ScriptedProvider([]))
    assert set(loop.tools_for("cron:ab12:telegram:-100123").names()) == set(MINIMAL)  # a thread of it was a group
    loop.note_chat("telegram:-100123", group=False)
    assert set(loop.tools_for("cron:ab12:telegram:-100123").names()) == set(MINIMAL)
    assert "exec" in loop.tools_for("cron:ab12:telegram:42").names()  # the owner's chat, never a group: tools.profile


# --- a one-shot's bound from what earlier processes learned (spend/bounds.jsonl) ----------------------------------

def reserves(home) -> list[float]:
    return [line["usd"] for line in ledger_lines(home) if line["op"] == "reserve"]


def one_shot(llm, text: str, *extra: str):
    from tests.conftest import run_cli

    llm.default_reply = Reply(text="noted", output_tokens=5)  # the server reports ~1 token per 4 bytes sent
    return run_cli("agent", "-m", text, *extra, env=anthropic_env(llm))


def first_run_then_cap(llm, home) -> float:
    """One uncapped one-shot (its prompt counted by bytes), then a daily cap leaving room for 90% of that bound: the
    byte bound of any later one-shot (its fixed part alone is most of it) would be refused. Returns the bound."""
    write_config(home, {"providers": IN_ONLY})
    ran = one_shot(llm, "remember the colour blue")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    by_bytes = reserves(home)[0]
    spent = [line["usd"] for line in ledger_lines(home) if line["op"] == "settle"][0]
    assert by_bytes > 3 * spent  # the fixed part counted a token per byte
    write_config(home, {"providers": IN_ONLY, "budget": {"daily": round(spent + 0.9 * by_bytes, 6)}})
    return by_bytes


@pytest.mark.process
def test_one_shots_in_a_row_in_one_session_are_bounded_by_the_tokens_the_last_process_was_told(llm, isolated_home):
    by_bytes = first_run_then_cap(llm, isolated_home)
    for text in ("and the colour red", "which colours did I say?"):
        ran = one_shot(llm, text)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "would be crossed" not in ran.stdout + ran.stderr
    later = reserves(isolated_home)[1:]
    assert len(later) == 2 and all(usd < by_bytes / 2 for usd in later)
    assert len(llm.requests) == 3


@pytest.mark.process
def test_the_first_one_shot_of_a_new_session_with_a_known_system_prompt_and_tools_is_allowed(llm, isolated_home):
    by_bytes = first_run_then_cap(llm, isolated_home)
    ran = one_shot(llm, "a fresh conversation", "-s", "cli:other")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert 0 < reserves(isolated_home)[-1] < by_bytes / 2


@pytest.mark.process
def test_a_changed_system_prompt_is_counted_by_bytes_again(llm, isolated_home):
    first_run_then_cap(llm, isolated_home)
    from nanoagent.paths import Paths

    soul = Paths.from_env().workspace / "SOUL.md"
    soul.parent.mkdir(parents=True, exist_ok=True)
    soul.write_text((soul.read_text() if soul.exists() else "") + "\nAlways answer in French.\n")
    ran = one_shot(llm, "and the colour red")
    assert ran.returncode == 1
    assert "would be crossed" in ran.stdout + ran.stderr
    assert len(llm.requests) == 1


@pytest.mark.process
def test_a_corrupt_bounds_file_is_ignored_and_the_next_one_shot_learns_again(llm, isolated_home):
    by_bytes = first_run_then_cap(llm, isolated_home)
    bounds = isolated_home / "spend" / "bounds.jsonl"
    assert bounds.exists()
    cap = (isolated_home / "config.json").read_text()
    bounds.write_text('{"not": "a bound"}\n[1, 2\nnot json at all\n["cli:direct", [')  # and a torn last line
    write_config(isolated_home, {"providers": IN_ONLY})
    ran = one_shot(llm, "and the colour red")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stderr.strip() == "" and "Traceback" not in ran.stdout
    assert reserves(isolated_home)[-1] >= by_bytes  # nothing known: bytes
    spent = sum(line["usd"] for line in ledger_lines(isolated_home) if line["op"] == "settle")
    (isolated_home / "config.json").write_text(cap.replace(str(json.loads(cap)["budget"]["daily"]),
                                                           str(round(spent + 0.9 * by_bytes, 6))))
    ran = one_shot(llm, "which colours did I say?")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert reserves(isolated_home)[-1] < by_bytes / 2


def test_the_bounds_journal_is_rewritten_short_once_long_and_a_new_process_reads_the_latest(tmp_path):
    from nanoagent.spend.bounds import COMPACT, KEPT, BoundsMemo

    writer = BoundsMemo(tmp_path)
    for n in range(COMPACT + 10):
        writer.record(f"session {n}", [2, "first", "last", 40, 3000 + n], "fixed part", 5000 - n)
    assert len((tmp_path / "bounds.jsonl").read_text().splitlines()) <= COMPACT
    reader = BoundsMemo(tmp_path)  # a new process
    assert reader.session(f"session {COMPACT + 9}") == [2, "first", "last", 40, 3000 + COMPACT + 9]
    assert reader.session("session 0") is None  # past the 256 kept
    assert reader.fixed_tokens("fixed part") == 5000 - COMPACT - 9  # the fewest reported
    assert len(reader.sessions) <= KEPT


@pytest.mark.process
def test_an_incognito_one_shot_keeps_no_hash_of_what_was_said(llm, isolated_home):
    from tests.conftest import run_cli

    write_config(isolated_home, {"providers": IN_ONLY})
    llm.default_reply = Reply(text="noted", output_tokens=5)
    ran = run_cli("agent", "--incognito", "-m", "my secret is 1234", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = [json.loads(line) for line in (isolated_home / "spend" / "bounds.jsonl").read_text().splitlines()]
    assert lines and all(session is None and entry is None for session, entry, _, _ in lines)  # the fixed part's only
