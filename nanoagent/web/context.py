"""What the web app's handlers reach: the gateway's hub (their one door to the AgentLoop), the home's paths, the
config, the sign-in state and the gateway itself (its components' health). The HTTP side fills it when it builds
the application; the app's modules may add fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanoagent.config.schema import Config
    from nanoagent.gateway.hub import Hub
    from nanoagent.gateway.server import Gateway
    from nanoagent.paths import Paths
    from nanoagent.web.auth import WebAuth


@dataclass
class WebContext:
    hub: Hub
    paths: Paths
    config: Config
    auth: WebAuth
    gateway: Gateway | None = None  # None in tests that run the HTTP side without a Gateway


__all__ = ["WebContext"]
