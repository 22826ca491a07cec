"""`nanoagent pairing list | approve CODE | revoke USER_ID`: who may talk to the agent through Telegram.

A person the bot does not know gets a pairing code in Telegram; approving the code lets them in at once, the
gateway running or not (it reads the approvals from channels/telegram.json at each message).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from nanoagent.cli.common import App, setup

if TYPE_CHECKING:
    from nanoagent.channels.state import StateFile

pairing_app = App(help="Let people talk to the agent on Telegram, by pairing code.\n\nExample: nanoagent pairing list",
                          no_args_is_help=True)


def _state_file() -> StateFile:
    from nanoagent.channels.state import state_file

    paths, _ = setup(None)
    return state_file(paths, "telegram")


@pairing_app.command("approve")
def approve(code: Annotated[str, typer.Argument(help="The code the bot sent them, e.g. ABCD-EFGH.")]) -> None:
    """Let the person who got this pairing code talk to the agent.

    Example: nanoagent pairing approve ABCD-EFGH
    """
    now = time.time()
    found = _state_file().update(lambda state: state.approve(code, now))
    print(f"Approved {found.name or 'user'} (Telegram user id {found.user}): their next message reaches the agent.")


@pairing_app.command("list")
def list_codes() -> None:
    """Pending pairing codes and the people approved so far.

    People in config's channels.telegram.allowFrom are not listed here.

    Example: nanoagent pairing list
    """
    from nanoagent.channels.state import show_code

    state = _state_file().read()
    now = time.time()
    pending = [p for p in state.pairing if not p.expired(now)]
    print("pending codes:" if pending else "No pending pairing codes.")
    for p in pending:
        print(f"  {show_code(p.code)}  {p.name or '-'} (user id {p.user}), {int((now - p.created) // 60)} min ago")
    print("approved:" if state.allowed else "Nobody approved by pairing yet.")
    for user_id, name in sorted(state.allowed.items()):
        print(f"  {user_id}  {name or '-'}")


@pairing_app.command("revoke")
def revoke(user_id: Annotated[int, typer.Argument(help="Their Telegram user id (see `nanoagent pairing list`).")],
           ) -> None:
    """Withdraw an approval made by pairing.

    Ids in config's allowFrom are changed in config.json.

    Example: nanoagent pairing revoke 123456789
    """
    if _state_file().update(lambda state: state.revoke(str(user_id))):
        print(f"Revoked user {user_id}: their messages no longer reach the agent.")
    else:
        print(f"User {user_id} was not approved by pairing; see `nanoagent pairing list` (and allowFrom in "
              "config.json).")
        raise typer.Exit(1)
