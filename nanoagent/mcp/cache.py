"""Each MCP server's tool list on disk, so a start can offer its tools before the server runs.

One file per server, `$NANOAGENT_HOME/cache/mcp/<name>.json`, holding a hash of the server's config: a list
cached for another command, URL or environment is not used. Written whenever a server lists its tools.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nanoagent.config.schema import McpServerConfig
from nanoagent.fsutil import atomic_write
from nanoagent.mcp.names import safe

VERSION = 1


@dataclass(frozen=True)
class McpTool:
    """A tool as its server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False  # the server's readOnlyHint


def config_key(config: McpServerConfig) -> str:
    """What decides which program answers: a change to any of it makes the cached list stale."""
    relevant = {k: v for k, v in asdict(config).items() if k not in ("timeout", "stop_grace", "enabled")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


class ToolCache:
    def __init__(self, directory: Path):
        self.directory = directory

    def path(self, name: str) -> Path:
        return self.directory / f"{safe(name)}.json"

    def load(self, name: str, config: McpServerConfig) -> list[McpTool] | None:
        """The cached list, or None when there is none for this config (or it cannot be read)."""
        try:
            data = json.loads(self.path(name).read_text(encoding="utf-8"))
            if data.get("version") != VERSION or data.get("key") != config_key(config):
                return None
            return [McpTool(str(t["name"]), str(t.get("description") or ""), dict(t.get("inputSchema") or {}),
                            bool(t.get("readOnly"))) for t in data["tools"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def save(self, name: str, config: McpServerConfig, tools: list[McpTool]) -> None:
        data = {"version": VERSION, "server": name, "key": config_key(config),
                "tools": [{"name": t.name, "description": t.description, "inputSchema": t.input_schema,
                           "readOnly": t.read_only} for t in tools]}
        atomic_write(self.path(name), json.dumps(data, ensure_ascii=False) + "\n", mode=0o600)

    def forget(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)
