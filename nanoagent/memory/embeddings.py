"""Embeddings for memory search: vectors from an OpenAI-compatible `/embeddings` endpoint for the model set in
`memory.embeddingModel`."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths
    from nanoagent.spend import Meter

EMBED_BATCH = 64
EMBED_CHARS = 4000
EMBED_TIMEOUT = 20.0


@dataclass(frozen=True)
class EmbeddingSettings:
    model: str  # as configured, e.g. openai/text-embedding-3-small; stored with each vector
    provider: str
    api_base: str  # "" when no base URL is known for the provider
    api_key: str | None
    key_variable: str | None  # the variable that must hold the key, for hosted providers that need one
    meter: Meter | None = field(default=None, compare=False)  # the spend check of each request (build_agent's)


class EmbeddingError(Exception):
    pass


def embedding_settings(config: Config) -> EmbeddingSettings | None:
    """Where `memory.embeddingModel` is served, from the provider's apiBase/apiKey (or their defaults); no I/O."""
    model = config.memory.embedding_model
    if not model:
        return None
    from nanoagent.errors import ConfigError
    from nanoagent.providers.registry import OPENAI_COMPATIBLE, provider_name

    try:
        name = provider_name(model)
    except ConfigError:
        name = model.split("/", 1)[0]
    settings = config.provider(name)
    default_base, key_var = OPENAI_COMPATIBLE.get(name, ("", None))
    return EmbeddingSettings(model=model, provider=name, api_base=(settings.api_base or default_base).rstrip("/"),
                             api_key=settings.api_key, key_variable=key_var)


def metered_settings(config: Config, paths: Paths) -> EmbeddingSettings | None:
    """`embedding_settings` with the spend check on each request, for a search outside an agent (`memory search`,
    the web app's memory page, `mcp serve`): its embeddings are counted (kind `embedding`) and capped as a turn's."""
    import dataclasses

    from nanoagent.providers.registry import provider_name
    from nanoagent.spend import Meter

    settings = embedding_settings(config)
    return None if settings is None else dataclasses.replace(
        settings, meter=Meter(config, paths, provider_of=provider_name))


def embed_texts(settings: EmbeddingSettings, texts: list[str]) -> list[list[float]]:
    """Vectors for `texts` from the OpenAI-compatible `/embeddings` endpoint; raises EmbeddingError with the cause."""
    if not settings.api_base:
        raise EmbeddingError(f"no API base URL for provider {settings.provider}: set providers.{settings.provider}"
                             ".apiBase in config.json")
    if settings.key_variable and not settings.api_key:
        raise EmbeddingError(f"no API key for {settings.provider}: set {settings.key_variable} or "
                             f"providers.{settings.provider}.apiKey")
    import httpx

    name = settings.model.split("/", 1)[1] if "/" in settings.model else settings.model
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    url = f"{settings.api_base}/embeddings"
    with _metered(settings, texts) as counted:
        try:
            response = httpx.post(url, json={"model": name, "input": texts}, headers=headers, timeout=EMBED_TIMEOUT)
        except httpx.HTTPError as e:
            raise EmbeddingError(f"cannot reach {url}: {e or type(e).__name__}") from None
        if response.status_code >= 400:
            counted.append(0)  # refused: nothing to pay
            raise EmbeddingError(f"{url} answered {response.status_code}: {response.text[:200]}")
        try:
            tokens = response.json().get("usage", {}).get("prompt_tokens")
            counted.extend([tokens] if isinstance(tokens, int) and not isinstance(tokens, bool) else [])
        except (ValueError, AttributeError):
            pass
    try:
        data = sorted(response.json()["data"], key=lambda item: item["index"])
        vectors = [[float(x) for x in item["embedding"]] for item in data]
    except (ValueError, KeyError, TypeError):
        raise EmbeddingError(f"{url} sent a response that is not an embeddings list") from None
    if len(vectors) != len(texts):
        raise EmbeddingError(f"{url} returned {len(vectors)} vectors for {len(texts)} texts")
    return vectors


@contextmanager
def _metered(settings: EmbeddingSettings, texts: list[str]) -> Iterator[list[int]]:
    """Reserve the request's worst case with the spend check (its texts' bytes at the model's input price), or
    EmbeddingError at a cap; settle at the tokens the caller appends to the list given (none: the worst case)."""
    if settings.meter is None:
        yield []
        return
    from nanoagent.spend import CapReached, working_as
    from nanoagent.tokens import token_bound
    from nanoagent.usage import Usage

    try:
        with working_as("embedding"):  # recall's and memory_search's against the turn that searched
            hold = settings.meter.reserve(settings.model, sum(token_bound(text) for text in texts), 0)
    except CapReached as e:
        raise EmbeddingError(e.line) from None
    counted: list[int] = []
    try:
        yield counted
    finally:
        settings.meter.settle(hold, Usage(input_tokens=counted[0] if counted else 0), known=bool(counted))


def unit_vector(vector: Sequence[float]) -> array:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return array("f", (x / norm for x in vector))
