"""`onboard` and `status`: first-run setup and a look at the current configuration."""

from __future__ import annotations

import json
from pathlib import Path

from nanoagent.config import Config, load_config, save_config
from nanoagent.errors import ConfigError
from nanoagent.paths import Paths
from nanoagent.templates import seed_workspace


def onboard(workspace: Path | None, provider: str | None = None, model: str | None = None,
            api_key: str | None = None, api_base: str | None = None) -> None:
    paths = Paths.from_env(workspace)
    paths.home.mkdir(parents=True, exist_ok=True)
    for folder in (paths.sessions_dir, paths.logs_dir):
        folder.mkdir(parents=True, exist_ok=True)
    config_file = paths.config_file
    if config_file.exists():
        data = _read_raw(config_file)
        print(f"Keeping existing config {config_file}")
    else:
        data = {}
    changed = not config_file.exists()
    defaults = data.setdefault("agents", {}).setdefault("defaults", {})
    if model:
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


def _read_raw(path: Path) -> dict:
    load_config(path)  # validates, with the same clear errors as every other command
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if text.strip() else {}


def status_lines(paths: Paths, config: Config) -> list[str]:
    from nanoagent.providers.registry import key_variable, provider_name

    model = config.defaults.model
    try:
        provider = provider_name(model)
        settings = config.provider(provider)
        key = "set" if settings.api_key else f"missing (set {key_variable(provider)} or run `nanoagent onboard`)"
        if provider == "ollama":
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
    return lines
