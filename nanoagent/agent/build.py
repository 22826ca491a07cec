"""The composition root: every command builds its agent here."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from nanoagent.agent import events as ev
from nanoagent.agent.budget import PromptBudget
from nanoagent.agent.commands import Commands, ModelChoice
from nanoagent.agent.context import ContextBuilder
from nanoagent.agent.flush import FLUSH_MAX_TOKENS, MemoryFlush, local_now
from nanoagent.agent.loop import AgentLoop
from nanoagent.agent.subagents import Subagents
from nanoagent.agent.turn import Turns
from nanoagent.channels.owners import Owners
from nanoagent.channels.state import recorded_groups
from nanoagent.config.schema import Config
from nanoagent.cron.deliver import Outbox
from nanoagent.cron.store import JobStore
from nanoagent.cron.targets import Access
from nanoagent.cron.tools import cron_tools
from nanoagent.memory.consolidator import Consolidator
from nanoagent.memory.dream import Dream
from nanoagent.memory.gitlog import MemoryGit, agent_commands, agent_edits
from nanoagent.memory.history import HistoryLog
from nanoagent.memory.recall import AutoRecall
from nanoagent.memory.search import MemorySearch, embedding_settings
from nanoagent.memory.search_tool import memory_tools
from nanoagent.paths import PROTECTED_FILES, Paths
from nanoagent.providers.base import ChatRequest, Provider, ProviderEvent, Providers
from nanoagent.session.store import SessionStore
from nanoagent.skills import SkillsLoader, SkillTrust
from nanoagent.spend import Meter
from nanoagent.spend.view import spend_view
from nanoagent.templates import seed_workspace
from nanoagent.tools import ToolContext, ToolRegistry, file_tools
from nanoagent.tools.browser import Browser, browser_tool, settings_from
from nanoagent.tools.policy import ToolPolicy
from nanoagent.tools.sandbox import SandboxPolicy
from nanoagent.tools.shell import ExecSettings, describe_confinement, exec_tool
from nanoagent.tools.web import web_tools
from nanoagent.usage import UsageRecord

if TYPE_CHECKING:
    from nanoagent.mcp.servers import McpServers


def build_agent(
    config: Config,
    paths: Paths,
    model: str | None = None,
    provider: Provider | None = None,
    warn: Callable[[str], None] = lambda message: None,
    outbox: Outbox | None = None,
    check_model: bool = True,
) -> AgentLoop:
    """Wire one AgentLoop. `provider` replaces the configured one (the ScriptedProvider in tests and demos).
    Events go to the sink each call to `handle` brings. `outbox` delivers messages and scheduled replies (the
    gateway passes the one whose deliveries its terminals watch). `check_model=False` leaves the model's provider
    (its name, its key) to be checked at the first model call, for a slash command that may make none."""
    from nanoagent.providers.registry import build_provider

    default_model = model or config.defaults.model
    meter = None
    if provider is None:
        if check_model:
            build_provider(config, default_model, warn)  # a bad model name or missing key fails before the first turn
        meter = spend_meter(config, paths)

        def provider_for(name: str) -> Provider:
            return build_provider(config, name, warn, meter)
    else:
        def provider_for(name: str) -> Provider:
            return provider
    seed_workspace(paths.workspace)
    skills = SkillsLoader(paths.workspace / "skills", warn=warn, trust=SkillTrust(paths.trusted_skills_file, warn))
    tools_config = config.tools
    history = HistoryLog(paths.memory_dir, warn=warn, key_file=paths.history_key_file)
    store = SessionStore(paths.sessions_dir, warn=warn)
    store.sweep_incognito()  # temporary sessions a killed process left behind
    providers = Providers(provider_for)
    memory_git = MemoryGit(paths.workspace, paths.memory_git_dir)
    outbox = outbox or build_outbox(config, paths, warn)
    access = Access(config, paths)
    owners = Owners.of(config)  # who is the owner on each channel: everyone else is a guest
    exec_config = exec_settings(config, paths)
    edits = agent_edits(memory_git, warn)
    embeddings = embedding_settings(config)
    if embeddings is not None:  # its requests count against the session that searched
        embeddings = dataclasses.replace(embeddings, meter=meter)
    searcher = MemorySearch(paths, embeddings, warn=warn)  # one index for the tools and recall
    tools = ToolRegistry([
        *file_tools(edits),
        exec_tool(exec_config, agent_commands(memory_git, warn)),
        *web_tools(tools_config.web),
        *memory_tools(searcher, history, store),
        *cron_tools(JobStore(paths.cron_jobs_file), outbox, access, config.defaults.timezone),
    ])
    browser = Browser.offered(settings_from(config, paths), config.tools.browser.enabled, warn)
    if browser is not None:
        tools.register(browser_tool(browser))
    mcp = mcp_servers(config, paths, tools, warn)
    context = ContextBuilder(paths.workspace, tools_config.restrict_to_workspace, tools, skills,
                             config.defaults.timezone, history, config.memory.recent_history_tokens,
                             confinement=functools.partial(describe_confinement, exec_config),
                             policy=ToolPolicy(tools_config), owners=owners)
    groups, unreadable = recorded_groups(paths)  # a cron job of a group chat gets the group's tools, channel or not
    context.load_groups(groups)
    for problem in unreadable:
        warn(problem)
    turns = Turns(store, providers, ToolContext(paths.workspace, tools_config.restrict_to_workspace),
                  config.defaults, tools_config.max_result_chars, tuple(tools_config.attachments.image_models))
    subagents = None
    if config.defaults.subagents.max_depth > 0:
        subagents = Subagents(turns, context, busy=lambda key: loop.busy(key))  # `loop` is built below, before any turn asks
        for subagent_tool in subagents.tools():
            tools.register(subagent_tool)
    for problem in context.policy.unknown(tools.names()) if context.policy else ():
        warn(problem)
    models = ModelChoice(default_model, pinned=model is not None)
    flush = MemoryFlush(config.memory.flush, providers, store, paths.workspace, edits, config.memory.dream_model,
                        min(config.defaults.max_tokens, FLUSH_MAX_TOKENS),
                        now=functools.partial(local_now, config.defaults.timezone), warn=warn, owners=owners,
                        background_model=config.defaults.background_model)
    budget = PromptBudget(context, config.defaults,
                          Consolidator(history, store, config.defaults, providers.complete, before_archive=flush))
    commands = Commands(
        store=store, models=models, providers=providers, budget=budget, skills=skills,
        memory_git=memory_git, subagents=subagents, tools_for=lambda key: loop.tools_for(key),
        tool_policy=context.policy.summary if context.policy else None,
        spending=lambda: spend_view(config, paths),
        dream_factory=lambda sink: build_dream(config, paths, sink, model=model, provider=provider, warn=warn),
    )
    loop = AgentLoop(
        turns=turns,
        budget=budget,
        models=models,
        commands=commands,
        mcp=mcp,
        subagents=subagents,
        recall=AutoRecall(searcher, history, config.memory.auto_recall),
        closers=(browser.aclose,) if browser is not None else (),
    )
    return loop


def spend_meter(config: Config, paths: Paths) -> Meter:
    """The spend check every model call of this agent goes through (`nanoagent/spend/`)."""
    from nanoagent.providers.registry import provider_name

    return Meter(config, paths, provider_of=provider_name)


def build_outbox(config: Config, paths: Paths, warn: Callable[[str], None] = lambda message: None) -> Outbox:
    """Where scheduled replies and the message tool deliver: every channel through the registry, and the sessions'
    logs."""
    return Outbox(SessionStore(paths.sessions_dir, warn=warn), config)


def mcp_servers(config: Config, paths: Paths, tools: ToolRegistry, warn: Callable[[str], None]) -> McpServers | None:
    """The user's MCP servers, their cached tools in `tools`; None when there are none (the SDK is never loaded)."""
    if not config.mcp_servers:
        return None
    from nanoagent.mcp.cache import ToolCache
    from nanoagent.mcp.servers import McpServers

    return McpServers.from_config(config.mcp_servers, tools, ToolCache(paths.mcp_cache_dir), paths.logs_dir, warn,
                                  max_image_bytes=config.tools.attachments.max_image_bytes)


def exec_settings(config: Config, paths: Paths) -> ExecSettings:
    e = config.tools.exec  # its choices are checked where config is built (`schema.check_choices`)
    policy = SandboxPolicy(e.sandbox, e.network, tuple(e.read_only_paths), tuple(e.writable_paths), tuple(e.env),
                           e.max_processes, e.memory_mb, e.tmp_mb)
    return ExecSettings(e.timeout, config.tools.max_result_chars, policy, e.approve, paths.home, PROTECTED_FILES)


def build_dream(
    config: Config,
    paths: Paths,
    sink: ev.EventSink = ev.discard,
    model: str | None = None,
    batch: bool = False,
    provider: Provider | None = None,
    warn: Callable[[str], None] = lambda message: None,
) -> Dream:
    """Wire Dream for the workspace. `batch` sends its calls through Anthropic's Message Batches API
    when the model is an Anthropic one, and falls back to direct calls otherwise."""
    memory = config.memory
    dream_model = model or memory.dream_model or config.defaults.background_model or config.defaults.model
    deferred = None
    if provider is None:  # built at the first call: a run with nothing new needs no key
        provider = deferred = DeferredProvider(lambda: _dream_provider(config, paths, dream_model, batch, warn))
    seed_workspace(paths.workspace)
    store = SessionStore(paths.sessions_dir, warn=warn)
    ledger = store.load(f"dream:{paths.workspace_slug()}")  # Dream's model calls show in `nanoagent usage`

    def recording_sink(event: ev.Event) -> None:
        if isinstance(event, ev.UsageRecorded):
            with store.lock(ledger):
                factor = deferred.price_factor if deferred is not None else 1.0
                store.add_usage(ledger, UsageRecord.now(event.model, event.usage, "dream", factor), sync=True)
        sink(event)

    return Dream(
        workspace=paths.workspace,
        history=HistoryLog(paths.memory_dir, warn=warn, key_file=paths.history_key_file),
        git=MemoryGit(paths.workspace, paths.memory_git_dir),
        provider=provider,
        model=dream_model,
        lock_path=paths.memory_dir / ".dream.lock",
        journal_path=paths.memory_git_dir.with_name(paths.memory_git_dir.name + "-dream-journal.json"),
        stall_path=paths.memory_git_dir.with_name(paths.memory_git_dir.name + "-dream-stalls.json"),
        batch_size=memory.dream_batch_size,
        max_iterations=memory.dream_max_iterations,
        sink=recording_sink,
        owners=Owners.of(config),
    )


def _dream_provider(config: Config, paths: Paths, model: str, batch: bool,
                    warn: Callable[[str], None]) -> tuple[Provider, float]:
    """Dream's provider and the share of the list price its calls cost."""
    from nanoagent.providers.registry import build_provider

    if batch:
        from nanoagent.providers.anthropic_batch import build_batch_provider

        provider = build_batch_provider(config, model, meter=spend_meter(config, paths))
        if provider is not None:
            return provider, 0.5  # Message Batches are billed at half price
        warn(f"--batch needs an Anthropic model; {model} gets direct calls instead.")
    return build_provider(config, model, warn, spend_meter(config, paths)), 1.0


class DeferredProvider:
    """A provider built on its first call: a run that makes none (Dream with nothing new) needs no API key."""

    name = "deferred"

    def __init__(self, build: Callable[[], tuple[Provider, float]]):
        self.build = build
        self.price_factor = 1.0
        self._provider: Provider | None = None

    def get(self) -> Provider:
        if self._provider is None:
            self._provider, self.price_factor = self.build()
        return self._provider

    def prepare(self) -> None:
        self.get().prepare()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        async for event in self.get().stream(request):
            yield event
