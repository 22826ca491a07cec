"""`make bench`: nanoagent's one-shot side by side with the peer's, nanobot-ai 0.3.5 (issue 18).

Budget: `nanoagent agent -m` in-process (no gateway running) takes at most 0.5x the wall time of
`nanobot agent -m`, both against the same local model server (tests/llm_server.py, Anthropic Messages API,
an anthropic/ model), for the first turn of a new session and for a second turn in the same session. Runs
alternate between the two (median of 7 each) so the load of a shared machine falls on both alike: compare
the ratio, not the seconds.

The peer lives in a venv of its own, never in this repository, found through NANOBOT_VENV:

    python3 -m venv /tmp/nanobot-venv && /tmp/nanobot-venv/bin/pip install nanobot-ai==0.3.5
    NANOBOT_VENV=/tmp/nanobot-venv make bench

Without it the comparison is skipped (exit 0) with that hint. `python bench/peer.py` runs this alone.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.llm_server import start_server  # noqa: E402

RUNS = 7
BUDGET = 0.5  # nanoagent's median wall time over the peer's
MODEL = "anthropic/claude-bench"


def peer_command() -> Path | str:
    """The peer's `nanobot` command, or why there is none."""
    venv = os.environ.get("NANOBOT_VENV", "")
    command = Path(venv) / "bin" / "nanobot"
    if not venv:
        return "NANOBOT_VENV is not set"
    return command if command.exists() else f"{command} does not exist"


def timed(args: list[str], env: dict, cwd: Path, server) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one whole process, which must exit 0 having asked the model."""
    asked = len(server.requests)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=300)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or len(server.requests) == asked:
        raise SystemExit(f"{args[0]} {' '.join(args[1:])} failed (exit {proc.returncode}, "
                         f"{len(server.requests) - asked} model calls): {(err or out).decode()[-800:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    peer = peer_command()
    if isinstance(peer, str):
        print(f"skip one-shot against nanobot-ai 0.3.5 ({peer}): set NANOBOT_VENV to a venv holding it "
              "(python3 -m venv DIR && DIR/bin/pip install nanobot-ai==0.3.5)")
        return 0
    # Time what an installed program costs: both were installed with their bytecode written.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    ours_cmd = Path(sys.executable).with_name("nanoagent")
    ours = [str(ours_cmd)] if ours_cmd.exists() else [sys.executable, "-m", "nanoagent"]
    server = start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            (home / "peer" / ".nanobot").mkdir(parents=True)
            (home / "peer" / ".nanobot" / "config.json").write_text(json.dumps({
                "agents": {"defaults": {"model": MODEL, "provider": "anthropic", "workspace": str(home / "peer" / "ws")}},
                "providers": {"anthropic": {"apiKey": "k", "apiBase": server.url}},
            }))
            base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "NANOAGENT_"))}
            our_env = {**base, "NANOAGENT_HOME": str(home / "ours"), "ANTHROPIC_API_KEY": "k",
                       "ANTHROPIC_BASE_URL": server.url, "NANOAGENT_MODEL": MODEL}
            peer_env = {**base, "HOME": str(home / "peer")}

            def run_ours(session: str) -> tuple[float, float]:
                return timed([*ours, "agent", "-m", "hello", "-s", session], our_env, home, server)

            def run_peer(session: str) -> tuple[float, float]:
                return timed([str(peer), "agent", "-m", "hello", "-s", session], peer_env, home / "peer", server)

            run_ours("warm-up")  # each makes its workspace and writes its bytecode once, outside the clock
            run_peer("warm-up")
            samples: dict[tuple[str, int], list[tuple[float, float]]] = {}
            for i in range(RUNS):
                order = [("ours", run_ours), ("peer", run_peer)]
                for name, run in order if i % 2 == 0 else order[::-1]:
                    for turn in (1, 2):  # a new session, then a second turn in it
                        samples.setdefault((name, turn), []).append(run(f"bench-{i}"))
    finally:
        server.close()
    failed = False
    for turn in (1, 2):
        ours_wall = statistics.median(s[0] for s in samples[("ours", turn)])
        peer_wall = statistics.median(s[0] for s in samples[("peer", turn)])
        ours_cpu = statistics.median(s[1] for s in samples[("ours", turn)])
        peer_cpu = statistics.median(s[1] for s in samples[("peer", turn)])
        ratio = ours_wall / peer_wall
        ok = ratio <= BUDGET
        failed = failed or not ok
        label = f"agent -m turn {turn} against nanobot 0.3.5 (median of {RUNS})"
        print(f"{'ok  ' if ok else 'MISS'} {label:<52} {ratio:>6.2f}x: {ours_wall:.2f} s vs {peer_wall:.2f} s"
              f" (CPU {ours_cpu:.2f} vs {peer_cpu:.2f} s)   budget <= {BUDGET}x", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
