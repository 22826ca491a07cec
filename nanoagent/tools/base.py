"""Declare a tool once: a typed function whose signature and docstring are its schema.

    @tool(read_only=True)
    def read_file(ctx: ToolContext, path: str, offset: int = 1) -> str:
        '''Read a text file.

        Args:
            path: File to read, relative to the workspace.
            offset: First line to show (1-based).
        '''

The first parameter is the ToolContext; the rest become a pydantic model that
gives the JSON schema and validates the model's arguments. A tool whose schema
comes from data (an MCP server's tool) is a `SchemaTool`: name, description,
JSON schema and a handler. A tool answers with text, or with a `ToolResult` when it
returns images too (stored under the workspace's media/ first, see `attachments.store_image`). Either way a tool's own dependencies (a searcher, a
timeout) come in by closure, from the function that builds it; the ToolContext
carries only the workspace policy, and what differs per turn is in `current_turn`.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pydantic

from nanoagent.channels.owners import OWNER, chat_person
from nanoagent.messages import ImageBlock
from nanoagent.providers.base import ToolSpec


class ToolError(Exception):
    """An expected failure; the message is for the model: what went wrong and what to do."""


class ToolArgumentError(ToolError):
    pass


@dataclass(frozen=True)
class ToolResult:
    """What a tool returns when it has images besides its text: references to files already under the workspace's
    media/. The runner envelopes the text; the images go to the model as images where it takes them."""

    text: str
    images: tuple[ImageBlock, ...] = ()


@dataclass(frozen=True)
class ToolContext:
    """Where tools may act: the workspace and whether paths must stay inside it."""

    workspace: Path
    restrict_to_workspace: bool = True

    @property
    def folder(self) -> Path:
        """Where this turn works: its working folder (`TurnScope.workdir`), else the workspace."""
        workdir = current_turn.get().workdir
        return Path(workdir) if workdir else self.workspace


# A question for the person at the terminal (y / n / always); returns their answer as typed.
Ask = Callable[[str], Awaitable[str]]


def _nobody(text: str) -> None:
    """Where notices go when nobody watches."""


@dataclass(frozen=True)
class TurnScope:
    """What a tool may need to know about the turn that called it."""

    session_key: str = ""  # the session whose turn is running
    visible_from: int = 0  # that session's messages from this index on are already in the prompt
    notify: Callable[[str], None] = _nobody  # a line for the person (a warning), not for the model
    ask: Ask | None = None  # None: nobody can answer here (no terminal, a schedule, a channel)
    # (path, what it stands for), workspace-relative, for the file tools in this turn: in a chat with someone other
    # than the owner, USER.md is that person's own file (memory/people.py)
    aliases: tuple[tuple[str, str], ...] = ()
    hidden: tuple[str, ...] = ()  # files and folders the file tools neither read nor list in this turn (not aliases)
    # the folder the person works in (`agent -C DIR`), a real absolute path: the file tools and exec work there,
    # relative paths start there, and the workspace stays reachable by its absolute paths; "" = the workspace
    workdir: str = ""
    # whom the turn talks with (`channels/owners.py`): "" the owner, else a guest's `<channel>:<chat>`; None: read
    # from `session_key` as if no channel named an owner (a guest stays a guest)
    person: str | None = None

    @property
    def who(self) -> str:
        return self.person if self.person is not None else chat_person(self.session_key)

    @property
    def guest(self) -> bool:
        """A guest's turn: a person other than the owner, or a group chat."""
        return self.who != OWNER


# Set by the loop for the length of a turn; tasks started inside the turn (parallel tool calls) inherit it.
current_turn: ContextVar[TurnScope] = ContextVar("current_turn", default=TurnScope())  # noqa: B039 - frozen


class Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def read_only(self) -> bool:
        """Safe to run beside other read-only calls of the same reply."""
        ...

    def spec(self) -> ToolSpec: ...

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> str | ToolResult: ...


@dataclass(frozen=True)
class SchemaTool:
    """A tool described by data: its JSON schema is passed through as given; the handler validates."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[ToolContext, dict[str, Any]], Awaitable[str | ToolResult]]
    read_only: bool = False

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> str | ToolResult:
        return await self.handler(ctx, arguments)


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str
    fn: Callable[..., Any]
    read_only: bool
    arg_docs: dict[str, str]

    @cached_property
    def params(self) -> type[pydantic.BaseModel]:
        """The arguments as a pydantic model, built on first use (pydantic costs ~50 ms to import)."""
        import pydantic

        fields: dict[str, Any] = {}
        hints = inspect.get_annotations(self.fn, eval_str=True)
        for index, param in enumerate(inspect.signature(self.fn).parameters.values()):
            if index == 0:
                continue  # the ToolContext
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (hints[param.name], pydantic.Field(default, description=self.arg_docs.get(param.name)))
        return pydantic.create_model(f"{self.fn.__name__}_params", __config__=pydantic.ConfigDict(extra="ignore"),
                                     **fields)

    def spec(self) -> ToolSpec:
        schema = self.params.model_json_schema()
        properties = {name: _clean(prop) for name, prop in schema.get("properties", {}).items()}
        parameters: dict[str, Any] = {"type": "object", "properties": properties}
        if schema.get("required"):
            parameters["required"] = schema["required"]
        return ToolSpec(self.name, self.description, parameters)

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> str | ToolResult:
        import pydantic

        try:
            params = self.params.model_validate(arguments)
        except pydantic.ValidationError as e:
            raise ToolArgumentError(_describe(self.name, e)) from None
        kwargs = {name: getattr(params, name) for name in type(params).model_fields}
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(ctx, **kwargs)
        else:
            result = await asyncio.to_thread(self.fn, ctx, **kwargs)
        return result if isinstance(result, ToolResult) else str(result)


def tool(*, read_only: bool = False, name: str | None = None) -> Callable[[Callable[..., Any]], FunctionTool]:
    def wrap(fn: Callable[..., Any]) -> FunctionTool:
        description, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        return FunctionTool(name or fn.__name__.rstrip("_"), description, fn, read_only, arg_docs)

    return wrap


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    head, _, args = doc.partition("\nArgs:\n")
    description = " ".join(head.split())
    arg_docs: dict[str, str] = {}
    current = None
    for line in args.splitlines():
        match = re.match(r"^\s{2,}(\w+)(?:\s*\(.*?\))?:\s*(.*)$", line)
        if match and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = match.group(1)
            arg_docs[current] = match.group(2).strip()
        elif current and line.strip():
            arg_docs[current] += " " + line.strip()
        elif not line.strip():
            current = None
    return description, arg_docs


def _clean(prop: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's noise and flatten Optional[X] to X so every provider accepts the schema."""
    prop = {k: v for k, v in prop.items() if k != "title"}
    options = prop.pop("anyOf", None)
    if options:
        non_null = [o for o in options if o.get("type") != "null"]
        if len(non_null) == 1:
            prop = {**non_null[0], **prop}
    if prop.get("default", 0) is None:
        prop.pop("default")
    return prop


def _describe(name: str, error: pydantic.ValidationError) -> str:
    problems = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "arguments"
        if item["type"] == "missing":
            problems.append(f"{field}: required but missing")
        else:
            problems.append(f"{field}: {item['msg'].lower()}, got {item.get('input')!r:.60}")
    return f"Invalid arguments for {name}: " + "; ".join(problems) + ". Fix them and call the tool again."
