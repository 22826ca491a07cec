"""ACP's stdio as nanoagent reads it: newline-delimited JSON-RPC 2.0, one message a line.

stdout carries protocol and nothing else: `serve` moves the process's own stdout to stderr, so a stray print or a
child's output cannot corrupt it. A line that is not JSON, or not a JSON-RPC message, is answered with a JSON-RPC
error here (the SDK's reader drops such lines unanswered). `initialize` is answered here too, from what nanoagent
can do: the SDK takes longer to import than an editor should wait for its first answer, so it loads meanwhile.

No SDK import here, and nothing heavy: this module runs before the SDK is loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Protocol

from nanoagent import __version__

PROTOCOL_VERSION = 1
MAX_LINE = 64 << 20  # an embedded image or file arrives in one line
PARSE_ERROR, INVALID_REQUEST = -32700, -32600
EOF_GRACE = 5.0  # seconds the requests read before stdin ended have to be answered before the connection closes


def initialize_result(params: Any) -> dict[str, Any]:
    """What nanoagent answers to `initialize`: protocol version 1, sessions it can list and load, prompts with images
    and embedded files (no audio), no MCP servers handed over by the editor (nanoagent has its own)."""
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "sessionCapabilities": {"list": {}},
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": False, "sse": False},
        },
        "agentInfo": {"name": "nanoagent", "title": "nanoagent", "version": __version__},
        "authMethods": [],
    }


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def problem_with(message: Any) -> str:
    """What keeps a decoded line from being a JSON-RPC 2.0 request, notification or response ("" for nothing)."""
    if not isinstance(message, dict):
        return "each line must be one JSON-RPC 2.0 object (batches are not taken)"
    if message.get("jsonrpc") != "2.0":
        return "\"jsonrpc\" must be \"2.0\""
    if "method" in message:
        if not isinstance(message["method"], str):
            return "\"method\" must be a string"
        if "params" in message and not isinstance(message["params"], dict | list):
            return "\"params\" must be an object"
        return ""
    if "id" not in message or not ("result" in message or "error" in message):
        return "a message needs a \"method\", or an \"id\" with a \"result\" or \"error\""
    return ""


class Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


class Stdio:
    """The connection's transport (the SDK's `Transport`: whole messages in and out). `pump` reads stdin from the
    start, answering bad lines and `initialize` itself; the SDK's connection takes the rest with `receive` once
    it has loaded. `client` holds what the editor said of itself in `initialize`."""

    def __init__(self, reader: asyncio.StreamReader, writer: Writer):
        self.reader = reader
        self.writer = writer
        self.client: dict[str, Any] = {}
        self.initialized = asyncio.Event()
        self._inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._unanswered: set[Any] = set()  # ids of the requests handed to the SDK and not answered yet
        self._answered = asyncio.Event()

    async def pump(self) -> None:
        """Read stdin until it ends; each message for the SDK goes to its inbox, None at the end."""
        try:
            while (line := await self._line()) is not None:
                message = self._checked(line)
                if message is not None and not self._initialize(message):
                    if "method" in message and "id" in message:
                        self._unanswered.add(_key(message["id"]))
                    await self._inbox.put(message)
            await self._settled()
        finally:
            await self._inbox.put(None)

    async def _settled(self) -> None:
        """Wait (up to EOF_GRACE) for the answers to what was asked before stdin ended: `printf ... | nanoagent acp`
        gets them all, a turn left running does not hold the process."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EOF_GRACE
        while self._unanswered and loop.time() < deadline:
            self._answered.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._answered.wait(), deadline - loop.time())

    async def _line(self) -> bytes | None:
        try:
            line = await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            line = e.partial
        except asyncio.LimitOverrunError:
            self.post(error(None, INVALID_REQUEST, f"a line over {MAX_LINE:,} bytes; closing"))
            return None
        return line or None

    def _checked(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            message = json.loads(line)
        except ValueError as e:  # UnicodeDecodeError among them
            self.post(error(None, PARSE_ERROR, f"Parse error: not JSON ({e})"))
            return None
        problem = problem_with(message)
        if problem:
            request_id = message.get("id") if isinstance(message, dict) else None
            self.post(error(request_id if isinstance(request_id, str | int) else None, INVALID_REQUEST,
                            f"Invalid Request: {problem}"))
            return None
        return message

    def _initialize(self, message: dict[str, Any]) -> bool:
        """Answer `initialize` now; False for any other message."""
        if message.get("method") != "initialize" or "id" not in message:
            return False
        params = message.get("params")
        self.client = params if isinstance(params, dict) else {}
        self.post({"jsonrpc": "2.0", "id": message["id"], "result": initialize_result(params)})
        self.initialized.set()
        return True

    def post(self, message: dict[str, Any]) -> None:
        """Write one message now, in order with every other (a session update, a response)."""
        if not self.writer.is_closing():
            self.writer.write(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")

    def can(self, capability: str) -> bool:
        """Whether the editor offered `fs.readTextFile` or `fs.writeTextFile` in `initialize`."""
        area, _, name = capability.partition(".")
        offered = (self.client.get("clientCapabilities") or {}).get(area) or {}
        return isinstance(offered, dict) and offered.get(name) is True

    # the SDK's Transport
    async def send(self, message: dict[str, Any]) -> None:
        self.post(message)
        if "method" not in message and "id" in message:
            self._unanswered.discard(_key(message["id"]))
            self._answered.set()
        await self.writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        return await self._inbox.get()

    async def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


def _key(request_id: Any) -> str:
    return json.dumps(request_id)
