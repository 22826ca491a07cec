"""`nanoagent browser login URL`: the browser tool's Chromium in a window, to log in once for the agent."""

from __future__ import annotations

import functools
import os
from typing import Annotated

import typer

from nanoagent.cli.common import App, WorkspaceOpt, setup
from nanoagent.errors import NanoagentError

browser_app = App(help="The agent's web browser: log in to sites once, in its own profile.\n\n"
                       "Example: nanoagent browser login https://github.com/login", no_args_is_help=True)


@browser_app.command("login")
def login(
    url: Annotated[str, typer.Argument(metavar="URL", help="The page to log in at (http:// or https://).")],
    workspace: WorkspaceOpt = None,
) -> None:
    """Open the agent's browser in a window to log in to a site once.

    The window uses the browser tool's profile (tools.browser.profile), so the cookies a site sets here are the
    ones the agent's browser sends. It needs a display (a desktop session, or `ssh -X`). Close the window, or
    press Ctrl-C, when you are done.

    Example: nanoagent browser login https://github.com/login
    """
    from nanoagent.cli.running import run_main
    from nanoagent.tools import ToolError
    from nanoagent.tools.browser import missing, settings_from
    from nanoagent.tools.browser.session import interactive_login

    paths, config = setup(workspace)
    settings = settings_from(config, paths)
    why = missing(settings)
    if why:
        raise NanoagentError(why)
    if not os.environ.get("DISPLAY"):
        raise NanoagentError("No display here (DISPLAY is not set), so no browser window can open: run "
                             "`nanoagent browser login` in a desktop session or over `ssh -X`, or log in on another "
                             f"machine and copy its profile folder to {settings.profile}.")
    try:
        run_main(interactive_login(settings, url, functools.partial(print, flush=True)))
    except KeyboardInterrupt:
        pass
    except ToolError as e:  # the profile in use, a browser that would not start: one line, as the model gets it
        raise NanoagentError(str(e)) from None
    print(f"Browser closed; the profile {settings.profile} keeps what the sites set.")
