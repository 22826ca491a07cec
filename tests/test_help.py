"""`--help` that reads in order, with an example for every command."""

import re
from pathlib import Path

import pytest

from tests.conftest import invoke


def test_help_lists_commands_in_groups_a_person_would_guess(isolated_home):
    help_text = invoke("--help").stdout
    sections = [line.rstrip(":") for line in help_text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert sections[-4:] == ["Talk", "Memory", "Always on", "Setup"]
    talk = help_text.index("Talk:")
    assert talk < help_text.index("  agent ") < help_text.index("  sessions ") < help_text.index("Memory:")
    assert help_text.index("Setup:") < help_text.index("  onboard ")


def test_every_command_and_group_shows_a_one_line_example_in_its_help(isolated_home):
    import typer.main

    from nanoagent.cli.app import app

    def leaves(group, path):
        ctx = group.make_context("nanoagent", [], resilient_parsing=True)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if hasattr(command, "list_commands"):
                yield [*path, name]  # a group's own help has an example too
                yield from leaves(command, [*path, name])
            else:
                yield [*path, name]

    commands = list(leaves(typer.main.get_command(app), []))
    assert ["sessions", "export"] in commands and ["agent"] in commands and ["memory", "search"] in commands
    missing = [" ".join(path) for path in commands if "Example: nanoagent " not in invoke(*path, "--help").stdout]
    assert missing == []


@pytest.mark.process
def test_a_one_shot_builds_no_command_group_it_does_not_use(llm, isolated_home):
    import subprocess
    import sys

    from tests.conftest import ROOT, anthropic_env

    ran = subprocess.run([sys.executable, "-X", "importtime", "-m", "nanoagent", "agent", "-m", "hi"], cwd=ROOT,
                         env={**__import__("os").environ, **anthropic_env(llm)}, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    imported = {line.split("|")[-1].strip() for line in ran.stderr.splitlines() if "import time:" in line}
    assert not {"nanoagent.cli.cron_cmd", "nanoagent.cli.mcp_cmd", "nanoagent.cli.sessions_cmd",
                "nanoagent.cli.gateway_cmd"} & imported


def _groups_and_commands():
    import typer.main

    from nanoagent.cli.app import app

    def walk(group, path):
        ctx = group.make_context("nanoagent", [], resilient_parsing=True)
        names = [name for name in group.list_commands(ctx) if not group.get_command(ctx, name).hidden]
        yield path, names
        for name in names:
            command = group.get_command(ctx, name)
            if hasattr(command, "list_commands"):
                yield from walk(command, [*path, name])
            else:
                yield [*path, name], []

    return list(walk(typer.main.get_command(app), []))


def test_every_group_lists_each_command_with_its_whole_summary_on_one_line_at_80_and_200_columns(isolated_home):
    groups = [(path, names) for path, names in _groups_and_commands() if names]
    assert [path for path, _ in groups][:1] == [[]] and ["cron"] in [path for path, _ in groups]
    for columns in ("80", "200"):
        for path, names in groups:
            shown = invoke(*path, "--help", env={"COLUMNS": columns}).stdout
            listing = shown[shown.index("\n", shown.index(f"\n  {names[0]} ")):].split("\n\n")[0]
            rows = [line for line in shown.splitlines() if line.startswith(tuple(f"  {name} " for name in names))]
            assert len(rows) == len(names), (path, shown)
            assert [row for row in rows if row.rstrip().endswith("...")] == [], (columns, path)
            assert all(len(row) <= int(columns) for row in rows)
            continued = [line for line in listing.splitlines()[1:] if line.startswith("    ")]
            assert continued == [], (columns, path, continued)  # a summary wrapped onto a second line


def test_arguments_read_as_upper_case_names_not_braces_in_every_usage_line(isolated_home):
    commands = [path for path, names in _groups_and_commands() if not names]
    usage = {" ".join(path): invoke(*path, "--help", env={"COLUMNS": "80"}).stdout for path in commands}
    assert [name for name, text in usage.items() if "{" in text.split("Options:")[0]] == []
    assert "Usage: nanoagent dream-restore [OPTIONS] SHA\n" in usage["dream-restore"]
    assert "\n  SHA  The commit to undo" in usage["dream-restore"]
    assert "Usage: nanoagent dream-log [OPTIONS] [SHA]\n" in usage["dream-log"]
    assert "Usage: nanoagent agent [OPTIONS] [MESSAGE]\n" in usage["agent"]
    missing = invoke("dream-restore")
    assert missing.returncode == 2 and "Missing argument 'SHA'" in missing.stderr


def _readme_headings(text: str) -> list[tuple[int, str]]:
    import re

    headings, fenced = [], False
    for line in text.splitlines():
        fenced = fenced != line.startswith("```")
        if not fenced and (found := re.match(r"(##+) (.+)", line)):
            headings.append((len(found[1]), found[2]))
    return headings


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces as -."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")


def test_the_readme_opens_with_contents_then_the_quick_start_next_steps_and_a_map_of_the_docs():
    import re

    from tests.conftest import ROOT

    text = (ROOT / "README.md").read_text()
    headings = _readme_headings(text)
    contents = text.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\]\(#([^)]+)\)", contents))
    assert [title for level, title in headings if level == 2 and title != "Contents" and _anchor(title) not in listed] == []
    assert text.index("## Contents") < text.index("## Quick start") < text.index("### Next steps") < text.index(
        "## The docs") < text.index("## Development")
    steps = text.split("### Next steps\n", 1)[1].split("\n## ", 1)[0]
    for page in ("providers.md#models-and-providers", "gateway.md#the-gateway", "schedules.md#schedules",
                 "memory.md#memory", "tools.md#commands-and-the-sandbox"):
        assert f"(docs/{page})" in steps
    assert "(docs/channels/telegram.md)" in steps  # each channel's guide is in docs/channels/
    the_docs = text.split("## The docs\n", 1)[1].split("\n## ", 1)[0]
    mapped = set(re.findall(r"\]\((docs/[\w/-]+\.md)", the_docs))
    assert mapped == {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}  # every page of docs/ is on the map
    assert '```sh\nmake agent && ANTHROPIC_API_KEY=sk-ant-... .venv/bin/nanoagent agent -m "hello"\nmake test\n```' in text


def test_the_quick_starts_commands_are_make_targets_and_the_agent_one_installs_no_test_tools():
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.MULTILINE))
    assert {"agent", "install", "test", "lint"} <= targets
    agent = makefile.split("\nagent:", 1)[1].split("\n\n", 1)[0]
    assert '-e ".[$(EXTRAS)]"' in agent and "EXTRAS ?= web" in makefile and "[test]" not in agent
    for needs_the_test_tools in ("test", "test-fast", "lint"):
        assert re.search(rf"^{needs_the_test_tools}: \$\(DEV\)", makefile, re.MULTILINE)
