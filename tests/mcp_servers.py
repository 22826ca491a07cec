"""Real MCP servers for the tests, written with the `mcp` SDK.

Run as a script: `python tests/mcp_servers.py KIND [--http PORT] [--token T]`. Over stdio by default; with
`--http` it serves streamable HTTP on 127.0.0.1:PORT/mcp (with `--token`, only requests bearing it).

Kinds:
  basic     echo, add, a tool with a schema providers reject, an image, text and an image of any size, a tool
            that fails, a slow one,
            `grow` (adds a tool and announces the changed list), `crash` (the process exits mid-call)
  other     a second server with its own `echo`
  garbage   prints lines that are not JSON-RPC on stdout before and between its answers
  dies      exits at once with a message on stderr
  sleepy    waits a long time before it reads anything (a server slow to start)
  escapes   a tool whose name and description hold terminal escape sequences
  children  starts a grandchild (`sleep`) so a kill -9 test can look for orphans
"""

import argparse
import asyncio
import os
import subprocess
import sys
from typing import Annotated, Any

# a 1x1 PNG
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")


def padded_png(pad: int) -> bytes:
    """The same picture, `pad` bytes bigger (a tEXt chunk after the header)."""
    import struct
    import zlib

    data = b"pad\x00" + b"x" * max(0, pad - 16)
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", zlib.crc32(b"tEXt" + data))
    return PNG[:33] + chunk + PNG[33:] if pad else PNG

# a tool name that sets the terminal's title and clears the screen when printed raw
ESCAPE_NAME = "evil\x1b]0;pwned\x07\x1b[2Jtool"

WEIRD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:test:weird",
    "type": "object",
    "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                        "required": ["x", "y"]}},
    "properties": {
        "when": {"type": "string", "format": "date-time"},
        "where": {"$ref": "#/$defs/Point"},
        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
        "options": {"type": "object", "default": {}, "additionalProperties": {"type": "string"}},
    },
    "required": ["where"],
}


def build(kind: str) -> Any:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.utilities.types import Image

    server = MCPServer(kind)
    if kind == "basic":
        @server.tool(description="Echo the text back.")
        def echo(text: str) -> str:
            return f"echo: {text}"

        @server.tool(description="Add two numbers.")
        def add(a: int, b: int) -> str:
            return str(a + b)

        @server.tool(description="A picture.")
        def picture() -> Image:
            return Image(data=PNG, format="png")

        @server.tool(description="A caption and a picture, padded to be `pad` bytes bigger.")
        def poster(pad: int = 0):  # noqa: ANN202 - unannotated: the SDK sends the list as content, not structure
            return [f"poster padded by {pad}", Image(data=padded_png(pad), format="png")]

        @server.tool(description="Always fails.")
        def broken() -> str:
            from mcp.server.mcpserver.exceptions import ToolError

            raise ToolError("the disk is on fire")

        @server.tool(description="Sleep for a while.")
        async def slow(seconds: float) -> str:
            await asyncio.sleep(seconds)
            return "woke up"

        @server.tool(description="Exit the server process in the middle of the call.")
        def crash() -> str:
            os._exit(3)

        @server.tool(description="Add a tool called `fresh` and tell the client.")
        async def grow(ctx: Context) -> str:
            def fresh(note: Annotated[str, "anything"] = "") -> str:
                return "fresh tool ran"

            server.add_tool(fresh, description="Added at run time.")
            await ctx.session.send_tool_list_changed()
            return "grew"

        def weird(where: dict[str, float], when: str = "", mode: str = "a", options: dict[str, str] | None = None) -> str:
            return f"weird ok: x={where['x']} mode={mode}"

        server.add_tool(weird, description="A schema full of keywords some providers reject.")
        server._tool_manager.get_tool("weird").parameters = WEIRD_SCHEMA  # published as data, as many servers do
    elif kind == "other":
        @server.tool(description="Echo, the other server's way.")
        def echo(text: str) -> str:
            return f"other echo: {text}"
    elif kind == "garbage":
        @server.tool(description="Echo the text back.")
        def echo(text: str) -> str:
            print("GARBAGE LINE {not json", flush=True)  # stdout: the protocol's channel
            return f"echo: {text}"
    elif kind == "escapes":
        def shout(text: str = "") -> str:
            return "ok\nsecond line\nthird line\nfourth line"

        server.add_tool(shout, name=ESCAPE_NAME, description="Sets the title\x1b]0;pwned\x07 and clears\x1b[2J")
    elif kind == "children":
        @server.tool(description="Sleep for a while.")
        async def slow(seconds: float) -> str:
            print("slow started", file=sys.stderr, flush=True)
            await asyncio.sleep(seconds)
            return "woke up"

        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL,  # noqa: S607
                                 stdout=subprocess.DEVNULL)  # a grandchild in the server's process group
        away = subprocess.Popen(["sleep", "301"], stdin=subprocess.DEVNULL,  # noqa: S607
                                stdout=subprocess.DEVNULL, start_new_session=True)  # a setsid one: out of the group
        print(f"setsid child {away.pid}", file=sys.stderr, flush=True)
        print(f"server {os.getpid()} grandchild {child.pid}", file=sys.stderr, flush=True)
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind")
    parser.add_argument("--http", type=int)
    parser.add_argument("--token")
    args = parser.parse_args()
    if args.kind == "garbage":
        print("hello from a chatty server", flush=True)
    if args.kind == "dies":
        print("config file /nope/server.toml not found", file=sys.stderr, flush=True)
        sys.exit(2)
    if args.kind == "sleepy":
        import time

        time.sleep(600)  # stopped by the client's process-group kill long before
    server = build(args.kind)
    if args.http is None:
        server.run()
        return
    import uvicorn

    app = server.streamable_http_app()
    if args.token:
        app = _require_token(app, args.token)
    uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")


def _require_token(app: Any, token: str) -> Any:
    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"error":"invalid_token"}'})
                return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    main()
