"""AgentRunner: one LLM-and-tools loop. No I/O of its own: everything goes out as events."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nanoagent import messages as msg
from nanoagent.agent import events as ev
from nanoagent.messages import (
    Message,
    ToolCallData,
    ToolMessage,
    escape_untrusted,
    parse_arguments,
    truncate,
    wrap_untrusted,
)
from nanoagent.providers import base as pb
from nanoagent.providers.base import ChatRequest, Provider, ProviderError, ToolCall
from nanoagent.tools import ToolContext, ToolError, ToolRegistry, ToolResult

MAX_ITERATIONS_REPLY = (
    "I stopped after {n} tool steps without reaching an answer (the limit is "
    "agents.defaults.maxToolIterations). Say \"continue\" to let me carry on, or raise the limit."
)
EMPTY_REPLY = "(The model returned an empty reply. Try rephrasing, or start a fresh session with /new.)"
CUT_REPLY_NOTICE = ("The reply was cut off: it reached the output limit of {n} tokens (agents.defaults.maxTokens). "
                    "Say \"continue\" for the rest, or raise the limit.")
CUT_CALL = ("Error: this tool call was not run: the reply was cut off at the output limit ({n} tokens) and its "
            "arguments may be incomplete. Send it again with less content, e.g. write a large file in parts.")
UNNAMED_TOOL = "unnamed_tool"  # what a call without a usable name is stored as, so later requests stay valid
MADE_ROOM = ("The conversation was too long for the model: older turns were archived to memory; sending it again. "
             "If this keeps happening, set agents.defaults.contextWindowTokens to the model's window.")
STILL_TOO_LONG = ("{error} (still too long after archiving older turns to memory: shorten the message, or start "
                  "afresh with /new)")
NOTHING_TO_ARCHIVE = "{error} (no older turns are left to archive: shorten the message, or start afresh with /new)"

# Makes room after the provider refused the prompt as too long: the new (system prompt, messages), None if it could not.
Shrink = Callable[[], Awaitable[tuple[str, list[Message]] | None]]
# Messages as the next request sends them: image references read from media/ (`attachments.resolve`).
Resolve = Callable[[list[Message]], list[Message]]


@dataclass
class RunSpec:
    system: str
    messages: list[Message]  # the conversation so far, ending with the new user message
    tools: ToolRegistry
    tool_context: ToolContext
    model: str
    session: str = ""  # the session key events are stamped with
    max_tokens: int = 8192
    temperature: float | None = None
    thinking_budget: int = 0
    max_iterations: int = 100
    max_result_chars: int = 16_000
    injections: Callable[[], list[str]] | None = None  # messages typed while the turn runs
    shrink: Shrink | None = None  # once a run: on a context overflow, make room and send the call again
    shrunk: bool = False  # room was made once in this run already
    resolve: Resolve | None = None  # for a tool result with images (None: they go as notes that they were not loaded)


@dataclass
class _Reply:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    thinking: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"

    @property
    def cut(self) -> bool:
        return self.stop_reason == "max_tokens"


class AgentRunner:
    def __init__(self, provider: Provider, sink: ev.EventSink):
        self.provider = provider
        self.sink = sink

    async def run(self, spec: RunSpec) -> ev.RunResult:
        result = ev.RunResult(reply="", stop=ev.StopReason.COMPLETED)
        messages = list(spec.messages)
        for _ in range(spec.max_iterations):
            self._drain_injections(spec, messages, result)
            try:
                reply = await self._call_model(spec, messages, result)
            except ProviderError as e:
                refit = await self._make_room(spec, messages, e)
                if isinstance(refit, str):
                    result.sent = e.reached or bool(result.messages)
                    return self._fail(spec, result, refit)
                spec = refit
                continue  # the same call once more, on the smaller prompt (it counts as a step)
            reply.calls = _usable_calls(reply.calls)
            self._add(spec, _assistant_message(reply), messages, result)
            if reply.calls:
                for message in await self._run_tools(spec, reply, result):
                    self._add(spec, message, messages, result)
                continue
            if spec.injections and self._drain_injections(spec, messages, result):
                continue  # the user said more while the model answered: let it respond
            return self._finish(spec, result, reply)
        result.reply = MAX_ITERATIONS_REPLY.format(n=spec.max_iterations)
        result.stop = ev.StopReason.MAX_ITERATIONS
        self._add(spec, msg.assistant(result.reply), messages, result)
        self._emit(spec, ev.TurnEnded(result.stop))
        return result

    def _emit(self, spec: RunSpec, event: ev.Event) -> None:
        self.sink(dataclasses.replace(event, session=spec.session) if spec.session else event)

    def _add(self, spec: RunSpec, message: Message, messages: list[Message], result: ev.RunResult) -> None:
        """`message` joins the run's next request (its images resolved) and, as it is, the result and the session."""
        messages.extend(spec.resolve([message]) if spec.resolve is not None and msg.images_of(message) else [message])
        result.messages.append(message)
        self._emit(spec, ev.MessageAdded(message))

    def _finish(self, spec: RunSpec, result: ev.RunResult, reply: _Reply) -> ev.RunResult:
        result.reply = reply.text or EMPTY_REPLY
        if reply.cut:
            result.stop = ev.StopReason.MAX_TOKENS
            self._emit(spec, ev.Notice(CUT_REPLY_NOTICE.format(n=spec.max_tokens)))
        self._emit(spec, ev.TurnEnded(result.stop))
        return result

    def _fail(self, spec: RunSpec, result: ev.RunResult, error: str) -> ev.RunResult:
        result.stop, result.error = ev.StopReason.ERROR, error
        self._emit(spec, ev.TurnEnded(ev.StopReason.ERROR, error))
        return result

    async def _make_room(self, spec: RunSpec, messages: list[Message], error: ProviderError) -> RunSpec | str:
        """After a context overflow, the spec to call again with (its messages replaced in `messages`), the first
        time in a run; otherwise the failure to report."""
        if not error.overflow or spec.shrink is None:
            return STILL_TOO_LONG.format(error=error.message) if error.overflow and spec.shrunk else error.message
        smaller = await spec.shrink()
        if smaller is None:
            return NOTHING_TO_ARCHIVE.format(error=error.message)
        system, messages[:] = smaller
        self._emit(spec, ev.Notice(MADE_ROOM))
        return dataclasses.replace(spec, system=system, shrink=None, shrunk=True)

    def _drain_injections(self, spec: RunSpec, messages: list[Message], result: ev.RunResult) -> bool:
        texts = spec.injections() if spec.injections else []
        for text in texts:
            self._emit(spec, ev.Injected(text))
            self._add(spec, msg.user(text), messages, result)
        return bool(texts)

    async def _call_model(self, spec: RunSpec, messages: list[Message], result: ev.RunResult) -> _Reply:
        request = ChatRequest(
            model=spec.model, system=spec.system, messages=messages, tools=spec.tools.specs(),
            max_tokens=spec.max_tokens, temperature=spec.temperature, thinking_budget=spec.thinking_budget,
        )
        reply = _Reply()
        async for event in self.provider.stream(request):
            match event:
                case pb.TextDelta(text=text):
                    reply.text += text
                    self._emit(spec, ev.TextDelta(text))
                case pb.ThinkingDelta(text=text):
                    self._emit(spec, ev.ThinkingDelta(text))
                case pb.ThinkingBlock(block=block):
                    reply.thinking.append(block)
                case pb.ToolCallReady(call=call):
                    reply.calls.append(call)
                case pb.UsageReport(usage=usage, model=model):
                    result.usage = result.usage + usage
                    self._emit(spec, ev.UsageRecorded(model or spec.model, usage))
                case pb.RetryNotice(model=model, reason=reason, wait=wait, next_model=next_model):
                    self._emit(spec, ev.Retrying(model, reason, wait, next_model))
                case pb.StreamEnd(stop_reason=stop):
                    reply.stop_reason = stop
        return reply

    async def _run_tools(self, spec: RunSpec, reply: _Reply, result: ev.RunResult) -> list[ToolMessage]:
        """Consecutive read-only calls run together; anything that writes runs alone, in order.
        Calls of a reply cut off by the output limit are not run: their arguments may be incomplete."""
        if reply.cut:
            return [msg.tool_result(c.id, c.name, CUT_CALL.format(n=spec.max_tokens), error=True) for c in reply.calls]
        messages: list[ToolMessage] = []
        batch: list[ToolCall] = []
        for call in reply.calls:
            if spec.tools.is_read_only(call.name):
                batch.append(call)
                continue
            messages += await asyncio.gather(*(self._run_tool(spec, c, result) for c in batch))
            batch = []
            messages.append(await self._run_tool(spec, call, result))
        messages += await asyncio.gather(*(self._run_tool(spec, c, result) for c in batch))
        return messages

    async def _run_tool(self, spec: RunSpec, call: ToolCall, result: ev.RunResult) -> ToolMessage:
        arguments, parse_error = parse_arguments(call.arguments)
        self._emit(spec, ev.ToolStarted(call.id, call.name, arguments))
        started = time.monotonic()
        error: str | None = None
        images: tuple[msg.ImageBlock, ...] = ()
        try:
            tool = spec.tools.get(call.name)
            if tool is None:
                raise ToolError(spec.tools.refused(call.name) or _unknown_tool(call.name, spec.tools))
            if parse_error:
                raise ToolError(parse_error)
            output = await tool.call(spec.tool_context, arguments)
            text = output.text if isinstance(output, ToolResult) else output
            images = output.images if isinstance(output, ToolResult) else ()
            content = wrap_untrusted(call.name, truncate(text, spec.max_result_chars))
        except ToolError as e:
            error = str(e)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the one place tool failures become results
            error = f"{call.name} failed with {type(e).__name__}: {e}"
        if error is not None:
            content = f"Error: {escape_untrusted(error)}"
        elapsed = time.monotonic() - started
        self._emit(spec, ev.ToolFinished(call.id, call.name, content, elapsed, error))
        result.tool_calls.append(ev.ToolCallRecord(call.name, arguments, error is None, elapsed))
        return msg.tool_result(call.id, call.name, content, error=error is not None,
                               images=images if error is None else ())


def _unknown_tool(name: str, tools: ToolRegistry) -> str:
    if name == UNNAMED_TOOL:
        return f"The tool call had no usable name. Call one of: {', '.join(tools.names())}."
    return f"Unknown tool '{name}'. Available tools: {', '.join(tools.names())}."


def _usable_calls(calls: list[ToolCall]) -> list[ToolCall]:
    """Calls as the session can store and the next request can send: each with a text name (a missing one
    becomes UNNAMED_TOOL, answered with an error) and an id of its own (missing or repeated ids get new ones)."""
    seen: set[str] = set()
    out = []
    for call in calls:
        name = call.name if isinstance(call.name, str) and call.name.strip() else UNNAMED_TOOL
        call_id = call.id if isinstance(call.id, str) and call.id and call.id not in seen else _new_id()
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments or {})
        seen.add(call_id)
        out.append(ToolCall(call_id, name, arguments))
    return out


def _new_id() -> str:
    return f"toolu_na_{uuid.uuid4().hex[:20]}"


def _assistant_message(reply: _Reply) -> msg.AssistantMessage:
    calls: list[ToolCallData] = [{"id": c.id, "name": c.name, "arguments": _normalized(c.arguments)}
                                 for c in reply.calls]
    return msg.assistant(reply.text, calls, reply.thinking)


def _normalized(raw: str) -> str:
    arguments, error = parse_arguments(raw)
    return raw if error else json.dumps(arguments, ensure_ascii=False)


__all__ = ["AgentRunner", "RunSpec"]
