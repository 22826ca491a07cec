"""`nanoagent channels list | add NAME | remove NAME | retry NAME`: the chat apps the gateway answers on, every one through the
registry (`channels/registry.py`), installed packages' channels included: nothing here names one."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nanoagent.cli.common import App, WorkspaceOpt, setup
from nanoagent.cli.render import say
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from nanoagent.channels.base import Channel, Question
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

VERIFY_TIMEOUT = 20.0  # seconds for a channel's one API call checking its credentials

channels_app = App(help="Set up the chat apps the agent answers on through the gateway.\n\n"
                        "Example: nanoagent channels add telegram", no_args_is_help=True)


def channel_named(name: str) -> Channel:
    """The channel `name` (of a folder or an installed package), or one line listing them."""
    from nanoagent.channels import registry

    try:
        return registry.get(name)
    except registry.UnknownChannel:
        known = ", ".join(c.name for c in registered()) or "none (reinstall nanoagent)"
        raise NanoagentError(f"There is no channel named {name!r}; the channels are {known}.") from None


def registered() -> list[Channel]:
    """Every channel: each folder's, then each installed package's (their entry points read now)."""
    from nanoagent.channels import registry

    return [registry.get(name) for name in registry.include_installed()]


def check_channel(channel: Channel, settings: Any) -> tuple[bool, str]:
    """Whether the channel can start with `settings`: its `problem`, then its one API call (`verify`). The text is
    who the bot is, or what is wrong in one line; it never holds a token (an unexpected failure is named by its
    kind only: its message might quote a URL with the token in it)."""
    problem = channel.problem(settings)
    if problem:
        return False, problem
    try:
        return True, asyncio.run(asyncio.wait_for(channel.verify(settings), VERIFY_TIMEOUT))
    except NanoagentError as e:
        return False, str(e)
    except TimeoutError:
        return False, f"{channel.title} did not answer within {VERIFY_TIMEOUT:g} s; check the network or its apiBase"
    except Exception as e:  # noqa: BLE001 - one channel's failure is reported, the others still checked
        return False, f"checking the credentials failed ({type(e).__name__}); `nanoagent --debug doctor` shows more"


def route_checks(channel: Channel, settings: Any, config: Config) -> list[tuple[bool, str, str]]:
    """(ok, what, the fix) for an enabled channel an app reaches by webhook (`Channel.routes`): its routes are served
    only by the gateway's HTTP listener (`gateway.http.enabled`), and the app reaches that through a reverse proxy
    whose public name must be in `gateway.http.allowedHosts` (any other Host is refused, 421)."""
    routes = channel.routes(settings) if settings.enabled else []
    if not routes:
        return []
    http = config.gateway.http
    where = ", ".join(dict.fromkeys(f"/channels/{channel.name}/{route.path.lstrip('/')}" for route in routes))
    return [(http.enabled, f"{channel.name}: its webhook ({where}) "
             + ("is served by the gateway's HTTP listener" if http.enabled else "needs the gateway's HTTP listener, "
                "which is off"), "set gateway.http.enabled to true in config.json, then restart the gateway"),
            (bool(http.allowed_hosts), f"{channel.name}: " + (f"{channel.title} may call {', '.join(http.allowed_hosts)}"
             if http.allowed_hosts else "no public host name in gateway.http.allowedHosts, so "
             f"{channel.title}'s calls through your reverse proxy are refused (421)"),
             f"put the name your HTTPS reverse proxy answers on in gateway.http.allowedHosts (docs/channels/"
             f"{channel.name}.md)")]


def configured(channel: Channel, settings: Any) -> bool:
    """Enabled, or holding every secret `channels add` asks for (its credentials; for a channel that asks none, any
    answer other than its default)."""
    if settings.enabled:
        return True
    questions = channel.questions()
    secrets = [q for q in questions if q.secret]
    if secrets:
        return all(_value(settings, q.path) not in (None, "", []) for q in secrets)
    return any(_value(settings, q.path) not in (None, "", [], q.default) for q in questions)


@channels_app.command("list")
def list_channels(workspace: WorkspaceOpt = None) -> None:
    """Each channel: set up or not, enabled or not, and its connection.

    With a gateway running, an enabled channel shows its connection as the gateway sees it ("connected as @bot",
    or "failing: " and the reason).

    Example: nanoagent channels list
    """
    from nanoagent.channels import state

    paths, config = setup(workspace)
    gateway = _gateway_status(paths)
    channels = registered()
    width = max((len(c.name) for c in channels), default=0)
    for channel in channels:
        say(f"{channel.name:<{width}}  {_state(channel, config, gateway)}", hang=width + 2)
        if waiting := state.backlog(paths, channel.name):
            say(f"{'':<{width}}  {waiting}", hang=width + 2)


@channels_app.command("retry")
def retry(name: Annotated[str, typer.Argument(help="The channel, as `nanoagent channels list` names it.")],
          workspace: WorkspaceOpt = None) -> None:
    """Try the channel's parked messages and replies again.

    A message whose handling failed three times in a row, or a reply whose sending did, is parked in the channel's
    state file so the channel goes on (`channels list` counts them; the gateway's log says why). This puts them back:
    the running gateway handles them within half a minute, or the next one at its start.

    Example: nanoagent channels retry email
    """
    from nanoagent.channels.state import state_file

    channel_named(name)
    paths, _ = setup(workspace)
    messages, replies = state_file(paths, name).update(lambda state: state.retry())
    if not messages and not replies:
        print(f"Nothing of {name} is parked.")
        return
    print(f"Put back {messages} message(s) and {replies} reply(ies) of {name}; the gateway tries them again.")


def _state(channel: Channel, config: Config, gateway: dict[str, Any] | None) -> str:
    name = channel.name
    settings = channel.settings(config)
    if not settings.enabled:
        if configured(channel, settings):
            return f"configured, not enabled (set channels.{name}.enabled to true)"
        return f"not configured (`nanoagent channels add {name}`)"
    if problem := channel.problem(settings):
        return f"enabled, cannot start: {problem}"
    if gateway is None:
        return "enabled; no gateway is running (start `nanoagent gateway`)"
    if name not in (gateway.get("components") or []):
        return "enabled; the running gateway did not start it (restart the gateway: it reads config.json at start)"
    health = (gateway.get("health") or {}).get(name) or "starting"
    return f"enabled, {health}"


def _gateway_status(paths: Paths) -> dict[str, Any] | None:
    """The running gateway's status answer, or None when none runs."""
    from nanoagent.gateway.oneshot import gateway_answers

    if not gateway_answers(paths.gateway_socket):
        return None
    from nanoagent.cli.gateway_cmd import _ask_status

    try:
        return asyncio.run(_ask_status(paths.gateway_socket))
    except (OSError, TimeoutError, ValueError):
        return None


@channels_app.command("add")
def add(name: Annotated[str, typer.Argument(help="The channel, as `nanoagent channels list` names it.")],
        workspace: WorkspaceOpt = None) -> None:
    """Set up a channel: ask its tokens, check them, write config.json.

    The tokens are asked on the terminal (secrets are not shown), checked with one call to the app's API, and
    written under channels.NAME in config.json (mode 0600), keeping everything else in the file.

    Example: nanoagent channels add telegram
    """
    from nanoagent.cli.oneshot import stdin_is_terminal
    from nanoagent.config import save_config
    from nanoagent.config.loader import config_from

    channel = channel_named(name)
    paths, _ = setup(workspace)
    if not stdin_is_terminal():
        raise NanoagentError(f"`nanoagent channels add {name}` asks for its settings on a terminal: run it on one, "
                             f"or write them under channels.{name} in {paths.config_file} (its guide: docs/channels/{name}.md).")
    data = _raw(paths.config_file)
    block = _block(data, name, paths.config_file)
    current = channel.settings(config_from(data, paths.config_file, env={}))
    print(f"Setting up {channel.title} (docs/channels/{name}.md says where each value comes from; Ctrl-C stops, "
          "nothing is written before the end).")
    for question in channel.questions():
        if (value := _ask(question, _value(current, question.path), read_answer)) is not None:
            _put(block, question.path, value)
    _ask_owner(channel, block, channel.settings(config_from(data, paths.config_file, env={})), read_answer)
    block["enabled"] = True
    settings = channel.settings(config_from(data, paths.config_file, env={}))
    ok, text = check_channel(channel, settings)
    if ok:
        print(f"Checked: {channel.title} knows these credentials ({text}).")
    else:
        print(f"The check failed: {text}")
        if read_answer("Save these settings anyway? [y/N] ", False).strip().lower() not in ("y", "yes"):
            raise NanoagentError(f"Nothing was written; run `nanoagent channels add {name}` again once it is fixed.")
    save_config(paths.config_file, data)
    print(f"Wrote channels.{name} to {paths.config_file} (mode 0600).")
    for ok, text, fix in route_checks(channel, settings, config_from(data, paths.config_file, env={})):
        print(f"{'Good' if ok else 'To do'}: {text}" + ("." if ok else f"; {fix}."))
    _next_steps(channel, paths)


def read_answer(prompt: str, secret: bool) -> str:
    """One answer typed at the terminal; a secret is not echoed."""
    from prompt_toolkit import prompt as ask

    return ask(prompt, is_password=secret)


def _ask(question: Question, current: Any, read: Callable[[str, bool], str]) -> Any:
    """The answer to `question` as config.json holds it (of the type of the setting's current value: a list from
    words separated by commas or spaces, a whole number, yes or no); None to leave the file as it is (Enter where a
    value is set)."""
    has = current not in (None, "", [])
    shown = (" [Enter keeps the current one]" if question.secret else f" [{_text(current)}]") if has else \
        (f" [{question.default}]" if question.default else "")
    while True:
        answer = read(f"{question.prompt}{shown}: ", question.secret).strip()
        if not answer and (has or not question.default):
            return None
        try:
            return _typed(answer or question.default, current)
        except ValueError as e:
            print(f"{e}; try again (Ctrl-C to stop).")


def _ask_owner(channel: Channel, block: dict[str, Any], settings: Any, read: Callable[[str, bool], str]) -> None:
    """Ask of each person let in whether they are the owner (`channels/owners.py`): the owner's private chat is theirs
    (all their memory, `tools.profile`); everyone else is a guest. Yes by default when there is one to ask about."""
    from nanoagent.channels.owners import owner_ids

    owners = owner_ids(settings)
    people = [str(user) for user in _value(settings, "allowFrom") or []
              if str(user) not in owners and channel.home(str(user)) is not None]
    for user in people:
        default = len(people) == 1 and not owners
        answer = read(f"Is {user} you? (the owner: every tool, all your memory; others are guests) "
                      f"[{'Y/n' if default else 'y/N'}] ", False).strip().lower()
        if answer in ("y", "yes") or (default and not answer):
            owners.append(user)
    if owners != owner_ids(settings):
        _put(block, "owner", owners)


def _typed(answer: str, current: Any) -> Any:
    if isinstance(current, bool):
        if answer.lower() not in ("y", "yes", "true", "n", "no", "false"):
            raise ValueError("answer yes or no")
        return answer.lower() in ("y", "yes", "true")
    if isinstance(current, int):
        if not answer.isdigit():
            raise ValueError("that is not a whole number")
        return int(answer)
    if isinstance(current, list):
        return answer.replace(",", " ").split()
    return answer


def _text(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _value(settings: Any, path: str) -> Any:
    """The setting at a dotted config.json path ("imap.host", "botToken") of a settings object (or dict)."""
    from nanoagent.config.loader import to_snake

    for part in path.split("."):
        if isinstance(settings, dict):
            settings = settings.get(part, settings.get(to_snake(part)))
        else:
            settings = getattr(settings, to_snake(part), None)
    return settings


def _put(block: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path in config.json's block, where the file already spells a key in snake_case too."""
    from nanoagent.config.loader import to_snake

    *parents, leaf = path.split(".")
    for part in parents:
        key = next((k for k in block if to_snake(k) == to_snake(part)), part)
        if not isinstance(block.get(key), dict):
            block[key] = {}
        block = block[key]
    for key in [k for k in block if to_snake(k) == to_snake(leaf)]:
        del block[key]
    block[leaf] = value


def _next_steps(channel: Channel, paths: Paths) -> None:
    from nanoagent.gateway.oneshot import gateway_answers

    start = ("restart the gateway (`nanoagent gateway stop`, then `nanoagent gateway`): it reads config.json at start"
             if gateway_answers(paths.gateway_socket) else "start the gateway: `nanoagent gateway`")
    print(f"Next: {start}.")
    name = channel.name
    if channel.pairing:
        print(f"Then message the bot in {channel.title}: it answers with a pairing code, and "
              f"`nanoagent pairing approve CODE` lets you in (or put your user id in channels.{name}.allowFrom).")
    else:
        print(f"Only senders in channels.{name}.allowFrom get an answer ({channel.title} has no pairing).")


@channels_app.command("remove")
def remove(name: Annotated[str, typer.Argument(help="The channel, as `nanoagent channels list` names it.")],
           yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask first.")] = False,
           workspace: WorkspaceOpt = None) -> None:
    """Remove a channel's settings (channels.NAME) from config.json.

    People approved by pairing stay approved in the channel's state file (`nanoagent pairing revoke` withdraws them).

    Example: nanoagent channels remove telegram
    """
    from nanoagent.config import save_config

    channel_named(name)
    paths, _ = setup(workspace)
    data = _raw(paths.config_file)
    channels = data.get("channels")
    if not isinstance(channels, dict) or name not in channels:
        raise NanoagentError(f"{paths.config_file} has no channels.{name}; `nanoagent channels list` shows what is "
                             "set up.")
    if not yes:
        if not sys.stdin.isatty():
            raise NanoagentError(f"Not removing channels.{name} without asking; add --yes to remove it from a script.")
        if input(f"Remove channels.{name} (its tokens included) from {paths.config_file}? [y/N] "
                 ).strip().lower() not in ("y", "yes"):
            print("Kept it.")
            return
    del channels[name]
    save_config(paths.config_file, data)
    print(f"Removed channels.{name} from {paths.config_file}; a running gateway stops using it when restarted.")


def _raw(path: Path) -> dict[str, Any]:
    """config.json as written, every other key kept ({} when there is none); `setup` has checked it already."""
    import json

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return json.loads(text) if text.strip() else {}


def _block(data: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    channels = data.setdefault("channels", {})
    block = channels.setdefault(name, {}) if isinstance(channels, dict) else None
    if not isinstance(block, dict):
        raise NanoagentError(f"{path}: `channels.{name}` must be an object; fix or delete it.")
    return block
