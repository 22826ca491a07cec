"""`--help` that reads in order, with an example for every command."""

from tests.conftest import invoke


def test_help_lists_commands_in_groups_a_person_would_guess(isolated_home):
    help_text = invoke("--help").stdout
    sections = [line.rstrip(":") for line in help_text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert sections[-4:] == ["Talk", "Memory", "Always on", "Setup"]
    talk = help_text.index("Talk:")
    assert talk < help_text.index("  agent ") < help_text.index("  sessions ") < help_text.index("Memory:")
    assert help_text.index("Setup:") < help_text.index("  onboard ")


def test_every_command_shows_a_one_line_example_in_its_help(isolated_home):
    import typer.main

    from nanoagent.cli.app import app

    def leaves(group, path):
        for name, command in group.commands.items():
            if getattr(command, "commands", None) and not getattr(command, "invoke_without_command", False):
                yield from leaves(command, [*path, name])
            else:
                yield [*path, name]
            if getattr(command, "commands", None) and getattr(command, "invoke_without_command", False):
                yield from leaves(command, [*path, name])

    commands = list(leaves(typer.main.get_command(app), []))
    assert ["sessions", "export"] in commands and ["agent"] in commands
    missing = [" ".join(path) for path in commands if "Example: nanoagent " not in invoke(*path, "--help").stdout]
    assert missing == []
