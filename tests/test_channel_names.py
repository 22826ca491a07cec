"""Nothing outside `channels/` names a specific channel (each channel's settings are in its folder; `config/` reads
them through the registry): cron, the heartbeat, the `message` tool, pairing, doctor and the gateway command ask the
registry. The names come from the registry, so a fifth channel is covered the day its folder is added.

A name counts as used when it is a word of an identifier (a variable, an attribute, a function, class or argument
name, a keyword, an imported name: `telegram_state`, `TelegramConfig`, `config.channels.slack`), a part of an
imported module's path (`nanoagent.channels.discord`, the `discord` library), or a string that is exactly the name
(`"email"`). Help texts and error messages may show a key such as `telegram:123`. The standard library's `email`
package is no channel: its imports and the names they bind are left alone, as are strings such as git's
`user.email`."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from nanoagent.channels import registry

PACKAGE = Path(__file__).resolve().parent.parent / "nanoagent"
OWNERS = ("channels",)  # the subpackage where channels are named: each in its folder, settings included
# (module under nanoagent/, identifier) -> why that word is not a channel there
ALLOWED = {
    ("mcp/servers.py", "CHECK_SLACK"): "slack as in spare time: the seconds a start check gets past its deadline",
    ("cli/running.py", "add_signal_handler"): "signal as in SIGTERM: asyncio's loop method",
    ("gateway/server.py", "add_signal_handler"): "signal as in SIGTERM: asyncio's loop method",
    ("gateway/server.py", "remove_signal_handler"): "signal as in SIGTERM: asyncio's loop method",
    ("web/pairing.py", "matrix_iter"): "matrix as in a QR code's grid of modules: segno's method",
}
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def words(identifier: str) -> set[str]:
    """`TelegramConfig` -> {"telegram", "config"}; `CHECK_SLACK` -> {"check", "slack"}."""
    return {word.lower() for word in _WORD.findall(identifier)}


def _stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def violations(source: str, names: list[str], module: str = "") -> list[str]:
    """Each use of a channel's name in `source`, as "line: what"."""
    tree = ast.parse(source)
    channels = set(names)
    stdlib_bound: set[str] = set()  # names bound by importing a standard library module (`email`)
    found: list[tuple[int, str]] = []

    def identifier(node: ast.AST, name: str | None, what: str) -> None:
        if name and words(name) & channels and name not in stdlib_bound and (module, name) not in ALLOWED:
            found.append((getattr(node, "lineno", 0), f"{what} {name}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _stdlib(alias.name):
                    stdlib_bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _stdlib(node.module):
            stdlib_bound.update(alias.asname or alias.name for alias in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            identifier(node, node.id, "name")
        elif isinstance(node, ast.Attribute):
            identifier(node, node.attr, "attribute")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            identifier(node, node.name, "definition")
        elif isinstance(node, ast.arg):
            identifier(node, node.arg, "argument")
        elif isinstance(node, ast.keyword):
            identifier(node, node.arg, "keyword")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            paths = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for path in paths:
                if not _stdlib(path) and any(words(part) & channels for part in path.split(".")):
                    found.append((node.lineno, f"import {path}"))
            for alias in node.names:
                if isinstance(node, ast.ImportFrom) and not _stdlib(node.module or ""):
                    identifier(node, alias.name, "imported name")
                if not _stdlib(alias.name if isinstance(node, ast.Import) else node.module or ""):
                    identifier(node, alias.asname, "imported as")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip().lower() in channels:
            found.append((node.lineno, f"string {node.value!r}"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def outside_the_channels() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if path.relative_to(PACKAGE).parts[0] not in OWNERS]


def test_no_module_outside_channels_names_a_channel():
    names = registry.names()
    found = {}
    for path in outside_the_channels():
        module = path.relative_to(PACKAGE).as_posix()
        if uses := violations(path.read_text(encoding="utf-8"), names, module):
            found[module] = uses
    assert found == {}, "ask the registry (nanoagent.channels.registry) instead of naming a channel"


def test_the_check_sees_every_kind_of_use_in_a_module(tmp_path):
    module = tmp_path / "offender.py"
    module.write_text(
        "from nanoagent.channels.discord import CHANNEL\n"
        "from nanoagent.config.schema import TelegramConfig\n"
        "import slack_sdk\n"
        "def deliver_email(config, telegram_chat):\n"
        "    send(config.channels.slack, via='discord', discord=1)\n"
        "class SlackOutbox:\n"
        "    pass\n", encoding="utf-8")
    found = violations(module.read_text(encoding="utf-8"), registry.names())
    assert found == ["1: import nanoagent.channels.discord", "2: imported name TelegramConfig",
                     "3: import slack_sdk", "4: argument telegram_chat", "4: definition deliver_email",
                     "5: attribute slack", "5: keyword discord", "5: string 'discord'", "6: definition SlackOutbox"]


def test_the_standard_librarys_email_package_and_gits_user_email_are_no_channel(tmp_path):
    module = tmp_path / "innocent.py"
    module.write_text(
        "import email.utils\n"
        "from email.message import EmailMessage\n"
        "from email import policy\n"
        "when = email.utils.parsedate_to_datetime(header)\n"
        "git('config', 'user.email', 'agent@localhost')\n"
        "env = {'GIT_COMMITTER_EMAIL': 'agent@localhost'}\n"
        "HELP = 'Session key, e.g. cli:direct or telegram:123'\n"
        "message = EmailMessage(policy=policy.default)\n", encoding="utf-8")
    assert violations(module.read_text(encoding="utf-8"), registry.names()) == []


def test_a_fifth_channel_is_covered_the_day_its_folder_is_added(monkeypatch):
    from tests import channel_folders

    source = "def carrier(pigeon_id):\n    return 'pigeon'\n"
    assert violations(source, registry.names()) == []
    channel_folders.add(monkeypatch, "pigeon")
    assert violations(source, registry.names()) == ["1: argument pigeon_id", "2: string 'pigeon'"]
