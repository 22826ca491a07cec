"""Token prices and context windows from litellm's bundled table, read as JSON (importing litellm takes seconds).

An unknown model has no price: callers show its tokens and leave the cost blank.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

TABLE_FILE = "model_prices_and_context_window_backup.json"


@dataclass(frozen=True)
class Price:
    """USD per token of each kind; `usage.Usage.cost_at` applies it."""

    input: float
    output: float
    cache_read: float
    cache_write: float


def _candidates(model: str) -> list[str]:
    name = model.removeprefix("litellm/")
    out = [name]
    if "/" in name:
        out.append(name.split("/", 1)[1])
    return out


PER_MILLION = 1_000_000
# The user's prices (`providers.<name>.prices`), set when the config is loaded, ahead of the table for every cost this
# process shows or counts: what `usage` and a reply's status line say agrees with what the spend ledger charged.
_own: dict[str, Price] = {}


def use_own_prices(prices: dict[str, Price]) -> None:
    _own.clear()
    _own.update(prices)


def price_per_million(input: float, output: float, cache_read: float | None = None,
                      cache_write: float | None = None) -> Price:
    """A Price from USD per million tokens; cache reads and writes cost the input price unless given."""
    base = input / PER_MILLION
    return Price(base, output / PER_MILLION, base if cache_read is None else cache_read / PER_MILLION,
                 base if cache_write is None else cache_write / PER_MILLION)


def price_for(model: str, table: dict[str, Any] | None = None) -> Price | None:
    if table is None:
        for key in [model, *_candidates(model)]:
            if key in _own:
                return _own[key]
        table = model_table()
    for key in _candidates(model):
        entry = table.get(key)
        if isinstance(entry, dict) and "input_cost_per_token" in entry:
            base = float(entry["input_cost_per_token"])
            return Price(
                input=base,
                output=float(entry.get("output_cost_per_token", 0.0)),
                cache_read=float(entry.get("cache_read_input_token_cost", base)),
                cache_write=float(entry.get("cache_creation_input_token_cost", base)),
            )
    return None


def context_window(model: str) -> int | None:
    """The model's own input window from the bundled table, or None when the table does not know it."""
    entry = model_entry(model)
    window = entry.get("max_input_tokens") if entry else None
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


@dataclass(frozen=True)
class Window:
    """The context window a session's prompt must fit, and whether it is the model's own (smaller than
    contextWindowTokens) rather than the configured one."""

    tokens: int
    from_model: bool = False


def effective_window(configured: int, model: str) -> Window:
    """The smaller of `contextWindowTokens` and the model's own window, so a small-window model never overflows."""
    own = context_window(model)
    return Window(own, True) if own is not None and own < configured else Window(configured)


def format_cost(cost: float | None) -> str:
    if cost is None:
        return "n/a"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def format_limit(amount: float) -> str:
    """A cap or budget as a person gives it: $0.20, $1.00, $0.005 (a spend, with `format_cost`, shows its cents)."""
    return f"${amount:,.2f}" if abs(amount * 100 - round(amount * 100)) < 1e-9 else f"${amount:g}"


def litellm_data_file(name: str) -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if not spec or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / name
    return path if path.exists() else None


@lru_cache(maxsize=64)
def model_entry(model: str) -> dict[str, Any] | None:
    """The table's entry for a model as nanoagent names it, parsed alone: every turn needs its window, and the
    whole table takes 50 ms and 8 MiB to parse. Each entry's name starts a line (`"name": {`)."""
    names = _candidates(model)
    if model_table.cache_info().currsize:
        table = model_table()
        return next((table[n] for n in names if isinstance(table.get(n), dict)), None)
    path = litellm_data_file(TABLE_FILE)
    try:
        text = path.read_text(encoding="utf-8") if path else ""
        for name in names:
            at = _key_at(text, json.dumps(name) + ":")
            entry = json.JSONDecoder().raw_decode(text, at)[0] if at >= 0 else None
            if isinstance(entry, dict):
                return entry
    except (OSError, ValueError):
        pass
    return None


def _key_at(text: str, key: str) -> int:
    """Where the object following `key` starts, for a key that begins its line; -1 when there is none."""
    at = text.find(key)
    while at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        value = at + len(key)
        while text[value:value + 1].isspace():
            value += 1
        if not text[line_start:at].strip() and text.startswith("{", value):
            return value
        at = text.find(key, at + 1)
    return -1


@lru_cache(maxsize=1)
def model_table() -> dict[str, dict]:
    """litellm's bundled price and context-window table, read without importing litellm."""
    path = litellm_data_file(TABLE_FILE)
    if path is None:
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def takes_images(model: str, also: tuple[str, ...] | list[str] = ()) -> bool:
    """Whether a model accepts images. The bundled table's `supports_vision` decides when it is there; Claude
    models (all of which take images) and models the table does not know (a local or custom server the user
    chose) are taken at their word and sent images; `also` lists models to send images to whatever the table
    says (tools.attachments.imageModels)."""
    if model in also or model.removeprefix("litellm/") in also:
        return True
    entry = model_entry(model)
    if entry is None:
        return True
    vision = entry.get("supports_vision")
    if isinstance(vision, bool):
        return vision
    name = model.removeprefix("litellm/").removeprefix("anthropic/")
    return name.startswith("claude-") and not name.startswith("claude-2") and not name.startswith("claude-instant")


# providers whose model names are the user's own (local tags, routers): the table cannot tell a typo there
OPEN_NAMESPACES = ("ollama", "openrouter")


def unknown_model_hint(model: str) -> str | None:
    """A note when the bundled table knows the model's provider but not the model, with the closest names it
    knows: likely a typo. None when the table knows the model or cannot judge (a provider it does not list)."""
    import difflib

    if model_entry(model) is not None:
        return None
    provider, _, name = model.removeprefix("litellm/").rpartition("/")
    provider = provider or ("anthropic" if name.startswith("claude-") else "openai")
    if provider.split("/")[0] in OPEN_NAMESPACES:
        return None
    known = [key.split("/", 1)[1] if key.startswith(provider + "/") else key for key, entry in model_table().items()
             if isinstance(entry, dict) and entry.get("litellm_provider") == provider
             and entry.get("mode", "chat") == "chat"]
    if not known:
        return None
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    guess = f"; did you mean {' or '.join(f'{provider}/{c}' for c in close)}?" if close else "."
    return (f"Note: {model} is not in the bundled model table (a model newer than the table still works if "
            f"{provider} knows it){guess}")
