"""Old long tool results are sent trimmed to their head and tail, in steps: the session file keeps them whole, the
requests between two steps share their prefix, and the prompt stays under budget longer before anything is
archived."""

from __future__ import annotations

import asyncio
import re

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.messages import PRUNE_KEEP_CHARS, is_tool
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore

FILES = ("alpha.txt", "beta.txt", "gamma.txt", "delta.txt")


def config() -> Config:
    c = Config()
    c.agents.defaults.context_window_tokens = 30_000
    c.agents.defaults.max_tokens = 500
    return c


def big_files() -> None:
    workspace = Paths.from_env().workspace
    workspace.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        words = "\n".join(f"{row}: the roses in the {name} garden need water every morning before the sun is high"
                          for row in range(150))
        (workspace / name).write_text(f"START OF {name}\n{words}\nEND OF {name}\n")


def context_used(loop) -> int:
    status = asyncio.run(loop.handle("/status", "cli:direct")).reply
    return int(re.search(r"context:\s+([\d,]+) of", status).group(1).replace(",", ""))


def last_turn_request(provider):
    return [r for r in provider.requests if "memory flush" not in r.system and "condense" not in r.system][-1]


def tool_texts(request) -> list[str]:
    return [m["content"] for m in request.messages if is_tool(m)]


def test_old_long_tool_results_are_trimmed_in_the_request_but_kept_whole_in_the_session():
    big_files()
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("read_file", {"path": f}) for f in FILES]),
                                 "read them all"], default="ok")
    loop = build_agent(config(), Paths.from_env(), provider=provider)
    asyncio.run(loop.handle("read the four files", "cli:direct"))
    asyncio.run(loop.handle("second question", "cli:direct"))
    asyncio.run(loop.handle("third question", "cli:direct"))
    before = context_used(loop)
    whole = [len(t) for t in tool_texts(last_turn_request(provider))]
    assert min(whole) > 10_000  # sent whole while they are recent

    asyncio.run(loop.handle("fourth question", "cli:direct"))
    trimmed = tool_texts(last_turn_request(provider))
    assert len(trimmed) == 4 and all(len(t) < PRUNE_KEEP_CHARS + 400 for t in trimmed)
    assert all(t.startswith('<untrusted_data source="read_file">') and t.endswith("</untrusted_data>") for t in trimmed)
    assert "START OF alpha.txt" in trimmed[0] and "END OF alpha.txt" in trimmed[0]  # head and tail
    assert context_used(loop) < before * 0.6  # the budget sees the trimmed prompt
    assert not (Paths.from_env().memory_dir / "history.jsonl").exists()  # nothing had to be archived

    session = SessionStore(Paths.from_env().sessions_dir).load("cli:direct")
    kept = [m["content"] for m in session.messages if is_tool(m)]
    assert len(kept) == 4 and all(len(t) > 10_000 for t in kept)  # the session file keeps them whole


def test_requests_within_one_pruning_step_share_their_prefix():
    big_files()
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("read_file", {"path": f}) for f in FILES]),
                                 "read them all"], default="ok")
    loop = build_agent(config(), Paths.from_env(), provider=provider)
    for text in ("read the four files", "second question", "third question", "fourth question"):
        asyncio.run(loop.handle(text, "cli:direct"))
    step = last_turn_request(provider)
    pruned = loop.session("cli:direct").meta.pruned
    assert pruned > 0 and all(len(t) < PRUNE_KEEP_CHARS + 400 for t in tool_texts(step))  # the step was taken
    for text in ("fifth question", "sixth question"):
        asyncio.run(loop.handle(text, "cli:direct"))
    after = provider.requests[-2:]
    assert loop.session("cli:direct").meta.pruned == pruned  # no new step: nothing more worth trimming
    for request in after:
        assert request.system == step.system
        assert request.messages[:len(step.messages)] == step.messages  # the cached prefix holds


def test_a_prompt_well_under_budget_is_never_pruned():
    big_files()
    c = config()
    c.agents.defaults.context_window_tokens = 200_000
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("read_file", {"path": f}) for f in FILES]),
                                 "read them all"], default="ok")
    loop = build_agent(c, Paths.from_env(), provider=provider)
    for text in ("read the four files", "second question", "third question", "fourth question", "fifth"):
        asyncio.run(loop.handle(text, "cli:direct"))
    assert all(len(t) > 10_000 for t in tool_texts(last_turn_request(provider)))
    assert loop.session("cli:direct").meta.pruned == 0
