"""The provider interface: one request in, a stream of typed events out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, Protocol

from nanoagent.messages import Message
from nanoagent.usage import Usage


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class ChatRequest:
    model: str
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    max_tokens: int = 8192
    temperature: float | None = None
    thinking_budget: int = 0


THINKING_REPLY_TOKENS = 1024  # room for the reply itself past a thinking budget, when max_tokens leaves none


def max_output_tokens(request: ChatRequest) -> int:
    """The most output tokens the request may be billed for: what a provider sends as its `max_tokens`. With
    extended thinking that is raised to hold the thinking budget and a reply (the Anthropic API wants max_tokens
    above budget_tokens); the spend check reserves this same figure, so the two cannot drift. The OpenAI-compatible
    and litellm providers send no thinking and `max_tokens` as it is: for them this is at most an over-reservation."""
    if request.thinking_budget > 0:
        return max(request.max_tokens, request.thinking_budget + THINKING_REPLY_TOKENS)
    return request.max_tokens


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text exactly as the model produced it; the runner parses and repairs it


# --- stream events ---------------------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ThinkingBlock:
    """A finished thinking block; providers that need it back (Anthropic) get it verbatim next turn."""

    block: dict[str, Any]


@dataclass(frozen=True)
class ToolCallReady:
    call: ToolCall


@dataclass(frozen=True)
class UsageReport:
    usage: Usage
    model: str = ""  # filled in by the retry layer: the model that actually answered


@dataclass(frozen=True)
class RetryNotice:
    """The retry layer is waiting before another attempt, or moving on to a fallback model."""

    model: str
    reason: str
    wait: float
    next_model: str


@dataclass(frozen=True)
class SpendNotice:
    """Something the spend check tells the user (`nanoagent/spend/`): a cap passed budget.warnAt, or a model's price
    was assumed."""

    text: str


@dataclass(frozen=True)
class ReplyStarted:
    """The model began its reply (its first content block): from here the stream idle timeout alone bounds each
    wait, not the request deadline, so a long reply that keeps streaming is never cut."""


@dataclass(frozen=True)
class StreamEnd:
    stop_reason: str  # "end_turn" | "tool_use" | "max_tokens" | provider-specific


ProviderEvent = (TextDelta | ThinkingDelta | ThinkingBlock | ToolCallReady | UsageReport | StreamEnd | RetryNotice
                 | ReplyStarted | SpendNotice)


class ProviderError(Exception):
    """A failed model call, already classified for the retry layer. `overflow`: the provider refused the prompt as
    longer than the model's context window (the loop archives older turns and sends it once more). `final`: no retry
    and no other model can help (a spend cap): the call ends with it."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        overflow: bool = False,
        reached: bool = True,
        final: bool = False,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.overflow = overflow
        self.reached = reached  # False: no server took the request (refused connection, unknown host)
        self.final = final


RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})
QUOTA_WORDS = ("quota", "credit", "billing", "insufficient_quota", "balance")
# How providers say a prompt is over the context window (Anthropic, OpenAI and OpenAI-compatible servers, and
# the phrases litellm maps to ContextWindowExceededError for the rest).
OVERFLOW_PHRASES = (
    "prompt is too long",  # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    "exceed context limit",  # Anthropic: "input length and `max_tokens` exceed context limit: ..."
    "context_length_exceeded",  # OpenAI's error code
    "maximum context length",  # OpenAI, DeepSeek, OpenRouter, vLLM: "This model's maximum context length is ..."
    "exceeds the context window",  # OpenAI: "Your input exceeds the context window of this model"
    "longer than the model's context length",
    "exceeds the available context size",  # llama.cpp
    "exceeds the maximum number of tokens allowed",  # Gemini
    "input tokens exceed the configured limit",
    "too many input tokens",
)


def is_overflow(status: int | None, message: str) -> bool:
    """True when a refused request says its prompt is over the model's context window."""
    return status in (400, 413, None) and any(phrase in message.lower() for phrase in OVERFLOW_PHRASES)


def classify_status(status: int | None, message: str) -> bool:
    """True when a failure with this HTTP status is worth retrying."""
    if status is None:
        return True  # connection reset, timeouts
    if status == 429 and any(w in message.lower() for w in QUOTA_WORDS):
        return False  # an exhausted quota does not come back in seconds
    return status in RETRYABLE_STATUS


# name -> (default base URL, environment variable for the key or None when no key is needed)
OPENAI_COMPATIBLE = {
    "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "ollama": ("http://localhost:11434/v1", None),
}


def key_variable(provider: str) -> str:
    if provider == "anthropic":
        return "ANTHROPIC_API_KEY"
    return (OPENAI_COMPATIBLE.get(provider, (None, None))[1]) or f"{provider.upper()}_API_KEY"


def key_setting(provider: str) -> str:
    """Where the key `provider` used came from: its environment variable when set (it overrides config.json)."""
    import os

    variable = key_variable(provider)
    return variable if os.environ.get(variable) else f"providers.{provider}.apiKey in config.json"


def base_setting(provider: str) -> str:
    """Where the server URL `provider` used came from: its environment variable (ANTHROPIC_BASE_URL) when set, since
    it overrides config.json, else `providers.NAME.apiBase` (where another URL would go)."""
    import os

    from nanoagent.config.loader import ENV_KEYS

    variable = ENV_KEYS.get(provider, (None, None))[1]
    return variable if variable and os.environ.get(variable) else f"providers.{provider}.apiBase"


def refused(status: int, message: str, *, provider: str, url: str, headers: Any = None,
            code: str = "") -> ProviderError:
    """A request the server answered with an error status, as one line; a 401, 403 or 404 names the server and
    the setting to change (the one that was used). They and a 400 that is not an overflow are final
    (`classify_status`): the same request gets the same answer."""
    keys = key_setting(provider)
    fix = {401: f"the key for {provider} ({keys}) was refused; check it",
           403: f"the key for {provider} ({keys}) is not allowed this request; check its access to the model",
           404: f"check the model name (agents.defaults.model or --model) and {base_setting(provider)}"}
    text = f"{status} from {url}: {message}: {fix[status]}" if status in fix else f"{status} {message}"
    overflow = is_overflow(status, f"{code} {message}")
    return ProviderError(text, status=status, retryable=classify_status(status, message) and not overflow,
                         retry_after=parse_retry_after(headers), overflow=overflow)


def cannot_connect(e: BaseException, *, provider: str, url: str) -> ProviderError:
    """A failed connection. Nothing listening at the address, or a host name with no address, is final: retrying
    for seconds does not start a server or fix a name. A reset or dropped connection is retried."""
    why = _unreachable(e)
    if why == "connection refused":
        return ProviderError(f"cannot connect to {url} (connection refused): is the server running? "
                             f"check {base_setting(provider)}", reached=False)
    if why:
        return ProviderError(f"cannot connect to {url} ({why}): check the network and {base_setting(provider)}",
                             reached=False)
    return ProviderError(f"connection to {url} failed: {root_cause(e)}", retryable=True)


def http_client(headers: dict[str, str], idle_timeout: float) -> Any:
    """The httpx client an HTTP provider streams with: `idle_timeout` seconds of silence at most, 10 s to connect."""
    import httpx

    return httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(idle_timeout, connect=10.0))


@asynccontextmanager
async def post_lines(client: Any, url: str, body: dict[str, Any], *, provider: str, base: str, idle_timeout: float,
                     status_error: Callable[[int, str, Any], ProviderError]) -> AsyncIterator[AsyncIterator[str]]:
    """POST `body` to `url` and give the streamed answer's lines; the response is closed on leaving. An error
    status comes out as `status_error(status, body text, headers)`; a silence of `idle_timeout` and a failed
    connection as ProviderErrors, also while the lines are read."""
    import httpx

    try:
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code >= 400:
                raise status_error(resp.status_code, (await resp.aread()).decode("utf-8", "replace"), resp.headers)
            yield resp.aiter_lines()
    except httpx.TimeoutException as e:
        raise ProviderError(f"no data from the model for {idle_timeout:.0f} s", retryable=True) from e
    except httpx.HTTPError as e:
        raise cannot_connect(e, provider=provider, url=base) from e


def _unreachable(e: BaseException | None) -> str | None:
    import socket

    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return "host not found"
        original = getattr(e, "original_exception", None)  # litellm keeps the cause here
        e = e.__cause__ or e.__context__ or (original if isinstance(original, BaseException) else None)
    return None


def root_cause(e: BaseException) -> str:
    while e.__cause__ is not None:
        e = e.__cause__
    return str(e) or type(e).__name__


def parse_retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return float(value) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from datetime import datetime
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, (when - datetime.now(UTC)).total_seconds())


class Provider(Protocol):
    name: str

    def prepare(self) -> None:
        """Load the SDK and client ahead of the first call; optional warm-up, safe to skip."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
        """Yield events for one model call; raise ProviderError on failure."""
        ...


async def complete_text(provider: Provider, request: ChatRequest) -> tuple[str, Usage, str]:
    """Run one call to the end; returns (text, usage, model that answered). Tool calls are ignored."""
    text, usage, model = "", Usage(), request.model
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, UsageReport):
            usage = usage + event.usage
            model = event.model or model
    return text, usage, model


class Providers:
    """One provider per model name, built on first use (imports the SDK then) and kept for the process."""

    def __init__(self, factory: Callable[[str], Provider]):
        self.factory = factory
        self._built: dict[str, Provider] = {}

    def get(self, model: str) -> Provider:
        if model not in self._built:
            self._built[model] = self.factory(model)
        return self._built[model]

    async def complete(self, model: str, system: str, user: str, max_tokens: int = 1024) -> tuple[str, Usage, str]:
        """One tool-free call (summaries): (text, usage, model that answered)."""
        request = ChatRequest(model=model, system=system, messages=[{"role": "user", "content": user}],
                              max_tokens=max_tokens)
        return await complete_text(self.get(model), request)
