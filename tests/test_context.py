import asyncio
from datetime import UTC, datetime

import pytest

from nanoagent.agent.context import ContextBuilder
from nanoagent.messages import history_for_model, strip_runtime_context
from nanoagent.skills import SkillsLoader
from nanoagent.templates import seed_workspace
from nanoagent.tools import ToolRegistry


def test_system_prompt_includes_workspace_files_each_capped_with_a_note(tmp_path):
    seed_workspace(tmp_path)
    (tmp_path / "USER.md").write_text("The user is called Ada.")
    (tmp_path / "memory" / "MEMORY.md").write_text("x" * 50_000)
    prompt = ContextBuilder(tmp_path, True, ToolRegistry()).system_prompt()
    assert "The user is called Ada." in prompt and "## SOUL.md" in prompt and "## TOOLS.md" in prompt
    assert "more characters cut" in prompt and len(prompt) < 40_000


def test_system_prompt_has_no_clock_so_it_stays_identical(tmp_path, monkeypatch):
    import nanoagent.agent.context as context

    clock = [datetime(2031, 3, 4, 12, 6, tzinfo=UTC)]

    class Clock(datetime):  # the time source the context module reads, moved forward by the test
        @classmethod
        def now(cls, tz=None):
            return clock[0] if tz is None else clock[0].astimezone(tz)

    monkeypatch.setattr(context, "datetime", Clock)
    seed_workspace(tmp_path)
    builder = ContextBuilder(tmp_path, True, ToolRegistry())
    first, first_runtime = builder.system_prompt(), builder.user_message("hi", "cli", "direct")["content"]
    clock[0] = datetime(2047, 9, 10, 12, 12, tzinfo=UTC)
    second, second_runtime = builder.system_prompt(), builder.user_message("hi", "cli", "direct")["content"]
    assert "2031-03-04" in first_runtime and "2047-09-10" in second_runtime  # the clock moved between the two
    assert first == second
    assert all(year not in first for year in ("2031", "2047", str(datetime.now().year)))


def test_runtime_context_goes_at_the_start_of_the_user_message(tmp_path):
    builder = ContextBuilder(tmp_path, True, ToolRegistry())
    now = datetime(2026, 11, 22, 14, 5, tzinfo=UTC)
    message = builder.user_message("hello", "cli", "direct", now=now)
    assert message["content"].startswith("<runtime_context>\ntime: 2026-11-22 14:05 Sunday (UTC)\n"
                                         "channel: cli\nchat_id: direct\n</runtime_context>")
    assert strip_runtime_context(message["content"]) == "hello"


def test_in_a_channels_session_the_runtime_block_says_how_replies_render_there(tmp_path, monkeypatch):
    from nanoagent.channels import registry
    from tests import pigeon_channel

    pigeon_channel.register(monkeypatch)
    builder = ContextBuilder(tmp_path, True, ToolRegistry())
    now = datetime(2026, 11, 22, 14, 5, tzinfo=UTC)
    message = builder.user_message("hello", "pigeon", "42", now=now, notices=["job done"])
    assert message["content"].startswith(
        "<runtime_context>\ntime: 2026-11-22 14:05 Sunday (UTC)\nchannel: pigeon\n"
        f"format: {registry.get('pigeon').hint}\nchat_id: 42\n"
        "notice (since the last turn; not from the user): job done\n</runtime_context>")
    assert strip_runtime_context(message["content"]) == "hello"


def test_a_turn_in_a_channels_session_shows_the_model_the_channels_format_hint(tmp_path, monkeypatch):
    from nanoagent.agent.build import build_agent
    from nanoagent.channels import registry
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths
    from nanoagent.providers.scripted import ScriptedProvider
    from tests import pigeon_channel

    pigeon_channel.register(monkeypatch)
    provider = ScriptedProvider(["Hi!", "Hi again!"])
    loop = build_agent(Config(), Paths.from_env(), provider=provider)
    asyncio.run(loop.handle("hello", "pigeon:42"))
    asyncio.run(loop.handle("hello", "cli:direct"))
    in_channel, in_terminal = (str(request.messages[-1]["content"]) for request in provider.requests)
    assert f"channel: pigeon\nformat: {registry.get('pigeon').hint}\nchat_id: 42\n" in in_channel
    assert "format:" not in in_terminal


def test_history_starts_at_a_user_message_and_drops_orphaned_tool_results():
    messages = [
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "x", "arguments": "{}"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "new"},
    ]
    assert history_for_model(messages, 2) == [messages[4]]
    assert history_for_model(messages, 0) == messages


def write_skill(root, name, frontmatter, body="Do the thing."):
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_text(f"---\n{frontmatter}\n---\n{body}\n")


def test_workspace_skill_overrides_builtin_and_missing_requirements_are_explained(tmp_path):
    builtin, ws = tmp_path / "builtin", tmp_path / "ws"
    write_skill(builtin, "notes", "name: notes\ndescription: builtin notes")
    write_skill(ws, "notes", "name: notes\ndescription: my notes")
    write_skill(builtin, "gh", "name: gh\ndescription: GitHub\nmetadata:\n  requires:\n    bins: [no-such-binary-xyz]")
    skills = {s.name: s for s in SkillsLoader(ws, builtin).skills()}
    assert skills["notes"].description == "my notes" and skills["notes"].source == "workspace"
    assert skills["gh"].missing == ("needs `no-such-binary-xyz` on PATH",)
    summary = SkillsLoader(ws, builtin).summary()
    assert "unavailable: needs `no-such-binary-xyz` on PATH" in summary


def test_malformed_skills_are_skipped_with_a_warning_naming_the_file(tmp_path):
    builtin, ws = tmp_path / "builtin", tmp_path / "ws"
    write_skill(ws, "nofront", "")
    (ws / "nofront" / "SKILL.md").write_text("just text")
    write_skill(ws, "badyaml", "name: [unclosed")
    write_skill(ws, "noname", "description: nameless")
    write_skill(ws, "good", "name: good\ndescription: fine", body="ok")
    warnings = []
    skills = SkillsLoader(ws, builtin, warn=warnings.append).skills()
    assert [s.name for s in skills] == ["good"]
    assert len(warnings) == 3 and all("SKILL.md" in w for w in warnings)
    assert any("no YAML frontmatter" in w for w in warnings) and any("no `name`" in w for w in warnings)


def test_always_skills_are_included_whole_and_others_only_by_name_description_and_path(tmp_path):
    builtin, ws = tmp_path / "builtin", tmp_path / "ws"
    write_skill(builtin, "house-rules", "name: house-rules\ndescription: rules to follow\nalways: true",
                body="ALWAYS-BODY: answer in British English.")
    write_skill(ws / "skills", "deploy", "name: deploy\ndescription: how to deploy", body="LAZY-BODY: run make.")
    prompt = ContextBuilder(ws, True, ToolRegistry(), SkillsLoader(ws / "skills", builtin)).system_prompt()
    assert "ALWAYS-BODY: answer in British English." in prompt
    assert "LAZY-BODY" not in prompt
    assert f"- **deploy**: how to deploy `{ws / 'skills' / 'deploy' / 'SKILL.md'}`" in prompt
    assert f"- **house-rules**: rules to follow `{builtin / 'house-rules' / 'SKILL.md'}`" in prompt


def test_skills_are_listed_in_name_order_whatever_their_folders_or_source(tmp_path):
    builtin, ws = tmp_path / "builtin", tmp_path / "ws"
    write_skill(ws, "alpha", "name: alpha\ndescription: first")  # a workspace skill's name is its folder's
    write_skill(builtin, "a-folder", "name: zulu\ndescription: last")
    write_skill(builtin, "m", "name: mike\ndescription: middle")
    skills = SkillsLoader(ws, builtin).skills()
    assert [s.name for s in skills] == ["alpha", "mike", "zulu"]
    summary = SkillsLoader(ws, builtin).summary()
    assert summary == SkillsLoader(ws, builtin).summary() == SkillsLoader(ws, builtin).summary()
    assert summary.index("**mike**") < summary.index("**zulu**")  # untrusted workspace skills follow, marked


def test_a_workspace_skill_replaces_the_built_in_skill_of_the_same_name(tmp_path):
    from nanoagent.resources import skills_dir

    write_skill(tmp_path / "skills", "github", "name: github\ndescription: our own GitHub workflow")
    summary = SkillsLoader(tmp_path / "skills").summary()
    assert f"- **github**: our own GitHub workflow `{tmp_path / 'skills' / 'github' / 'SKILL.md'}`" in summary
    assert str(skills_dir() / "github") not in summary
    assert summary.count("**github**") == 1


@pytest.mark.parametrize("content, problem", [
    (b"---\nname: nodesc\n---\nbody\n", "no `description`"),
    (b"---\nname: open\ndescription: never closed\nbody\n", "not closed"),
    (b"---\n- just\n- a list\n---\nbody\n", "must be a mapping"),
    (b"---\nname: latin\ndescription: caf\xe9\n---\nbody\n", "save it as UTF-8"),
], ids=["missing-description", "unclosed-frontmatter", "non-mapping-frontmatter", "non-utf8-bytes"])
def test_a_malformed_skill_is_skipped_with_a_warning_naming_its_file(tmp_path, content, problem):
    builtin, ws = tmp_path / "builtin", tmp_path / "ws"
    (ws / "broken").mkdir(parents=True)
    (ws / "broken" / "SKILL.md").write_bytes(content)
    write_skill(ws, "good", "name: good\ndescription: fine")
    warnings: list[str] = []
    assert [s.name for s in SkillsLoader(ws, builtin, warn=warnings.append).skills()] == ["good"]
    assert len(warnings) == 1 and str(ws / "broken" / "SKILL.md") in warnings[0]
    assert problem in warnings[0]


def test_openclaw_skills_drop_in_with_their_vendor_metadata_and_any_bins(tmp_path):
    builtin, ws = tmp_path / "builtin", tmp_path / "ws"
    write_skill(ws, "claw", 'name: claw\ndescription: d\nmetadata: {"clawdis": {"requires": {"bins": ["no-such-bin-x"]}}}')
    write_skill(ws, "anyof", 'name: anyof\ndescription: d\nmetadata: {"openclaw": {"requires": {"anyBins": ["no-such-a", "sh"]}}}')
    write_skill(ws, "noneof", 'name: noneof\ndescription: d\nmetadata: {"openclaw": {"requires": {"anyBins": ["no-such-a", "no-such-b"]}}}')
    write_skill(ws, "quoted", 'name: quoted\ndescription: d\nalways: "false"')
    skills = {s.name: s for s in SkillsLoader(ws, builtin).skills()}
    assert skills["claw"].missing == ("needs `no-such-bin-x` on PATH",)
    assert skills["anyof"].available
    assert skills["noneof"].missing == ("needs one of `no-such-a`, `no-such-b` on PATH",)
    assert skills["quoted"].always is False


def test_parsed_skills_are_cached_until_the_file_changes(tmp_path):
    import os

    builtin, ws = tmp_path / "builtin", tmp_path / "ws"
    write_skill(ws, "notes", "name: notes\ndescription: first version")
    loader = SkillsLoader(ws, builtin)
    assert [s.description for s in loader.skills()] == ["first version"]
    path = ws / "notes" / "SKILL.md"
    stat = path.stat()
    path.write_text("---\nname: notes\ndescription: second version\n---\nDo the thing.\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime: the cached parse is used
    assert [s.description for s in loader.skills()] == ["first version"]
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: parsed again
    assert [s.description for s in loader.skills()] == ["second version"]
