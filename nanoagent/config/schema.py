"""The shape of config.json. Field names are snake_case here and camelCase on disk.

Every number has the range config.json may set it in (`bounded`); the loader refuses a value outside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from nanoagent.errors import ConfigError

T = TypeVar("T")


def bounded(default: Any, low: float, high: float) -> Any:
    """A numeric setting that config.json may set from `low` to `high`, both included."""
    return field(default=default, metadata={"range": (low, high)})


def choice(default: str | None, options: tuple[str, ...]) -> Any:
    """A setting that takes one of `options`; its default (None or "": unset) is always allowed. The class's
    `__post_init__` calls `check_choices`, so a config built in code is held to them as config.json is."""
    return field(default=default, metadata={"choices": options})


def check_choices(settings: Any, where: str) -> None:
    """ConfigError naming the key and its choices for the first `choice` setting of `settings` outside them."""
    for f in dataclasses.fields(settings):
        options, value = f.metadata.get("choices"), getattr(settings, f.name)
        if options and value != f.default and value not in options:
            head, *rest = f.name.split("_")
            key = head + "".join(part.title() for part in rest)
            raise ConfigError(f"`{where}.{key}` is {value!r}; use one of {', '.join(options)}, or delete the key.")


@dataclass
class SubagentsConfig:
    """What the `spawn` tool may start: sub-agents, each in a session of its own."""

    max_depth: int = bounded(2, 0, 10)  # levels below the user's turn; at the limit `spawn` is not offered (0: never)
    max_concurrent: int = bounded(4, 1, 64)  # runs working at once in this process; more wait their turn
    max_iterations: int = bounded(40, 1, 10_000)  # model calls in one sub-agent run
    timeout: float = bounded(600.0, 1, 86_400)  # seconds a foreground spawn waits before the run goes to the background
    summary_model: str | None = None  # makes `context: summary`; default: agents.defaults.backgroundModel, else the
    # spawning run's model


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
    # a cheaper model for housekeeping: the heartbeat, the memory flush, Dream, archive summaries and a sub-agent's
    # context summary use it where their own setting is unset (`background`); None: the model each would use anyway
    background_model: str | None = None
    subagents: SubagentsConfig = field(default_factory=SubagentsConfig)


@dataclass
class ModelPrice:
    """What a model costs, USD per million tokens (`providers.<name>.prices.<model>`); cache reads and writes cost the
    input price unless given."""

    input: float | None = bounded(None, 0, 1_000_000)
    output: float | None = bounded(None, 0, 1_000_000)
    cache_read: float | None = bounded(None, 0, 1_000_000)
    cache_write: float | None = bounded(None, 0, 1_000_000)

    def __post_init__(self) -> None:
        if self.input is None or self.output is None:
            raise ConfigError("a price in `providers.<name>.prices` needs both `input` and `output` (USD per million "
                              "tokens), e.g. {\"input\": 3.0, \"output\": 15.0}.")


@dataclass
class ProviderConfig:
    api_key: str | None = None
    api_base: str | None = None
    prices: dict[str, ModelPrice] = field(default_factory=dict)  # model name -> its price, over the bundled table's


@dataclass
class ExecConfig:
    timeout: int = bounded(60, 1, 86_400)  # seconds a command may run
    sandbox: str = choice("auto", ("auto", "bwrap", "none"))  # auto: bwrap when it works; bwrap: only sandboxed
    network: bool = False  # commands in the sandbox reach the network
    approve: str | None = choice(None, ("never", "unsandboxed", "always"))  # default: never with a sandbox, else unsandboxed
    env: list[str] = field(default_factory=list)  # variable names passed to commands (secrets only when named)
    read_only_paths: list[str] = field(default_factory=list)  # more folders commands may read
    writable_paths: list[str] = field(default_factory=list)  # more folders commands may write
    max_processes: int = bounded(256, 8, 100_000)
    memory_mb: int = bounded(4096, 64, 1_048_576)
    tmp_mb: int = bounded(512, 1, 1_048_576)  # size of the sandbox's private /tmp

    def __post_init__(self) -> None:
        check_choices(self, "tools.exec")


SEARCH_PROVIDERS = ("brave", "tavily", "searxng", "duckduckgo")


@dataclass
class WebSearchConfig:
    provider: str = choice("", SEARCH_PROVIDERS)  # empty: web_search says how to set one up
    api_key: str | None = None  # brave and tavily; else BRAVE_API_KEY / TAVILY_API_KEY
    api_base: str | None = None  # the backend's base URL, for a proxy or a stand-in
    url: str | None = None  # searxng: the instance to ask

    def __post_init__(self) -> None:
        check_choices(self, "tools.web.search")


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
class AttachmentsConfig:
    """Files attached to a message (`agent -a`, `/attach`, Telegram photos)."""

    max_image_bytes: int = bounded(5_000_000, 1_000, 100_000_000)  # per image (Anthropic takes up to 5 MB)
    max_text_bytes: int = bounded(200_000, 1_000, 10_000_000)  # per text file
    max_stdin_bytes: int = bounded(1_000_000, 1_000, 100_000_000)  # text piped into `agent -m`
    image_models: list[str] = field(default_factory=list)  # models sent images whatever the bundled table says


TOOL_PROFILES = ("minimal", "coding", "full")  # the presets of `tools/policy.py`


@dataclass
class ToolRuleConfig:
    """The tools of the sessions one `tools.policies` key pattern names (`telegram:-100*`): a profile, then tool names
    or `*` patterns added (`allow`) and taken away (`deny`)."""

    profile: str | None = choice(None, TOOL_PROFILES)
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_choices(self, "tools.policies.<pattern>")


@dataclass
class TranscribeConfig:
    """Voice notes and audio files transcribed before the turn, through `POST {apiBase}/audio/transcriptions`."""

    model: str = ""  # empty: off. "groq/whisper-large-v3-turbo", "openai/whisper-1", or a local server's model name
    api_base: str | None = None  # default: the provider's (openai, groq); required for any other model
    api_key: str | None = None  # default: the provider's key (providers.<name>.apiKey, OPENAI_API_KEY, GROQ_API_KEY)
    max_bytes: int = bounded(5_000_000, 1_000, 25_000_000)  # a longer note's first bytes only (25 MB: OpenAI's cap)
    timeout: float = bounded(120.0, 1, 3600)  # seconds for one transcription

    def __post_init__(self) -> None:
        provider, slash, _ = self.model.partition("/")
        if self.model and not self.api_base and not (slash and provider in ("openai", "groq")):
            raise ConfigError(f"`tools.transcribe.model` is {self.model!r}, which names no provider; write "
                              "\"openai/whisper-1\" or \"groq/whisper-large-v3-turbo\", or set tools.transcribe.apiBase "
                              "to your whisper server.")


@dataclass
class BrowserConfig:
    """The browser tool: the system's Chromium driven through Playwright (the `browser` extra)."""

    enabled: bool = True  # offered when the executable and Playwright are found
    executable: str | None = None  # default: chromium (or chromium-browser, google-chrome) on PATH
    profile: str | None = None  # default: $NANOAGENT_HOME/browser/<workspace>/profile
    idle_seconds: float = bounded(300.0, 1, 86_400)  # the browser closes after this long unused
    timeout_seconds: float = bounded(30.0, 1, 3600)  # one action (a page load) is cut after this long
    headless: bool = True
    max_download_bytes: int = bounded(50_000_000, 1_000, 10_000_000_000)  # per download, kept under media/


@dataclass
class ToolsConfig:
    restrict_to_workspace: bool = True
    max_result_chars: int = bounded(16_000, 100, 10_000_000)
    exec: ExecConfig = field(default_factory=ExecConfig)
    web: WebConfig = field(default_factory=WebConfig)
    attachments: AttachmentsConfig = field(default_factory=AttachmentsConfig)
    browser: BrowserConfig = field(default_factory=BrowserConfig)
    transcribe: TranscribeConfig = field(default_factory=TranscribeConfig)
    # which tools a session is offered (`tools/policy.py`): a profile, then allow adds and deny removes
    profile: str = choice("full", TOOL_PROFILES)  # the owner's: the terminal, the owner's chats, cron, HTTP
    guest_profile: str = choice("minimal", TOOL_PROFILES)  # the direct chats of anyone but the owner
    group_profile: str = choice("minimal", TOOL_PROFILES)  # group chats, as each channel tells them
    allow: list[str] = field(default_factory=list)  # tool names, patterns (`mcp__*`) or capabilities (`shell`)
    deny: list[str] = field(default_factory=list)
    policies: dict[str, ToolRuleConfig] = field(default_factory=dict)  # session-key pattern -> its rule

    def __post_init__(self) -> None:
        check_choices(self, "tools")


@dataclass
class FlushConfig:
    """The memory flush: a silent turn before older turns are archived, in which the agent writes down what must
    outlast the cut (a dated note memory/YYYY-MM-DD.md, or MEMORY.md)."""

    enabled: bool = True
    model: str | None = None  # default: agents.defaults.backgroundModel, else memory.dreamModel, else the session's
    timeout: float = bounded(60.0, 0.01, 3600)  # seconds; past it the archive goes on without the flush


@dataclass
class AutoRecallConfig:
    """Memory found for each person's message without a model call, put in that turn's runtime block."""

    enabled: bool = True
    max_tokens: int = bounded(400, 0, 20_000)  # the recalled text's size at most, estimated without a tokenizer
    min_score: float = bounded(0.0, 0.0, 1_000_000)  # hits scoring lower are not recalled (the searcher's units)


@dataclass
class MemoryConfig:
    recent_history_tokens: int = bounded(4000, 0, 1_000_000)  # history entries Dream has not processed, shown to the model
    dream_batch_size: int = bounded(20, 1, 1000)  # history entries one Dream run takes
    dream_max_iterations: int = bounded(30, 1, 1000)  # tool steps Dream's editing phase may take
    dream_model: str | None = None  # default: agents.defaults.backgroundModel, else agents.defaults.model
    embedding_model: str | None = None  # hybrid memory search; off (None) by default
    dream_schedule: str = "0 */2 * * *"  # cron expression for Dream in the gateway and `cron tick`; "" turns it off
    flush: FlushConfig = field(default_factory=FlushConfig)
    auto_recall: AutoRecallConfig = field(default_factory=AutoRecallConfig)


@dataclass
class HeartbeatConfig:
    """A light turn over the standing tasks in HEARTBEAT.md; without task lines it makes no model call."""

    interval_minutes: int = bounded(30, 1, 10_080)
    active_hours: str = ""  # "08:00-22:00" in agents.defaults.timezone (else local time); "" means always
    model: str | None = None  # a cheaper model for heartbeats; default: agents.defaults.backgroundModel, else the agent's
    target: str | None = None  # "telegram:<chat>", "cli:<session>" or "none"; default: the most recently active chat

    def __post_init__(self) -> None:
        active_window(self.active_hours)  # a malformed window fails when config.json is read
        if self.target is not None and self.target != "none" and ":" not in self.target:
            raise ConfigError(f"`heartbeat.target` is {self.target!r}; write \"telegram:<chat id>\", "
                              "\"cli:<session>\" or \"none\", or delete the key for the most recently active chat.")


def active_window(text: str) -> tuple[int, int] | None:
    """`heartbeat.activeHours` as (start, end) minutes after midnight; None for "" (always). End may be 24:00, and
    an end before the start spans midnight ("22:00-06:00")."""
    if not text.strip():
        return None
    try:
        start, end = (_minutes(part) for part in text.split("-"))
    except ValueError:
        raise ConfigError(f"`heartbeat.activeHours` is {text!r}; write it as \"HH:MM-HH:MM\" (e.g. \"08:00-22:00\"), "
                          "or \"\" for any time of day.") from None
    return start, end


def _minutes(part: str) -> int:
    hours, minutes = part.strip().split(":")
    if not (hours.isdigit() and minutes.isdigit() and len(minutes) == 2):
        raise ValueError(part)
    value = int(hours) * 60 + int(minutes)
    if int(minutes) >= 60 or value > 24 * 60:
        raise ValueError(part)
    return value


@dataclass
class HttpConfig:
    """The gateway's OpenAI-compatible endpoint; every request but /health needs the token in run/http-token."""

    enabled: bool = False
    host: str = "127.0.0.1"  # anything but loopback is reachable by others: still only with the token
    port: int = bounded(8765, 1, 65535)
    # Host names requests may name besides loopback, `host` and this machine's addresses (a reverse proxy's name)
    allowed_hosts: list[str] = field(default_factory=list)


@dataclass
class WebAppConfig:
    """`gateway.web`: how the web app behaves (the listener it is served on is `gateway.http`)."""

    # a new chat's title from one short call to agents.defaults.backgroundModel (else the chat's model), counted in the
    # spend ledger as `title`; off: the first words of its first message
    model_titles: bool = False
    # days a signed-in device (browser) stays signed in without being used; its cookie lasts as long
    device_idle_days: int = bounded(30, 1, 3650)

@dataclass
class GatewayConfig:
    max_concurrent_turns: int = bounded(4, 1, 1000)  # sessions whose turns run at the same time
    shutdown_grace: float = bounded(10.0, 0, 3600)  # seconds running turns get to finish on SIGTERM
    # seconds the event loop may stop answering before the gateway exits to be restarted (0: no watchdog)
    watchdog_seconds: float = bounded(60.0, 0, 86_400)
    http: HttpConfig = field(default_factory=HttpConfig)
    web: WebAppConfig = field(default_factory=WebAppConfig)


# for the channels' settings classes (each in its folder, `channels/<name>/settings.py`): what they share
GROUP_POLICIES = ("mention", "all", "off")


def ids() -> Any:
    """`allowFrom`: who may talk to a channel, as strings (the channel normalises them); a number is taken as its
    digits, so Telegram's numeric ids may be written either way."""
    return field(default_factory=list, metadata={"digits": True})


@dataclass
class ReplyLimitConfig:
    """`channels.replyLimit`, for every channel: at most `perThread` replies in one chat or thread and `perSender`
    to one sender within `windowSeconds`; past either the message gets no model call and no reply (one log line).
    It stops two bots answering each other, whatever headers they keep. 0 turns a bound off."""

    per_thread: int = bounded(30, 0, 1_000_000)
    per_sender: int = bounded(60, 0, 1_000_000)
    window_seconds: float = bounded(600.0, 1, 7 * 86_400)


@dataclass
class ChannelsConfig:
    """`channels` in config.json: `replyLimit`, shared by every channel, and one block per channel, read by the
    loader with the settings class the channel's folder declares (`Channel.settings_class`). A channel's settings
    are read through the channel (`registry.get(name).settings(config)`), which gives its defaults when config.json
    has no block for it, with its environment variables (`Channel.env`) applied."""

    reply_limit: ReplyLimitConfig = field(default_factory=ReplyLimitConfig)
    blocks: dict[str, Any] = field(default_factory=dict)  # channel name -> its settings, an instance of its class
    # where `of` reads a channel's variables when it makes a block's defaults: the loader's environment (a config
    # built in code reads none, as it applies no variable anywhere)
    environment: Mapping[str, str] = field(default_factory=dict, repr=False)

    def of(self, name: str, cls: type[T], env: Mapping[str, str] = MappingProxyType({})) -> T:
        """Channel `name`'s settings: its block, else (kept from now on) `cls()` with the variables of `env` (setting
        path -> variable) that the environment sets."""
        if name not in self.blocks:
            self.blocks[name] = apply_env(cls(), env, self.environment)
        found = self.blocks[name]
        if not isinstance(found, cls):
            raise TypeError(f"channels.{name} holds a {type(found).__name__}, not its settings class {cls.__name__}")
        return found


def apply_env(settings: T, env: Mapping[str, str], environment: Mapping[str, str]) -> T:
    """`settings` with each setting named in `env` (a dotted snake_case path -> the variable that overrides it) set
    from `environment` where that variable is set and not empty."""
    for path, variable in env.items():
        if value := environment.get(variable):
            *parents, leaf = path.split(".")
            target: Any = settings
            for part in parents:
                target = getattr(target, part)
            setattr(target, leaf, value)
    return settings


MCP_TRANSPORTS = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamable_http": "http", "sse": "sse"}


@dataclass
class McpServerConfig:
    """One MCP server, in the shape Claude Desktop and Claude Code use: `command` (stdio) or `url` (remote)."""

    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # added to the server's environment
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # sent with every request to `url`
    type: str | None = None  # "stdio" | "http" (streamable HTTP) | "sse"; default: stdio with a command, else http
    transport: str | None = None  # the same as `type`, as some clients spell it
    timeout: float = bounded(60.0, 1, 86_400)  # seconds for starting and for each tool call
    stop_grace: float = bounded(2.0, 0, 60)  # seconds a local server gets to exit once its stdin closes
    enabled: bool = True

    def kind(self, name: str) -> str:
        """"stdio", "http" or "sse"; ConfigError with the fix when the entry cannot be used."""
        where = f"`mcpServers.{name}`"
        given = self.type or self.transport
        if given is not None and given not in MCP_TRANSPORTS:
            raise ConfigError(f"{where} has type {given!r}; use \"stdio\", \"http\" or \"sse\".")
        if self.command and self.url:
            raise ConfigError(f"{where} has both `command` and `url`; keep `command` for a local server or `url` "
                              "for a remote one.")
        if not self.command and not self.url:
            raise ConfigError(f"{where} has neither `command` nor `url`; add `command` (and `args`) to run a local "
                              "server, or `url` for a remote one.")
        kind = MCP_TRANSPORTS[given] if given else ("stdio" if self.command else "http")
        if kind == "stdio" and not self.command:
            raise ConfigError(f"{where} has no `command`; add the program to run (and its `args`), or a `url`.")
        if kind != "stdio" and not self.url:
            raise ConfigError(f"{where} has no `url`; add the server's address, or a `command` to run it locally.")
        return kind


@dataclass
class McpServeConfig:
    """`mcp.serve`: what `nanoagent mcp serve` lets an MCP client (another agent) do."""

    # where send_message and cron_add may deliver: "owner" (the owner's own chats and terminal sessions) and
    # session-key patterns ("telegram:*", "email:*"); a target must also be one the channels' settings allow
    targets: list[str] = field(default_factory=lambda: ["owner"])


@dataclass
class McpConfig:
    serve: McpServeConfig = field(default_factory=McpServeConfig)


@dataclass
class CronConfig:
    """Scheduled jobs (`nanoagent cron`, the cron tool): run by the gateway, or by `nanoagent cron tick`."""

    enabled: bool = True  # the gateway runs due jobs; `cron tick` runs them either way
    catch_up_hours: float = bounded(12.0, 0, 8760)  # a run missed by more than this is skipped, not caught up
    max_concurrent_runs: int = bounded(2, 1, 100)  # jobs running at the same time
    run_timeout: float = bounded(600.0, 1, 86_400)  # seconds one run may take; a job's own timeout overrides it


@dataclass
class BudgetConfig:
    """What the agent may spend, in USD (`nanoagent/spend/`): unset means no cap. Days and months are the user's
    (agents.defaults.timezone)."""

    daily: float | None = bounded(None, 0, 1_000_000_000)  # the whole agent, per day
    monthly: float | None = bounded(None, 0, 1_000_000_000)  # the whole agent, per month
    sessions: dict[str, float] = field(default_factory=dict)  # session-key pattern ("telegram:*") -> USD per day
    heartbeat: float | None = bounded(None, 0, 1_000_000_000)  # the heartbeat's turns, per day
    dream: float | None = bounded(None, 0, 1_000_000_000)  # Dream's calls, per day
    warn_at: float = bounded(0.8, 0, 1)  # the share of a cap at which the user is told, once per period

    def __post_init__(self) -> None:
        for pattern, limit in self.sessions.items():
            if not pattern.strip() or not 0 <= limit <= 1_000_000_000:  # NaN too
                raise ConfigError(f"`budget.sessions` has {pattern!r}: {limit!r}; write a session-key pattern such as "
                                  "\"telegram:*\" and a number of USD per day from 0 up.")


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
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    cron: CronConfig = field(default_factory=CronConfig)
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)  # `mcpServers`, by name
    mcp: McpConfig = field(default_factory=McpConfig)  # `nanoagent mcp serve`
    budget: BudgetConfig = field(default_factory=BudgetConfig)

    @property
    def defaults(self) -> AgentDefaults:
        return self.agents.defaults

    def provider(self, name: str) -> ProviderConfig:
        return self.providers.get(name) or ProviderConfig()
