"""The shape of config.json. Field names are snake_case here and camelCase on disk."""

from __future__ import annotations

from dataclasses import dataclass, field

from nanoagent.errors import ConfigError


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


SEARCH_PROVIDERS = ("brave", "tavily", "searxng", "duckduckgo")


@dataclass
class WebSearchConfig:
    provider: str = ""  # one of SEARCH_PROVIDERS; empty: web_search says how to set one up
    api_key: str | None = None  # brave and tavily; else BRAVE_API_KEY / TAVILY_API_KEY
    api_base: str | None = None  # the backend's base URL, for a proxy or a stand-in
    url: str | None = None  # searxng: the instance to ask

    def __post_init__(self) -> None:
        if self.provider and self.provider not in SEARCH_PROVIDERS:
            raise ConfigError(f"`tools.web.search.provider` is {self.provider!r}; use one of "
                              f"{', '.join(SEARCH_PROVIDERS)} (duckduckgo needs no key), or delete the key.")


@dataclass
class WebConfig:
    allow_private: list[str] = field(default_factory=list)  # CIDRs web_fetch may reach besides public addresses
    max_bytes: int = 5_000_000  # per response, counted before and after decompression
    timeout: float = 30.0  # seconds for a whole fetch, redirects included
    max_chars: int = 15_000  # default length of web_fetch's result
    search: WebSearchConfig = field(default_factory=WebSearchConfig)

    def __post_init__(self) -> None:
        import ipaddress

        for entry in self.allow_private:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ConfigError(f"`tools.web.allowPrivate` holds {entry!r}, which is not a network; write CIDRs "
                                  "such as \"192.168.1.0/24\" or \"fd7a:115c:a1e0::/48\", or remove it.") from None


@dataclass
class ToolsConfig:
    restrict_to_workspace: bool = True
    max_result_chars: int = 16_000
    exec: ExecConfig = field(default_factory=ExecConfig)
    web: WebConfig = field(default_factory=WebConfig)


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
