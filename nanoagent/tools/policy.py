"""Which tools a session may use: profiles, allow and deny lists, per session-key pattern.

A session's tools are decided in steps, each later one overriding what an earlier one said of a name:
1. a profile, the preset the session starts from: `minimal` (reading files, memory search, web_fetch), `coding`
   (those, plus writing, editing and exec) or `full` (every tool). It is the most specific `tools.policies` rule
   that names one; else `tools.groupProfile` in a group chat (as its channel says: `Incoming.private`), else
   `tools.profile`;
2. `tools.allow` adds tools, then `tools.deny` takes them away (so a name in both is denied);
3. each `tools.policies` rule whose session-key pattern matches, least specific first (`channels.keys.matching`):
   its `allow`, then its `deny`.
Names and patterns are tool names where `*` stands for any run of characters (`mcp__*`, `mcp__github__*`).

A tool a session may not use is not offered to the model at all (`ToolView`), and a call to it anyway is refused
with the step that took it away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nanoagent.channels.keys import matches, matching
from nanoagent.config.schema import ToolsConfig
from nanoagent.providers.base import ToolSpec
from nanoagent.tools.base import Tool
from nanoagent.tools.registry import ToolRegistry

MINIMAL = ("read_file", "list_dir", "glob", "grep", "memory_search", "memory_get", "web_fetch")
PROFILES: dict[str, tuple[str, ...]] = {
    "minimal": MINIMAL,
    "coding": (*MINIMAL, "write_file", "edit_file", "exec"),
    "full": ("*",),
}


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
        allowed = any(matches(p, name) for p in PROFILES[self.profile])
        for step in self.steps:
            if matches(step.pattern, name):
                allowed = step.allow
        return allowed

    def reason(self, name: str) -> str:
        """Why `name` is refused here (call only for a refused one)."""
        denied = next((s for s in reversed(self.steps) if matches(s.pattern, name)), None)
        why = (f"`{denied.pattern}` in {denied.source} denies it" if denied is not None
               else f"it is not in the `{self.profile}` profile ({self.chosen_by})")
        return (f"The tool '{name}' is not allowed in this session: {why}. Do without it; the owner can change "
                "tools.profile, tools.allow, tools.deny or tools.policies in config.json.")


@dataclass(frozen=True)
class ToolPolicy:
    """`tools.profile`, `tools.groupProfile`, `tools.allow`, `tools.deny` and `tools.policies` as one decision."""

    settings: ToolsConfig

    def for_session(self, key: str, group: bool = False, guest: bool = False) -> Allowed:
        s = self.settings
        rules = matching(key, [(pattern, (pattern, rule)) for pattern, rule in s.policies.items()])
        profile, chosen_by = ((s.group_profile, "tools.groupProfile, for group chats") if group
                              else (s.profile, "tools.profile"))
        for pattern, rule in rules:  # the most specific rule naming a profile wins
            if rule.profile:
                profile, chosen_by = rule.profile, f'tools.policies["{pattern}"].profile'
        steps = [*(Step(p, True, "tools.allow") for p in s.allow), *(Step(p, False, "tools.deny") for p in s.deny)]
        for pattern, rule in rules:
            steps += [Step(p, True, f'tools.policies["{pattern}"].allow') for p in rule.allow]
            steps += [Step(p, False, f'tools.policies["{pattern}"].deny') for p in rule.deny]
        return Allowed(profile, chosen_by, tuple(steps))

    def unknown(self, names: list[str]) -> list[str]:
        """A line for each allow or deny pattern that names none of `names` (a typo denies nothing). MCP tools
        (`mcp__...`) are left out: a server's tools may not be known yet."""
        s = self.settings
        where = [("tools.allow", p) for p in s.allow] + [("tools.deny", p) for p in s.deny]
        for key, rule in s.policies.items():
            where += [(f'tools.policies["{key}"].allow', p) for p in rule.allow]
            where += [(f'tools.policies["{key}"].deny', p) for p in rule.deny]
        return [f"{setting} names `{pattern}`, which is no tool here; the tools are {', '.join(names)}."
                for setting, pattern in where
                if not pattern.startswith("mcp__") and not any(matches(pattern, name) for name in names)]

    def summary(self) -> list[str]:
        """The policy in lines, for `nanoagent status`: each profile in use with its tools, then each rule."""
        s = self.settings
        lines = [f"{_profile_text(s.profile)} (the terminal, direct chats, cron, HTTP)",
                 f"group chats: {_profile_text(s.group_profile)}"]
        changes = _changes(s.allow, s.deny)
        if changes:
            lines.append(f"everywhere: {changes}")
        for pattern, rule in s.policies.items():
            said = " ".join(p for p in (_profile_text(rule.profile) if rule.profile else "",
                                        _changes(rule.allow, rule.deny)) if p)
            lines.append(f"{pattern}: {said or 'no change'}")
        return lines


def _profile_text(profile: str) -> str:
    return f"{profile}: every tool" if profile == "full" else f"{profile}: {', '.join(PROFILES[profile])}"


def _changes(allow: list[str], deny: list[str]) -> str:
    return " ".join([*(f"+{p}" for p in allow), *(f"-{p}" for p in deny)])


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
