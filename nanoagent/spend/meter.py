"""The check before every model call attempt: price its worst case, refuse it at a cap, reserve, settle after.

The retry layer (`providers/retry.py`) asks `Meter.reserve` before each attempt (retries and fallbacks included) and
`Meter.settle` after it with the tokens it really used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from nanoagent.config.schema import Config
from nanoagent.paths import Paths
from nanoagent.pricing import Price, format_cost, model_table, price_for, price_per_million
from nanoagent.spend.caps import (
    Cap,
    CapReached,
    Scope,
    caps,
    current_scope,
    ledger_for,
    reached_line,
    warning_line,
)
from nanoagent.spend.ledger import Ledger
from nanoagent.usage import Usage

log = logging.getLogger("nanoagent")
PER_MILLION = 1_000_000
_told: set[str] = set()  # models whose assumed price was said in this process


@dataclass
class Hold:
    """A reservation made for one attempt, settled once it ends."""

    line: dict[str, Any]
    price: Price
    scope: Scope | None
    notes: list[str] = field(default_factory=list)  # to tell the user before the call (an assumed price)
    settled: bool = False

    @property
    def worst(self) -> float:
        return float(self.line["usd"])


@dataclass
class Meter:
    """The spend check for one process's model calls. `provider_of` names a model's provider (the registry's); `clock`
    gives the time (epoch seconds) a call is counted at."""

    config: Config
    paths: Paths
    provider_of: Callable[[str], str] | None = None
    clock: Callable[[], float] = time.time
    price_factor: float = 1.0  # the share of the list price these calls are billed at (Message Batches: 0.5)
    _prices: dict[str, tuple[Price, str | None]] = field(default_factory=dict, repr=False, init=False)
    _caps: dict[Scope | None, list[Cap]] = field(default_factory=dict, repr=False, init=False)

    _ledger: Ledger | None = field(default=None, repr=False, init=False)

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = ledger_for(self.paths, self.config.defaults.timezone)
        return self._ledger

    def price(self, model: str) -> tuple[Price, str | None]:
        """The model's price: the user's (`providers.<name>.prices`), the bundled table's, or else the most
        expensive of its provider in the table (of the whole table when the provider has none), with a note."""
        known = self._prices.get(model)
        if known is None:
            price, note = self._price(model)
            f = self.price_factor
            known = self._prices[model] = (Price(price.input * f, price.output * f, price.cache_read * f,
                                                 price.cache_write * f), note)
        return known

    def caps(self, scope: Scope | None) -> list[Cap]:
        """The caps a call in `scope` counts against (config.json is read once per process)."""
        found = self._caps.get(scope)
        if found is None:
            if len(self._caps) > 1000:
                self._caps.clear()
            found = self._caps[scope] = caps(self.config, scope)
        return found

    def _price(self, model: str) -> tuple[Price, str | None]:
        provider = self._provider(model)
        own = self._own_price(model, provider)
        if own is not None:
            return own, None
        listed = price_for(model)
        if listed is not None:
            return listed, None
        assumed, whose = most_expensive(provider)
        note = (f"{model} has no price in the bundled table, so spend caps count it at {whose} most expensive "
                f"({format_cost(assumed.input * PER_MILLION)} in, {format_cost(assumed.output * PER_MILLION)} out per "
                f"million tokens); set its price in providers.{provider or '<name>'}.prices.\"{model}\" "
                "(USD per million tokens, e.g. {\"input\": 3.0, \"output\": 15.0}).")
        return assumed, note

    def reserve(self, model: str, prompt_tokens: int, max_tokens: int) -> Hold:
        """Reserve the worst case of a call to `model` (`prompt_tokens` at most in, `max_tokens` out), or raise
        CapReached when it could cross a cap of the current scope. Appended (fsynced) to the ledger under its lock."""
        scope = current_scope.get()
        price, note = self.price(model)
        worst = (prompt_tokens * max(price.input, price.cache_read, price.cache_write)
                 + max(0, max_tokens) * price.output)
        applicable = self.caps(scope)
        ledger = self.ledger
        now = self.clock()
        with ledger.locked() as totals:
            for cap in applicable:
                spent, held = cap.use(totals, ledger.calendar, now)
                if spent + held + worst > cap.limit + 1e-12 and worst > 0:
                    status = cap.status(totals, ledger.calendar, now)
                    raise CapReached(status, reached_line(status, worst, self.config.defaults.timezone), worst)
            line = ledger.reserve(worst, scope.fields() if scope is not None else {"kind": "other"}, model, now)
            ledger.append([line])
        notes = []
        if note is not None and self._capped() and model not in _told:
            _told.add(model)
            notes.append(note)
        return Hold(line, price, scope, notes)

    def settle(self, hold: Hold, usage: Usage, known: bool) -> list[str]:
        """Replace the reservation with what the attempt cost: `usage` at the price reserved with when it is `known`
        (the attempt ended, or the server refused it), else its worst case (it may have been billed). Returns the
        warnings (budget.warnAt) to give now, each once per period across processes."""
        if hold.settled:
            return []
        hold.settled = True
        real = usage.cost_at(hold.price) if known else max(hold.worst, usage.cost_at(hold.price))
        ledger = self.ledger
        share = self.config.budget.warn_at
        warnings = []
        with ledger.locked() as totals:
            ledger.append([ledger.settlement(hold.line, real, usage.to_dict())], sync=False)  # lost in a crash: the worst case stays
            now = self.clock()
            for cap in self.caps(hold.scope):
                spent, held = cap.use(totals, ledger.calendar, now)
                if cap.limit > 0 and spent + held >= share * cap.limit \
                        and ledger.first_warning(cap.name, cap.period_key(ledger.calendar, now)):
                    warnings.append(warning_line(cap.status(totals, ledger.calendar, now), share,
                                                 self.config.defaults.timezone))
        for warning in warnings:
            log.warning("%s", warning)
        return warnings

    def _capped(self) -> bool:
        b = self.config.budget
        return any(v is not None for v in (b.daily, b.monthly, b.heartbeat, b.dream)) or bool(b.sessions) \
            or (current_scope.get() or Scope()).run_cap is not None

    def _provider(self, model: str) -> str:
        if self.provider_of is not None:
            try:
                return self.provider_of(model)
            except Exception:  # noqa: BLE001 - a name the registry cannot place has no provider's prices
                pass
        name = model.removeprefix("litellm/")
        return name.split("/", 1)[0] if "/" in name else ""

    def _own_price(self, model: str, provider: str) -> Price | None:
        settings = self.config.providers.get(provider) if provider else None
        if settings is None or not settings.prices:
            return None
        bare = model.removeprefix("litellm/")
        for name in (model, bare, bare.split("/", 1)[1] if "/" in bare else bare):
            given = settings.prices.get(name)
            if given is not None and given.input is not None and given.output is not None:
                return price_per_million(given.input, given.output, given.cache_read, given.cache_write)
        return None


def record_cost(config: Config, paths: Paths, scope: Scope | None, model: str, usd: float,
                **detail: Any) -> None:
    """Count a call whose cost is known only once it was made (a transcription: the audio's length is unknown before
    it), against `scope`: its reservation and settlement at `usd` together, `detail` (seconds, tokens) on both."""
    ledger = ledger_for(paths, config.defaults.timezone)
    with ledger.locked():
        line = {**ledger.reserve(usd, scope.fields() if scope is not None else {"kind": "other"}, model), **detail}
        ledger.append([line, ledger.settlement(line, usd)])


@lru_cache(maxsize=32)
def most_expensive(provider: str) -> tuple[Price, str]:
    """The highest price of each kind among `provider`'s models in the bundled table (of the whole table when it lists
    none), and whose it is ("anthropic's", "the table's")."""
    entries = [e for e in model_table().values() if isinstance(e, dict) and "input_cost_per_token" in e]
    own = [e for e in entries if provider and e.get("litellm_provider") == provider]
    chosen, whose = (own, f"{provider}'s") if own else (entries, "the bundled table's")

    def top(key: str, fallback: str = "input_cost_per_token") -> float:
        return max((_float(e.get(key, e.get(fallback))) for e in chosen), default=0.0)

    return Price(top("input_cost_per_token"), top("output_cost_per_token"), top("cache_read_input_token_cost"),
                 top("cache_creation_input_token_cost")), whose


@lru_cache(maxsize=8)
def most_expensive_per_second(provider: str) -> float:
    """The highest price per second of audio among `provider`'s models in the bundled table (0 when it has none)."""
    return max((_float(e.get("input_cost_per_second")) for e in model_table().values()
                if isinstance(e, dict) and e.get("litellm_provider") == provider), default=0.0)


def _float(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if number == number and number != float("inf") else 0.0
