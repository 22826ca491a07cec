"""Spend caps: the ledger of what model calls cost, the caps config.json sets (`budget`), the check before each call.

`current_scope` says what a call counts against (set where a turn, a cron run, the heartbeat or Dream starts);
`Meter` is the check the retry layer makes before every attempt; `report` and `blocked` read the running totals.
"""

from nanoagent.spend.caps import (
    SOURCES,
    CapReached,
    CapStatus,
    Scope,
    blocked,
    current_scope,
    ledger_for,
    reached_line,
    report,
    working_as,
)
from nanoagent.spend.ledger import Ledger
from nanoagent.spend.meter import Hold, Meter

__all__ = ["CapReached", "CapStatus", "Hold", "Ledger", "Meter", "Scope", "SOURCES", "blocked", "current_scope", "ledger_for",
           "reached_line", "report", "working_as"]
