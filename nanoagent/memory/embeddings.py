"""Embeddings for memory search: vectors from an OpenAI-compatible `/embeddings` endpoint for the model set in
`memory.embeddingModel`."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanoagent.config.schema import Config

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
    try:
        response = httpx.post(url, json={"model": name, "input": texts}, headers=headers, timeout=EMBED_TIMEOUT)
    except httpx.HTTPError as e:
        raise EmbeddingError(f"cannot reach {url}: {e or type(e).__name__}") from None
    if response.status_code >= 400:
        raise EmbeddingError(f"{url} answered {response.status_code}: {response.text[:200]}")
    try:
        data = sorted(response.json()["data"], key=lambda item: item["index"])
        vectors = [[float(x) for x in item["embedding"]] for item in data]
    except (ValueError, KeyError, TypeError):
        raise EmbeddingError(f"{url} sent a response that is not an embeddings list") from None
    if len(vectors) != len(texts):
        raise EmbeddingError(f"{url} returned {len(vectors)} vectors for {len(texts)} texts")
    return vectors


def unit_vector(vector: Sequence[float]) -> array:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return array("f", (x / norm for x in vector))
