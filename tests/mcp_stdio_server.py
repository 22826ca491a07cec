"""An MCP server over stdio in plain Python: the kinds of tests/mcp_servers.py without importing the `mcp` SDK.

The SDK costs a server about 1.3 CPU-seconds to start, and most MCP tests start one or more; the client's side is
what they test. This server speaks the protocol subset nanoagent's client uses, one JSON-RPC message a line:
`initialize` (it answers with the client's protocol version), `ping`, `tools/list`, `tools/call` (each in a thread
of its own, so a slow tool does not hold the next request), and `notifications/tools/list_changed` from `grow`.
Its tools answer as the SDK's do: content blocks, `isError` with "Error executing tool NAME: why" for a failure,
"Unknown tool: NAME". It exits when stdin closes; `sleepy` never reads stdin, `dies` exits at once.
tests/mcp_servers.py keeps the SDK's own servers: streamable HTTP, and the few stdio tests that check the client
against the real thing.

Run as a script: `python tests/mcp_stdio_server.py KIND`.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_servers import ESCAPE_NAME, PNG, WEIRD_SCHEMA, padded_png  # its sibling: run as a script from tests/

Blocks = list[dict[str, Any]]


class Failed(Exception):
    """The tool's own failure: an `isError` result."""


@dataclass
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    run: Callable[[dict[str, Any]], Blocks]


def params(tool: str, required: dict[str, str] | None = None, optional: dict[str, tuple[str, Any]] | None = None
           ) -> dict[str, Any]:
    """An input schema shaped like the one the SDK derives from a function's signature."""
    properties: dict[str, Any] = {n: {"title": n.title(), "type": t} for n, t in (required or {}).items()}
    properties |= {n: {"default": d, "title": n.title(), "type": t} for n, (t, d) in (optional or {}).items()}
    schema: dict[str, Any] = {"properties": properties}
    if required:
        schema["required"] = list(required)
    return {**schema, "type": "object", "title": f"{tool}Arguments"}


def text(value: str) -> Blocks:
    return [{"type": "text", "text": value}]


def image(data: bytes) -> dict[str, Any]:
    return {"type": "image", "data": base64.b64encode(data).decode(), "mimeType": "image/png"}


class Server:
    def __init__(self, kind: str):
        self.kind = kind
        self.tools: dict[str, Tool] = {}
        self._writing = threading.Lock()
        getattr(self, f"_{kind}")()

    def add(self, name: str, description: str, schema: dict[str, Any], run: Callable[[dict[str, Any]], Blocks]
            ) -> None:
        self.tools[name] = Tool(name, description, schema, run)

    # --- the kinds ------------------------------------------------------------------------------------------

    def _basic(self) -> None:
        self.add("echo", "Echo the text back.", params("echo", {"text": "string"}), lambda a: text(f"echo: {a['text']}"))
        self.add("add", "Add two numbers.", params("add", {"a": "integer", "b": "integer"}),
                 lambda a: text(str(int(a["a"]) + int(a["b"]))))
        self.add("picture", "A picture.", params("picture"), lambda a: [image(PNG)])
        self.add("poster", "A caption and a picture, padded to be `pad` bytes bigger.",
                 params("poster", optional={"pad": ("integer", 0)}),
                 lambda a: [*text(f"poster padded by {a.get('pad', 0)}"), image(padded_png(int(a.get("pad", 0))))])
        self.add("broken", "Always fails.", params("broken"), self._broken)
        self.add("slow", "Sleep for a while.", params("slow", {"seconds": "number"}), self._slow)
        self.add("crash", "Exit the server process in the middle of the call.", params("crash"), lambda a: os._exit(3))
        self.add("grow", "Add a tool called `fresh` and tell the client.", params("grow"), self._grow)
        self.add("weird", "A schema full of keywords some providers reject.", WEIRD_SCHEMA,
                 lambda a: text(f"weird ok: x={float(a['where']['x'])} mode={a.get('mode', 'a')}"))

    def _other(self) -> None:
        self.add("echo", "Echo, the other server's way.", params("echo", {"text": "string"}),
                 lambda a: text(f"other echo: {a['text']}"))

    def _garbage(self) -> None:
        def echo(arguments: dict[str, Any]) -> Blocks:
            self.send_raw("GARBAGE LINE {not json")  # stdout: the protocol's channel
            return text(f"echo: {arguments['text']}")

        self.send_raw("hello from a chatty server")
        self.add("echo", "Echo the text back.", params("echo", {"text": "string"}), echo)

    def _escapes(self) -> None:
        self.add(ESCAPE_NAME, "Sets the title\x1b]0;pwned\x07 and clears\x1b[2J", params("shout", optional={
            "text": ("string", "")}), lambda a: text("ok\nsecond line\nthird line\nfourth line"))

    def _children(self) -> None:
        def slow(arguments: dict[str, Any]) -> Blocks:
            print("slow started", file=sys.stderr, flush=True)
            return self._slow(arguments)

        self.add("slow", "Sleep for a while.", params("slow", {"seconds": "number"}), slow)
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL,  # noqa: S607
                                 stdout=subprocess.DEVNULL)  # a grandchild in the server's process group
        away = subprocess.Popen(["sleep", "301"], stdin=subprocess.DEVNULL,  # noqa: S607
                                stdout=subprocess.DEVNULL, start_new_session=True)  # a setsid one: out of the group
        print(f"setsid child {away.pid}", file=sys.stderr, flush=True)
        print(f"server {os.getpid()} grandchild {child.pid}", file=sys.stderr, flush=True)

    def _dies(self) -> None:
        print("config file /nope/server.toml not found", file=sys.stderr, flush=True)
        sys.exit(2)

    def _sleepy(self) -> None:
        time.sleep(600)  # stopped by the client's process-group kill long before

    # --- tools that need the server -------------------------------------------------------------------------

    def _broken(self, arguments: dict[str, Any]) -> Blocks:
        raise Failed("the disk is on fire")

    def _slow(self, arguments: dict[str, Any]) -> Blocks:
        time.sleep(float(arguments["seconds"]))
        return text("woke up")

    def _grow(self, arguments: dict[str, Any]) -> Blocks:
        self.add("fresh", "Added at run time.", params("fresh", optional={"note": ("string", "")}),
                 lambda a: text("fresh tool ran"))
        self.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("grew")

    # --- the protocol ---------------------------------------------------------------------------------------

    def send_raw(self, line: str) -> None:
        with self._writing:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message))

    def serve(self) -> None:
        for line in sys.stdin:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict) or "method" not in message or "id" not in message:
                continue  # a notification (initialized, cancelled) or an answer: nothing to say
            if message["method"] == "tools/call":
                threading.Thread(target=self.answer, args=(message,), daemon=True).start()
            else:
                self.answer(message)
        os._exit(0)  # stdin closed: the client is done, a slow call in its thread goes with the process

    def answer(self, request: dict[str, Any]) -> None:
        method, p = request["method"], request.get("params") or {}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if method == "initialize":
            reply["result"] = {"protocolVersion": p.get("protocolVersion"), "capabilities": {
                "tools": {"listChanged": True}}, "serverInfo": {"name": self.kind, "version": "0"}}
        elif method == "ping":
            reply["result"] = {}
        elif method == "tools/list":
            reply["result"] = {"tools": [{"name": t.name, "description": t.description, "inputSchema": t.schema}
                                         for t in list(self.tools.values())]}
        elif method == "tools/call":
            reply["result"] = self.call(str(p.get("name")), p.get("arguments") or {})
        else:
            reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        self.send(reply)

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        tool = self.tools.get(name)
        if tool is None:
            return {"content": text(f"Unknown tool: {name}"), "isError": True}
        missing = [n for n in tool.schema.get("required", []) if n not in arguments]
        try:
            if missing:
                raise Failed(f"missing arguments: {', '.join(missing)}")
            return {"content": tool.run(arguments), "isError": False}
        except (Failed, KeyError, TypeError, ValueError) as e:
            return {"content": text(f"Error executing tool {name}: {e}"), "isError": True}


if __name__ == "__main__":
    Server(sys.argv[1]).serve()
