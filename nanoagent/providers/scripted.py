"""A provider that plays back scripted replies: for runner tests and offline demos."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nanoagent.providers.base import (
    ChatRequest,
    ProviderError,
    ProviderEvent,
    StreamEnd,
    TextDelta,
    ToolCall,
    ToolCallReady,
    UsageReport,
)
from nanoagent.usage import Usage


@dataclass
class ScriptedReply:
    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    error: ProviderError | None = None
    usage: Usage | None = None
    delay: float = 0.0  # seconds before the reply begins, like a model's latency


class ScriptedProvider:
    name = "scripted"

    def __init__(self, replies: Iterable[ScriptedReply | str] = (), default: str | None = None,
                 respond: Callable[[ChatRequest], ScriptedReply | str | None] | None = None):
        self.replies = [ScriptedReply(r) if isinstance(r, str) else r for r in replies]
        self.default = default
        self.respond = respond  # picks a reply from the request; None falls through to the script
        self.requests: list[ChatRequest] = []
        self._calls = 0

    def prepare(self) -> None:
        pass

    async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        self.requests.append(dataclasses.replace(request, messages=list(request.messages)))
        chosen = self.respond(request) if self.respond else None
        if chosen is not None:
            reply = ScriptedReply(chosen) if isinstance(chosen, str) else chosen
        elif not self.replies:
            if self.default is None:
                raise ProviderError("the scripted provider has no replies left")
            reply = ScriptedReply(self.default)
        else:
            reply = self.replies.pop(0)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.error is not None:
            raise reply.error
        for word in _chunks(reply.text):
            yield TextDelta(word)
        for name, args in reply.tool_calls:
            self._calls += 1
            raw = args if isinstance(args, str) else json.dumps(args)
            yield ToolCallReady(ToolCall(f"call_{self._calls}", name, raw))
        # No prompt figure unless a reply gives one: a script cannot know how a real model counts the prompt, so
        # the context budget is counted, as for a server that reports none.
        yield UsageReport(reply.usage or Usage(output_tokens=len(reply.text) // 4 + 1))
        yield StreamEnd("tool_use" if reply.tool_calls else "end_turn")


def _chunks(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words) if w or i < len(words) - 1]
