"""`make bench`: `nanoagent acp` as an editor meets it (issue 39). Budgets: `initialize` answered within 300 ms of the
process's start (the median of RUNS starts); through a running gateway, a prompt's first agent message chunk reaches
the editor within 100 ms of the model's first token (the median of PROMPTS prompts). Exits 1 on a miss.

The first is a process started as an editor starts it, `initialize` written at once, timed to its answer. The second
is a real gateway process and `nanoagent acp` in front of it, against the local LLM server (`tests/llm_server.py`),
which notes when it sent each reply's first text; the editor is the ACP SDK's client side, noting when the first
chunk arrives (one clock: CLOCK_MONOTONIC is the machine's). Without the `acp` extra it says so and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = 7
PROMPTS = 7
INITIALIZE_BUDGET_MS = 300.0
STREAM_BUDGET_MS = 100.0
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'


def initialize_ms(env: dict[str, str]) -> float:
    start = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "nanoagent", "acp"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(INITIALIZE)
    process.stdin.flush()
    answer = json.loads(process.stdout.readline())
    elapsed = (time.monotonic() - start) * 1000
    assert answer["result"]["protocolVersion"] == 1, answer
    process.stdin.close()
    process.wait(30)
    return elapsed


async def streaming_ms(env: dict[str, str], llm: Any, project: Path) -> list[float]:
    import acp

    from tests.llm_server import Reply

    first: list[float] = []

    class Editor:
        def on_connect(self, conn: Any) -> None:
            pass

        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            if update.session_update == "agent_message_chunk" and len(first) < len(llm.first_text):
                first.append(time.monotonic())

    async with acp.spawn_agent_process(Editor(), sys.executable, "-m", "nanoagent", "acp", env=env,
                                       cwd=ROOT) as (conn, _):
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        for n in range(PROMPTS):
            llm.script(Reply(text=f"streamed reply number {n} " * 20, chunk_delay=0.005))
            await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(f"prompt {n}")])
    return [(arrived - sent) * 1000 for arrived, sent in zip(first, llm.first_text, strict=True)]


def main() -> int:
    try:
        import acp  # noqa: F401
    except ImportError:
        print("skipped: the acp extra is not installed (pip install 'nanoagent[acp]')")
        return 0
    from tests.conftest import anthropic_env, start_gateway_process
    from tests.llm_server import start_server

    base = Path(tempfile.mkdtemp(prefix="nanoagent-bench-acp-"))
    home, project = base / "home", base / "project"
    project.mkdir()
    llm = start_server()
    env = {**os.environ, **anthropic_env(llm), "NANOAGENT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    initialize_ms(env)  # the first start writes the home and compiles what it imports
    starts = sorted(initialize_ms(env) for _ in range(RUNS))
    gateway = start_gateway_process(env)
    try:
        gaps = asyncio.run(streaming_ms(env, llm, project))
    finally:
        gateway.terminate()
        gateway.wait(30)
        llm.close()
    start_ms, gap_ms = statistics.median(starts), statistics.median(gaps)
    print(f"acp: initialize answered {start_ms:.0f} ms after start (median of {RUNS}; budget "
          f"{INITIALIZE_BUDGET_MS:.0f}); through the gateway the first chunk reached the editor {gap_ms:.1f} ms after "
          f"the model's first token (median of {len(gaps)}, worst {max(gaps):.1f}; budget {STREAM_BUDGET_MS:.0f})")
    return 0 if start_ms <= INITIALIZE_BUDGET_MS and gap_ms <= STREAM_BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
