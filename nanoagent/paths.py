"""Every path nanoagent touches comes from one `Paths` object rooted at NANOAGENT_HOME."""

from __future__ import annotations

import json
import os
import posixpath
import re
from pathlib import Path

from nanoagent.records import Frozen, lean_dataclass

# The workspace's long-term memory: what Dream edits, git records and search indexes.
MEMORY_FILES = ("SOUL.md", "USER.md", "memory/MEMORY.md")  # plus every skills/<name>/SKILL.md, people file and dated note
# The owner's other files that enter the system prompt or what the heartbeat runs: memory files too (recorded by the
# memory git, shown by dream-log, undone by dream-restore, written only from the owner's sessions), but not Dream's.
PROMPT_FILES = ("AGENTS.md", "TOOLS.md", "HEARTBEAT.md")
SKILL_FILE = re.compile(r"skills/[^/]+/SKILL\.md")
# What the agent knows about one person other than the owner (memory/people.py names them): `<channel>-<id>.md`.
PEOPLE_DIR = "memory/people"
PERSON_FILE = re.compile(r"memory/people/[^/.][^/]*\.md")
# A dated note (`memory/2026-11-25.md`): what the memory flush wrote that day, before older turns left the prompt.
DATED_NOTE = re.compile(r"memory/\d{4}-\d{2}-\d{2}\.md")


# Files nanoagent alone writes: the agent's tools and commands may read them, never change them.
# history.jsonl only grows; the cursors and locks belong to the Consolidator and Dream. is_protected also
# covers every other dot-file in memory/ (temporary files of atomic writes, later bookkeeping).
PROTECTED_FILES = ("memory/history.jsonl", "memory/.cursor", "memory/.dream_cursor", "memory/.history.lock",
                   "memory/.dream.lock")


def is_memory_file(relpath: str) -> bool:
    """True for a workspace-relative path of long-term memory: MEMORY_FILES, PROMPT_FILES, a skill's SKILL.md, a
    person's file or a dated note."""
    return relpath in MEMORY_FILES or relpath in PROMPT_FILES or SKILL_FILE.fullmatch(relpath) is not None \
        or is_person_file(relpath) or is_dated_note(relpath)


def is_person_file(relpath: str) -> bool:
    return PERSON_FILE.fullmatch(relpath) is not None


def memory_files_on_disk(workspace: Path) -> list[str]:
    """MEMORY_FILES and PROMPT_FILES, then the skills' SKILL.md, the people files (links included: callers decide) and
    the dated notes (regular files only) that exist."""
    found = [*MEMORY_FILES, *PROMPT_FILES]
    skills = workspace / "skills"
    if skills.is_dir():
        found += [f"skills/{d.name}/SKILL.md" for d in sorted(skills.iterdir())]
    people = workspace / PEOPLE_DIR
    if people.is_dir():
        found += [rel for p in sorted(people.iterdir()) if is_person_file(rel := f"{PEOPLE_DIR}/{p.name}")]
    return found + dated_notes(workspace)


def is_dated_note(relpath: str) -> bool:
    return DATED_NOTE.fullmatch(relpath) is not None


def dated_notes(workspace: Path) -> list[str]:
    """The workspace-relative paths of the dated notes in memory/ (regular files, not links), oldest first."""
    folder = workspace / "memory"
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [rel for rel in (f"memory/{name}" for name in names) if is_dated_note(rel)]


def is_protected(relpath: str) -> bool:
    """True for a workspace-relative path nanoagent keeps for itself: PROTECTED_FILES or any dot-file in memory/.
    Compared without case, so a case-insensitive file system cannot give another name to the same file."""
    folded = posixpath.normpath(relpath.replace(os.sep, "/")).casefold()
    folder, _, name = folded.rpartition("/")
    return folded in PROTECTED_FILES or (folder == "memory" and name.startswith("."))


@lean_dataclass(frozen=True)
class Paths(Frozen):
    """The home (NANOAGENT_HOME) and the workspace; every other path is a property of the two."""

    home: Path
    workspace: Path

    @classmethod
    def from_env(cls, workspace: str | os.PathLike | None = None) -> Paths:
        home = Path(os.environ.get("NANOAGENT_HOME") or Path.home() / ".nanoagent").expanduser()
        ws = Path(workspace).expanduser() if workspace else home / "workspace"
        return cls(home=home.absolute(), workspace=ws.absolute())

    @property
    def config_file(self) -> Path:
        return self.home / "config.json"

    @property
    def sessions_dir(self) -> Path:
        return self.home / "sessions"

    @property
    def run_dir(self) -> Path:
        """The running gateway's socket, pid file and HTTP token (0700)."""
        return self.home / "run"

    @property
    def gateway_socket(self) -> Path:
        return self.run_dir / "gateway.sock"

    @property
    def channels_dir(self) -> Path:
        """Each channel's own state (`channels/<name>.json`: pairing codes, approved users, the inbox)."""
        return self.home / "channels"

    @property
    def web_devices_file(self) -> Path:
        """The browsers signed in to the web app (hashes of their cookies' tokens: `nanoagent.web.devices`)."""
        return self.home / "web-devices.json"

    @property
    def cron_dir(self) -> Path:
        """Scheduled jobs (`jobs.json`, its last good copy, the scheduler's and each running job's lock)."""
        return self.home / "cron"

    @property
    def cron_jobs_file(self) -> Path:
        """The jobs store; outside the workspace, so the agent's file tools cannot clobber it."""
        return self.cron_dir / "jobs.json"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def spend_dir(self) -> Path:
        """The spend ledger, its running totals and the warnings given (`nanoagent/spend/`); outside the sessions, so
        deleting one never lowers what was spent."""
        return self.home / "spend"

    @property
    def heartbeat_state(self) -> Path:
        """The heartbeat's counters: runs, idle runs (no task, no model call), skips outside active hours."""
        return self.home / "heartbeat.json"

    @property
    def memory_dir(self) -> Path:
        return self.workspace / "memory"

    @property
    def trusted_skills_file(self) -> Path:
        """The skills the user allows to load into every prompt; outside the workspace, out of the agent's reach."""
        return self.home / "trusted-skills.json"

    @property
    def history_key_file(self) -> Path:
        """The key that signs history entries (memory.history): outside the workspace, hidden from commands."""
        return self.home / "history.key"

    @property
    def index_dir(self) -> Path:
        """Derived, rebuildable data (the memory search index)."""
        return self.home / "index"

    @property
    def mcp_cache_dir(self) -> Path:
        """MCP servers' tool lists, one file per server, so a start need not wait for them."""
        return self.home / "cache" / "mcp"

    def workspace_slug(self) -> str:
        """A stable name for this workspace: folder name plus a hash of its real path."""
        import hashlib

        real = os.path.realpath(self.workspace)
        return f"{_portable(Path(real).name) or 'root'}-{hashlib.sha1(real.encode()).hexdigest()[:10]}"

    @property
    def memory_git_dir(self) -> Path:
        """The git dir recording memory edits; outside the workspace so the agent's tools cannot touch it
        and a workspace inside another repository keeps working."""
        return self.home / "git" / f"{self.workspace_slug()}.git"

    def session_file(self, key: str) -> Path:
        return session_file(self.sessions_dir, key)


def check_owned(path: Path) -> None:
    """Refuse, as ssh does, a home, config.json or cron/jobs.json another user could have written: owned by someone
    other than you (or root), or writable by group or others. They name commands, prompts and MCP servers that
    nanoagent runs as you. Checked before the file is read or made private again, so tightening cannot hide it."""
    from nanoagent.errors import ConfigError

    try:
        info = path.stat()
    except FileNotFoundError:
        return
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        raise ConfigError(f"Refused {path}: it belongs to another user (uid {info.st_uid}, you are {me}), who could "
                          f"make nanoagent run commands as you. If it is yours, `chown {me} {path}`; if not, move "
                          "it away.")
    mode = info.st_mode & 0o777
    if mode & 0o022 and not os.statvfs(path).f_flag & os.ST_RDONLY:  # on a read-only disk nobody writes it
        private = "700" if path.is_dir() else "600"
        raise ConfigError(f"Refused {path}: other users can write it (mode {mode:o}), and could make nanoagent run "
                          f"commands as you. Check what it holds, then `chmod {private} {path}`.")


def safe_key(key: str) -> str:
    """Session keys look like `channel:chat_id`; map them one-to-one to a portable file name.

    Letters, digits, `-` and `.` stay; `:` becomes `__`; `_` and every other character become `_xx` for each of
    its UTF-8 bytes. A `_` is thus always followed by `_` or two hex digits, so the name reads back one way only.
    Keys without `_` or other characters keep the name the first mapping gave them."""
    out = []
    for c in key:
        if c.isalnum() or c in "-.":
            out.append(c)
        elif c == ":":
            out.append("__")
        else:
            out.extend(f"_{b:02x}" for b in c.encode("utf-8", "surrogatepass"))
    return "".join(out)


MAX_KEY_BYTES = 200  # a session's file name (safe_key) at most: room under the 255 bytes a file system takes for
# `.jsonl.lock`, an atomic write's temp name and the longer keys of its sub-agents' sessions


def check_session_key(key: str) -> str:
    """`key` when it can name a session file, else NanoagentError saying why: the one check of a session's name,
    for every channel (the command line, the socket, HTTP), made before anything is sent or stored."""
    from nanoagent.errors import NanoagentError

    name = safe_key(key)
    if key.strip() and len(name) <= MAX_KEY_BYTES:
        return key
    shown = key if len(key) <= 40 else f"{key[:40]}..."
    why = "is empty" if not key.strip() else f"is too long ({len(name)} characters as a file name, at most " \
                                              f"{MAX_KEY_BYTES})"
    raise NanoagentError(f"The session name {shown!r} {why}; give a shorter one.")


def session_file(directory: Path, key: str) -> Path:
    """The file of session `key`. A session saved under the first mapping (which sent `_`, `/` and the rest all to
    `_`, so `x/y` and `x_y` shared a file) keeps its file when that file's header names this very key."""
    path = directory / f"{safe_key(key)}.jsonl"
    old = directory / f"{_portable(key.replace(':', '__'))}.jsonl"
    if old != path and not path.exists() and _header_key(old) == key:
        return old
    return path


def _portable(name: str) -> str:
    """The first mapping of keys to file names; still names workspaces (`workspace_slug`), which a hash tells apart."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _header_key(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline(65536))
        return header["key"] if isinstance(header, dict) else None
    except (OSError, ValueError, KeyError):
        return None
