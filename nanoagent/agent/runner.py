"""AgentRunner: one LLM-and-tools loop. No I/O of its own: everything goes out as events."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nanoagent.agent import events as ev
from nanoagent.providers import base as pb
from nanoagent.providers.base import ChatRequest, Provider, ProviderError, ToolCall, Usage
from nanoagent.tools import ToolContext, ToolError, ToolRegistry

MAX_ITERATIONS_REPLY = (
    "I stopped after {n} tool steps without reaching an answer (the limit is "
    "agents.defaults.maxToolIterations). Say \"continue\" to let me carry on, or raise the limit."
)
EMPTY_REPLY = "(The model returned an empty reply. Try rephrasing, or start a fresh session with /new.)"


@dataclass
class RunSpec:
    system: str
    messages: list[dict[str, Any]]  # the conversation so far, ending with the new user message
    tools: ToolRegistry
    tool_context: ToolContext
    model: str
    max_tokens: int = 8192
    temperature: float | None = None
    thinking_budget: int = 0
    max_iterations: int = 100
    max_result_chars: int = 16_000
    injections: Callable[[], list[str]] | None = None  # messages typed while the turn runs


@dataclass
class _Reply:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    thinking: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"


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
                return self._fail(result, e.message)
            assistant = _assistant_message(reply)
            self._add(assistant, messages, result)
            if not reply.calls:
                if spec.injections and self._drain_injections(spec, messages, result):
                    continue  # the user said more while the model answered: let it respond
                result.reply = reply.text or EMPTY_REPLY
                self.sink(ev.TurnEnded(ev.StopReason.COMPLETED))
                return result
            for message in await self._run_tools(spec, reply.calls, result):
                self._add(message, messages, result)
        result.reply = MAX_ITERATIONS_REPLY.format(n=spec.max_iterations)
        result.stop = ev.StopReason.MAX_ITERATIONS
        self._add({"role": "assistant", "content": result.reply}, messages, result)
        self.sink(ev.TurnEnded(result.stop))
        return result

    def _add(self, message: dict[str, Any], messages: list[dict[str, Any]], result: ev.RunResult) -> None:
        messages.append(message)
        result.messages.append(message)
        self.sink(ev.MessageAdded(message))

    def _fail(self, result: ev.RunResult, error: str) -> ev.RunResult:
        result.stop, result.error = ev.StopReason.ERROR, error
        self.sink(ev.TurnEnded(ev.StopReason.ERROR, error))
        return result

    def _drain_injections(self, spec: RunSpec, messages: list[dict[str, Any]], result: ev.RunResult) -> bool:
        texts = spec.injections() if spec.injections else []
        for text in texts:
            self.sink(ev.Injected(text))
            self._add({"role": "user", "content": text}, messages, result)
        return bool(texts)

    async def _call_model(self, spec: RunSpec, messages: list[dict[str, Any]], result: ev.RunResult) -> _Reply:
        request = ChatRequest(
            model=spec.model, system=spec.system, messages=messages, tools=spec.tools.specs(),
            max_tokens=spec.max_tokens, temperature=spec.temperature, thinking_budget=spec.thinking_budget,
        )
        reply = _Reply()
        async for event in self.provider.stream(request):
            match event:
                case pb.TextDelta(text=text):
                    reply.text += text
                    self.sink(ev.TextDelta(text))
                case pb.ThinkingDelta(text=text):
                    self.sink(ev.ThinkingDelta(text))
                case pb.ThinkingBlock(block=block):
                    reply.thinking.append(block)
                case pb.ToolCallReady(call=call):
                    reply.calls.append(call)
                case pb.UsageReport(usage=usage, model=model):
                    result.usage = result.usage + usage
                    self.sink(ev.UsageRecorded(model or spec.model, usage))
                case pb.RetryNotice(model=model, reason=reason, wait=wait, next_model=next_model):
                    self.sink(ev.Retrying(model, reason, wait, next_model))
                case pb.StreamEnd(stop_reason=stop):
                    reply.stop_reason = stop
        return reply

    async def _run_tools(self, spec: RunSpec, calls: list[ToolCall], result: ev.RunResult) -> list[dict[str, Any]]:
        """Consecutive read-only calls run together; anything that writes runs alone, in order."""
        messages: list[dict[str, Any]] = []
        batch: list[ToolCall] = []
        for call in calls:
            if spec.tools.is_read_only(call.name):
                batch.append(call)
                continue
            messages += await asyncio.gather(*(self._run_tool(spec, c, result) for c in batch))
            batch = []
            messages.append(await self._run_tool(spec, call, result))
        messages += await asyncio.gather(*(self._run_tool(spec, c, result) for c in batch))
        return messages

    async def _run_tool(self, spec: RunSpec, call: ToolCall, result: ev.RunResult) -> dict[str, Any]:
        arguments, parse_error = parse_arguments(call.arguments)
        self.sink(ev.ToolStarted(call.id, call.name, arguments))
        started = time.monotonic()
        ok = False
        try:
            tool = spec.tools.get(call.name)
            if tool is None:
                raise ToolError(f"Unknown tool '{call.name}'. Available tools: {', '.join(spec.tools.names())}.")
            if parse_error:
                raise ToolError(parse_error)
            output = truncate(await tool.call(spec.tool_context, arguments), spec.max_result_chars)
            content = f'<untrusted_data source="{call.name}">\n{output}\n</untrusted_data>'
            ok = True
        except ToolError as e:
            content = f"Error: {e}"
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the one place tool failures become results
            content = f"Error: {call.name} failed with {type(e).__name__}: {e}"
        elapsed = time.monotonic() - started
        self.sink(ev.ToolFinished(call.id, call.name, ok, content, elapsed))
        result.tool_calls.append(ev.ToolCallRecord(call.name, arguments, ok, elapsed))
        return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content,
                **({} if ok else {"is_error": True})}


def _assistant_message(reply: _Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.calls:
        message["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": _normalized(c.arguments)} for c in reply.calls
        ]
    if reply.thinking:
        message["thinking"] = reply.thinking
    return message


def _normalized(raw: str) -> str:
    arguments, error = parse_arguments(raw)
    return raw if error else json.dumps(arguments, ensure_ascii=False)


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parse a tool call's JSON arguments, repairing malformed JSON. Returns (arguments, error)."""
    if not raw or not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except ValueError:
        from json_repair import repair_json

        try:
            value = repair_json(raw, return_objects=True)
        except Exception:  # noqa: BLE001
            value = None
    if not isinstance(value, dict):
        return {}, (f"The tool arguments were not a JSON object and could not be repaired: {raw[:200]!r}. "
                    "Send the arguments as one JSON object.")
    return value, None


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of an over-long result, saying how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n\n[... {omitted:,} characters omitted ...]\n\n{text[-tail:]}"


__all__ = ["AgentRunner", "RunSpec", "Usage", "parse_arguments", "truncate"]
