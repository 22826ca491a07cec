"""`make bench` (tools by policy): what each profile's tool list costs in prompt tokens.

The agent is built as every command builds it (its built-in tools, no MCP servers); each profile's tool list is the
one a session with that profile is offered (`ContextBuilder.tools_for`), counted as the context counts the fixed part
of every request (`ContextBuilder.tool_tokens`: the tools' names, descriptions and schemas as JSON, by the offline
tokenizer). Budget: the `minimal` profile (group chats' default) under 1,000 tokens.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nanoagent.agent.build import build_agent  # noqa: E402
from nanoagent.config.schema import TOOL_PROFILES, Config  # noqa: E402
from nanoagent.paths import Paths  # noqa: E402
from nanoagent.providers.scripted import ScriptedProvider  # noqa: E402
from nanoagent.tokens import tokenizer_available  # noqa: E402

BUDGET = 1_000


def main() -> int:
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        counter = "offline tokenizer" if tokenizer_available() else "estimate: no tokenizer"
        for profile in TOOL_PROFILES:
            config = Config()
            config.tools.profile = profile
            loop = build_agent(config, Paths(home=home, workspace=home / "workspace"), provider=ScriptedProvider())
            tools = loop.context.tools_for("cli:direct")
            tokens = loop.context.tool_tokens(tools)
            budgeted = profile == "minimal"
            ok &= tokens < BUDGET or not budgeted
            mark = ("ok  " if tokens < BUDGET else "MISS") if budgeted else "    "
            name = f"tool list of the {profile} profile ({len(tools.names())} tools)"
            print(f"{mark} {name:<52} {f'{tokens:,} tokens':>18}   budget {'< 1,000' if budgeted else '-'}",
                  flush=True)
        print(f"     (counted by the {counter})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
