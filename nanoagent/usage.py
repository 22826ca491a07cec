"""Tokens a model call used, the session-file record of it, and token and cost totals.

A one-shot through the gateway loads this module to read a turn's usage: datetime and the price table (pricing)
load only where a record is stamped or a cost is worked out.
"""

from __future__ import annotations

from dataclasses import field

from nanoagent.records import ByValue, Frozen, lean_dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any

    from nanoagent.pricing import Price

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


@lean_dataclass(frozen=True)
class Usage(Frozen):
    """Tokens one model call (or a sum of calls) used, by kind."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """Everything the request sent, cached or not: how full the context was."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def to_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in TOKEN_FIELDS}

    def cost_at(self, price: Price) -> float:
        """What these tokens cost in USD at `price`."""
        return (self.input_tokens * price.input + self.output_tokens * price.output
                + self.cache_read_tokens * price.cache_read + self.cache_write_tokens * price.cache_write)


@lean_dataclass(frozen=True)
class UsageRecord(Frozen):
    """One model call as a session file records it: {"type": "usage", "ts", "model", "purpose", tokens...}.
    `price_factor` 0.5 marks a Message Batches call (half price). `window` is the [start, end) of the session's
    messages a turn's call sent, so its prompt tokens measure that stretch of the session."""

    model: str
    usage: Usage
    purpose: str = "turn"
    ts: str = ""
    price_factor: float = 1.0
    window: tuple[int, int] | None = None

    @classmethod
    def now(cls, model: str, usage: Usage, purpose: str = "turn", price_factor: float = 1.0,
            window: tuple[int, int] | None = None) -> UsageRecord:
        from datetime import UTC, datetime

        return cls(model, usage, purpose, datetime.now(UTC).isoformat(timespec="seconds"), price_factor, window)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {"type": "usage", "ts": self.ts, "model": self.model, "purpose": self.purpose,
                                  **self.usage.to_dict()}
        if self.price_factor != 1.0:
            record["price_factor"] = self.price_factor
        if self.window is not None:
            record["window"] = list(self.window)
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> UsageRecord:
        """Tolerant: a field of the wrong type counts as absent (zero tokens, no price factor)."""
        import math

        tokens = [_count(record.get(name)) for name in TOKEN_FIELDS]
        factor = record.get("price_factor", 1.0)
        good_factor = isinstance(factor, int | float) and not isinstance(factor, bool) and math.isfinite(factor)
        return cls(model=_text(record.get("model")), usage=Usage(*tokens), purpose=_text(record.get("purpose")) or "turn",
                   ts=_text(record.get("ts")), price_factor=float(factor) if good_factor and factor >= 0 else 1.0,
                   window=_window(record.get("window")))


def _index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(value: Any) -> int:
    return value if _index(value) else 0


def _window(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list) and len(value) == 2 and all(_index(v) for v in value) and value[0] < value[1]:
        return value[0], value[1]
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@lean_dataclass()
class Total(ByValue):
    """Tokens, cost and calls summed over usage records."""

    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    unpriced: bool = False  # some calls were to a model without a known price
    calls: int = 0

    def add(self, model: str, usage: Usage, price_factor: float = 1.0) -> None:
        self.usage = self.usage + usage
        self.calls += 1
        cost = turn_cost(model, usage)
        if cost is None:
            self.unpriced = True
        else:
            self.cost += cost * price_factor

    def merge(self, other: Total) -> None:
        self.usage, self.calls = self.usage + other.usage, self.calls + other.calls
        self.cost += other.cost
        self.unpriced = self.unpriced or other.unpriced

    def cost_text(self) -> str:
        from nanoagent.pricing import format_cost

        if self.unpriced:
            return "n/a" if self.cost == 0 else f"{format_cost(self.cost)} + n/a"
        return format_cost(self.cost)


def turn_cost(model: str, usage: Usage) -> float | None:
    """What one turn's calls cost in USD at the model's listed price; None for a model without one."""
    from nanoagent.pricing import price_for

    price = price_for(model)
    return None if price is None else usage.cost_at(price)


def turn_line(model: str, usage: Usage) -> str:
    """The line shown after a reply: tokens in and out (cache reads among them), and the cost."""
    if not usage.input_tokens and not usage.output_tokens:
        return ""
    from nanoagent.pricing import format_cost

    cached = f" ({usage.cache_read_tokens:,} cached)" if usage.cache_read_tokens else ""
    return (f"{usage.prompt_tokens:,} in{cached} · {usage.output_tokens:,} out · "
            f"{format_cost(turn_cost(model, usage))}")


def session_total(records: list[UsageRecord]) -> Total:
    total = Total()
    for record in records:
        total.add(record.model, record.usage, record.price_factor)
    return total


def summarize(records: list[tuple[str, UsageRecord]], days: int | None = None,
              now: datetime | None = None) -> list[tuple[str, str, str, Total]]:
    """(day, session, model, total) rows, oldest day first, from (session key, usage record) pairs."""
    from collections import defaultdict
    from datetime import UTC, datetime, timedelta

    now = now or datetime.now(UTC)
    since = (now - timedelta(days=days)).date().isoformat() if days else ""
    rows: dict[tuple[str, str, str], Total] = defaultdict(Total)
    for key, record in records:
        day = record.ts[:10] or "unknown"
        if since and day != "unknown" and day <= since:
            continue
        rows[(day, key, record.model)].add(record.model, record.usage, record.price_factor)
    return [(day, key, model, total) for (day, key, model), total in sorted(rows.items())]


def rows_json(rows: list[tuple[str, str, str, Total]]) -> dict[str, Any]:
    """`nanoagent usage --json`: each (day, session, model) row's calls, tokens and cost (USD at the listed prices,
    null when no call had one; `unpriced`: some calls had none and are not in the cost), and their total."""
    grand = Total()
    out = []
    for day, key, model, total in rows:
        grand.merge(total)
        out.append({"day": day, "session": key, "model": model, **total_json(total)})
    return {"rows": out, "total": total_json(grand)}


def total_json(total: Total) -> dict[str, Any]:
    cost = None if total.unpriced and total.cost == 0 else round(total.cost, 6)
    return {"calls": total.calls, **total.usage.to_dict(), "cost": cost, "unpriced": total.unpriced}
