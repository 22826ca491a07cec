"""The shape of config.json. Field names are snake_case here and camelCase on disk.

Every number has the range config.json may set it in (`bounded`); the loader refuses a value outside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def bounded(default: Any, low: float, high: float) -> Any:
    """A numeric setting that config.json may set from `low` to `high`, both included."""
    return field(default=default, metadata={"range": (low, high)})


@dataclass
class AgentDefaults:
    model: str = "anthropic/claude-sonnet-4-5"
    max_tokens: int = bounded(8192, 1, 1_000_000)  # per reply
    context_window_tokens: int = bounded(200_000, 1_000, 100_000_000)
    max_tool_iterations: int = bounded(100, 1, 10_000)  # model calls in one turn
    temperature: float | None = bounded(None, 0, 2)
    timezone: str | None = None
    fallback_models: list[str] = field(default_factory=list)
    thinking_budget: int = bounded(0, 0, 1_000_000)  # 0: no extended thinking
    stream_idle_timeout: float = bounded(90.0, 1, 3600)  # seconds without data before a call fails
    max_retries: int = bounded(4, 0, 20)
    retry_base_delay: float = bounded(1.0, 0, 60)  # seconds; doubles with each retry
    max_retry_wait: float = bounded(60.0, 0, 3600)  # seconds; the most one wait may last
    request_deadline: float = bounded(180.0, 1, 86_400)  # seconds until a call's reply begins, over all its retries


@dataclass
class ProviderConfig:
    api_key: str | None = None
    api_base: str | None = None


@dataclass
class ExecConfig:
    timeout: int = bounded(60, 1, 86_400)  # seconds a command may run
    sandbox: str = "auto"  # "auto" (bwrap when it works) | "bwrap" (only sandboxed) | "none"
    network: bool = False  # commands in the sandbox reach the network
    approve: str | None = None  # "never" | "unsandboxed" | "always"; default: never with a sandbox, else unsandboxed
    env: list[str] = field(default_factory=list)  # variable names passed to commands (secrets only when named)
    read_only_paths: list[str] = field(default_factory=list)  # more folders commands may read
    writable_paths: list[str] = field(default_factory=list)  # more folders commands may write
    max_processes: int = bounded(256, 8, 100_000)
    memory_mb: int = bounded(4096, 64, 1_048_576)
    tmp_mb: int = bounded(512, 1, 1_048_576)  # size of the sandbox's private /tmp


@dataclass
class ToolsConfig:
    restrict_to_workspace: bool = True
    max_result_chars: int = bounded(16_000, 100, 10_000_000)
    exec: ExecConfig = field(default_factory=ExecConfig)


@dataclass
class MemoryConfig:
    recent_history_tokens: int = bounded(4000, 0, 1_000_000)  # history entries Dream has not processed, shown to the model
    dream_batch_size: int = bounded(20, 1, 1000)  # history entries one Dream run takes
    dream_max_iterations: int = bounded(30, 1, 1000)  # tool steps Dream's editing phase may take
    dream_model: str | None = None  # defaults to agents.defaults.model
    embedding_model: str | None = None  # hybrid memory search; off (None) by default


@dataclass
class AgentsConfig:
    defaults: AgentDefaults = field(default_factory=AgentDefaults)


@dataclass
class Config:
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    @property
    def defaults(self) -> AgentDefaults:
        return self.agents.defaults

    def provider(self, name: str) -> ProviderConfig:
        return self.providers.get(name) or ProviderConfig()
