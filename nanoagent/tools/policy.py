"""Which tools a session may use: profiles, allow and deny lists, per session-key pattern.

A session's tools are decided in steps, each later one overriding what an earlier one said of a name:
1. a profile, the preset the session starts from: `minimal` (reading files, memory search, web_fetch), `coding`
   (those, plus writing, editing and exec) or `full` (every tool). It is the most specific `tools.policies` rule
   that names one; else `tools.groupProfile` in a group chat (as its channel says: `Incoming.private`), else
   `tools.guestProfile` in a guest's direct chat, else `tools.profile`;
2. `tools.allow` adds tools, then `tools.deny` takes them away (so a name in both is denied);
3. each `tools.policies` rule whose session-key pattern matches, least specific first (`keys.matching`):
   its `allow`, then its `deny`.
Names and patterns are tool names where `*` stands for any run of characters (`mcp__*`, `mcp__github__*`), or a
capability's name (`GROUPS`: `write`, `shell`, `memory`, `web`), which stands for each of its tools.

MCP tools follow exec: where the steps leave `exec` out, an MCP tool (`mcp__...`) is left out too unless an allow step
whose pattern starts with `mcp__` names it (an MCP server may run commands, outside exec's sandbox and approvals; `*`
of the `full` profile or of an allow does not count as naming it).

A tool a session may not use is not offered to the model at all (`ToolView`), and a call to it anyway is refused
with the step that took it away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nanoagent.config.schema import ToolsConfig
from nanoagent.keys import matches, matching
from nanoagent.providers.base import ToolSpec
from nanoagent.tools.base import Tool
from nanoagent.tools.registry import ToolRegistry

MINIMAL = ("read_file", "list_dir", "glob", "grep", "memory_search", "memory_get", "web_fetch")
PROFILES: dict[str, tuple[str, ...]] = {
    "minimal": MINIMAL,
    "coding": (*MINIMAL, "write_file", "edit_file", "exec"),
    "full": ("*",),
}
# capabilities a pattern may name instead of tools: each stands for the tools (or tool patterns) listed
GROUPS: dict[str, tuple[str, ...]] = {
    "write": ("write_file", "edit_file"),
    "shell": ("exec",),
    "memory": ("memory_*",),
    "web": ("web_fetch", "web_search", "browser"),
}
MCP = "mcp__"
SHELL = "exec"  # the tool MCP tools follow


def covers(pattern: str, name: str) -> bool:
    """Does an allow or deny pattern name tool `name`: a capability one of whose tools it is, or a tool pattern
    that matches it?"""
    return any(matches(p, name) for p in GROUPS.get(pattern, (pattern,)))


@dataclass(frozen=True)
class Step:
    """One allow or deny pattern and the setting it comes from."""

    pattern: str
    allow: bool
    source: str  # "tools.deny", "tools.policies[\"telegram:-100*\"].deny"


@dataclass(frozen=True)
class Allowed:
    """The tools one session may use: its profile (and the setting that chose it), then the steps in order."""

    profile: str
    chosen_by: str
    steps: tuple[Step, ...] = ()

    @property
    def everything(self) -> bool:
        return self.profile == "full" and all(step.allow for step in self.steps)

    def allows(self, name: str) -> bool:
        if not self._stepped(name):
            return False
        return not name.startswith(MCP) or self._stepped(SHELL) or self._named(name)

    def reason(self, name: str) -> str:
        """Why `name` is refused here (call only for a refused one)."""
        if self._stepped(name):  # an MCP tool where exec is off
            server = name.removeprefix(MCP).split("__", 1)[0]
            return (f"The tool '{name}' is not allowed in this session: MCP tools follow exec, which is off here: "
                    f"{self._why(SHELL)} "
                    "(an MCP server may run commands outside exec's sandbox). Do without it; the owner can allow it "
                    f"by name (`{name}` or `{MCP}{server}__*`) in tools.allow or a tools.policies rule's allow in "
                    "config.json.")
        return (f"The tool '{name}' is not allowed in this session: {self._why(name)}. Do without it; the owner can "
                "change tools.profile, tools.allow, tools.deny or tools.policies in config.json.")

    def _stepped(self, name: str) -> bool:
        """What the profile and the steps say of `name`, before MCP tools follow exec."""
        allowed = any(matches(p, name) for p in PROFILES[self.profile])
        for step in self.steps:
            if covers(step.pattern, name):
                allowed = step.allow
        return allowed

    def _named(self, name: str) -> bool:
        """Whether an allow step names MCP tool `name` by its own name or its server's (a pattern starting `mcp__`)."""
        return any(step.allow and step.pattern.startswith(MCP) and matches(step.pattern, name) for step in self.steps)

    def _why(self, name: str) -> str:
        denied = next((s for s in reversed(self.steps) if covers(s.pattern, name)), None)
        if denied is None:
            return f"it is not in the `{self.profile}` profile ({self.chosen_by})"
        return f"`{denied.pattern}` in {denied.source} denies it"


@dataclass(frozen=True)
class ToolPolicy:
    """`tools.profile`, `tools.guestProfile`, `tools.groupProfile`, `tools.allow`, `tools.deny` and `tools.policies`
    as one decision."""

    settings: ToolsConfig

    def for_session(self, key: str, group: bool = False, guest: bool = False) -> Allowed:
        """The tools of session `key`: a group chat's when `group` (whoever is in it), else a guest's direct chat's
        when `guest` (anyone but the owner), else the owner's."""
        s = self.settings
        rules = matching(key, [(pattern, (pattern, rule)) for pattern, rule in s.policies.items()])
        profile, chosen_by = ((s.group_profile, "tools.groupProfile, for group chats") if group
                              else (s.guest_profile, "tools.guestProfile, for guests' direct chats") if guest
                              else (s.profile, "tools.profile"))
        for pattern, rule in rules:  # the most specific rule naming a profile wins
            if rule.profile:
                profile, chosen_by = rule.profile, f'tools.policies["{pattern}"].profile'
        steps = list(self._everywhere())
        for pattern, rule in rules:
            steps += _rule_steps(pattern, rule.allow, rule.deny)
        return Allowed(profile, chosen_by, tuple(steps))

    def _everywhere(self) -> tuple[Step, ...]:
        s = self.settings
        return (*(Step(p, True, "tools.allow") for p in s.allow), *(Step(p, False, "tools.deny") for p in s.deny))

    def unknown(self, tools: list[str]) -> list[str]:
        """A line for each allow or deny pattern that names none of `tools` (a typo denies nothing). Capabilities
        (`GROUPS`) and MCP tools (`mcp__...`) are left out: a server's tools may not be known yet."""
        s = self.settings
        where = [("tools.allow", p) for p in s.allow] + [("tools.deny", p) for p in s.deny]
        for key, rule in s.policies.items():
            where += [(f'tools.policies["{key}"].allow', p) for p in rule.allow]
            where += [(f'tools.policies["{key}"].deny', p) for p in rule.deny]
        return [f"{setting} names `{pattern}`, which is no tool here; the tools are {', '.join(tools)} "
                f"(or the capabilities {', '.join(GROUPS)})."
                for setting, pattern in where
                if not pattern.startswith(MCP) and pattern not in GROUPS and not any(covers(pattern, t) for t in tools)]

    def summary(self) -> list[str]:
        """The policy in lines, for `nanoagent status` and `/status`: the profiles of the owner, guests and group
        chats with their tools, then each rule; capabilities with their tools, and where MCP tools are off as exec
        is."""
        s = self.settings
        everywhere = self._everywhere()
        lines = [f"{who}: {_profile_text(profile)}{_mcp_text(Allowed(profile, '', everywhere))}"
                 for who, profile in (("the owner (the terminal, the owner's chats, cron, HTTP)", s.profile),
                                      ("guests' direct chats", s.guest_profile),
                                      ("group chats", s.group_profile))]
        if everywhere:
            lines.append(f"everywhere: {_changes(s.allow, s.deny)}")
        for pattern, rule in s.policies.items():
            steps = _rule_steps(pattern, rule.allow, rule.deny)
            said = " ".join(p for p in (_profile_text(rule.profile) if rule.profile else "",
                                        _changes(rule.allow, rule.deny)) if p)
            takes_exec = rule.profile or any(covers(step.pattern, SHELL) for step in steps)
            mcp = _mcp_text(Allowed(rule.profile or s.profile, "", (*everywhere, *steps))) if takes_exec else ""
            lines.append(f"{pattern}: {said or 'no change'}{mcp}")
        return lines


def _rule_steps(pattern: str, allow: list[str], deny: list[str]) -> list[Step]:
    return [*(Step(p, True, f'tools.policies["{pattern}"].allow') for p in allow),
            *(Step(p, False, f'tools.policies["{pattern}"].deny') for p in deny)]


def _profile_text(profile: str) -> str:
    return f"{profile}: every tool" if profile == "full" else f"{profile}: {', '.join(PROFILES[profile])}"


def _changes(allow: list[str], deny: list[str]) -> str:
    return " ".join([*(f"+{_pattern_text(p)}" for p in allow), *(f"-{_pattern_text(p)}" for p in deny)])


def _pattern_text(pattern: str) -> str:
    return f"{pattern} ({', '.join(GROUPS[pattern])})" if pattern in GROUPS else pattern


def _mcp_text(allowed: Allowed) -> str:
    """Where exec is off, what that leaves of MCP tools: those an allow names by a pattern starting `mcp__`."""
    if allowed.allows(SHELL):
        return ""
    named = [step.pattern for step in allowed.steps if step.allow and step.pattern.startswith(MCP)]
    return f"; no exec, so MCP tools only {', '.join(named)}" if named else "; no exec, so no MCP tools"


def narrowed(tools: ToolRegistry, profile: str) -> ToolRegistry:
    """`tools` (what the policy gives a session) left with those of `profile` alone: a profile chosen for a turn
    (an editor's mode, `nanoagent acp`) takes tools away and never adds one. "" or `full` leaves them as they are;
    an unknown name leaves none (a narrowing must not fail open)."""
    if not profile or profile == "full":
        return tools
    kept = PROFILES.get(profile, ())
    return ToolView(tools, lambda name: any(matches(p, name) for p in kept),
                    lambda name: f"The tool '{name}' is off in this session's mode ({profile}): the person chose "
                                 "that mode in their editor. Do without it, or ask them to switch modes.")


class ToolView(ToolRegistry):
    """The tools of `source` that `allows` lets through, kept in step with it (MCP servers add and drop tools while a
    process runs): what one session is offered. A tool of `source` it leaves out is `refused` with `reason`."""

    def __init__(self, source: ToolRegistry, allows: Callable[[str], bool], reason: Callable[[str], str]):
        super().__init__()
        self.source = source
        self.allows = allows
        self.reason = reason
        self._seen = -1

    def _sync(self) -> None:
        current = self.source.current()
        if self._seen != current:
            self._tools = {name: t for name, t in self.source.items() if self.allows(name)}
            self._specs = None
            self._seen = self.version = current

    def current(self) -> int:
        self._sync()
        return self.version

    def register(self, tool: Tool) -> None:
        raise TypeError("register tools with the registry a ToolView shows, not the view")

    def unregister(self, name: str) -> None:
        raise TypeError("unregister tools from the registry a ToolView shows, not the view")

    def get(self, name: str) -> Tool | None:
        self._sync()
        return super().get(name)

    def names(self) -> list[str]:
        self._sync()
        return super().names()

    def specs(self) -> list[ToolSpec]:
        self._sync()
        return super().specs()

    def items(self) -> list[tuple[str, Tool]]:
        self._sync()
        return super().items()

    def is_read_only(self, name: str) -> bool:
        self._sync()
        return super().is_read_only(name)

    def refused(self, name: str) -> str | None:
        if self.source.get(name) is not None and not self.allows(name):
            return self.reason(name)
        return self.source.refused(name)

    def restricted(self, allowed: set[str]) -> ToolRegistry:
        """A narrower view (a sub-agent's tools): what this one refuses stays refused, with the same reason."""
        return ToolView(self, lambda name: name in allowed,
                        lambda name: f"The tool '{name}' was not given to this sub-agent.")
