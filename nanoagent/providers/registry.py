"""Which provider serves a model name, and with which key.

`anthropic/...` and `claude-...` use the native Anthropic provider. OpenAI-
compatible providers (`base.OPENAI_COMPATIBLE`) use plain httpx. Any other `provider/model` that
litellm knows goes through litellm, as does anything prefixed `litellm/`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache

from nanoagent.config.schema import Config
from nanoagent.errors import ConfigError
from nanoagent.pricing import model_table
from nanoagent.providers.base import OPENAI_COMPATIBLE, Provider, key_variable
from nanoagent.providers.retry import RetryingProvider, RetryPolicy
from nanoagent.spend import Meter

OPENAI_BARE_PREFIXES = ("gpt-", "o1", "o3", "o4", "chatgpt-")
# a model that works for each provider onboard offers; also what `doctor` suggests when only that provider has a key
DEFAULT_MODELS = {
    "anthropic": "anthropic/claude-sonnet-4-5",
    "openai": "openai/gpt-4.1",
    "openrouter": "openrouter/anthropic/claude-sonnet-4.5",
    "ollama": "ollama/llama3.1",
}
log = logging.getLogger("nanoagent")
_skipped: set[str] = set()  # fallback models already warned about in this process
EXAMPLES = "e.g. anthropic/claude-sonnet-4-5, openai/gpt-4.1, openrouter/<vendor>/<model> or ollama/llama3.1"


def provider_name(model: str) -> str:
    """The provider a model name belongs to ("anthropic", "openai", ..., or a litellm provider)."""
    if model.startswith("litellm/"):
        return provider_name(model.removeprefix("litellm/"))
    if "/" in model:
        return model.split("/", 1)[0]
    if model.startswith("claude-"):
        return "anthropic"
    if model.startswith(OPENAI_BARE_PREFIXES):
        return "openai"
    raise ConfigError(f"Unknown model '{model}': name it as provider/model, {EXAMPLES}.")


class MissingKeyError(ConfigError):
    """A model's provider needs an API key and has none."""


def make_provider(model: str, config: Config) -> Provider:
    name = provider_name(model)
    settings = config.provider(name)
    timeout = config.defaults.stream_idle_timeout
    via_litellm = model.startswith("litellm/")
    if name == "anthropic" and not via_litellm:
        if not settings.api_key:
            raise MissingKeyError(missing_key_message(name, model, config))
        from nanoagent.providers.anthropic import AnthropicProvider

        return AnthropicProvider(settings.api_key, settings.api_base, timeout)
    if (name in OPENAI_COMPATIBLE or (settings.api_base and name not in litellm_providers())) and not via_litellm:
        default_base, key_var = OPENAI_COMPATIBLE.get(name, (None, None))
        if key_var and not settings.api_key:
            raise MissingKeyError(missing_key_message(name, model, config))
        from nanoagent.providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(name, settings.api_key, settings.api_base or default_base or "", timeout)
    if name not in litellm_providers() and name not in config.providers:
        raise ConfigError(f"Unknown provider '{name}' in model '{model}': use a known provider, {EXAMPLES}, "
                          "or add providers.<name>.apiBase for an OpenAI-compatible server.")
    from nanoagent.providers.litellm import LiteLLMProvider

    return LiteLLMProvider(settings.api_key, settings.api_base, timeout, provider=name)


def session_model_error(model: str, default: str, error: Exception) -> ConfigError:
    """A session's own model (chosen with /model, kept in its file) that cannot be built: say where the name came from
    and that /model changes it, since config.json and --model do not name it."""
    return ConfigError(f"This session's model {model} was set with /model and cannot be used: {str(error).rstrip('.')}. "
                       f"Type /model {default} to switch this session back to the default, or /model with another.")


def missing_key_message(provider: str, model: str | None = None, config: Config | None = None) -> str:
    where = ""
    if model and config is not None and model == config.defaults.model:
        where = f" ({model_setting(model)} is {model})"
    elif model:
        where = f" (model {model})"
    return f"No API key for {provider}{where}: {key_fix(provider, config, model)}."


def key_fix(provider: str, config: Config | None = None, model: str | None = None) -> str:
    """How to give `provider` a key. When another provider has one, the model is more likely the wrong setting
    than the key: say so, and which model to use instead (the configured one when it is that provider's)."""
    text = (f"set {key_variable(provider)} or run `nanoagent onboard` "
            f"(or put it in config.json under providers.{provider}.apiKey)")
    other = next((name for name in keyed_providers(config) if name != provider), None)
    if not other or config is None:
        return text
    configured = config.defaults.model
    try:
        own = provider_name(configured) == other
    except ConfigError:  # a configured model that names no provider has its own error
        own = False
    suggest = configured if own else DEFAULT_MODELS.get(other, other + "/<model>")
    if model is not None and model != configured:  # the model came from --model or /model, not the settings
        return text + f"; a key is set for {other}: use one of its models instead, such as {suggest}"
    return text + (f"; a key is set for {other}: to use it, set {model_setting(configured)} to {suggest} "
                   f"(or run `nanoagent onboard --provider {other}`)")


def model_setting(model: str) -> str:
    """Where the configured model came from: the environment overrides config.json."""
    import os

    return "NANOAGENT_MODEL" if os.environ.get("NANOAGENT_MODEL") == model else "agents.defaults.model"


def keyed_providers(config: Config | None) -> list[str]:
    """Providers with a key (from config.json or the environment), in the order DEFAULT_MODELS lists them."""
    if config is None:
        return []
    names = [name for name, settings in config.providers.items() if settings.api_key]
    return sorted(names, key=lambda n: list(DEFAULT_MODELS).index(n) if n in DEFAULT_MODELS else len(DEFAULT_MODELS))


def default_model(provider: str) -> str | None:
    """A model that works for `provider` when the user names none, or None when nanoagent cannot pick one."""
    return DEFAULT_MODELS.get(provider)


def build_provider(config: Config, model: str | None = None,
                   warn: Callable[[str], None] = log.warning, meter: Meter | None = None) -> RetryingProvider:
    """The primary model and its fallbacks, each checked now so a bad name fails before the first turn. A fallback
    whose provider has no key is left out of the chain (warned about once per process): it could only fail, and
    failing every call for it would stop a healthy primary."""
    primary = model or config.defaults.model
    chain = [(primary, make_provider(primary, config))]
    for fallback in config.defaults.fallback_models:
        if fallback == primary:
            continue
        try:
            chain.append((fallback, make_provider(fallback, config)))
        except MissingKeyError:
            if fallback not in _skipped:
                _skipped.add(fallback)
                name = provider_name(fallback)
                warn(f"Fallback model {fallback} is skipped: no API key for {name}; set {key_variable(name)} "
                     f"(or providers.{name}.apiKey in config.json) to use it, or remove it from "
                     "agents.defaults.fallbackModels.")
    return with_retries(config, chain, meter=meter)


def with_retries(config: Config, chain: list[tuple[str, Provider]], deadline: bool = True,
                 meter: Meter | None = None) -> RetryingProvider:
    """A chain of (model, provider) behind the one retry layer, with the policy from config. `deadline=False` for
    calls that are slow by design (Message Batches, bounded by their own timeout). `meter` checks spend caps before
    every attempt and records what each cost (None: no check, no record)."""
    d = config.defaults
    policy = RetryPolicy(max_retries=d.max_retries, base_delay=d.retry_base_delay, max_retry_wait=d.max_retry_wait,
                         deadline=d.request_deadline if deadline else None)
    if meter is not None:
        from nanoagent.providers.metered import Metered

        chain = [(model, Metered(provider, meter)) for model, provider in chain]
    return RetryingProvider(chain, policy)


@lru_cache(maxsize=1)
def litellm_providers() -> frozenset[str]:
    names = {v.get("litellm_provider", "") for v in model_table().values() if isinstance(v, dict)}
    return frozenset(n for n in names if n)
