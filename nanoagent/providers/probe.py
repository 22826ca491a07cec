"""One small live request to a model's provider, for `doctor`: whether the agent could answer with that model now.

A server that needs no key (Ollama) is asked for its model list (free, and it does not load the model); any other
provider gets a one-token completion through the same provider object the agent builds, so the key, the server's
address and the model's name are all checked the way a turn would use them. One line says what is wrong and how to
fix it, as every error a person sees does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from nanoagent.config.schema import Config
from nanoagent.errors import ConfigError
from nanoagent.providers.base import OPENAI_COMPATIBLE, ChatRequest, ProviderError, base_setting, key_setting

PROBE_SECONDS = 30.0  # a live check that takes longer is reported as a server that does not answer


@dataclass(frozen=True)
class Probe:
    ok: bool
    text: str  # what was found, one line
    fix: str = ""


def needs_key(provider: str, config: Config) -> bool:
    """Whether `provider` must have an API key: not Ollama, nor a server of one's own given by `apiBase` that
    nanoagent talks to as OpenAI-compatible (it makes its own rules; a refused request says so)."""
    from nanoagent.providers.registry import litellm_providers

    if provider in OPENAI_COMPATIBLE:
        return OPENAI_COMPATIBLE[provider][1] is not None
    return not (config.provider(provider).api_base and provider not in litellm_providers())


def probe(model: str, config: Config) -> Probe:
    """Ask `model`'s provider once, within PROBE_SECONDS."""
    from nanoagent.providers.registry import make_provider, provider_name

    provider = provider_name(model)
    try:
        if provider == "ollama" and not model.startswith("litellm/"):
            return asyncio.run(asyncio.wait_for(_ollama_has(model, config), PROBE_SECONDS))
        client = make_provider(model, config)
        request = ChatRequest(model=model, system="", messages=[{"role": "user", "content": "Say ok."}], max_tokens=1)
        asyncio.run(asyncio.wait_for(_one_token(client, request), PROBE_SECONDS))
    except ProviderError as e:
        return _failed(model, provider, e)
    except TimeoutError:
        return Probe(False, f"{model}: {provider} did not answer within {PROBE_SECONDS:.0f} s",
                     f"check that the server is up and {base_setting(provider)}")
    except ConfigError as e:
        return Probe(False, f"{model}: {e}")
    return Probe(True, f"{model}: {provider} answered a one-token request")


async def _one_token(client: object, request: ChatRequest) -> None:
    async for _ in client.stream(request):  # type: ignore[attr-defined]
        pass


def _failed(model: str, provider: str, e: ProviderError) -> Probe:
    if e.status in (401, 403):
        return Probe(False, f"{model}: {provider} refused the key ({e.status})",
                     f"check {key_setting(provider)}, or run `nanoagent onboard`")
    if not e.reached:
        return Probe(False, f"{model}: {e.message.split(': ')[0]}",
                     f"start the server, or fix {base_setting(provider)}")
    return Probe(False, f"{model}: {e.message}")


async def _ollama_has(model: str, config: Config) -> Probe:
    """Ollama's model list (`GET /v1/models`) holds the model, under its name or `name:latest`."""
    import httpx

    from nanoagent.providers.base import cannot_connect

    base = (config.provider("ollama").api_base or OPENAI_COMPATIBLE["ollama"][0] or "").rstrip("/")
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(PROBE_SECONDS, connect=10.0)) as client:
            answer = await client.get(f"{base}/models")
    except httpx.HTTPError as e:
        raise cannot_connect(e, provider="ollama", url=base) from e
    if answer.status_code != 200:
        return Probe(False, f"{model}: {base}/models answered {answer.status_code}",
                     f"check that {base} is Ollama's address ({base_setting('ollama')})")
    try:
        have = [str(entry.get("id")) for entry in answer.json().get("data") or []]
    except (ValueError, AttributeError):
        have = []
    name = model.split("/", 1)[1]
    if name in have or f"{name}:latest" in have:
        return Probe(True, f"{model}: Ollama at {base} has the model")
    return Probe(False, f"{model}: Ollama at {base} does not have the model "
                 f"(it has {', '.join(have) or 'none'})", f"run `ollama pull {name}`, or choose a model it has")
