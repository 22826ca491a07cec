"""Token and cost totals from the usage records sessions carry."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nanoagent.pricing import format_cost, price_for
from nanoagent.providers.base import Usage


@dataclass
class Total:
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    unpriced: bool = False  # some calls were to a model without a known price
    calls: int = 0

    def add(self, model: str, usage: Usage, price_factor: float = 1.0) -> None:
        self.usage = self.usage + usage
        self.calls += 1
        price = price_for(model)
        if price is None:
            self.unpriced = True
        else:
            self.cost += price.cost(usage) * price_factor

    def cost_text(self) -> str:
        if self.unpriced:
            return "n/a" if self.cost == 0 else f"{format_cost(self.cost)} + n/a"
        return format_cost(self.cost)


def usage_record(model: str, usage: Usage, purpose: str = "turn", price_factor: float = 1.0) -> dict[str, Any]:
    """The session-file record of one model call. `price_factor` 0.5: a Message Batches call (half price)."""
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    record = {"type": "usage", "ts": stamp, "model": model, "purpose": purpose, **usage.to_dict()}
    if price_factor != 1.0:
        record["price_factor"] = price_factor
    return record


def _factor(record: dict[str, Any]) -> float:
    try:
        return float(record.get("price_factor", 1.0))
    except (TypeError, ValueError):
        return 1.0


def usage_of(record: dict[str, Any]) -> Usage:
    return Usage(int(record.get("input_tokens", 0)), int(record.get("output_tokens", 0)),
                 int(record.get("cache_read_tokens", 0)), int(record.get("cache_write_tokens", 0)))


def session_total(records: list[dict[str, Any]]) -> Total:
    total = Total()
    for record in records:
        total.add(str(record.get("model", "")), usage_of(record), _factor(record))
    return total


def summarize(records: list[tuple[str, dict[str, Any]]], days: int | None = None,
              now: datetime | None = None) -> list[tuple[str, str, str, Total]]:
    """(day, session, model, total) rows, oldest day first, from (session key, usage record) pairs."""
    now = now or datetime.now(UTC)
    since = (now - timedelta(days=days)).date().isoformat() if days else ""
    rows: dict[tuple[str, str, str], Total] = defaultdict(Total)
    for key, record in records:
        day = str(record.get("ts", ""))[:10] or "unknown"
        if since and day != "unknown" and day <= since:
            continue
        model = str(record.get("model", ""))
        rows[(day, key, model)].add(model, usage_of(record), _factor(record))
    return [(day, key, model, total) for (day, key, model), total in sorted(rows.items())]
