"""Read config.json tolerantly and strictly at once.

Unknown keys warn (a stale key must never stop the agent from starting); a wrong
type or invalid JSON is one clear error naming the file, the key and the fix.
The file is never rewritten by reading it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

from nanoagent.config.schema import ChannelsConfig, Config, ProviderConfig, ReplyLimitConfig, apply_env
from nanoagent.errors import ConfigError
from nanoagent.fsutil import atomic_write
from nanoagent.paths import check_owned

# Keys renamed between versions: old name -> current name (dotted, snake_case).
RENAMED_KEYS = {
    "agents.defaults.max_tool_iteration": "agents.defaults.max_tool_iterations",
    "agents.defaults.context_window": "agents.defaults.context_window_tokens",
}


class RenamedKey(str):
    """The warning for a key a newer version renamed (its text, as every warning), with the old and new dotted
    snake_case names: `doctor --fix` migrates these."""

    old: str
    new: str

    def __new__(cls, text: str, old: str, new: str) -> RenamedKey:
        warning = super().__new__(cls, text)
        warning.old, warning.new = old, new
        return warning


def to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def load_config(path: Path, env: typing.Mapping[str, str] | None = None) -> tuple[Config, list[str]]:
    """Return (config, warnings). Precedence: environment > file > defaults (flags are applied by the CLI)."""
    warnings: list[str] = []
    data: dict[str, Any] = {}
    if path.exists():
        check_owned(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"Cannot read {path}: {e}. Fix its permissions or encoding.") from None
        if text.strip():
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise ConfigError(
                    f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}). "
                    "Fix that spot, or move the file away and run `nanoagent onboard`."
                ) from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} must hold a JSON object at the top level; fix it or run `nanoagent onboard`.")
    config = config_from(data, path, env, warnings)
    _use_own_prices(config)
    return config, warnings


def _use_own_prices(config: Config) -> None:
    """Register `providers.<name>.prices` for every cost this process works out (`pricing.price_for`)."""
    from nanoagent.pricing import price_per_million, use_own_prices

    own = {}
    for provider, settings in config.providers.items():
        for model, given in (settings.prices or {}).items():
            if given.input is not None and given.output is not None:
                price = price_per_million(given.input, given.output, given.cache_read, given.cache_write)
                own[model] = own[f"{provider}/{model}"] = price
    use_own_prices(own)


def config_from(data: dict[str, Any], path: Path, env: typing.Mapping[str, str] | None = None,
                warnings: list[str] | None = None) -> Config:
    """The config that `data` (config.json's contents, not yet written to `path`) would be, checked as
    `load_config` checks the file, with the environment's overrides (`env={}`: none)."""
    config = _build(Config, data, "", path, [] if warnings is None else warnings)
    _apply_env(config, os.environ if env is None else env)
    return config


def _build(cls: type, data: Any, prefix: str, path: Path, warnings: list[str]) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: `{prefix.rstrip('.') or 'top level'}` must be an object; fix or delete it.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = fields.keys()
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = to_snake(raw_key)
        dotted = prefix + key
        if dotted in RENAMED_KEYS:
            new = RENAMED_KEYS[dotted]
            warnings.append(RenamedKey(f"{path}: `{dotted}` was renamed to `{new}`; `nanoagent doctor` can migrate it.",
                                       dotted, new))
            if new.startswith(prefix) and new[len(prefix):] in names and new[len(prefix):] not in kwargs:
                key, dotted = new[len(prefix):], new
            else:
                continue
        if key not in names:
            warnings.append(f"{path}: unknown key `{prefix}{raw_key}` ignored.")
            continue
        kwargs[key] = _convert(hints[key], value, dotted, path, warnings, fields[key].metadata.get("digits", False))
        if "range" in fields[key].metadata and value is not None:
            _check_range(value, fields[key].metadata["range"], dotted, path)  # as written: 0, not 0.0
    try:
        return cls(**kwargs)
    except ConfigError as e:  # a class's own checks (`schema.check_choices`) name the key; this adds the file
        raise ConfigError(f"{path}: {e}") from None


def _channels(data: Any, path: Path, warnings: list[str]) -> ChannelsConfig:
    """`channels`: the shared `replyLimit`, and each channel's block read with the settings class its folder (or
    installed package) declares; a block naming no channel warns, as an unknown key does."""
    from nanoagent.channels import registry

    if not isinstance(data, dict):
        raise ConfigError(f"{path}: `channels` must be an object; fix or delete it.")
    channels = ChannelsConfig()
    for key, value in data.items():
        if to_snake(key) == "reply_limit":
            channels.reply_limit = _build(ReplyLimitConfig, value, "channels.reply_limit.", path, warnings)
            continue
        try:
            channel = registry.get(key)
        except registry.UnknownChannel:
            warnings.append(f"{path}: unknown key `channels.{key}` ignored (no channel is called {key!r}: "
                            "`nanoagent channels list` shows them).")
            continue
        channels.blocks[key] = _build(channel.settings_class, value, f"channels.{key}.", path, warnings)
    return channels


def _check_range(value: float, bounds: tuple[float, float], dotted: str, path: Path) -> None:
    low, high = bounds
    if not low <= value <= high:  # NaN too
        raise ConfigError(f"{path}: `{_camel_path(dotted)}` must be from {low} to {high}, got "
                          f"{json.dumps(value)[:40]}; fix the value or delete the key.")


def _convert(tp: Any, value: Any, dotted: str, path: Path, warnings: list[str], digits: bool = False) -> Any:
    """`value` as type `tp`; `digits`: a whole number may be written as a string of digits (ids, as nanobot and
    OpenClaw write them)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, dotted, path, warnings, digits)
    if tp is ChannelsConfig:
        return _channels(value, path, warnings)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, dotted + ".", path, warnings)
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            _type_error(dotted, "a list", value, path)
        return [_convert(item, v, f"{dotted}[{i}]", path, warnings, digits) for i, v in enumerate(value)]
    if origin is dict:
        _, item = typing.get_args(tp)
        if not isinstance(value, dict):
            _type_error(dotted, "an object", value, path)
        return {k: _convert(item, v, f"{dotted}.{k}", path, warnings) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            _type_error(dotted, "true or false", value, path)
        return value
    if tp is int:
        if digits and isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,20}", value.strip()):
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            _type_error(dotted, "a whole number" + (" or a string of digits" if digits else ""), value, path)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            _type_error(dotted, "a number", value, path)
        return float(value)
    if tp is str:
        if digits and isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            _type_error(dotted, "a string", value, path)
        return value
    raise AssertionError(f"unsupported config type {tp!r}")


def _camel_path(dotted: str) -> str:
    return ".".join(to_camel(p) for p in dotted.split("."))


def _type_error(dotted: str, expected: str, value: Any, path: Path) -> typing.NoReturn:
    raise ConfigError(
        f"{path}: `{_camel_path(dotted)}` must be {expected}, got {json.dumps(value)[:40]}; fix the value or delete "
        "the key."
    )


ENV_KEYS = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openrouter": ("OPENROUTER_API_KEY", None),
    "deepseek": ("DEEPSEEK_API_KEY", None),
    "groq": ("GROQ_API_KEY", None),
    "gemini": ("GEMINI_API_KEY", None),
    "ollama": (None, "OLLAMA_API_BASE"),
}


def _apply_env(config: Config, env: typing.Mapping[str, str]) -> None:
    if env.get("NANOAGENT_MODEL"):
        config.agents.defaults.model = env["NANOAGENT_MODEL"]
    for name, (key_var, base_var) in ENV_KEYS.items():
        key = env.get(key_var) if key_var else None
        base = env.get(base_var) if base_var else None
        if key or base:
            pc = config.providers.setdefault(name, ProviderConfig())
            if key:
                pc.api_key = key
            if base:
                pc.api_base = base
    if config.channels.blocks:
        from nanoagent.channels import registry

        for name, settings in config.channels.blocks.items():
            apply_env(settings, registry.get(name).env, env)
    config.channels.environment = env  # for the blocks made later of a channel's defaults


def save_config(path: Path, data: dict[str, Any]) -> None:
    """Write config atomically with mode 0600: it may hold API keys."""
    atomic_write(path, json.dumps(data, indent=2) + "\n", mode=0o600)
