"""Token counting that works offline and never answers zero for real text.

tiktoken cannot download encodings on machines without internet; litellm ships
the files, so point TIKTOKEN_CACHE_DIR at them (found without importing litellm).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from nanoagent.messages import Message, calls_of, images_of, is_assistant, is_tool, text_of

# What one image costs in a prompt, at most: Anthropic's figure for an image at its largest size (about 1.15
# megapixels); OpenAI's high detail stays under it.
IMAGE_TOKENS = 1600


def _litellm_tokenizer_dir() -> str | None:
    spec = importlib.util.find_spec("litellm")
    if not spec or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(folder) if folder.is_dir() else None


@lru_cache(maxsize=1)
def _encoding() -> Any | None:
    if not os.environ.get("TIKTOKEN_CACHE_DIR"):
        folder = _litellm_tokenizer_dir()
        if folder:
            os.environ["TIKTOKEN_CACHE_DIR"] = folder
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base")
    except Exception:  # noqa: BLE001 - any failure means: estimate instead
        return None


def estimate_tokens(text: str) -> int:
    """Rough count for when no tokenizer is available: about 4 ASCII characters a token, and about one
    token for each other character (CJK text runs close to a token a character)."""
    other = sum(1 for c in text if ord(c) > 127) if not text.isascii() else 0
    return (len(text) - other + 3) // 4 + other


def token_bound(text: str) -> int:
    """An upper bound on the token count, without a tokenizer: a BPE token covers at least one UTF-8 byte."""
    return len(text.encode("utf-8"))


def count_tokens(text: str) -> int:
    if not text:
        return 0
    enc = _encoding()
    if enc is None:
        return estimate_tokens(text)
    try:
        return len(enc.encode(text, disallowed_special=()))
    except Exception:  # noqa: BLE001
        return estimate_tokens(text)


def tokenizer_available() -> bool:
    return _encoding() is not None


def count_message_tokens(message: Message, count: Callable[[str], int] = count_tokens) -> int:
    """Tokens one stored message adds to a prompt, including a small per-message overhead.
    With `count=token_bound`, an upper bound that needs no tokenizer."""
    total = 4 + count(text_of(message)) + IMAGE_TOKENS * len(images_of(message))
    for call in calls_of(message):
        total += count(call["name"]) + count(call["arguments"]) + 8
    return total


def message_bound(message: Message) -> int:
    """An upper bound on the tokens `message` adds to a prompt, without a tokenizer, as the spend check needs it:
    also for a request's messages after `attachments.resolve` (images as `image_data`), and counting what the
    provider is sent back besides the text: each image (by reference or resolved, in a user's content or a tool's
    `images`) at IMAGE_TOKENS, and an assistant's thinking blocks by the bytes of their text, signature or data."""
    total = 4 + token_bound(text_of(message)) + IMAGE_TOKENS * _all_images(message)
    for call in calls_of(message):
        total += token_bound(call["name"]) + token_bound(call["arguments"]) + 8
    if is_assistant(message):
        for block in message.get("thinking") or ():
            total += 4 + sum(token_bound(v) for v in block.values() if isinstance(v, str))
    return total


def _all_images(message: Message) -> int:
    """How many images a message carries, by reference (`image`) or resolved (`image_data`)."""
    if is_tool(message):
        blocks: Any = message.get("images") or ()
    elif isinstance(message["content"], str):
        return 0
    else:
        blocks = message["content"]
    return sum(1 for b in blocks if isinstance(b, dict) and b.get("type") in ("image", "image_data"))
