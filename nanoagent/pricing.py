"""Token prices and context windows from litellm's bundled table, read as JSON (importing litellm takes seconds).

An unknown model has no price: callers show its tokens and leave the cost blank.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nanoagent.usage import Usage


@dataclass(frozen=True)
class Price:
    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, usage: Usage) -> float:
        return (usage.input_tokens * self.input + usage.output_tokens * self.output
                + usage.cache_read_tokens * self.cache_read + usage.cache_write_tokens * self.cache_write)


def _candidates(model: str) -> list[str]:
    name = model.removeprefix("litellm/")
    out = [name]
    if "/" in name:
        out.append(name.split("/", 1)[1])
    return out


def price_for(model: str, table: dict[str, Any] | None = None) -> Price | None:
    if table is None:
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
    for key in _candidates(model):
        entry = model_table().get(key)
        if isinstance(entry, dict) and entry.get("max_input_tokens"):
            return int(entry["max_input_tokens"])
    return None


def format_cost(cost: float | None) -> str:
    if cost is None:
        return "n/a"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def litellm_data_file(name: str) -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if not spec or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / name
    return path if path.exists() else None


@lru_cache(maxsize=1)
def model_table() -> dict[str, dict]:
    """litellm's bundled price and context-window table, read without importing litellm."""
    path = litellm_data_file("model_prices_and_context_window_backup.json")
    if path is None:
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
