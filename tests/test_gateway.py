"""The gateway: one per home, its socket protocol, turns that outlive their clients, shutdown, and terminals
that attach to it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanoagent.agent import events as ev
from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.errors import NanoagentError
from nanoagent.gateway import protocol
from nanoagent.gateway.client import GatewayClient
from nanoagent.gateway.hub import Hub
from nanoagent.gateway.oneshot import gateway_answers
from nanoagent.gateway.server import Gateway, GatewayBusy
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider
from tests.conftest import PATIENCE, ROOT, anthropic_env, invoke, run_cli, start_gateway_process


class SlowProvider(ScriptedProvider):
    """Replies `answer: <the message>` after `delay` seconds (the turn is busy meanwhile)."""

    def __init__(self, delay: float = 0.0):
        super().__init__(respond=lambda request: "answer: " + _last_text(request))
        self.delay = delay
        self.started = threading.Event()

    async def stream(self, request):
        self.started.set()
        await asyncio.sleep(self.delay)
        async for event in super().stream(request):
            yield event


def _last_text(request) -> str:
    return request.messages[-1]["content"].rsplit("\n", 1)[-1]


class Running:
    """A gateway served in a background thread, as `nanoagent gateway` serves it in its main thread."""

    def __init__(self, provider: ScriptedProvider, grace: float = 10.0, max_turns: int = 4,
                 config: Config | None = None):
        self.paths = Paths.from_env()
        self.loop = build_agent(config or Config(), self.paths, provider=provider)
        self.gateway = Gateway(Hub(self.loop, max_turns), self.paths, grace=grace)
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10), self.error
        self.aio: asyncio.AbstractEventLoop

    def _run(self) -> None:
        async def main() -> None:
            self.aio = asyncio.get_running_loop()
            await self.gateway.serve(self.ready.set, handle_signals=False)

        try:
            asyncio.run(main())
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.error = e
            self.ready.set()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.aio.call_soon_threadsafe(self.gateway.stop)
            self.thread.join(20)


@pytest.fixture
def gateway(isolated_home) -> Iterator[Running]:
    running = Running(SlowProvider())
    yield running
    running.stop()


def raw_lines(path: Path, *lines: bytes, want: int = 1, timeout: float = 5) -> list[dict]:
    """Send raw lines to the socket; the first `want` messages that come back."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(timeout)
        conn.connect(str(path))
        for line in lines:
            conn.sendall(line)
        data = b""
        while data.count(b"\n") < want:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    return [json.loads(line) for line in data.splitlines()[:want]]


async def talk(path: Path, session: str, *texts: str) -> tuple[list[ev.TurnResult | None], list[ev.Event]]:
    seen: list[ev.Event] = []
    client = await GatewayClient.connect(path, session, seen.append)
    try:
        return [await client.send(text) for text in texts], seen
    finally:
        await client.close()


def session_messages(key: str) -> list[dict]:
    from nanoagent.session.store import SessionStore

    return SessionStore(Paths.from_env().sessions_dir).load(key).messages


# --- one gateway per home ----------------------------------------------------------------------


def test_a_second_gateway_on_the_same_home_says_which_pid_holds_it(gateway):
    second = Gateway(gateway.gateway.hub, gateway.paths)
    with pytest.raises(GatewayBusy, match=f"pid {os.getpid()}"):
        asyncio.run(second.serve(handle_signals=False))
    assert gateway_answers(gateway.paths.gateway_socket)  # the first one is untouched


def test_a_stale_socket_left_by_a_killed_gateway_does_not_count_and_is_replaced(isolated_home):
    paths = Paths.from_env()
    paths.run_dir.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(paths.gateway_socket))  # a socket file nobody listens on, as a kill -9 leaves it
    stale.close()
    assert not gateway_answers(paths.gateway_socket)
    running = Running(SlowProvider())
    try:
        assert gateway_answers(paths.gateway_socket)
        (results, _) = asyncio.run(talk(paths.gateway_socket, "cli:direct", "hello"))
        assert results[0] is not None and results[0].reply == "answer: hello"
    finally:
        running.stop()
    assert not paths.gateway_socket.exists() and not (paths.run_dir / "gateway.pid").exists()


def test_the_socket_folder_is_private_and_an_open_one_is_tightened(isolated_home):
    paths = Paths.from_env()
    paths.run_dir.mkdir(parents=True)
    os.chmod(paths.run_dir, 0o777)
    running = Running(SlowProvider())
    try:
        assert paths.run_dir.stat().st_mode & 0o777 == 0o700
        assert paths.gateway_socket.stat().st_mode & 0o777 == 0o600
    finally:
        running.stop()


# --- the protocol ------------------------------------------------------------------------------


def test_garbage_gets_an_error_line_and_the_connection_stays(gateway):
    replies = raw_lines(gateway.paths.gateway_socket, b"this is not json\n", b"[1, 2]\n",
                        protocol.encode({"type": "status"}), want=3)
    assert [r["type"] for r in replies] == ["error", "error", "status"]
    assert "not JSON" in replies[0]["message"]


def test_a_line_of_100_mb_is_refused_and_the_gateway_goes_on(gateway):
    path = gateway.paths.gateway_socket
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(path))
        chunk = b"x" * (1 << 20)
        try:
            for _ in range(100):
                conn.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway closed it, as it should
        answer = conn.recv(65536)
    assert not answer or b"longer than" in answer
    results, _ = asyncio.run(talk(path, "cli:direct", "still there?"))
    assert results[0] is not None and results[0].reply == "answer: still there?"


def test_events_of_a_turn_come_typed_and_the_result_carries_the_run(gateway):
    results, seen = asyncio.run(talk(gateway.paths.gateway_socket, "cli:direct", "hi"))
    turn = results[0]
    assert turn is not None and turn.result is not None and turn.result.stop is ev.StopReason.COMPLETED
    kinds = [type(e).__name__ for e in seen]
    assert kinds[:2] == ["TurnStarted", "MessageAdded"] and "TextDelta" in kinds and kinds[-1] == "TurnEnded"
    assert all(e.session == "cli:direct" for e in seen)
    assert "".join(e.text for e in seen if isinstance(e, ev.TextDelta)) == "answer: hi"


def test_a_client_that_disconnects_mid_turn_leaves_the_turn_to_finish_and_be_saved(isolated_home):
    provider = SlowProvider(delay=0.5)
    running = Running(provider)
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(running.paths.gateway_socket))
            conn.sendall(protocol.encode({"type": "hello", "session": "cli:gone"}))
            conn.sendall(protocol.encode({"type": "send", "id": "r1", "text": "finish without me"}))
            assert provider.started.wait(5)
        deadline = time.monotonic() + PATIENCE
        while len(session_messages("cli:gone")) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert session_messages("cli:gone")[-1]["content"] == "answer: finish without me"
    finally:
        running.stop()


def test_a_message_for_a_busy_session_joins_the_running_turn(isolated_home):
    provider = SlowProvider(delay=0.4)
    running = Running(provider)
    path = running.paths.gateway_socket

    async def scenario():
        first = asyncio.create_task(talk(path, "cli:direct", "first"))
        while not provider.started.is_set():
            await asyncio.sleep(0.01)
        joined, _ = await talk(path, "cli:direct", "second")
        done, seen = await first
        return joined[0], done[0], seen

    try:
        joined, done, seen = asyncio.run(scenario())
    finally:
        running.stop()
    assert joined is None  # it went into the running turn
    assert any(isinstance(e, ev.Injected) and e.text == "second" for e in seen)
    contents = [m["content"] for m in session_messages("cli:direct")]
    assert contents[-1] == "answer: second" and done is not None


class MeetingProvider(ScriptedProvider):
    """Each call waits, up to a generous deadline, until `count` calls are inside the provider at once."""

    def __init__(self, count: int):
        super().__init__(respond=lambda request: "answer: " + _last_text(request))
        self.count = count
        self.inside = 0
        self.met = threading.Event()

    async def stream(self, request):
        self.inside += 1
        if self.inside >= self.count:
            self.met.set()
        deadline = time.monotonic() + 20
        while not self.met.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        async for event in super().stream(request):
            yield event


def test_slow_turns_in_two_sessions_run_at_once(isolated_home):
    provider = MeetingProvider(count=2)
    running = Running(provider)
    path = running.paths.gateway_socket

    async def both():
        return await asyncio.gather(talk(path, "chat:a", "a"), talk(path, "chat:b", "b"))

    try:
        asyncio.run(both())
    finally:
        running.stop()
    # both turns were inside the model at the same moment: one did not wait for the other to end
    assert provider.met.is_set()


def test_stop_cancels_the_running_turn_and_leaves_it_recorded(isolated_home):
    provider = SlowProvider(delay=30)
    running = Running(provider)
    path = running.paths.gateway_socket

    async def scenario():
        turn = asyncio.create_task(talk(path, "cli:direct", "long job"))
        while not provider.started.is_set():
            await asyncio.sleep(0.01)
        stopped, _ = await talk(path, "cli:direct", "/stop")
        await asyncio.gather(turn, return_exceptions=True)
        return stopped[0]

    try:
        stopped = asyncio.run(scenario())
    finally:
        running.stop()
    assert stopped is not None and stopped.reply == "Stopped the running turn."
    assert "cancelled" in session_messages("cli:direct")[-1]["content"]


# --- shutdown ------------------------------------------------------------------------------------


def test_shutdown_lets_a_short_turn_finish_and_cancels_a_long_one_after_the_grace(isolated_home):
    provider = SlowProvider(delay=0.3)
    running = Running(provider, grace=1.0)
    path = running.paths.gateway_socket

    async def start(session: str, text: str):
        client = await GatewayClient.connect(path, session, lambda e: None)
        client.write({"type": "send", "id": "r1", "session": session, "text": text})
        await client.writer.drain()
        return client

    async def scenario():
        quick = await start("chat:quick", "quick")
        while not provider.started.is_set():
            await asyncio.sleep(0.01)
        provider.delay = 30
        provider.started.clear()
        slow = await start("chat:slow", "slow")
        while not provider.started.is_set():
            await asyncio.sleep(0.01)
        await asyncio.to_thread(running.stop)
        for client in (quick, slow):
            await client.close()

    asyncio.run(scenario())
    assert session_messages("chat:quick")[-1]["content"] == "answer: quick"
    assert "cancelled" in session_messages("chat:slow")[-1]["content"]
    assert not running.thread.is_alive()


# --- terminals attach ---------------------------------------------------------------------------


@pytest.mark.process
def test_agent_m_goes_through_a_running_gateway_and_local_bypasses_it(llm, isolated_home):
    from tests.llm_server import Reply

    env = {**os.environ, **anthropic_env(llm)}
    proc = start_gateway_process(env)
    try:
        llm.script(Reply(text="via the gateway"))
        through = subprocess.run([sys.executable, "-X", "importtime", "-m", "nanoagent", "agent", "-m", "hi"],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=PATIENCE,
                                 stdin=subprocess.DEVNULL)
        assert through.returncode == 0 and through.stdout.strip() == "via the gateway", through.stderr
        imported = {line.split("|")[-1].strip() for line in through.stderr.splitlines() if "import time:" in line}
        assert not {"anthropic", "litellm", "pydantic", "tiktoken", "httpx"} & imported
        assert not {"typer", "asyncio", "rich"} & imported  # a plain one-shot is answered before typer loads
        llm.script(Reply(text="in this process"))
        local = subprocess.run([sys.executable, "-m", "nanoagent", "agent", "-m", "hi", "--local", "--json"],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=PATIENCE)
        assert json.loads(local.stdout)["reply"] == "in this process"
        llm.script(Reply(status=400, error_message="bad request"))
        failed = subprocess.run([sys.executable, "-m", "nanoagent", "agent", "-m", "boom", "--json"], cwd=ROOT,
                                env=env, capture_output=True, text=True, timeout=PATIENCE)
        assert failed.returncode == 1 and json.loads(failed.stdout)["error"].endswith("bad request")
        status = subprocess.run([sys.executable, "-m", "nanoagent", "gateway", "status"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=PATIENCE)
        assert status.returncode == 0 and f"pid {proc.pid}" in status.stdout
        assert "clients: 0" in status.stdout  # nobody attached: the asking command does not count itself
        second = subprocess.run([sys.executable, "-m", "nanoagent", "gateway"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=PATIENCE)
        assert second.returncode != 0 and second.stderr.count(f"(pid {proc.pid})") == 1, second.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 0
    stopped = subprocess.run([sys.executable, "-m", "nanoagent", "gateway", "status"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=PATIENCE)
    assert stopped.returncode == 3 and "No gateway is running" in stopped.stdout


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGINT, 130, ""),  # as typer ends on Ctrl-C
                                                   (signal.SIGTERM, 143, "Error: Stopped by SIGTERM")],
                         ids=["ctrl-c", "sigterm"])
@pytest.mark.process
def test_ctrl_c_or_sigterm_on_a_one_shot_through_the_gateway_cancels_its_turn_there(llm, isolated_home, sig, code,
                                                                                   said):
    from tests.llm_server import Reply

    env = {**os.environ, **anthropic_env(llm)}
    proc = start_gateway_process(env)
    try:
        llm.script(Reply(text="never seen", delay=30))
        client = subprocess.Popen([sys.executable, "-m", "nanoagent", "agent", "-m", "take your time"], cwd=ROOT,
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        deadline = time.monotonic() + PATIENCE
        while not any(r.api == "anthropic" for r in llm.requests):
            assert time.monotonic() < deadline and client.poll() is None
            time.sleep(0.02)
        client.send_signal(sig)
        _, err = client.communicate(timeout=PATIENCE)
        assert client.returncode == code and (err.strip().splitlines() or [""])[-1].startswith(said), err
        assert "Traceback" not in err
        deadline = time.monotonic() + PATIENCE
        while "cancelled" not in str(session_messages("cli:direct")[-1:]):
            assert time.monotonic() < deadline, session_messages("cli:direct")
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 0  # the gateway stopped at once: no turn was left running


def test_a_one_shot_through_the_gateway_asks_its_own_terminal_to_approve_a_command(isolated_home):
    from nanoagent.gateway.oneshot import send_one
    from nanoagent.providers.scripted import ScriptedReply

    config = Config()
    config.tools.exec.sandbox, config.tools.exec.approve = "none", "always"
    provider = ScriptedProvider([ScriptedReply("", tool_calls=[("exec", {"command": "echo RAN-IT"})]), "Done.",
                                 ScriptedReply("", tool_calls=[("exec", {"command": "echo NOT-THIS"})]), "Declined."])
    running = Running(provider, config=config)
    try:
        questions: list[str] = []
        yes = send_one(running.paths.gateway_socket, "cli:direct", "run it", lambda e: None,
                       ask=lambda q: questions.append(q) or "y")
        no = send_one(running.paths.gateway_socket, "cli:direct", "and that", lambda e: None)  # nobody to ask
    finally:
        running.stop()
    assert len(questions) == 1 and "echo RAN-IT" in questions[0]
    assert (yes.reply, no.reply) == ("Done.", "Declined.")
    tool_results = [str(m["content"]) for m in session_messages("cli:direct") if m["role"] == "tool"]
    assert "RAN-IT" in tool_results[0] and "NOT-THIS" not in tool_results[1]


def test_a_message_over_a_megabyte_goes_through_and_one_past_the_limit_is_refused_before_sending(isolated_home):
    from nanoagent.gateway.oneshot import send_one

    running = Running(SlowProvider())
    try:
        quotes = '"' * 900_000  # doubled by JSON: the echoed message is longer than a megabyte
        turn = send_one(running.paths.gateway_socket, "cli:big", f"count these {quotes}", lambda e: None)
        assert turn.reply.startswith("answer: count these")
        with pytest.raises(NanoagentError, match="too large for the gateway.*--local"):
            send_one(running.paths.gateway_socket, "cli:big", "x" * (protocol.MAX_LINE + 1), lambda e: None)
    finally:
        running.stop()
    assert len(session_messages("cli:big")) == 2


def test_a_client_whose_output_breaks_mid_turn_leaves_the_turn_to_finish(isolated_home):
    from nanoagent.gateway.oneshot import send_one

    provider = SlowProvider(delay=0.3)
    running = Running(provider)

    def draw(event: ev.Event) -> None:
        if isinstance(event, ev.TurnStarted):
            raise BrokenPipeError("stdout went away")  # `nanoagent agent -m ... | head -c 1`

    try:
        with pytest.raises(BrokenPipeError):
            send_one(running.paths.gateway_socket, "cli:piped", "finish anyway", draw)
        deadline = time.monotonic() + PATIENCE
        while len(session_messages("cli:piped")) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        running.stop()
    assert session_messages("cli:piped")[-1]["content"] == "answer: finish anyway"


def test_signal_handlers_are_put_back_after_a_one_shot_and_an_ignored_hangup_stays_ignored(isolated_home):
    from nanoagent.cli.oneshot import through_gateway
    from nanoagent.cli.render import OneShotRenderer

    running = Running(SlowProvider())
    before = signal.getsignal(signal.SIGTERM)
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        turn = through_gateway(running.paths, "cli:direct", "hi", OneShotRenderer(quiet_reply=True))
        assert turn.reply == "answer: hi"
        assert signal.getsignal(signal.SIGTERM) is before and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, hangup)
        running.stop()


@pytest.mark.process
def test_a_kill_9_of_the_gateway_mid_turn_then_a_restart_leaves_a_whole_session_answered_once(llm,
                                                                                              isolated_home):
    from tests.llm_server import Reply

    env = {**os.environ, **anthropic_env(llm)}
    proc = start_gateway_process(env)
    llm.script(Reply(text="never seen", delay=30))
    client = subprocess.Popen([sys.executable, "-m", "nanoagent", "agent", "-m", "are you there?"], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + PATIENCE
    while not any(r.api == "anthropic" for r in llm.requests):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    _, err = client.communicate(timeout=PATIENCE)
    assert client.returncode != 0 and "gateway went away" in err
    llm.reset()
    llm.script(Reply(text="I am here"))
    again = start_gateway_process(env)
    try:
        answered = subprocess.run([sys.executable, "-m", "nanoagent", "agent", "-m", "and now?"], cwd=ROOT,
                                  env=env, capture_output=True, text=True, timeout=PATIENCE)
        assert answered.stdout.strip() == "I am here"
    finally:
        again.send_signal(signal.SIGTERM)
        again.communicate(timeout=PATIENCE)
    contents = [m["content"] for m in session_messages("cli:direct")]
    assert sum("are you there?" in c for c in contents) == 1 and contents[-1] == "I am here"


@pytest.mark.process
def test_a_cron_change_from_another_process_reaches_the_gateways_scheduler_at_once(isolated_home):
    from nanoagent.cron.store import JobStore

    running = Running(SlowProvider())
    woken = threading.Event()
    stop_listening = JobStore(running.paths.cron_jobs_file).listen(woken.set)  # what the scheduler listens with
    try:
        added = run_cli("cron", "add", "--every", "1h", "-m", "check the build", "--to", "none")
        assert added.returncode == 0, added.stderr
        assert woken.wait(10)  # told over the socket, not found at the scheduler's next minute
        woken.clear()
        removed = run_cli("cron", "remove", added.stdout.strip())
        assert removed.returncode == 0 and woken.wait(10)
    finally:
        stop_listening()
        running.stop()


def test_gateway_install_prints_a_systemd_unit(isolated_home):
    out = invoke("gateway", "install", "--print")
    assert out.returncode == 0
    assert "ExecStart=" in out.stdout and "gateway" in out.stdout and "Restart=on-failure" in out.stdout
    assert f"NANOAGENT_HOME={isolated_home}" in out.stdout


def test_the_client_says_how_to_start_a_gateway_when_none_runs(isolated_home):
    with pytest.raises(NanoagentError, match="nanoagent gateway"):
        asyncio.run(GatewayClient.connect(Paths.from_env().gateway_socket, "cli:direct", lambda e: None))


def test_a_session_name_too_long_for_a_file_gets_one_line_over_the_socket_and_from_the_cli(gateway, llm):
    long = "x" * 300
    path = gateway.paths.gateway_socket
    sent = raw_lines(path, protocol.encode(protocol.send("r1", f"cli:{long}", "hi")),
                     protocol.encode(protocol.hello(f"cli:{long}")), protocol.encode({"type": "status"}), want=3)
    assert sorted((r["type"], r.get("id") or "") for r in sent) == [("error", ""), ("error", "r1"), ("status", "")]
    assert all("too long" in r["message"] and "\n" not in r["message"] for r in sent if r["type"] == "error")
    for args in (["agent", "-s", long, "-m", "hi"], ["agent", "--local", "-s", long, "-m", "hi"]):
        ran = invoke(*args, env=anthropic_env(llm))
        assert ran.returncode == 1 and ran.stderr.count("\n") == 1, ran.stderr
        assert ran.stderr.startswith("Error: The session name 'cli:xxx") and "too long" in ran.stderr
    assert not any(gateway.paths.sessions_dir.glob("*xxxxx*"))


@pytest.mark.process
def test_a_one_shot_with_a_model_or_key_of_its_own_is_answered_in_its_own_process(llm, isolated_home):
    from tests.llm_server import Reply

    env = {**os.environ, **anthropic_env(llm)}
    proc = start_gateway_process(env)
    try:
        llm.script(Reply(text="one"), Reply(text="two"), Reply(text="three"))
        unset = {name: "" for name in anthropic_env(llm)}  # here alone it could not answer: no key, no server
        same = invoke("agent", "-m", "hi", "--json", env=unset)
        model = invoke("agent", "-m", "hi", "--json", env={**anthropic_env(llm), "NANOAGENT_MODEL": "anthropic/other"})
        key = invoke("agent", "-m", "hi", "--json", env={**anthropic_env(llm), "ANTHROPIC_API_KEY": "sk-ant-mine"})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=PATIENCE)
    assert [json.loads(ran.stdout)["model"] for ran in (same, model, key)] == [
        "anthropic/claude-test", "anthropic/other", "anthropic/claude-test"]
    assert [r.body["model"] for r in llm.requests] == ["claude-test", "other", "claude-test"]
    assert [r.headers.get("x-api-key") for r in llm.requests] == ["sk-ant-test", "sk-ant-test", "sk-ant-mine"]
    assert not (isolated_home / "run" / "gateway.env").exists()  # gone with the gateway
