"""The prompt's budget, decided in one place: what a turn sends, and when older turns are archived to make room.

The window is the smaller of `contextWindowTokens` and the model's own (`pricing.effective_window`); the budget is
that less the reply and a margin (`Consolidator.budget_for`); the prompt is measured as the Consolidator measures
it (estimates scaled to the provider's figure for the last call, the tokenizer only without one). A turn meets the
budget at three moments, the methods of its `TurnBudget`:
- `fit`, before the first call: archive when the prompt is over the budget, then leave out of this request the
  oldest turns that still do not fit (they stay for later rounds);
- `shrink`, when the provider refuses the prompt as too long: it filled the model's window whatever the estimate
  said, so archive as if it had;
- `settle`, after the turn: near the budget (80%), archive now rather than at the start of the next turn.
Without a Consolidator nothing is archived: the prompt is the whole unarchived session.

Before anything is archived, old tool results are pruned, in steps: at `fit`, when the prompt is over half the
budget and trimming every tool result longer than `messages.PRUNE_MIN_CHARS` before the last `PRUNE_KEEP_TURNS`
user turns would save at least a quarter of the budget, they are all sent trimmed to their head and tail from then on
(the session's `pruned` cursor; the session file keeps them whole). The cursor moves only at such a step, so the
requests between two steps share their prefix: a step disturbs the cached prefix once and buys a quarter of the
budget, and a prompt with nothing worth trimming never moves it. The first call after a step is measured by count,
not by the previous call's figure (that prompt was not trimmed).
"""

from __future__ import annotations

from dataclasses import dataclass

from nanoagent.agent.context import ContextBuilder
from nanoagent.config.schema import AgentDefaults
from nanoagent.memory.consolidator import Consolidator, FixedCost
from nanoagent.pricing import Window, effective_window
from nanoagent.session.store import Session

SETTLE_AT = 0.8  # after a turn, archive once the prompt is over this share of the budget
PRUNE_AT = 0.5  # a pruning step is considered once the prompt is over this share of the budget ...
PRUNE_GAIN = 0.25  # ... and taken when it saves at least this share of it
PRUNE_KEEP_TURNS = 3  # the results of the latest user turns are always sent whole


@dataclass(frozen=True)
class Prompt:
    """What a request sends besides the tools: the system prompt, and the session's messages from `visible` on."""

    system: str
    visible: int


@dataclass(frozen=True)
class PromptBudget:
    context: ContextBuilder  # the system prompt and the tool list: the fixed part of every request
    settings: AgentDefaults
    consolidator: Consolidator | None = None  # archives old turns to memory/history.jsonl (None: never)

    def window(self, model: str) -> Window:
        return effective_window(self.settings.context_window_tokens, model)

    def fixed(self, system: str) -> FixedCost:
        """Tokens of the system prompt and tool list, by whichever counter the Consolidator asks for."""
        return lambda count: self.context.fixed_tokens(system, count)

    def used(self, session: Session, model: str) -> int:
        """The prompt the next turn would send, in tokens, measured as the turn measures it (/status)."""
        if self.consolidator is None:
            return self.context.prompt_tokens(session.messages, session.last_consolidated, session.failed(),
                                              session.key)
        return self.consolidator.prompt_tokens(session, self.fixed(self.context.system_prompt(session.key)), model)

    def turn(self, session: Session, model: str) -> TurnBudget:
        return TurnBudget(self, session, model)


@dataclass
class TurnBudget:
    """One turn's prompt against the budget; `prompt` is what the turn sends now."""

    owner: PromptBudget
    session: Session
    model: str
    prompt: Prompt | None = None

    @property
    def can_shrink(self) -> bool:
        return self.owner.consolidator is not None

    async def fit(self) -> Prompt:
        """Before the turn's first call (its user message stored): archive old turns if the prompt would outgrow
        the budget, and say what to send."""
        consolidator, session = self.owner.consolidator, self.session
        system = self.owner.context.system_prompt(self.session.key)
        if consolidator is None:
            self.prompt = Prompt(system, session.last_consolidated)
            return self.prompt
        consolidator.maybe_prune(session, self.owner.fixed(system), self.model, PRUNE_AT, PRUNE_KEEP_TURNS, PRUNE_GAIN)
        if await consolidator.maybe_consolidate(session, self.owner.fixed(system), self.model):
            system = self.owner.context.system_prompt(self.session.key)  # the archive added to the recent history
        return self._send(system)

    async def shrink(self) -> Prompt | None:
        """The provider refused the prompt as too long: archive older turns as if it filled the model's window.
        The smaller prompt, or None when nothing is left to archive."""
        consolidator = self.owner.consolidator
        if consolidator is None:
            return None
        system = self.prompt.system if self.prompt is not None else self.owner.context.system_prompt(self.session.key)
        if not await consolidator.consolidate_overflow(self.session, self.owner.fixed(system), self.model):
            return None
        return self._send(self.owner.context.system_prompt(self.session.key))  # the archive added to the recent history

    async def settle(self) -> None:
        """After the turn: near the budget, archive now rather than at the start of the next turn."""
        consolidator = self.owner.consolidator
        if consolidator is None or self.prompt is None:
            return
        await consolidator.maybe_consolidate(self.session, self.owner.fixed(self.prompt.system), self.model,
                                             threshold=SETTLE_AT)

    def _send(self, system: str) -> Prompt:
        assert self.owner.consolidator is not None
        visible = self.owner.consolidator.window_start(self.session, self.owner.fixed(system), self.model)
        self.prompt = Prompt(system, visible)
        return self.prompt


__all__ = ["Prompt", "PromptBudget", "TurnBudget"]
