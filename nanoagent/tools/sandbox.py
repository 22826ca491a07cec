"""Where exec's commands run: inside bubblewrap on Linux, so the kernel keeps them from the user's files.

Inside: new user, pid, ipc, uts and cgroup namespaces, and no network unless the user allows it;
the system folders read-only; from /etc only what programs need; the workspace read-write (what
nanoagent keeps in memory/ read-only, made before the first command, and memory/ itself a mount point
that cannot be renamed aside); nanoagent's own Python read-only; a private /tmp with a size
cap and a throwaway home; nothing else of $HOME or of $NANOAGENT_HOME. The environment is rebuilt,
never inherited, with or without the sandbox. See docs/tools.md, "Commands and the sandbox" and, for
macOS, `SEATBELT_PROFILE` below (designed, not yet used: `auto` reports no sandbox there).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from nanoagent.fsutil import private_dir
from nanoagent.tools.base import ToolError

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
ETC_FILES = ("/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/resolv.conf", "/etc/hosts", "/etc/passwd",
             "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/ld.so.cache", "/etc/ld.so.conf",
             "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/mime.types", "/etc/gai.conf")
BASE_ENV = ("LANG", "LC_ALL", "TERM", "TZ")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


@dataclass(frozen=True)
class SandboxPolicy:
    """tools.exec from config, the parts that shape where a command runs."""

    mode: str = "auto"  # "auto" | "bwrap" | "none"
    network: bool = False
    read_only_paths: tuple[str, ...] = ()
    writable_paths: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # extra variable names passed through, secrets included when named
    max_processes: int = 256
    memory_mb: int = 4096
    tmp_mb: int = 512


@dataclass(frozen=True)
class Confined:
    """A guest's command (`channels/owners.py`): the workspace read-only, so nothing a guest runs can change a file
    that reaches the owner's prompt (AGENTS.md, a new skill, a file made later), and `hidden` (workspace-relative
    files and folders: the owner's USER.md, memory/, media/) not there at all."""

    hidden: tuple[str, ...] = ()


@dataclass(frozen=True)
class SandboxCheck:
    ok: bool
    reason: str = ""  # why the sandbox cannot start here
    fix: str = ""

    def explain(self) -> str:
        return f"{self.reason}. {self.fix}".strip() if not self.ok else "bubblewrap works"


@functools.cache
def check_bwrap() -> SandboxCheck:
    """Start a tiny sandbox once per process; the reason and the fix when it fails (doctor prints them)."""
    if sys.platform != "linux":
        return SandboxCheck(False, f"no sandbox on {sys.platform} yet (the Seatbelt profile is designed, not "
                                   "enabled)", "set tools.exec.sandbox to \"none\" to run commands unsandboxed")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return SandboxCheck(False, "bubblewrap (bwrap) is not installed",
                            "install it: `sudo apt install bubblewrap` (or dnf/pacman install bubblewrap)")
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", *_system_binds(), "--proc", "/proc",
            "--dev", "/dev", "--", "/bin/sh", "-c", "exit 0"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, env={"PATH": SANDBOX_PATH})
    except (OSError, subprocess.TimeoutExpired) as e:
        return SandboxCheck(False, f"bwrap did not start ({e})", "check that bwrap runs: `bwrap --version`")
    if done.returncode == 0:
        return SandboxCheck(True)
    return _diagnose(done.stderr.strip())


def _diagnose(stderr: str) -> SandboxCheck:
    first = stderr.splitlines()[0] if stderr else "no error message"
    if read_or_empty("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return SandboxCheck(False, f"AppArmor forbids unprivileged user namespaces ({first})",
                            "allow bwrap: `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`, or add an "
                            "AppArmor profile for /usr/bin/bwrap with `userns,`")
    disabled = (read_or_empty("/proc/sys/kernel/unprivileged_userns_clone") == "0"
                or read_or_empty("/proc/sys/user/max_user_namespaces") == "0")
    if disabled:
        return SandboxCheck(False, f"unprivileged user namespaces are disabled ({first})",
                            "enable them: `sudo sysctl kernel.unprivileged_userns_clone=1` "
                            "(or user.max_user_namespaces=15000)")
    return SandboxCheck(False, f"bwrap failed: {first}", "run `nanoagent doctor` and check that `bwrap --unshare-all "
                                                       "--ro-bind / / true` works for your user")


def read_or_empty(path: str | Path) -> str:
    """A small file's text, stripped; "" when it cannot be read."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _system_binds() -> list[str]:
    """The system folders, read-only; merged-/usr links stay links."""
    args: list[str] = []
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    return args


def python_paths() -> list[str]:
    """What nanoagent's own Python needs to run inside: the interpreter, its packages and nanoagent itself
    (an editable checkout too), so `nanoagent skills validate` and skill scripts work."""
    package = Path(__file__).resolve().parent.parent
    paths = {sys.prefix, sys.base_prefix, str(package)}
    for name in ("templates", "skills"):
        if (package.parent / name).is_dir():
            paths.add(str(package.parent / name))
    system = tuple(SYSTEM_DIRS)
    return sorted(p for p in paths if not any(p == s or p.startswith(s + "/") for s in system))


def bwrap_argv(policy: SandboxPolicy, command: str, workspace: Path, cwd: Path, home: Path,
               protected: list[Path], workdir: Path | None = None, guest: Confined | None = None) -> list[str]:
    """The bwrap command line for one command. Later mounts go on top of earlier ones, so the order is:
    system, /etc, /proc, /dev, private /tmp and home, Python, the working folder (`workdir`, `agent -C DIR`, with
    $NANOAGENT_HOME hidden again should it lie inside), the workspace, then what is read-only in it; for a guest
    the workspace read-only with what they may not see covered."""
    real_ws = os.path.realpath(workspace)
    args = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            *([] if policy.network else ["--unshare-net"]), "--disable-userns",
            "--die-with-parent", "--new-session", "--hostname", "nanoagent",
            *_system_binds()]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(policy.tmp_mb << 20), "--tmpfs", "/tmp"]
    user_home = os.path.expanduser("~")
    if user_home not in ("/", "/tmp") and not user_home.startswith("/usr"):
        args += ["--size", str(64 << 20), "--tmpfs", user_home]  # a throwaway home: nothing of the real one
    args += ["--tmpfs", str(home)]  # $NANOAGENT_HOME hidden even when it sits under a bound folder
    for path in python_paths():
        args += ["--ro-bind", path, path]
    if workdir is not None:
        real_folder = os.path.realpath(workdir)
        args += ["--bind", real_folder, real_folder]
        real_home = os.path.realpath(home)
        if real_home == real_folder or real_home.startswith(real_folder + os.sep):
            args += ["--tmpfs", real_home]  # tools.fs.working_folder refuses such a folder; this holds regardless
    for path in policy.read_only_paths:
        expanded = os.path.realpath(os.path.expanduser(path))
        args += ["--ro-bind-try", expanded, expanded]
    for path in policy.writable_paths:
        expanded = os.path.realpath(os.path.expanduser(path))
        args += ["--bind-try", expanded, expanded]
    if guest is not None:
        return [*args, *_guest_workspace(real_ws, guest), "--chdir", os.path.realpath(cwd), "--", "/bin/sh", "-c",
                command]
    args += ["--bind", real_ws, real_ws]
    # history and cursors: the agent reads them, nanoagent alone writes them. Their folder is a mount point too
    # (bound onto itself), so it cannot be renamed aside and replaced; the files, made before the first command
    # (prepare_protected), can be neither replaced, renamed nor removed; the rest of memory/ stays writable.
    folders = {os.path.dirname(os.path.realpath(file)) for file in protected}
    for folder in sorted(folders):
        if folder.startswith(real_ws + os.sep) and os.path.isdir(folder):
            args += ["--bind", folder, folder]
    for file in protected:
        if file.exists():
            real = os.path.realpath(file)
            args += ["--ro-bind", real, real]
    args += ["--chdir", os.path.realpath(cwd), "--", "/bin/sh", "-c", command]
    return args


def _guest_workspace(real_ws: str, guest: Confined) -> list[str]:
    """The workspace read-only, each hidden folder an empty read-only tmpfs and each hidden file empty. A hidden
    path that is a link is covered where the link lies, not where it points (the workspace is read-only, so it cannot
    be swapped meanwhile)."""
    args = ["--ro-bind", real_ws, real_ws]
    for rel in guest.hidden:
        path = os.path.join(real_ws, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.lexists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args


def prepare_protected(workspace: Path, protected: tuple[str, ...]) -> list[Path]:
    """Make the files nanoagent keeps for itself (workspace-relative `protected`) exist, empty where missing, so a
    command can bind them read-only before nanoagent first writes them: a command must never create them. Raises
    ToolError when their folder is a link (a command could swap the link for a folder of its own)."""
    files = [workspace / rel for rel in protected]
    for folder in sorted({file.parent for file in files}):
        if folder.is_symlink():
            raise ToolError(f"Not run: {folder} is a symbolic link, so a command could put another folder in its "
                            "place and forge what nanoagent keeps there; make it a real folder (move its contents "
                            "in) to run commands.")
        private_dir(folder)
    for file in files:
        try:
            os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            pass
    return files


def command_env(policy: SandboxPolicy, sandboxed: bool) -> dict[str, str]:
    """The environment a command gets, rebuilt from names, never inherited: PATH, HOME, LANG, TERM, TZ and the
    names the user listed in tools.exec.env. A name holding KEY, TOKEN, SECRET or PASSWORD passes only when
    listed by name."""
    own_bin = os.path.dirname(sys.executable)  # `nanoagent` itself, even when the venv was never activated
    inherited = os.environ.get("PATH", "") if not sandboxed else SANDBOX_PATH
    entries = [e for e in inherited.split(os.pathsep) if e]
    env = {"PATH": os.pathsep.join(entries if own_bin in entries else [own_bin, *entries]),
           "HOME": os.path.expanduser("~"), "LANG": os.environ.get("LANG", "C.UTF-8")}
    for name in BASE_ENV:
        if name in os.environ:
            env[name] = os.environ[name]
    env = {k: v for k, v in env.items() if not _secret(k)}
    for name in policy.env:
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


# The macOS design, for when it can be tested: sandbox-exec (Seatbelt) with the same rules. Deny by default;
# read the system; read-write the workspace; no network unless allowed; nothing of $HOME.
SEATBELT_PROFILE = """(version 1)
(deny default)
(allow process-fork process-exec signal (target same-sandbox))
(allow sysctl-read mach-lookup (global-name "com.apple.system.logger"))
(allow file-read* (subpath "/usr") (subpath "/bin") (subpath "/sbin") (subpath "/System") (subpath "/Library")
       (subpath "/opt/homebrew") (subpath "/private/etc") (subpath "/dev") (param "PYTHON_PREFIX"))
(allow file-read* file-write* (param "WORKSPACE") (subpath "/private/tmp/nanoagent") (literal "/dev/null"))
(deny file-write* (param "PROTECTED"))
(allow network* (local unix))
; with tools.exec.network: (allow network-outbound)
"""
