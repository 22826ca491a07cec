"""The composition root: every command builds its agent here."""

from __future__ import annotations

from collections.abc import Callable

from nanoagent.agent import events as ev
from nanoagent.agent.commands import COMMANDS
from nanoagent.agent.context import ContextBuilder
from nanoagent.agent.loop import AgentLoop
from nanoagent.config.schema import Config
from nanoagent.memory.consolidator import Consolidator
from nanoagent.memory.dream import Dream
from nanoagent.memory.gitlog import MemoryGit
from nanoagent.memory.history import HistoryLog
from nanoagent.memory.search import MemorySearch, embedding_settings
from nanoagent.paths import Paths
from nanoagent.providers.base import Provider, Providers
from nanoagent.session.store import SessionStore
from nanoagent.skills import SkillsLoader
from nanoagent.templates import seed_workspace
from nanoagent.tools import ToolContext, default_tools
from nanoagent.usage import usage_record


def build_agent(
    config: Config,
    paths: Paths,
    sink: ev.EventSink,
    model: str | None = None,
    provider: Provider | None = None,
    warn: Callable[[str], None] = lambda message: None,
) -> AgentLoop:
    """Wire one AgentLoop. `provider` replaces the configured one (the ScriptedProvider in tests and demos)."""
    from nanoagent.providers.registry import build_provider

    default_model = model or config.defaults.model
    if provider is None:
        build_provider(config, default_model)  # a bad model name or missing key fails before the first turn

        def provider_for(name: str) -> Provider:
            return build_provider(config, name)
    else:
        def provider_for(name: str) -> Provider:
            return provider
    seed_workspace(paths.workspace)
    skills = SkillsLoader(paths.workspace / "skills", warn=warn)
    tools_config = config.tools
    history = HistoryLog(paths.memory_dir, warn=warn)
    store = SessionStore(paths.sessions_dir, warn=warn)
    providers = Providers(provider_for)
    return AgentLoop(
        providers=providers,
        store=store,
        context=ContextBuilder(paths.workspace, tools_config.restrict_to_workspace, skills,
                               config.defaults.timezone, history, config.memory.recent_history_tokens),
        tools=default_tools(),
        tool_context=ToolContext(
            workspace=paths.workspace,
            restrict_to_workspace=tools_config.restrict_to_workspace,
            exec_timeout=tools_config.exec.timeout,
            max_output_chars=tools_config.max_result_chars,
            memory_search=MemorySearch(paths, embedding_settings(config), warn=warn),
        ),
        settings=config.defaults,
        max_result_chars=tools_config.max_result_chars,
        sink=sink,
        model=default_model,
        model_pinned=model is not None,
        commands=dict(COMMANDS),
        consolidator=Consolidator(history, store, config.defaults, providers.complete),
        memory_git=MemoryGit(paths.workspace, paths.memory_git_dir),
        dream_factory=lambda: build_dream(config, paths, sink, model=model, provider=provider, warn=warn),
    )


def build_dream(
    config: Config,
    paths: Paths,
    sink: ev.EventSink,
    model: str | None = None,
    batch: bool = False,
    provider: Provider | None = None,
    warn: Callable[[str], None] = lambda message: None,
) -> Dream:
    """Wire Dream for the workspace. `batch` sends its calls through Anthropic's Message Batches API
    when the model is an Anthropic one, and falls back to direct calls otherwise."""
    from nanoagent.memory.gitlog import MemoryGit
    from nanoagent.providers.registry import build_provider

    memory = config.memory
    dream_model = model or memory.dream_model or config.defaults.model
    price_factor = 1.0
    if provider is None and batch:
        from nanoagent.providers.anthropic_batch import build_batch_provider

        provider = build_batch_provider(config, dream_model)
        if provider is None:
            warn(f"--batch needs an Anthropic model; {dream_model} gets direct calls instead.")
        else:
            price_factor = 0.5  # Message Batches are billed at half price
    if provider is None:
        provider = build_provider(config, dream_model)
    seed_workspace(paths.workspace)
    store = SessionStore(paths.sessions_dir, warn=warn)
    ledger = store.load(f"dream:{paths.workspace_slug()}")  # Dream's model calls show in `nanoagent usage`

    def recording_sink(event: ev.Event) -> None:
        if isinstance(event, ev.UsageRecorded):
            with store.lock(ledger):
                store.append(ledger, [usage_record(event.model, event.usage, "dream", price_factor)], sync=True)
        sink(event)

    return Dream(
        workspace=paths.workspace,
        history=HistoryLog(paths.memory_dir, warn=warn),
        git=MemoryGit(paths.workspace, paths.memory_git_dir),
        provider=provider,
        model=dream_model,
        lock_path=paths.memory_dir / ".dream.lock",
        journal_path=paths.memory_git_dir.with_name(paths.memory_git_dir.name + "-dream-journal.json"),
        batch_size=memory.dream_batch_size,
        max_iterations=memory.dream_max_iterations,
        sink=recording_sink,
    )
