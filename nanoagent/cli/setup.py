"""`onboard` and `status`: first-run setup and a look at the current configuration."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nanoagent.cli.common import open_home
from nanoagent.cli.render import say
from nanoagent.config import Config, load_config, save_config
from nanoagent.errors import ConfigError
from nanoagent.fsutil import atomic_write, private_dir
from nanoagent.paths import Paths
from nanoagent.providers.base import OPENAI_COMPATIBLE
from nanoagent.providers.probe import needs_key
from nanoagent.providers.registry import DEFAULT_MODELS
from nanoagent.templates import seed_workspace

KEY_PREFIXES = {"anthropic": "sk-ant-", "openai": "sk-", "openrouter": "sk-or-"}


def key_problem(provider: str, key: str, own_server: bool = False) -> str | None:
    """Why a key cannot be right for this provider, or None when it looks plausible. For a server of one's own
    (`--api-base`: a proxy, a local model) any key without spaces will do: it makes its own rules."""
    if not key or key != key.strip() or any(c.isspace() for c in key):
        return "the key is empty or contains spaces"
    if own_server:
        return None
    prefix = KEY_PREFIXES.get(provider)
    if prefix and not key.startswith(prefix):
        return f"{provider} keys start with `{prefix}`"
    if len(key) < 20:
        return "the key is too short; copy the whole key"
    return None


SERVER, LITELLM = "server", "litellm"  # onboard's two open choices besides the providers DEFAULT_MODELS names
CHOICES = (f"  {', '.join(DEFAULT_MODELS)}\n"
           f"  {SERVER:<9}an OpenAI-compatible server (URL): LM Studio, vLLM, llama.cpp, a company proxy\n"
           f"  {LITELLM:<9}a provider as litellm names it (gemini, mistral, bedrock, ...)")


def ask_onboarding() -> dict[str, str | None]:
    """Ask for provider, model, base URL and key at the terminal (prompt-toolkit)."""
    from prompt_toolkit import prompt
    from prompt_toolkit.completion import WordCompleter

    names = [*DEFAULT_MODELS, SERVER, LITELLM]
    print("Providers:\n" + CHOICES)
    provider = ""
    while provider not in names:
        provider = prompt("Provider [anthropic]: ", completer=WordCompleter(names)).strip() or "anthropic"
        provider = LITELLM if provider == "other" else provider  # the name this choice had before
    if provider == SERVER:
        return _ask_server(prompt)
    while provider == LITELLM or not provider:
        provider = prompt("Provider name as litellm knows it (e.g. gemini, mistral): ").strip()
    model = _ask_model(provider, prompt)
    api_base = None
    if provider in OPENAI_COMPATIBLE or provider not in DEFAULT_MODELS:
        default = OPENAI_COMPATIBLE.get(provider, (None, None))[0]
        api_base = prompt(f"API base URL [{default}] (empty keeps it): " if default else
                          "API base URL (empty for the default): ").strip() or None
    api_key = _ask_key(provider, prompt, own_server=bool(api_base)) if needs_key(provider, Config()) else None
    return {"provider": provider, "model": model, "api_key": api_key, "api_base": api_base}


def _ask_server(prompt: Callable[..., str]) -> dict[str, str | None]:
    """An OpenAI-compatible server of the person's own: a name for it (the models' prefix and its entry under
    `providers`), its base URL, its model and whether it needs a key."""
    import re

    from nanoagent.providers.registry import litellm_providers

    name = ""
    while not name:
        name = prompt("A name for the server (models are named <name>/<model>) [local]: ").strip().lower() or "local"
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name) or name in litellm_providers() or name in DEFAULT_MODELS:
            print(f"{name} cannot be this server's name: use letters, digits, - or _, not a provider's name "
                  "(such as openai). Try again (Ctrl-C to stop).")
            name = ""
    api_base = ""
    while not api_base.startswith(("http://", "https://")):
        api_base = prompt("Its base URL (e.g. http://localhost:1234/v1): ").strip()
    model = ""
    while not model:
        model = prompt("Model, as the server names it: ").strip().removeprefix(f"{name}/")
    wants_key = prompt("Does it need an API key? [y/N]: ").strip().lower() in ("y", "yes")
    api_key = _ask_key(name, prompt, own_server=True) if wants_key else None
    return {"provider": name, "model": f"{name}/{model}", "api_key": api_key, "api_base": api_base}


def _ask_model(provider: str, prompt: Callable[..., str]) -> str:
    """A model of `provider`: the default on Enter where there is one; asked again until it names this provider,
    since a model of another provider would look for that provider's key."""
    default = DEFAULT_MODELS.get(provider)
    while True:
        model = prompt(f"Model [{default}]: " if default else f"Model, as {provider}/<model name>: ").strip()
        model = model or default or ""
        problem = model_problem(provider, model) if model else f"{provider} has no default model; name one"
        if problem is None:
            return model
        print(f"{problem}. Try again (Ctrl-C to stop).")


def model_problem(provider: str, model: str) -> str | None:
    """Why `model` cannot be the model for `provider`, or None when it fits."""
    from nanoagent.providers.registry import provider_name

    try:
        serves = provider_name(model)
    except ConfigError as e:
        return str(e).rstrip(".")
    if serves != provider:
        return (f"the model {model} belongs to {serves}, not {provider}; name it as {provider}/<model name>"
                + (f", e.g. {DEFAULT_MODELS[provider]}" if provider in DEFAULT_MODELS else ""))
    return None


def _ask_key(provider: str, prompt: Callable[..., str], own_server: bool = False) -> str | None:
    """The key to store in config.json, or None to keep it in the environment only. A key found in the environment
    is offered first: cron and services do not see the shell's variables, so storing it is what lets them run."""
    import os

    from nanoagent.providers.registry import key_variable

    variable = key_variable(provider)
    found = os.environ.get(variable, "").strip()
    if found and key_problem(provider, found, own_server) is None:
        answer = prompt(f"Store the key from ${variable} in config.json (mode 0600), so cron jobs and the gateway "
                        "find it too? [Y/n]: ").strip().lower()
        if answer in ("", "y", "yes"):
            return found
        print(f"Not stored. Commands run by cron do not see ${variable}: set it in the crontab or store it later.")
        return None
    while True:
        key = prompt(f"API key for {provider} (empty: keep it in ${variable} instead): ", is_password=True).strip()
        if not key:
            print(f"No key stored. Set ${variable} where nanoagent runs; for cron, in the crontab too.")
            return None
        problem = key_problem(provider, key, own_server)
        if problem is None:
            return key
        print(f"That key does not look right: {problem}. Try again (Ctrl-C to stop).")


def onboard(workspace: Path | None, provider: str | None = None, model: str | None = None,
            api_key: str | None = None, api_base: str | None = None, interactive: bool = False) -> None:
    if interactive:
        answers = ask_onboarding()
        provider, model, api_key, api_base = (answers["provider"], answers["model"], answers["api_key"],
                                              answers["api_base"])
    paths = Paths.from_env(workspace)
    data = _read_raw(paths.config_file) if paths.config_file.exists() else {}
    provider, model = _provider_and_model(data, provider, model, api_key or api_base)
    if api_key and provider:
        problem = key_problem(provider, api_key, own_server=bool(api_base))
        if problem:
            fix = "" if api_base else " (for a proxy or a server of your own, give its --api-base too)"
            raise ConfigError(f"The API key for {provider} does not look right: {problem}{fix}.")
    open_home(paths.home)
    for folder in (paths.sessions_dir, paths.logs_dir):
        private_dir(folder)
    config_file = paths.config_file
    if config_file.exists():
        print(f"Keeping existing config {config_file}")
    changed = not config_file.exists()
    defaults = data.setdefault("agents", {}).setdefault("defaults", {})
    if model and model != defaults.get("model"):
        print(f"Model: {model}" + (f" (was {defaults['model']})" if defaults.get("model") else ""))
        defaults["model"] = model
        changed = True
    if provider and (api_key or api_base):
        entry = data.setdefault("providers", {}).setdefault(provider, {})
        if api_key:
            entry["apiKey"] = api_key
        if api_base:
            entry["apiBase"] = api_base
        changed = True
    if changed:
        save_config(config_file, data)
        print(f"Wrote {config_file} (mode 0600)")
    created = seed_workspace(paths.workspace)
    print(f"Workspace {paths.workspace}: {len(created)} file(s) created, existing files kept")
    print('Next: nanoagent agent -m "hello"')


def current_model(data: dict) -> str:
    """The model config.json names, or the built-in default."""
    from nanoagent.config.schema import AgentDefaults

    model = data.get("agents", {}).get("defaults", {}).get("model")
    return model if isinstance(model, str) and model else AgentDefaults.model


def _provider_and_model(data: dict, provider: str | None, model: str | None,
                        setting_given: object) -> tuple[str | None, str | None]:
    """The provider the key or base URL is for, and the model to write (None: keep the one there).

    Without --provider, a key belongs to the provider of the model (given, or the one in config.json). Without
    --model, a provider other than the current model's switches the model to that provider's default, so a new
    key is never left next to a model that looks for another provider's key."""
    from nanoagent.providers.registry import provider_name

    if model:
        if provider is None:
            provider = provider_name(model)
        elif (problem := model_problem(provider, model)) is not None:
            raise ConfigError(f"--model and --provider disagree: {problem}.")
        return provider, model
    if provider is None:
        return (provider_name(current_model(data)) if setting_given else None), None
    try:
        if provider_name(current_model(data)) == provider:
            return provider, None
    except ConfigError:
        pass
    default = DEFAULT_MODELS.get(provider)
    if default is None:
        raise ConfigError(f"No default model for {provider}: pass --model {provider}/<model name> "
                          f"(the model's name as {provider} knows it).")
    return provider, default


def _read_raw(path: Path) -> dict:
    load_config(path)  # validates, with the same clear errors as every other command
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if text.strip() else {}


def status_lines(paths: Paths, config: Config) -> list[str]:
    from nanoagent.providers.registry import key_fix, provider_name

    model = config.defaults.model
    try:
        provider = provider_name(model)
        settings = config.provider(provider)
        key = "set" if settings.api_key else f"missing ({key_fix(provider, config)})"
        if not settings.api_key and not needs_key(provider, config):
            key = "not needed"
    except ConfigError as e:
        provider, key = "unknown", str(e)
        settings = None
    lines = [
        f"model:     {model}",
        f"provider:  {provider}" + (f" ({settings.api_base})" if settings and settings.api_base else ""),
        f"api key:   {key}",
        f"fallbacks: {', '.join(config.defaults.fallback_models) or 'none'}",
        f"config:    {paths.config_file}" + ("" if paths.config_file.exists() else " (not created; defaults in use)"),
        f"workspace: {paths.workspace}",
        f"sessions:  {paths.sessions_dir}",
        f"logs:      {paths.logs_dir}",
    ]
    from nanoagent.tools.policy import ToolPolicy

    lines += [f"{'tools:' if i == 0 else '':<11}{line}" for i, line in enumerate(ToolPolicy(config.tools).summary())]
    return lines


def migrate_renamed_keys(data: dict) -> list[str]:
    """Rename keys a newer version renamed, in place. Returns what was moved."""
    from nanoagent.config.loader import RENAMED_KEYS, to_camel, to_snake

    moved = []
    for old, new in RENAMED_KEYS.items():
        *parents, old_leaf = old.split(".")
        node: Any = data
        for part in parents:
            node = next((v for k, v in node.items() if to_snake(k) == part), None) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        old_key = next((k for k in node if to_snake(k) == old_leaf), None)
        if old_key is None:
            continue
        new_leaf = to_camel(new.split(".")[-1])
        value = node.pop(old_key)
        node.setdefault(new_leaf, value)
        moved.append(f"{old} -> {new}")
    return moved


def _check_home(home: Path, report: Any) -> None:
    """Like every command, doctor makes an open home private (700), unless others could write it; it also says so."""
    import os

    from nanoagent.paths import check_owned

    try:
        check_owned(home)
    except ConfigError as e:
        report(False, str(e))
        return
    if not home.exists():
        report(True, f"home {home} does not exist yet; the first command creates it")
    elif not home.is_dir():
        report(False, f"home {home} is a file, not a folder", "move it away, or set NANOAGENT_HOME to a folder")
    elif not os.access(home, os.W_OK | os.X_OK):
        report(False, f"home {home} is not writable", "make it writable, or set NANOAGENT_HOME to a folder you can write")
    elif (mode := home.stat().st_mode & 0o777) & 0o077:
        open_home(home)
        report(True, f"home {home} was open to other users (mode {mode:o}); made it private (700)")
    else:
        report(True, f"home {home} is private")


def run_doctor(workspace: Path | None, fix: bool, offline: bool = False) -> bool:
    import os
    import shutil
    import subprocess

    from nanoagent.config.loader import RenamedKey
    from nanoagent.templates import workspace_templates
    from nanoagent.tokens import tokenizer_available

    paths = Paths.from_env(workspace)
    problems = 0

    def report(ok: bool, text: str, fix_hint: str = "") -> None:
        nonlocal problems
        problems += not ok
        say(("ok    " if ok else "FIX   ") + text, hang=6)
        if fix_hint and not ok:
            say(f"      -> {fix_hint}", hang=9)

    _check_home(paths.home, report)
    config = None
    if not paths.config_file.exists():
        report(True, f"no config file at {paths.config_file}; using defaults and environment variables")
        config, warnings = load_config(paths.config_file)
    else:
        try:
            config, warnings = load_config(paths.config_file)
        except ConfigError as e:
            report(False, str(e))
            warnings = []
        if config is not None:
            report(True, f"config {paths.config_file} is valid")
        renamed = [w for w in warnings if isinstance(w, RenamedKey)]
        if renamed and fix:
            data = _read_raw(paths.config_file)
            backup = paths.config_file.with_suffix(".json.bak")
            atomic_write(backup, paths.config_file.read_bytes(), mode=0o600)
            moved = migrate_renamed_keys(data)
            save_config(paths.config_file, data)
            report(True, f"migrated {', '.join(moved)} (backup in {backup.name})")
        elif renamed:
            report(False, "config uses renamed keys: " + "; ".join(renamed), "run `nanoagent doctor --fix` to migrate")
        for warning in (w for w in warnings if not isinstance(w, RenamedKey)):
            report(False, warning, "delete the key, or check its spelling")
        mode = paths.config_file.stat().st_mode & 0o777
        if mode & 0o022:
            pass  # refused above: its contents are for the person to check before making it private
        elif mode & 0o077:
            if fix:
                os.chmod(paths.config_file, 0o600)
                report(True, f"config mode changed from {mode:o} to 600")
            else:
                report(False, f"config mode is {mode:o}; other users can read your keys", "chmod 600 it, or --fix")
    if config is not None:
        _report_models(report, config, offline)
    missing = [str(rel) for _, rel in workspace_templates() if not (paths.workspace / rel).exists()]
    report(not missing, f"workspace {paths.workspace}" + (f" lacks {', '.join(missing)}" if missing else " is complete"),
           "run `nanoagent onboard` (it never overwrites your files)")
    git = shutil.which("git")
    version = subprocess.run([git, "--version"], capture_output=True, text=True).stdout.strip() if git else ""
    report(bool(git), f"git: {version or 'not found'}", "install git; memory history needs it")
    report(tokenizer_available(), "offline tokenizer " + ("works" if tokenizer_available() else "missing; using estimates"),
           "reinstall nanoagent (the tokenizer files come with litellm)")
    _report_sandbox(report, config)
    if config is not None:
        _report_browser(report, config, paths)
    _report_skills(report, paths)
    if config is not None:
        _report_channels(report, config)
        _report_gateway(report, config, paths)
        _report_mcp(report, config, paths)
    _report_scheduler(report, config, paths)
    print("All good." if not problems else f"{problems} thing(s) to fix.")
    return problems == 0


def _report_models(report: Callable[[bool, str, str], None], config: Config, offline: bool) -> None:
    """The default model and each fallback: its key, then (unless offline) one small live request to its provider,
    so "All good." means the agent can answer."""
    from nanoagent.providers.probe import needs_key, probe
    from nanoagent.providers.registry import key_fix, model_setting, provider_name

    models = list(dict.fromkeys([config.defaults.model, *config.defaults.fallback_models]))
    for model in models:
        label = f"{model_setting(model)} is {model}" if model == config.defaults.model else f"fallback {model}"
        try:
            provider = provider_name(model)
        except ConfigError as e:
            report(False, f"{label}: {e}", "")
            continue
        has_key = bool(config.provider(provider).api_key)
        if not has_key and needs_key(provider, config):
            report(False, f"{label}: API key for {provider} missing", key_fix(provider, config))
            continue
        report(True, f"{label}: " + (f"API key for {provider} present" if has_key else f"{provider} needs no key"), "")
        if not offline:
            result = probe(model, config)
            report(result.ok, result.text, result.fix)
    if offline:
        report(True, "providers not contacted (--offline); without it doctor makes one small request to each", "")


def _report_channels(report: Callable[[bool, str, str], None], config: Config) -> None:
    """Every enabled channel, through the registry: what keeps it from starting (`problem`), else its credentials
    checked with one call to its app (`verify`), as the channel's first call when the gateway starts it."""
    from nanoagent.channels.owners import owner_ids
    from nanoagent.cli.channels_cmd import check_channel, registered, route_checks

    for channel in registered():
        settings = channel.settings(config)
        if settings.enabled:
            ok, text = check_channel(channel, settings)
            report(ok, f"{channel.name}: " + (f"the credentials work ({text})" if ok else text),
                   f"fix channels.{channel.name} in config.json, or `nanoagent channels add {channel.name}` "
                   f"(docs/channels/{channel.name}.md)")
            report(bool(owner_ids(settings)), f"{channel.name}: "
                   + ("names its owner" if owner_ids(settings) else "names no owner, so everyone it answers is a guest, "
                      "you too: no memory of yours and tools.guestProfile in your own chat"),
                   f"put your user id in channels.{channel.name}.owner, or `nanoagent channels add {channel.name}`")
            for ok, text, fix in route_checks(channel, settings, config):
                report(ok, text, fix)


def _report_gateway(report: Callable[[bool, str, str], None], config: Config, paths: Paths) -> None:
    """Channels serve nobody without a running gateway; the HTTP endpoint is asked for /health where it listens."""
    from nanoagent.cli.channels_cmd import registered

    wanted = [f"channels.{c.name}" for c in registered() if c.settings(config).enabled]
    wanted += ["gateway.http"] if config.gateway.http.enabled else []
    if not wanted:
        return
    from nanoagent.gateway.oneshot import gateway_answers

    if not gateway_answers(paths.gateway_socket):
        report(False, f"gateway: not running, so {' and '.join(wanted)} (enabled in config) serve nobody",
               "start `nanoagent gateway` (docs/gateway.md)")
        return
    report(True, "gateway: running", "")
    if config.gateway.http.enabled:
        import httpx

        host = config.gateway.http.host
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        url = f"http://{f'[{host}]' if ':' in host else host}:{config.gateway.http.port}/health"
        try:
            ok = httpx.get(url, timeout=5.0).status_code == 200
        except httpx.HTTPError:
            ok = False
        report(ok, f"http endpoint: {url} " + ("answers" if ok else "does not answer"),
               "restart the gateway; its log says why the endpoint did not start (e.g. the port is taken)")


def _report_mcp(report: Callable[[bool, str, str], None], config: Config, paths: Paths) -> None:
    """Each enabled MCP server started once, as `nanoagent mcp list` does, given the time the agent gives it
    (`timeout`): a slow machine is no reason to report a server as broken."""
    from nanoagent.cli.mcp_cmd import check_servers
    from nanoagent.cli.render import terminal_safe

    enabled = {name: server for name, server in config.mcp_servers.items() if server.enabled}
    if not enabled:
        return
    for name, result in check_servers(paths, enabled, max(server.timeout for server in enabled.values())).items():
        if isinstance(result, list):
            report(True, terminal_safe(f"mcp server {name}: connected, {len(result)} tool(s)"), "")
        else:
            report(False, terminal_safe(f"mcp server {name}: {result}"),
                   f"fix its entry in config.json (`nanoagent mcp list` shows more), or `nanoagent mcp remove {name}`")


def _report_scheduler(report: Callable[[bool, str, str], None], config: Config | None, paths: Paths) -> None:
    """With jobs scheduled: whether a scheduler (the gateway's, or a crontab `cron tick`) has looked lately."""
    from nanoagent.errors import NanoagentError

    if not paths.cron_jobs_file.exists():
        return
    from nanoagent.cron.scheduler import scheduler_seen
    from nanoagent.cron.store import JobStore

    store = JobStore(paths.cron_jobs_file)
    try:
        jobs = [job for job in store.read().jobs if job.enabled]
    except NanoagentError as e:
        report(False, f"cron: {e}", "")
        return
    if not jobs:
        return
    if scheduler_seen(store):
        report(True, f"scheduler: running; {len(jobs)} job(s) scheduled", "")
        return
    gateway_off = config is not None and not config.cron.enabled
    report(False, f"scheduler: {len(jobs)} job(s) scheduled, but no scheduler has run lately, so they do not run",
           "set cron.enabled to true and restart the gateway" if gateway_off else
           "start `nanoagent gateway`, or run `nanoagent cron tick` from crontab (docs/schedules.md)")


def _report_skills(report: Callable[[bool, str, str], None], paths: Paths) -> None:
    """Skills that cannot load, untrusted ones left out of the prompt, and built-ins a workspace skill replaces."""
    from nanoagent.cli.render import terminal_safe
    from nanoagent.skills import SkillsLoader, SkillTrust, Trust

    bad: list[str] = []
    loader = SkillsLoader(paths.workspace / "skills", warn=bad.append, trust=SkillTrust(paths.trusted_skills_file))
    scan = loader.scan()
    for warning in bad:
        report(False, terminal_safe(warning), "fix the file, or check it with `nanoagent skills validate`")
    for skill in scan.left_out:
        report(False, terminal_safe(skill.left_out_note()), "")
    for skill in scan.replacing:
        trusted = loader.trust_state(skill) is Trust.TRUSTED
        report(trusted, f"workspace skill {skill.name} ({skill.path}) replaces the built-in skill of that name"
               + (" (you trusted it)" if trusted else " and its guidance"),
               f"if you made it, `nanoagent skills trust {skill.name}`; if not, delete {skill.path.parent}")


def _report_browser(report: Callable[[bool, str, str], None], config: Config, paths: Paths) -> None:
    """Whether the browser tool is offered, and where its Chromium and profile are (an optional tool: not a
    problem when absent)."""
    from nanoagent.tools.browser import missing, settings_from

    if not config.tools.browser.enabled:
        report(True, "browser: off (tools.browser.enabled is false)", "")
        return
    settings = settings_from(config, paths)
    why = missing(settings)
    if why:
        report(True, f"browser: not offered. {why}", "")
        return
    report(True, f"browser: {settings.executable}, profile {settings.profile}", "")


def _report_sandbox(report: Callable[[bool, str, str], None], config: Config | None) -> None:
    """The same smoke test exec runs: whether commands run in the sandbox, and if not why and how to fix it;
    and what bounds a command's memory and processes here."""
    from nanoagent.tools.sandbox import SandboxPolicy, check_bwrap
    from nanoagent.tools.shell import describe_limits

    e = config.tools.exec if config is not None else None
    report(True, describe_limits(SandboxPolicy(max_processes=e.max_processes, memory_mb=e.memory_mb) if e else
                                 SandboxPolicy()), "")
    mode = config.tools.exec.sandbox if config is not None else "auto"
    if mode == "none":
        report(True, "sandbox: off (tools.exec.sandbox is \"none\"); commands run as you, environment scrubbed", "")
        return
    check = check_bwrap()
    if check.ok:
        report(True, "sandbox: bubblewrap works; commands run in it", "")
    else:
        unattended = "refused" if mode == "bwrap" else "run after a warning at a terminal, refused unattended"
        report(False, f"sandbox: {check.reason}; commands are {unattended}", check.fix)
