"""The shape of config.json. Field names are snake_case here and camelCase on disk.

Every number has the range config.json may set it in (`bounded`); the loader refuses a value outside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nanoagent.errors import ConfigError


def bounded(default: Any, low: float, high: float) -> Any:
    """A numeric setting that config.json may set from `low` to `high`, both included."""
    return field(default=default, metadata={"range": (low, high)})


@dataclass
class SubagentsConfig:
    """What the `spawn` tool may start: sub-agents, each in a session of its own."""

    max_depth: int = bounded(2, 0, 10)  # levels below the user's turn; at the limit `spawn` is not offered (0: never)
    max_concurrent: int = bounded(4, 1, 64)  # runs working at once in this process; more wait their turn
    max_iterations: int = bounded(40, 1, 10_000)  # model calls in one sub-agent run
    timeout: float = bounded(600.0, 1, 86_400)  # seconds a foreground spawn waits before the run goes to the background
    summary_model: str | None = None  # makes `context: summary`; defaults to the spawning run's model


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
    subagents: SubagentsConfig = field(default_factory=SubagentsConfig)


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
    max_bytes: int = bounded(5_000_000, 1_000, 1_000_000_000)  # per response, before and after decompression
    timeout: float = bounded(30.0, 1, 3600)  # seconds for a whole fetch, redirects included
    max_chars: int = bounded(15_000, 100, 100_000)  # default length of web_fetch's result
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
    max_result_chars: int = bounded(16_000, 100, 10_000_000)
    exec: ExecConfig = field(default_factory=ExecConfig)
    web: WebConfig = field(default_factory=WebConfig)


@dataclass
class MemoryConfig:
    recent_history_tokens: int = bounded(4000, 0, 1_000_000)  # history entries Dream has not processed, shown to the model
    dream_batch_size: int = bounded(20, 1, 1000)  # history entries one Dream run takes
    dream_max_iterations: int = bounded(30, 1, 1000)  # tool steps Dream's editing phase may take
    dream_model: str | None = None  # defaults to agents.defaults.model
    embedding_model: str | None = None  # hybrid memory search; off (None) by default


@dataclass
class HttpConfig:
    """The gateway's OpenAI-compatible endpoint; every request but /health needs the token in run/http-token."""

    enabled: bool = False
    host: str = "127.0.0.1"  # anything but loopback is reachable by others: still only with the token
    port: int = bounded(8765, 1, 65535)


@dataclass
class GatewayConfig:
    max_concurrent_turns: int = bounded(4, 1, 1000)  # sessions whose turns run at the same time
    shutdown_grace: float = bounded(10.0, 0, 3600)  # seconds running turns get to finish on SIGTERM
    http: HttpConfig = field(default_factory=HttpConfig)


@dataclass
class TelegramConfig:
    enabled: bool = False
    token: str | None = None  # from @BotFather; the TELEGRAM_BOT_TOKEN variable overrides it
    allow_from: list[int] = field(default_factory=list)  # numeric user ids; empty: nobody until paired
    group_policy: str = "mention"  # in groups: "mention" (mentioned or replied to) | "all" | "off"
    streaming: bool = True  # edit the reply as it grows (at most about once a second); false: send it at the end
    api_base: str = "https://api.telegram.org"  # requests go to {apiBase}/bot{token}/{method}


@dataclass
class ChannelsConfig:
    telegram: TelegramConfig = field(default_factory=TelegramConfig)


@dataclass
class AgentsConfig:
    defaults: AgentDefaults = field(default_factory=AgentDefaults)


@dataclass
class Config:
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    channels: ChannelsConfig = field(default_factory=ChannelsConfig)

    @property
    def defaults(self) -> AgentDefaults:
        return self.agents.defaults

    def provider(self, name: str) -> ProviderConfig:
        return self.providers.get(name) or ProviderConfig()
