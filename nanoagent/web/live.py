"""A reply rendered while it streams, for the web app's chat: Markdown by blocks, with `web.markdown`'s parser and
rules (raw HTML off, links checked, outside images as links).

A block of Markdown is finished once another top-level block starts after it (a heading, a paragraph after a blank
line, a list, a fence...): nothing written later can change how it renders. So each update parses only the open
tail (the text from the last block's first line on), sends the blocks it finished as HTML once, and the tail's HTML
again; a long reply costs one parse of its last block per update, not of the whole reply. The page appends the
finished blocks and replaces the tail. When the turn ends the page reloads the stored reply, rendered whole.

A turn's text comes in segments: a tool call (or the end of a model call) closes one, and the next text starts a
new one below the call, as the terminal shows it. One `LiveReply` per session serves all its tabs: every tab's
watcher sees the same event object, and the render is made once for it (`wire`).

One block can be long (a code block of thousands of lines), and parsing it again per token would grow with it: an
open tail over LONG_TAIL characters is rendered at most every SLOW seconds (an update between says `tail: None`,
keep the last), and once more when its segment closes, so what the page shows is never left behind."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from nanoagent.web.markdown import _parser

if TYPE_CHECKING:
    from nanoagent.agent import events as ev

LONG_TAIL = 8_000  # characters of open tail past which it is rendered at most every SLOW seconds
SLOW = 0.1


class LiveReply:
    def __init__(self) -> None:
        self.segment = 0
        self.open = False  # a segment has text and no tool call or end closed it
        self.text = ""  # the open tail's Markdown: from the first line of the last block on
        self.done: list[str] = []  # the current segment's finished blocks as HTML (for a tab that connects late)
        self.tail = ""
        self.rendered = 0.0  # time.monotonic() of the last render
        self.behind = False  # text came since the last render (a long tail waiting for its turn)
        self._last: tuple[object, dict[str, Any] | None] = (None, None)

    def wire(self, event: ev.Event) -> dict[str, Any] | None:
        """What the page needs of `event` besides its wire form: for a TextDelta, {"seg", "done", "tail"}; for an
        event that closes a segment whose render was behind, its last render; else None. The same event object gives
        the same answer (each tab's watcher asks)."""
        if self._last[0] is event:
            return self._last[1]
        from nanoagent.agent import events as ev

        found: dict[str, Any] | None = None
        if isinstance(event, ev.TextDelta) and not event.agent:
            found = self.add(event.text)
        elif isinstance(event, (ev.TurnStarted, ev.ToolStarted, ev.TurnEnded)) and not event.agent:
            found = self.close()
        elif isinstance(event, ev.MessageAdded) and not event.agent and event.message.get("role") == "assistant":
            found = self.close()
        self._last = (event, found)
        return found

    def close(self) -> dict[str, Any] | None:
        """The open segment ends: the next text starts a new one. Its last render when the page has not had it."""
        last = self.render() if self.open and self.behind else None
        if self.open:
            self.segment += 1
        self.open, self.text, self.done, self.tail, self.behind = False, "", [], "", False
        return last

    def add(self, text: str) -> dict[str, Any]:
        self.open = True
        self.text += text
        if len(self.text) > LONG_TAIL and time.monotonic() - self.rendered < SLOW:
            self.behind = True
            return {"seg": self.segment, "done": [], "tail": None}
        return self.render()

    def render(self) -> dict[str, Any]:
        """Finish the blocks the open text holds before its last one, and render that last one."""
        md = _parser()
        self.rendered, self.behind = time.monotonic(), False
        tokens = md.parse(self.text, {})
        starts = [i for i, t in enumerate(tokens) if t.level == 0 and t.nesting >= 0 and t.map is not None]
        finished: list[str] = []
        if len(starts) > 1:
            cut = starts[-1]
            finished.append(md.renderer.render(tokens[:cut], md.options, {}))
            line = tokens[cut].map[0]  # type: ignore[index]
            self.text = "".join(self.text.splitlines(keepends=True)[line:])
            tokens = tokens[cut:]
            self.done.extend(finished)
        self.tail = md.renderer.render(tokens, md.options, {})
        return {"seg": self.segment, "done": finished, "tail": self.tail}

    def snapshot(self) -> dict[str, Any] | None:
        """The open segment as a tab that connects now needs it, or None."""
        if self.behind:
            self.render()
        return {"seg": self.segment, "done": list(self.done), "tail": self.tail} if self.open else None


__all__ = ["LiveReply"]
