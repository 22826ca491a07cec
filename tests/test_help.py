"""`--help` that reads in order, with an example for every command."""

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
