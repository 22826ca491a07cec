"""Token prices from litellm's bundled table, read as JSON (importing litellm takes seconds).

An unknown model has no price: callers show its tokens and leave the cost blank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nanoagent.providers.base import Usage


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
        from nanoagent.providers.registry import model_table

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
    from nanoagent.providers.registry import model_table

    for key in _candidates(model):
        entry = model_table().get(key)
        if isinstance(entry, dict) and entry.get("max_input_tokens"):
            return int(entry["max_input_tokens"])
    return None


def format_cost(cost: float | None) -> str:
    if cost is None:
        return "n/a"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"
