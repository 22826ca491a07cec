"""`nanoagent pairing list | approve CODE | deny CODE | revoke USER`: who may talk to the agent on each channel.

A person a channel's bot does not know gets a pairing code in a private chat; approving the code lets them in at
once, on that channel only, the gateway running or not (it reads the approvals from channels/<name>.json at each
message). Every channel that pairs (`Channel.pairing`) is served alike, through the registry.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from nanoagent.cli.channels_cmd import channel_named, registered
from nanoagent.cli.common import App, setup
from nanoagent.cli.render import say
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from nanoagent.channels.base import Channel
    from nanoagent.channels.state import Pairing, StateFile
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths

pairing_app = App(help="Let people talk to the agent on a chat channel, by pairing code.\n\n"
                       "Example: nanoagent pairing list", no_args_is_help=True)

ChannelOpt = Annotated[str | None, typer.Option("--channel", "-c", help="The channel, where the code or user id is "
                                                                           "found in more than one.")]


def _state_file(paths: Paths, channel: Channel) -> StateFile:
    from nanoagent.channels.state import state_file

    return state_file(paths, channel.name)


def _pairing(name: str) -> Channel:
    channel = channel_named(name)
    if not channel.pairing:
        raise NanoagentError(_no_pairing(channel))
    return channel


def _no_pairing(channel: Channel) -> str:
    return (f"{channel.title} has no pairing: only senders in channels.{channel.name}.allowFrom get an answer; add "
            "theirs there.")


def _holding(paths: Paths, code: str, name: str | None) -> Channel:
    """The channel where `code` was handed out (pending or expired): the one named, else the only one holding it."""
    from nanoagent.channels.state import normalize_code

    if name is not None:
        return _pairing(name)
    wanted = normalize_code(code)
    found = [c for c in registered() if c.pairing
             and any(p.code == wanted for p in _state_file(paths, c).read().pairing)]
    if len(found) > 1:
        raise NanoagentError(f"The pairing code {code} is pending on {' and '.join(c.name for c in found)}; say "
                             f"which with --channel, e.g. `--channel {found[0].name}`.")
    if not found:
        raise NanoagentError(f"The pairing code {code} is not pending; ask them to message the bot again for a new "
                             "one, and see `nanoagent pairing list`.")
    return found[0]


@pairing_app.command("approve")
def approve(code: Annotated[str, typer.Argument(help="The code the bot sent them, e.g. ABCD-EFGH.")],
            channel: ChannelOpt = None) -> None:
    """Let the person who got this pairing code talk to the agent.

    They are approved on the channel that sent them the code, and on no other.

    Example: nanoagent pairing approve ABCD-EFGH
    """
    paths, _ = setup(None)
    holder = _holding(paths, code, channel)
    now = time.time()
    found = _state_file(paths, holder).update(lambda state: state.approve(code, now))
    print(f"Approved {_who(holder, found)} on {holder.title}: their next message there reaches the agent.")


@pairing_app.command("deny")
def deny(code: Annotated[str, typer.Argument(help="The pending code, e.g. ABCD-EFGH.")],
         channel: ChannelOpt = None) -> None:
    """Drop a pending pairing code: its holder stays out.

    Example: nanoagent pairing deny ABCD-EFGH
    """
    from nanoagent.channels.state import show_code

    paths, _ = setup(None)
    holder = _holding(paths, code, channel)
    now = time.time()
    found = _state_file(paths, holder).update(lambda state: state.deny(code, now))
    print(f"Denied {show_code(found.code)}: {_who(holder, found)} stays out of {holder.title}.")


def _who(channel: Channel, pairing: Pairing) -> str:
    return f"{pairing.name or 'user'} ({channel.title} user id {pairing.user})"


@pairing_app.command("list")
def list_codes() -> None:
    """Pending pairing codes and the people approved so far, per channel.

    People in a channel's allowFrom (config.json) are not listed here.

    Example: nanoagent pairing list
    """
    from nanoagent.channels.state import show_code

    paths, config = setup(None)
    now = time.time()
    pending: list[str] = []
    approved: list[str] = []
    for channel in (c for c in registered() if c.pairing):
        state = _state_file(paths, channel).read()
        for p in state.pairing:
            if not p.expired(now):
                pending.append(f"  {show_code(p.code)}  {channel.name}  {p.name or '-'} (user id {p.user}), "
                               f"{int((now - p.created) // 60)} min ago")
        approved.extend(f"  {channel.name}  {user}  {name or '-'}" for user, name in sorted(state.allowed.items()))
    say("pending codes:" if pending else "No pending pairing codes.", *pending)
    say("approved:" if approved else "Nobody approved by pairing yet.", *approved)
    for channel in _unpaired(config):
        say(_no_pairing(channel))


def _unpaired(config: Config) -> list[Channel]:
    """Enabled channels that do not pair: a person looking for their approvals is told why there are none."""
    return [c for c in registered() if not c.pairing and c.settings(config).enabled]


@pairing_app.command("revoke")
def revoke(user: Annotated[str, typer.Argument(help="Their user id on the channel (see `nanoagent pairing list`).")],
           channel: ChannelOpt = None) -> None:
    """Withdraw an approval made by pairing.

    Ids in a channel's allowFrom are changed in config.json.

    Example: nanoagent pairing revoke 123456789
    """
    paths, _ = setup(None)
    candidates = [_pairing(channel)] if channel is not None else [c for c in registered() if c.pairing]
    holders = [c for c in candidates if user in _state_file(paths, c).read().allowed]
    if len(holders) > 1:
        raise NanoagentError(f"User {user} is approved on {' and '.join(c.name for c in holders)}; say which with "
                             f"--channel, e.g. `--channel {holders[0].name}`.")
    if not holders or not _state_file(paths, holders[0]).update(lambda state: state.revoke(user)):
        where = f" on {channel}" if channel else ""
        raise NanoagentError(f"User {user} was not approved by pairing{where}; see `nanoagent pairing list` (and "
                             "allowFrom in config.json).")
    print(f"Revoked user {user} on {holders[0].title}: their messages there no longer reach the agent.")
