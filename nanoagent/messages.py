"""Messages as nanoagent stores and sends them, and the helpers that belong to them.

A conversation is a list of messages in one provider-neutral shape; each provider translates it
on the way out. On disk each message is the JSON object of its TypedDict, unchanged since format 1.
This module sits at the bottom: it imports nothing of nanoagent.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, NotRequired, TypedDict, TypeGuard

RUNTIME_OPEN, RUNTIME_CLOSE = "<runtime_context>", "</runtime_context>"
UNTRUSTED_CLOSE = "</untrusted_data>"
_OPENING = '<untrusted_data source="'  # how every envelope starts
# The envelope's tag as a model might read it: any case, spaces or a slash after "<", "_", "-" or space inside.
_UNTRUSTED_TAG = re.compile(r"<(?=\s*/?\s*untrusted[\s_-]*data)", re.IGNORECASE)
_ENVELOPE = re.compile(r'<untrusted_data source="[^"]*">\n(.*)\n</untrusted_data>', re.DOTALL)


class ToolCallData(TypedDict):
    id: str
    name: str
    arguments: str  # JSON text of an object


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ImageBlock(TypedDict):
    """An image the user attached or a tool returned, by reference: a file under the workspace's `media/` and its SHA-256. The session
    stores this, never the bytes; `attachments.resolve` reads the file when a request is built."""

    type: Literal["image"]
    path: str  # relative to the workspace, under media/
    sha256: str  # hex digest of the file's bytes
    media_type: str  # one of IMAGE_TYPES
    name: NotRequired[str]  # the file's name as the user knew it, for notes about it


class ImageData(TypedDict):
    """An image ready to send: what `attachments.resolve` puts in a request in place of an ImageBlock. Never
    stored (the checker drops it)."""

    type: Literal["image_data"]
    media_type: str
    data: str  # base64


UserBlock = TextBlock | ImageBlock | ImageData


class UserMessage(TypedDict):
    role: Literal["user"]
    content: str | list[UserBlock]  # text, or text and images (only when the message carries images)


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str
    tool_calls: NotRequired[list[ToolCallData]]
    thinking: NotRequired[list[dict[str, Any]]]  # provider blocks returned verbatim next turn (Anthropic)


class ToolMessage(TypedDict):
    role: Literal["tool"]
    tool_call_id: str
    name: str
    content: str
    is_error: NotRequired[bool]
    # Images the tool returned, as stored: references (ImageBlock). In a request, what `attachments.resolve` made of
    # each: its bytes (ImageData), or a note (TextBlock) when the file is gone or the model takes no images.
    images: NotRequired[list[UserBlock]]


Message = UserMessage | AssistantMessage | ToolMessage


IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def user(text: str, images: list[ImageBlock] | tuple[ImageBlock, ...] = ()) -> UserMessage:
    """A user message: plain text, or a text block and the images when there are any (old sessions and every
    message without images keep the plain shape)."""
    if not images:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [{"type": "text", "text": text}, *images]}


def image_block(path: str, sha256: str, media_type: str, name: str = "") -> ImageBlock:
    block: ImageBlock = {"type": "image", "path": path, "sha256": sha256, "media_type": media_type}
    if name:
        block["name"] = name
    return block


def text_of(message: Message) -> str:
    """A message's text: its content, or the text blocks of a user message with images, joined."""
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n\n".join(b["text"] for b in content if b["type"] == "text")


def images_of(message: Message) -> list[ImageBlock]:
    """The image references a message carries: a user's attached images, a tool's returned ones (resolved images
    not included)."""
    if is_tool(message):
        blocks = message.get("images") or []
    elif isinstance(message["content"], str):
        return []
    else:
        blocks = message["content"]
    return [b for b in blocks if b["type"] == "image"]


def image_label(block: ImageBlock) -> str:
    return block.get("name") or block["path"].rsplit("/", 1)[-1]


def shown_text(message: Message) -> str:
    """A message's text with each image it carries named as a line, for anything that reads messages as text
    (archiving, search, rendering)."""
    text = text_of(message)
    notes = [f"[image: {image_label(b)}]" for b in images_of(message)]
    return "\n".join([text, *notes]) if notes else text


def checked_image(raw: Any) -> tuple[ImageBlock | None, str]:
    """An image reference as stored or sent by a client, or (None, what is wrong with it)."""
    if not isinstance(raw, dict) or raw.get("type") != "image":
        return None, "an attachment must be an object with \"type\": \"image\""
    path, digest, media_type, name = raw.get("path"), raw.get("sha256"), raw.get("media_type"), raw.get("name", "")
    if not isinstance(path, str) or not path.startswith("media/") or ".." in path.split("/") or "\\" in path:
        return None, f"an image's path must name a file under media/, got {path!r}"
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        return None, "an image needs its sha256 as 64 lowercase hex digits"
    if media_type not in IMAGE_TYPES:
        return None, f"an image's media_type must be one of {', '.join(IMAGE_TYPES)}, got {media_type!r}"
    return image_block(path, digest, media_type, name if isinstance(name, str) else ""), ""


def assistant(text: str, calls: list[ToolCallData] | None = None,
              thinking: list[dict[str, Any]] | None = None) -> AssistantMessage:
    message: AssistantMessage = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["thinking"] = thinking
    return message


def tool_result(call_id: str, name: str, content: str, error: bool = False,
                images: list[ImageBlock] | tuple[ImageBlock, ...] = ()) -> ToolMessage:
    message: ToolMessage = {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}
    if error:
        message["is_error"] = True
    if images:
        message["images"] = list(images)
    return message


def is_user(message: Message) -> TypeGuard[UserMessage]:
    return message["role"] == "user"


def is_assistant(message: Message) -> TypeGuard[AssistantMessage]:
    return message["role"] == "assistant"


def is_tool(message: Message) -> TypeGuard[ToolMessage]:
    return message["role"] == "tool"


def calls_of(message: Message) -> list[ToolCallData]:
    return (message.get("tool_calls") or []) if is_assistant(message) else []


# --- checking what was read from disk ----------------------------------------------------------


def checked_message(raw: Any) -> tuple[Message | None, str]:
    """A stored message in the shape the next request needs, or (None, what is wrong with it).

    Lenient where the meaning is clear (a null content is empty text, arguments given as an object
    become JSON text); anything else is refused rather than sent upstream to fail every turn."""
    if not isinstance(raw, dict):
        return None, f"a message must be an object, got {type(raw).__name__}"
    role, content = raw.get("role"), raw.get("content")
    if content is None:
        content = ""
    if role == "user" and isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "image"
                                                            for b in content):
        return _checked_user_blocks(content)
    if isinstance(content, list):  # provider-style content blocks: their text is what this version reads
        content = "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    if not isinstance(content, str):
        return None, f"the {role or 'message'}'s content must be text, got {type(content).__name__}"
    if role == "user":
        return user(content), ""
    if role == "assistant":
        calls, problem = _checked_calls(raw.get("tool_calls"))
        if problem:
            return None, problem
        thinking = raw.get("thinking")
        good_thinking = thinking if isinstance(thinking, list) and all(isinstance(b, dict) for b in thinking) else None
        return assistant(content, calls, good_thinking), ""
    if role == "tool":
        call_id, name = raw.get("tool_call_id"), raw.get("name")
        if not isinstance(call_id, str) or not call_id:
            return None, "a tool result without a tool_call_id"
        raw_images = raw.get("images") or []
        images, notes = _checked_images(raw_images if isinstance(raw_images, list) else [{}])
        return tool_result(call_id, name if isinstance(name, str) else "", "\n".join([content, *notes]),
                           raw.get("is_error") is True, images), ""
    return None, f"unknown role {role!r}"


def _checked_user_blocks(blocks: list[Any]) -> tuple[Message | None, str]:
    """A user message with images: its text blocks joined into one, and each image reference that is whole (one
    that is not becomes a note, so the rest of the message still goes)."""
    texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]
    images, notes = _checked_images([b for b in blocks if isinstance(b, dict) and b.get("type") == "image"])
    return user("\n\n".join(texts + notes), images), ""


def _checked_images(raw: list[Any]) -> tuple[list[ImageBlock], list[str]]:
    """The whole image references among `raw`, and a note for each one that is not. Resolved images (image_data)
    are never stored, so they are dropped without a note."""
    images: list[ImageBlock] = []
    notes: list[str] = []
    for b in raw:
        if isinstance(b, dict) and b.get("type") == "image_data":
            continue
        image, problem = checked_image(b)
        if image is None:
            notes.append(f"[an image could not be read back: {problem}]")
        else:
            images.append(image)
    return images, notes


def _checked_calls(raw: Any) -> tuple[list[ToolCallData], str]:
    if raw is None:
        return [], ""
    if not isinstance(raw, list):
        return [], f"tool_calls must be a list, got {type(raw).__name__}"
    calls: list[ToolCallData] = []
    for item in raw:
        if not isinstance(item, dict):
            return [], "a tool call must be an object"
        call_id, name, arguments = item.get("id"), item.get("name"), item.get("arguments", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            return [], "a tool call without a usable id or name"
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        if not isinstance(arguments, str):
            return [], f"tool call arguments must be JSON text, got {type(arguments).__name__}"
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    return calls, ""


# --- helpers ---------------------------------------------------------------------------------


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of an over-long text, saying how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n\n[... {omitted:,} characters omitted ...]\n\n{text[-tail:]}"


def escape_untrusted(text: str) -> str:
    """Text that cannot open or close an untrusted-data envelope: each `<` that starts the tag in any spelling
    becomes `&lt;`, so `</untrusted_data>` reads as `&lt;/untrusted_data>`, plain to a model and inert."""
    return _UNTRUSTED_TAG.sub("&lt;", text)


def wrap_untrusted(source: str, text: str) -> str:
    """`text` marked as data from `source` (a tool, a file), not instructions, in an envelope it cannot close."""
    name = " ".join(source.split())
    for raw, entity in (("&", "&amp;"), ('"', "&quot;"), ("<", "&lt;"), (">", "&gt;")):
        name = name.replace(raw, entity)
    return f'{_OPENING}{name}">\n{escape_untrusted(text)}\n{UNTRUSTED_CLOSE}'


def holds_untrusted(text: str) -> bool:
    """Whether `text` holds an envelope `wrap_untrusted` made: inside one, every spelling of the tag is escaped, so an
    opening tag as written here is an envelope's (or a person typed it: then this says yes, the safe answer)."""
    return _OPENING in text


def unwrap_untrusted(text: str) -> str:
    """The text inside one whole envelope made by `wrap_untrusted` (still escaped); other text as it is."""
    match = _ENVELOPE.fullmatch(text)
    return match.group(1) if match else text


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
        except Exception:  # noqa: BLE001 - any failure to repair is reported the same way
            value = None
    if not isinstance(value, dict):
        return {}, (f"The tool arguments were not a JSON object and could not be repaired: {raw[:200]!r}. "
                    "Send the arguments as one JSON object.")
    return value, None


def strip_runtime_context(content: str | list[UserBlock]) -> str:
    """The user's own words, without the runtime block nanoagent put in front (the text of a message with images)."""
    if not isinstance(content, str):
        content = "\n\n".join(b["text"] for b in content if b["type"] == "text")
    if content.startswith(RUNTIME_OPEN):
        end = content.find(RUNTIME_CLOSE)
        if end >= 0:
            return content[end + len(RUNTIME_CLOSE):].lstrip("\n")
    return content


# An old tool result longer than PRUNE_MIN_CHARS is sent trimmed to PRUNE_KEEP_CHARS of its head and tail, once the
# budget decided to prune before it (`agent/budget.py`); the session keeps it whole.
PRUNE_MIN_CHARS = 4_000
PRUNE_KEEP_CHARS = 1_500


def prunable(message: Message) -> bool:
    return is_tool(message) and len(message["content"]) > PRUNE_MIN_CHARS


def pruned(message: Message) -> Message:
    """`message` as a request sends it once it is old: a long tool result trimmed to its head and tail, still inside
    its untrusted-data envelope; any other message as it is."""
    if not is_tool(message) or len(message["content"]) <= PRUNE_MIN_CHARS:
        return message
    trimmed: ToolMessage = {**message}
    text = truncate(unwrap_untrusted(message["content"]), PRUNE_KEEP_CHARS)
    trimmed["content"] = wrap_untrusted(message["name"], text + "\n[an old result, trimmed in this request; run the "
                                                              "tool again for the whole of it]")
    return trimmed


def history_for_model(messages: list[Message], start: int, skip: frozenset[int] = frozenset()) -> list[Message]:
    """Messages from `start`, beginning at a user message, without orphaned tool results.
    Indexes in `skip` (turns that failed) are left out."""
    history = [m for i, m in enumerate(messages[start:], start) if i not in skip] if skip else messages[start:]
    first_user = next((i for i, m in enumerate(history) if is_user(m)), len(history))
    known_calls: set[str] = set()
    out: list[Message] = []
    for m in history[first_user:]:  # once a turn over the whole unarchived tail: no generator per message
        if is_tool(m):
            if m["tool_call_id"] not in known_calls:
                continue
        elif calls := calls_of(m):
            known_calls.update(c["id"] for c in calls)
        out.append(m)
    return out


def unanswered_tool_calls(messages: list[Message]) -> list[ToolCallData]:
    """Tool calls of the last assistant message that carries calls, lacking a result."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        calls = calls_of(message)
        if calls:
            answered = {m["tool_call_id"] for m in messages[index + 1:] if is_tool(m)}
            return [c for c in calls if c["id"] not in answered]
        if is_user(message):
            return []
    return []


def closing_results(messages: list[Message], text: str) -> list[Message]:
    """An error result saying `text` for each tool call of the last turn that never got one (the turn was cut
    off mid-tool), so the conversation is whole again."""
    return [tool_result(call["id"], call["name"], text, error=True) for call in unanswered_tool_calls(messages)]
