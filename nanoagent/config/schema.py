"""The shape of config.json. Field names are snake_case here and camelCase on disk."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AgentDefaults:
    model: str = "anthropic/claude-sonnet-4-5"
    max_tokens: int = 8192
    context_window_tokens: int = 200_000
    max_tool_iterations: int = 100
    temperature: float | None = None
    timezone: str | None = None
    fallback_models: list[str] = field(default_factory=list)
    thinking_budget: int = 0
    stream_idle_timeout: float = 90.0
    max_retries: int = 4
    retry_base_delay: float = 1.0
    max_retry_wait: float = 60.0


@dataclass
class ProviderConfig:
    api_key: str | None = None
    api_base: str | None = None


@dataclass
class ExecConfig:
    timeout: int = 60
    sandbox: str = "auto"  # "auto" (bwrap when it works) | "bwrap" (only sandboxed) | "none"
    network: bool = False  # commands in the sandbox reach the network
    approve: str | None = None  # "never" | "unsandboxed" | "always"; default: never with a sandbox, else unsandboxed
    env: list[str] = field(default_factory=list)  # variable names passed to commands (secrets only when named)
    read_only_paths: list[str] = field(default_factory=list)  # more folders commands may read
    writable_paths: list[str] = field(default_factory=list)  # more folders commands may write
    max_processes: int = 256
    memory_mb: int = 4096
    tmp_mb: int = 512  # size of the sandbox's private /tmp


@dataclass
class ToolsConfig:
    restrict_to_workspace: bool = True
    max_result_chars: int = 16_000
    exec: ExecConfig = field(default_factory=ExecConfig)


@dataclass
class MemoryConfig:
    recent_history_tokens: int = 4000  # history entries Dream has not processed, shown to the model
    dream_batch_size: int = 20  # history entries one Dream run takes
    dream_max_iterations: int = 30  # tool steps Dream's editing phase may take
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
