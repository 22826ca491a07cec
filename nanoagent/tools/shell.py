"""The exec tool: a shell command in the sandbox (see sandbox.py), with limits, bounded output and a timeout.

Where the sandbox cannot start and the user did not choose `sandbox: "none"`: with a person at the
terminal the command runs unsandboxed after one warning per session; where nobody watches it is
refused. `approve` decides which commands wait for a person's yes first.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import functools
import os
import resource
import signal
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from nanoagent.procguard import Cgroup, release, start_guard, watch
from nanoagent.tools.base import Tool, ToolContext, ToolError, TurnScope, current_turn, tool
from nanoagent.tools.fs import resolve_path
from nanoagent.tools.sandbox import (
    Confined,
    SandboxPolicy,
    bwrap_argv,
    check_bwrap,
    command_env,
    prepare_protected,
)

MAX_TIMEOUT = 600
CHUNK = 65536
DRAIN_GRACE = 0.2  # after the command exits, how long a background child may keep its output open
PR_SET_PDEATHSIG = 1
NO_NETWORK_HINT = ("[note: this command has no network (tools.exec.network is false); a host that does not "
                   "resolve is why]")
RESOLVE_FAILURES = ("could not resolve host", "temporary failure in name resolution", "name or service not known",
                    "nodename nor servname", "network is unreachable", "getaddrinfo failed")


@dataclass(frozen=True)
class ExecSettings:
    timeout: int = 60
    max_output_chars: int = 16_000
    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    approve: str | None = None  # "never" | "unsandboxed" | "always"; None: "never" with a sandbox, else "unsandboxed"
    home: Path | None = None  # $NANOAGENT_HOME, hidden from sandboxed commands
    protected: tuple[str, ...] = ()  # workspace-relative files commands may read but not write


class BoundedOutput:
    """Keeps the first and last `limit // 2` bytes of a stream and counts what falls between."""

    def __init__(self, limit: int):
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.omitted = 0

    def add(self, data: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        if len(self.tail) > self.half:
            drop = len(self.tail) - self.half
            self.omitted += drop
            del self.tail[:drop]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if self.omitted:
            return f"{head}\n[... {self.omitted:,} bytes omitted ...]\n{tail}"
        return head + tail


# Runs around each command: given the command and a callable that runs it, returns its result. build_agent passes
# memory.gitlog.agent_commands, so what a command changes in the memory files is the agent's commit.
CommandHook = Callable[[str, Callable[[], Awaitable[str]]], Awaitable[str]]


def exec_tool(settings: ExecSettings | None = None, around: CommandHook | None = None) -> Tool:
    """The exec tool with its limits and sandbox from config (tools.exec, tools.maxResultChars)."""
    settings = settings or ExecSettings()
    gate = Gate(settings)

    @tool(name="exec")
    async def exec_(ctx: ToolContext, command: str, timeout: int | None = None, workdir: str | None = None) -> str:
        """Run a shell command in the workspace and return its output and exit code.

        Args:
            command: The command line, run with /bin/sh -c.
            timeout: Seconds before the command is killed (default from config, at most 600).
            workdir: Folder to run in, relative to the workspace.
        """
        # inside the workspace (or the turn's working folder) even when file tools may leave it: the sandbox holds
        # nothing else writable
        cwd = resolve_path(dataclasses.replace(ctx, restrict_to_workspace=True), workdir) if workdir else ctx.folder
        if not cwd.is_dir():
            raise ToolError(f"workdir '{workdir}' is not a folder.")
        turn = current_turn.get()
        sandboxed = await gate.admit(command, turn)
        limit = min(MAX_TIMEOUT, timeout or settings.timeout)
        folder = Path(turn.workdir) if turn.workdir else None

        guest = Confined(turn.hidden) if turn.guest else None

        def run() -> Awaitable[str]:
            return run_command(command, ctx.workspace, cwd, limit, settings, sandboxed, folder, guest)

        return await (around(command, run) if around is not None else run())

    return exec_


class Gate:
    """Decides per command: sandboxed or not, and whether a person must say yes first. Remembers, per
    session, the warning already shown and an "always" answer."""

    def __init__(self, settings: ExecSettings):
        self.settings = settings
        self.warned: set[str] = set()
        self.always: set[str] = set()

    async def admit(self, command: str, turn: TurnScope) -> bool:
        """True: run in the sandbox; False: run unsandboxed. Raises ToolError when the command may not run."""
        policy = self.settings.policy
        if turn.guest:  # only the kernel keeps a guest's command from the owner's memory: no sandbox, no command
            check = check_bwrap() if policy.mode != "none" else None
            if check is None or not check.ok:
                why = check.explain() if check is not None else 'tools.exec.sandbox is "none"'
                raise ToolError(f"Not run: commands from a guest's chat run only in the sandbox, and it cannot run "
                                f"here ({why}). Answer without running commands.")
        sandboxed = policy.mode != "none"
        if sandboxed:
            check = check_bwrap()
            if not check.ok:
                if policy.mode == "bwrap" or turn.ask is None:
                    raise ToolError(f"Not run: commands run only in the sandbox here and it cannot start: "
                                    f"{check.explain()}. Or set tools.exec.sandbox to \"none\" to allow "
                                    "unsandboxed commands.")
                sandboxed = False
                if turn.session_key not in self.warned:
                    self.warned.add(turn.session_key)
                    turn.notify(f"warning: commands run WITHOUT a sandbox: {check.explain()}")
        approve = approval(self.settings, sandboxed)
        if approve == "never" or (approve == "unsandboxed" and sandboxed) or turn.session_key in self.always:
            return sandboxed
        if turn.ask is None:
            raise ToolError(f"Not run: this command needs a person's approval (tools.exec.approve is \"{approve}\") "
                            "and nobody can answer here. Ask the user to run it, or change tools.exec.approve.")
        where = "in the sandbox" if sandboxed else "WITHOUT a sandbox"
        answer = (await turn.ask(f"Run {where}: {command}\n[y]es / [n]o / [a]lways this session? ")).strip().lower()
        if answer in ("a", "always"):
            self.always.add(turn.session_key)
        elif answer not in ("y", "yes"):
            raise ToolError("Not run: the user declined this command. Ask what they would like instead.")
        return sandboxed


def approval(settings: ExecSettings, sandboxed: bool) -> str:
    """tools.exec.approve, or its default: ask first only for a command that runs unsandboxed by fallback."""
    return settings.approve or ("never" if sandboxed or settings.policy.mode == "none" else "unsandboxed")


def describe_confinement(settings: ExecSettings) -> str:
    """What keeps exec's commands in, as the model should be told it: the sandbox as configured and as it works
    on this machine (the same smoke test the Gate runs), or that nothing does."""
    policy = settings.policy
    check = check_bwrap() if policy.mode != "none" else None
    sandboxed = check is not None and check.ok
    if check is not None and not check.ok and policy.mode == "bwrap":
        return ("Commands (`exec`) cannot run here: they may run only in the sandbox, which cannot start "
                f"({check.reason}). Say so when a task needs one.")
    approve = approval(settings, sandboxed)
    if sandboxed:
        network = "the network is reachable" if policy.network else "there is no network"
        text = ("Commands (`exec`) run in a bubblewrap sandbox: the workspace is writable, the system read-only, "
                f"the user's home and nanoagent's own files are hidden, /tmp is private, and {network}.")
    else:
        why = "tools.exec.sandbox is \"none\"" if check is None else f"the sandbox cannot start: {check.reason}"
        text = (f"Commands (`exec`) run WITHOUT a sandbox ({why}): as the user, with all of the user's files and "
                "the network within reach. Run only what the task needs.")
    text += " Their environment holds no secrets unless the user named them."
    if approve == "always" or (approve == "unsandboxed" and not sandboxed):
        text += " The user approves each command first; where nobody can answer, commands are refused."
    return text


def describe_limits(policy: SandboxPolicy) -> str:
    """What bounds a command here (doctor says it): cgroups bound it as a whole where nanoagent can make them;
    elsewhere memoryMb bounds each process (RLIMIT_DATA), and maxProcesses counts per user (RLIMIT_NPROC)."""
    group = Cgroup.create(policy.max_processes, policy.memory_mb << 20)
    if group is not None:
        group.close()
    memory, procs = f"memoryMb ({policy.memory_mb} MB)", f"maxProcesses ({policy.max_processes})"
    if group is not None and group.memory is not None:
        return f"exec limits: {memory} and {procs} bound each command as a whole (cgroups)"
    if group is not None:
        return (f"exec limits: {procs} bounds each command (pids cgroup); {memory} bounds each process, not the "
                "command: no memory cgroup can be made here")
    return (f"exec limits: {memory} bounds each process, not the command, and {procs} is counted per user namespace "
            "(RLIMIT_NPROC; not for root): no cgroup can be made here (run as root, or delegate a cgroup to this user)")


async def run_command(command: str, workspace: Path, cwd: Path, limit: float, settings: ExecSettings,
                      sandboxed: bool, folder: Path | None = None, guest: Confined | None = None) -> str:
    """Run `command` in `cwd`; `folder` is the turn's working folder (`agent -C DIR`), bound read-write beside the
    workspace in the sandbox; `guest`: a guest's command, which sees the workspace read-only and without what
    their file tools do not see (the caller made sure it is sandboxed)."""
    policy = settings.policy
    if sandboxed:
        home = settings.home or Path(os.path.expanduser("~/.nanoagent"))
        protected = await asyncio.to_thread(prepare_protected, workspace, settings.protected)
        argv = bwrap_argv(policy, command, workspace, cwd, home, protected, folder, guest)
    else:
        argv = ["/bin/sh", "-c", command]
    group = await asyncio.to_thread(Cgroup.create, policy.max_processes, policy.memory_mb << 20)
    over_memory = group.oom_event() if group is not None else None  # listening before the command can use any
    try:
        return await _supervised(command, argv, cwd, limit, settings, sandboxed, group, over_memory)
    finally:
        if over_memory is not None:
            os.close(over_memory)
        if group is not None:
            await asyncio.to_thread(group.close)


async def _supervised(command: str, argv: list[str], cwd: Path, limit: float, settings: ExecSettings,
                      sandboxed: bool, group: Cgroup | None, over_memory: int | None) -> str:
    """Start the command under its watcher, read its output until it exits or the time is up, and end it with
    everything it started."""
    policy = settings.policy
    run_id = f"nanoagent-run-{uuid.uuid4().hex}"
    if sandboxed:  # bwrap's own command line carries the run's name, so the watcher finds it even before its pid
        argv[1:1] = ["--setenv", "NANOAGENT_RUN", run_id]
    # ready before the command exists, so no moment of it goes unwatched; a sandboxed run is also found by its
    # name, and whatever left the process group through the cgroup
    guard = await start_guard('pkill -9 -f -- "--setenv NANOAGENT_RUN $0" 2>/dev/null', run_id,
                              cgroups=group.paths if group else ())
    spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *argv, cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True, env=command_env(policy, sandboxed),
        preexec_fn=_limits(policy, group),
    ))
    try:
        proc = await asyncio.shield(spawn)
        watch(guard, proc.pid)
    except asyncio.CancelledError:  # cancelled while starting: the process may exist already; end it too
        proc = await spawn
        await _end(proc)
        await release(guard)
        raise
    except BaseException:
        await release(guard)
        raise
    output = BoundedOutput(settings.max_output_chars)
    oom = asyncio.ensure_future(_stop_when_over_memory(group, over_memory))
    try:
        # the deadline covers reading AND waiting for exit: a command may close its output and keep running
        code = await asyncio.wait_for(_run(proc, output), timeout=limit)
    except TimeoutError:
        await _end(proc)
        raise ToolError(f"{output.text()}\n[timed out after {limit:g} s; the command and everything it started "
                        f"were killed]{_limit_note(group, policy)}") from None
    finally:
        oom.cancel()
        await asyncio.gather(oom, return_exceptions=True)  # its reader is removed before the fd is closed
        await _end(proc)  # background children: nohup, setsid and `&` ones end with the command
        await release(guard)
        note = _limit_note(group, policy)
    text = output.text()
    if not policy.network and sandboxed and code != 0 and any(w in text.lower() for w in RESOLVE_FAILURES):
        text += "\n" + NO_NETWORK_HINT
    return f"{text}{note}\n[exit code: {code}]"


async def _stop_when_over_memory(group: Cgroup | None, fd: int | None) -> None:
    """Under cgroup v1 the kernel kills one process over the memory limit; the command as a whole is what the
    limit bounds, so the rest of it ends too when `fd` (the cgroup's OOM eventfd) fires (v2's memory.oom.group
    does this itself)."""
    if fd is None or group is None:
        return
    loop = asyncio.get_running_loop()
    fired: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _resolve, fired)
    try:
        await fired
        group.over_memory = True  # the kernel may not have killed anything yet: this ends it all first
        await asyncio.to_thread(group.kill_all)
    finally:
        loop.remove_reader(fd)


def _limit_note(group: Cgroup | None, policy: SandboxPolicy) -> str:
    note = ""
    if group is not None and (group.over_memory or group.oom_kills()):
        note += (f"\n[note: the command went over the memory limit ({policy.memory_mb} MB for all its processes "
                 "together, tools.exec.memoryMb) and was stopped]")
    if group is not None and group.hit_process_limit():
        note += (f"\n[note: the command reached the process limit ({policy.max_processes}, "
                 "tools.exec.maxProcesses); new processes were refused]")
    return note


async def _run(proc: asyncio.subprocess.Process, output: BoundedOutput) -> int:
    """Read until the command exits, then what is left for a moment: a background child that keeps the output
    open must not hold the turn until the timeout."""
    assert proc.stdout is not None
    reader = asyncio.ensure_future(_drain(proc.stdout, output))
    await _exited(proc)
    try:
        await asyncio.wait_for(asyncio.shield(reader), timeout=DRAIN_GRACE)
    except TimeoutError:
        reader.cancel()
    await _end(proc)  # what it left running ends now, and with it the output it held open
    return await proc.wait()


async def _exited(proc: asyncio.subprocess.Process) -> None:
    """Wait for the process itself to exit, not for its output to close (asyncio's wait() waits for both)."""
    if not hasattr(os, "pidfd_open"):  # not Linux: poll
        while proc.returncode is None:
            await asyncio.sleep(0.05)
        return
    try:
        fd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return  # already gone
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _resolve, done)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def _drain(stdout: asyncio.StreamReader, output: BoundedOutput) -> None:
    while chunk := await stdout.read(CHUNK):
        output.add(chunk)


def _limits(policy: SandboxPolicy, group: Cgroup | None) -> Callable[[], None]:
    """Runs in the child between fork and exec: the cgroups, each process's memory limit, the process limit, and
    death with nanoagent."""
    prctl = _prctl()

    def apply() -> None:
        if group is not None:
            group.join()
        memory = policy.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
        if os.getuid() != 0:  # counted per user namespace for the sandbox (root is exempt: it gets the cgroup)
            resource.setrlimit(resource.RLIMIT_NPROC, (policy.max_processes, policy.max_processes))
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return apply


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, loaded once in the parent (not after each fork)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


async def _end(proc: asyncio.subprocess.Process) -> None:
    """End the command and its process group (the sandbox's whole pid namespace goes with bwrap); what
    escaped the group is ended through the cgroup, when there is one."""
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        if proc.returncode is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace)
        except TimeoutError:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children left in the group after the leader ended
    except (ProcessLookupError, PermissionError):
        pass


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
