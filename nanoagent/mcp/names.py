"""Tool names and input schemas every provider accepts, from what MCP servers publish.

Names: `mcp__<server>__<tool>`, only [a-zA-Z0-9_-], at most 64 characters (the tightest provider limit); a longer
name keeps its start and gets a hash of the server and tool. Two tools that come out the same get distinct names
deterministically: the first in (server, tool) order keeps it, the others get the hash.

Schemas: MCP servers send any JSON Schema. Anthropic refuses `oneOf`/`anyOf`/`allOf` at the top level and wants
`type: object` there; OpenAI wants an object with `properties`; Gemini (through litellm) refuses `$ref`, `$defs`,
`$schema`, `default`, most `format` values, `const`, `examples` and type lists. The cleaned schema says the same
for the model: local `$ref`s are inlined, a dropped `format` moves into the description, `X or null` becomes X.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

MAX_NAME = 64
PREFIX = "mcp__"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
KEPT_FORMATS = {"date-time", "enum"}  # the only ones every provider takes
DROPPED_KEYS = {"$schema", "$id", "$defs", "definitions", "$comment", "$anchor", "examples", "title", "const",
                "default", "format", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding"}
MAX_REF_DEPTH = 8


def safe(part: str) -> str:
    return _UNSAFE.sub("_", part) or "_"


def tool_names(pairs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The model-facing name of each (server, tool), distinct and within the limit."""
    names: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    for server, tool in sorted(set(pairs)):
        name = _fit(f"{PREFIX}{safe(server)}__{safe(tool)}", server, tool)
        if name in taken:
            name = _hashed(name, server, tool)
        taken.add(name)
        names[(server, tool)] = name
    return names


def _fit(name: str, server: str, tool: str) -> str:
    return name if len(name) <= MAX_NAME else _hashed(name, server, tool)


def _hashed(name: str, server: str, tool: str) -> str:
    digest = hashlib.sha1(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[:MAX_NAME - 9]}_{digest}"


def clean_schema(schema: Any) -> dict[str, Any]:
    """An input schema every provider accepts: an object with properties, no top-level combinators."""
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    defs = {**_as_dict(schema.get("definitions")), **_as_dict(schema.get("$defs"))}
    top = _flatten_top(_clean(schema, defs, 0))
    top["type"] = "object"
    if not isinstance(top.get("properties"), dict):
        top["properties"] = {}
    return top


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _clean(node: Any, defs: dict[str, Any], depth: int) -> Any:
    if isinstance(node, list):
        return [_clean(item, defs, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = _resolve(ref, defs)
        if target is None or depth >= MAX_REF_DEPTH:  # remote, unknown or recursive past the depth: say what it is
            return {"type": "object", "description": node.get("description", f"(a {ref.rsplit('/', 1)[-1]})")}
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _clean(merged, defs, depth + 1)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROPPED_KEYS:
            continue
        if key in ("properties", "patternProperties", "$defs", "definitions"):
            out[key] = {k: _clean(v, defs, depth) for k, v in _as_dict(value).items()}
        elif key == "required":
            if isinstance(value, list) and value:
                out[key] = [v for v in value if isinstance(v, str)]
        else:
            out[key] = _clean(value, defs, depth)
    _keep_meaning(node, out)
    return out


def _keep_meaning(node: dict[str, Any], out: dict[str, Any]) -> None:
    """What a dropped keyword said, kept where providers allow it."""
    fmt = node.get("format")
    if isinstance(fmt, str):
        if fmt in KEPT_FORMATS:
            out["format"] = fmt
        else:
            out["description"] = _note(out.get("description"), f"format: {fmt}")
    if "const" in node:
        out["enum"] = [node["const"]]
    default = node.get("default")
    if default is not None and not isinstance(default, dict | list):
        out["description"] = _note(out.get("description"), f"default: {default!r}")
    types = out.get("type")
    if isinstance(types, list):
        real = [t for t in types if t != "null"]
        if len(real) == 1:
            out["type"] = real[0]
        elif real:
            out.pop("type")
            out["anyOf"] = [{"type": t} for t in real]
    for combinator in ("anyOf", "oneOf"):  # `X or null` is X
        options = out.get(combinator)
        if isinstance(options, list):
            real = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            if len(real) == 1 and isinstance(real[0], dict):
                out.pop(combinator)
                out.update({k: v for k, v in real[0].items() if k not in out})


def _note(description: Any, note: str) -> str:
    return f"{description} ({note})" if isinstance(description, str) and description else f"({note})"


def _resolve(ref: str, defs: dict[str, Any]) -> dict[str, Any] | None:
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            target = defs.get(ref[len(prefix):])
            return target if isinstance(target, dict) else None
    return None


def _flatten_top(schema: dict[str, Any]) -> dict[str, Any]:
    """No combinator at the top: `allOf` parts merge; `anyOf`/`oneOf` branches merge their properties, and only
    what every branch requires stays required (the server still checks the real rule)."""
    branches = []
    for combinator in ("allOf", "anyOf", "oneOf"):
        parts = [p for p in schema.pop(combinator, None) or [] if isinstance(p, dict)]
        branches.append((combinator, parts))
    for combinator, parts in branches:
        if not parts:
            continue
        properties = dict(_as_dict(schema.get("properties")))
        for part in parts:
            properties.update(_as_dict(part.get("properties")))
        schema["properties"] = properties
        required_sets = [set(p.get("required") or []) for p in parts]
        if combinator == "allOf":
            required = set(schema.get("required") or []).union(*required_sets)
        else:
            required = set(schema.get("required") or []) | set.intersection(*required_sets)
        if required:
            schema["required"] = sorted(required)
    schema.pop("enum", None)
    schema.pop("not", None)
    return schema
