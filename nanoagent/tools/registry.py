"""The set of tools an agent may call, in a stable order (so the prompt cache keeps hitting)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nanoagent.providers.base import ToolSpec
from nanoagent.tools.base import Tool

if TYPE_CHECKING:
    from nanoagent.tools.fs import WriteHook


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None):
        self._tools: dict[str, Tool] = {}
        self._specs: list[ToolSpec] | None = None
        self.version = 0  # changes with the tool list (MCP servers add and drop tools while a process runs)
        for t in tools or ():
            self.register(t)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool
        self._specs = None
        self.version += 1

    def unregister(self, name: str) -> None:
        if self._tools.pop(name, None) is not None:
            self._specs = None
            self.version += 1

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def items(self) -> list[tuple[str, Tool]]:
        return list(self._tools.items())

    def current(self) -> int:
        """`version`, with any change of a registry this one shows taken in first (`tools/policy.py` ToolView)."""
        return self.version

    def refused(self, name: str) -> str | None:
        """Why a call to `name` is refused when this registry leaves out a tool it knows of (a policy, a
        sub-agent's subset); None for a name it simply does not have."""
        return None

    def specs(self) -> list[ToolSpec]:
        if self._specs is None:
            self._specs = [t.spec() for t in self._tools.values()]
        return self._specs

    def is_read_only(self, name: str) -> bool:
        tool = self._tools.get(name)
        return bool(tool and tool.read_only)

    def restricted(self, allowed: set[str]) -> ToolRegistry:
        return ToolRegistry([t for name, t in self._tools.items() if name in allowed])


def file_tools(on_write: WriteHook | None = None) -> list[Tool]:
    """The file tools; `on_write` sees every write inside the workspace (see tools/fs.py WriteHook)."""
    from nanoagent.tools.fs import glob, grep, list_dir, read_file, writing_tools

    write_file, edit_file = writing_tools(on_write)
    return [read_file, write_file, edit_file, list_dir, glob, grep]
