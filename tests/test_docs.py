"""The docs say what the program does: every link lands, every `nanoagent` command shown names a real command and real
options, every config.json example loads without a warning, and the commands that can run offline do run."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, invoke

PAGES = [ROOT / "README.md", ROOT / "AGENTS.md", *sorted((ROOT / "docs").rglob("*.md"))]
# JSON blocks that are not config.json (say why); every other ```json block is a config example
NOT_CONFIG: dict[str, str] = {}
# commands shown that can run offline and change nothing: each found in the docs runs, in a fresh home
RUNS_OFFLINE = {("--help",), ("status",), ("doctor", "--offline"), ("sessions", "list"), ("cron", "list"),
                ("skills", "list"), ("channels", "list"), ("pairing", "list"), ("budget",), ("usage",)}
# where `nanoagent` starts a command in a code line: the line's start, after a path, a pipe, `&&`, `$ ` or `;`
COMMAND = re.compile(r"(?:^|[|;&]\s*|\$\s|/)nanoagent(\s.*|$)")


def _blocks(page: Path) -> Iterator[tuple[str, str, int]]:
    """Each fenced code block of a page: its language, its text and the line it starts on."""
    text = page.read_text(encoding="utf-8")
    for found in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        yield found[1], found[2], text[:found.start()].count("\n") + 2


def _where(page: Path, line: int) -> str:
    return f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name}:{line}"


def _commands_shown(pages: list[Path] = PAGES, forms: bool = False) -> list[tuple[str, list[str]]]:
    """Every `nanoagent ...` command in the pages' code blocks: (where, its words after `nanoagent`), comments,
    redirections and what a pipe leads to left out, `[optional]` brackets taken off. With `forms`, each command
    shown with optional parts is given as its forms instead: without them, and with each one alone."""
    shown = []
    for page in pages:
        for _, block, start in _blocks(page):
            for offset, line in enumerate(block.splitlines()):
                for found in COMMAND.finditer(line):
                    text = found[1]
                    code = text.split("  #", 1)[0]
                    optional = re.findall(r"\[([^\]]*)\]", code)
                    if forms and optional:
                        required = re.sub(r"\[[^\]]*\]", " ", code)
                        shown += [(_where(page, start + offset), _words(f"{required} {part}")) for part in ["", *optional]]
                    else:
                        shown.append((_where(page, start + offset), _words(text)))
    return shown


def _words(text: str) -> list[str]:
    """A command's words as the shell reads them, up to a comment, a pipe, `&&`, `;` or a redirection."""
    lexer = shlex.shlex(text.replace("[", " ").replace("]", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if word.strip("|&;<>()") == "":
            break
        words.append(word)
    return words


def _tree():
    import typer.main

    from nanoagent.cli.app import app

    return typer.main.get_command(app)


def _problems(words: list[str], root) -> list[str]:
    """What in one command is not the CLI's: a command a group does not have, an option its command does not take."""
    command, path, problems = root, ["nanoagent"], []
    words = list(words)
    while words and hasattr(command, "list_commands"):
        word = words.pop(0)
        if word.startswith("-"):  # the group's own option, before its command: `nanoagent --debug agent`
            option = next((param for param in command.params if word in param.opts), None)
            if option is None and word != "--help":
                problems.append(f"`{' '.join(path)}` has no option `{word}`")
            elif option is not None and not (getattr(option, "is_flag", False) or getattr(option, "count", False)):
                words = words[1:]  # its value
            continue
        ctx = command.make_context(" ".join(path), [], resilient_parsing=True)
        sub = command.get_command(ctx, word)
        if sub is None:
            return [f"`{' '.join(path)}` has no command `{word}`"]
        command, path = sub, [*path, word]
    if hasattr(command, "list_commands"):
        return problems
    options = {"--help"} | {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
    options_part = words[:words.index("--")] if "--" in words else words  # after `--`: another program's words
    named = [word.split("=", 1)[0] for word in options_part if re.match(r"-{1,2}[A-Za-z]", word)]
    return problems + [f"`{' '.join(path)}` has no option `{name}`" for name in named if name not in options]


def test_every_relative_link_in_the_readme_agents_md_and_docs_lands_on_a_file_and_a_heading_there():
    from tests.test_help import _anchor, _readme_headings

    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            landing = (page.parent / path).resolve() if path else page
            if not landing.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and landing.suffix == ".md":
                title = [_anchor(heading) for _, heading in _readme_headings("\n" + landing.read_text(encoding="utf-8"))]
                first = landing.read_text(encoding="utf-8").split("\n", 1)[0]
                if anchor not in title and anchor != _anchor(first.lstrip("# ")):
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_docs_show_nanoagent_commands_in_code_blocks_and_each_names_real_commands_and_options():
    shown = _commands_shown()
    assert len(shown) > 60 and any(words[:2] == ["cron", "add"] for _, words in shown)
    root = _tree()
    wrong = [f"{where}: {problem}" for where, words in shown for problem in _problems(words, root)]
    assert wrong == []


def test_a_made_up_command_or_option_in_a_docs_code_block_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```sh\nnanoagent agent -m hi --colour red    # no such option\nnanoagent sessions lsit\n"
                    "0 * * * * $HOME/bin/nanoagent cron tick --every 5 >> log\n```\n")
    root = _tree()
    found = [problem for _, words in _commands_shown([page]) for problem in _problems(words, root)]
    assert found == ["`nanoagent agent` has no option `--colour`", "`nanoagent sessions` has no command `lsit`",
                     "`nanoagent cron tick` has no option `--every`"]


def _config_examples() -> list:
    return [pytest.param(block, id=_where(page, start)) for page in PAGES for language, block, start in _blocks(page)
            if language == "json" and _where(page, start) not in NOT_CONFIG]


@pytest.mark.parametrize("block", _config_examples())
def test_each_config_json_example_in_the_docs_loads_without_an_error_or_a_warning(block, tmp_path):
    from nanoagent.config.loader import load_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps(json.loads(block)))
    path.chmod(0o600)
    _, warnings = load_config(path, env={})
    assert warnings == []


def test_an_unknown_key_in_a_config_example_would_be_caught(tmp_path):
    from nanoagent.config.loader import load_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"tools": {"web": {"serch": {}}}}))
    path.chmod(0o600)
    assert load_config(path, env={})[1] == [f"{path}: unknown key `tools.web.serch` ignored."]


def test_the_commands_the_docs_show_that_run_offline_without_side_effects_run_in_a_fresh_home(isolated_home):
    runnable = sorted({tuple(words) for _, words in _commands_shown(forms=True) if tuple(words) in RUNS_OFFLINE})
    assert {("--help",), ("status",), ("doctor", "--offline")} <= set(runnable)
    failed = []
    for words in runnable:
        ran = invoke(*words, env={"ANTHROPIC_API_KEY": "sk-ant-docs"})  # the Quick start's key, never sent
        # doctor answers a fresh home with what to fix (the workspace `onboard` makes) and exit code 1
        answered = ran.returncode == 0 or words[0] == "doctor" and ran.returncode == 1 and "to fix." in ran.stdout
        if not answered or "Traceback" in ran.stderr:
            failed.append((words, ran.returncode, ran.stdout[-300:], ran.stderr[-300:]))
    assert failed == []
