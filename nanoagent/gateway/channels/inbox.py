"""The exactly-once bookkeeping of a channel's messages, over its state file (`channels/state.py`).

A message is taken into the inbox before the app is told it may forget it (`take`), given to the hub (`give`), and
leaves the inbox only once the loop wrote it to its session file (`persisted`, called from the session's event
sink just after the write) or once it was answered without a turn (`handled`: a command, a pairing code, a message
that is ignored). A turn it opens stays in `open_turns` until its reply reached the chat (`answered`). So a gateway
killed at any moment answers each message once after the restart: the inbox is replayed, open turns are finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nanoagent.channels.state import ChannelState, StateFile
from nanoagent.messages import ImageBlock, strip_runtime_context


@dataclass
class Waiting:
    """A message given to the hub and not yet written to its session file."""

    id: str
    text: str
    images: list[ImageBlock] = field(default_factory=list)


class Inbox:
    """What outlives one run of the channel's component (the supervisor restarts a run that crashed): the state
    file, and which messages this process gave the hub. Each change is written before the call returns."""

    def __init__(self, state: StateFile):
        self.state = state
        self.given: set[str] = set()  # ids of the messages this process gave the hub
        self.waiting: dict[str, list[Waiting]] = {}  # per session, in the order given

    def take(self, raws: list[dict[str, Any]]) -> set[str]:
        """Put messages from the app in the inbox; the ids of those not taken before (an app may send some again)."""
        return set(self.state.update(lambda state: state.take(raws))) if raws else set()

    def handled(self, *ids: str) -> None:
        if ids:
            self.state.update(lambda state: state.handled(set(ids)))

    def give(self, key: str, id: str, text: str, images: list[ImageBlock] | None = None) -> Waiting:
        waiting = Waiting(id, text, images or [])
        self.waiting.setdefault(key, []).append(waiting)
        self.given.add(id)
        return waiting

    def forget(self, key: str, waiting: Waiting, handled: bool) -> None:
        if waiting in self.waiting.get(key, []):
            self.waiting[key].remove(waiting)
        if handled:
            self.handled(waiting.id)

    def persisted(self, key: str, content: str, opens_turn: bool) -> None:
        """The loop wrote a user message to the session file: the messages it holds leave the inbox, and a turn it
        starts is open until its reply reached the chat. Called from the session's event sink, just after the
        write: a kill in between is the one moment that could make a message count twice."""
        text = strip_runtime_context(content)
        waiting = self.waiting.get(key, [])
        done = run_of(waiting, text)
        for item in done:
            waiting.remove(item)
        if not done and not opens_turn:
            return
        ids = {item.id for item in done}

        def change(state: ChannelState) -> None:
            state.handled(ids)
            if opens_turn and key not in state.open_turns:
                state.open_turns.append(key)

        self.state.update(change)

    def dropped(self, key: str) -> None:
        """The session's turn was cancelled, and the hub dropped the messages waiting to join it."""
        self.handled(*(item.id for item in self.waiting.pop(key, [])))

    def answered(self, key: str) -> None:
        def change(state: ChannelState) -> None:
            state.open_turns = [k for k in state.open_turns if k != key]

        self.state.update(change)


def run_of(waiting: list[Waiting], text: str) -> list[Waiting]:
    """The messages a stored user message holds: one message, or several in a row joined by blank lines (those
    that waited while a turn ran, sent by the hub as the next turn). Exact, so a message is never taken for
    another that merely contains it."""
    for start in range(len(waiting)):
        joined = ""
        for end in range(start, len(waiting)):
            joined = waiting[end].text if end == start else f"{joined}\n\n{waiting[end].text}"
            if joined == text:
                return waiting[start:end + 1]
            if not text.startswith(joined):
                break
    return []
