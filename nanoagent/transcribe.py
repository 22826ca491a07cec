"""Voice notes and audio files as text for the model, through an OpenAI-compatible transcription endpoint.

`POST {apiBase}/audio/transcriptions` (multipart: `model`, `file`) as OpenAI, Groq and local whisper servers answer
it. Off unless `tools.transcribe.model` is set; a model named `openai/...` or `groq/...` takes that provider's key
(`providers.<name>.apiKey`, or OPENAI_API_KEY / GROQ_API_KEY through the loader) and address unless
`tools.transcribe` gives its own; any other model needs `apiBase` (a server the user runs, no key unless given).

A note over `tools.transcribe.maxBytes` is cut: only its first bytes are sent, and the model and the user are told.
A transcript reaches the model as untrusted data (`messages.wrap_untrusted`), labelled as the transcript of its
file; a failed transcription still delivers the message, with the reason in place of the transcript.

Every transcription goes through `transcribe`, the one call to the endpoint (where a spend ledger can count it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nanoagent.config.schema import Config
from nanoagent.errors import NanoagentError
from nanoagent.messages import escape_untrusted, wrap_untrusted

BASES = {"openai": "https://api.openai.com/v1", "groq": "https://api.groq.com/openai/v1"}
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "groq": "GROQ_API_KEY"}
FILE_LIMIT = 20 * 1024 * 1024  # an audio file attached on the command line over this is refused (a chat's too: engine)
HINT = ("To have voice notes transcribed, set tools.transcribe.model in config.json (\"groq/whisper-large-v3-turbo\" "
        "with GROQ_API_KEY, \"openai/whisper-1\" with OPENAI_API_KEY, or your whisper server's model with "
        "tools.transcribe.apiBase).")


class TranscriptionError(NanoagentError):
    """A transcription that failed; the message says why, in a few words the model and the user can read."""


@dataclass(frozen=True)
class Transcriber:
    """Where and how to transcribe, resolved from config once."""

    url: str  # {apiBase}/audio/transcriptions
    model: str  # as the endpoint names it (the provider's prefix dropped)
    api_key: str | None
    max_bytes: int
    timeout: float
    provider: str = ""  # "openai", "groq", or "" for a server the user runs


@dataclass(frozen=True)
class Transcript:
    text: str
    sent: int  # bytes sent to the endpoint
    size: int  # bytes of the whole file
    usage: dict[str, Any] | None = None  # what the endpoint reported (duration, tokens), for a spend ledger

    @property
    def cut(self) -> bool:
        return self.sent < self.size


@dataclass(frozen=True)
class Heard:
    """One audio file as the model gets it, and what the user should be told about it (a cut, a failure)."""

    text: str
    note: str | None = None
    transcribed: bool = False


def transcriber(config: Config) -> Transcriber | None:
    """The transcription settings, or None when `tools.transcribe.model` is unset (voice notes stay files)."""
    settings = config.tools.transcribe
    if not settings.model:
        return None
    provider, slash, bare = settings.model.partition("/")
    if slash and provider in BASES:
        own = config.provider(provider)
        base = settings.api_base or own.api_base or BASES[provider]
        key, model = settings.api_key or own.api_key, bare
    else:
        base, key, model, provider = settings.api_base or "", settings.api_key, settings.model, ""
    return Transcriber(base.rstrip("/") + "/audio/transcriptions", model, key or None, settings.max_bytes,
                       settings.timeout, provider)


def sniff_audio(data: bytes) -> tuple[str, str] | None:
    """(media type, file extension) of the audio the bytes start like: Ogg (voice notes: Opus), MP3, WAV, FLAC,
    M4A; else None. Video containers are not taken for audio."""
    if data.startswith(b"OggS"):
        return "audio/ogg", "ogg"
    if data.startswith(b"ID3") or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "audio/mpeg", "mp3"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav", "wav"
    if data.startswith(b"fLaC"):
        return "audio/flac", "flac"
    if data[4:8] == b"ftyp" and data[8:11] in (b"M4A", b"M4B"):
        return "audio/mp4", "m4a"
    return None


def transcribe(settings: Transcriber, data: bytes, name: str) -> Transcript:
    """The one call to the transcription endpoint: the file's first `max_bytes` (all of it when shorter), named
    with the extension its bytes call for (endpoints tell the format by it). TranscriptionError says why not."""
    import httpx

    chunk = data[:settings.max_bytes]
    stem, dot, given = name.replace("\\", "/").rpartition("/")[2].rpartition(".")
    stem, given = (stem, given) if dot else (given, "")
    media_type, ext = sniff_audio(data) or ("application/octet-stream", given or "ogg")
    upload = f"{stem or 'audio'}.{ext}"
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    try:
        response = httpx.post(settings.url, data={"model": settings.model}, headers=headers,
                              files={"file": (upload, chunk, media_type)}, timeout=settings.timeout)
    except httpx.TimeoutException:
        raise TranscriptionError(f"no answer within {settings.timeout:g} s (tools.transcribe.timeout)") from None
    except httpx.HTTPError as e:
        raise TranscriptionError(f"could not reach {settings.url}: {e or type(e).__name__}") from None
    if response.status_code >= 400:
        raise TranscriptionError(_refusal(settings, response.status_code, response.text))
    try:
        body = response.json()
        text = body["text"]
    except (ValueError, KeyError, TypeError):
        raise TranscriptionError("the transcription service's answer held no text") from None
    if not isinstance(text, str):
        raise TranscriptionError("the transcription service's answer held no text")
    usage = {k: body[k] for k in ("duration", "usage") if k in body} or None
    return Transcript(text.strip(), len(chunk), len(data), usage)


def hear(settings: Transcriber | None, data: bytes, kind: str, name: str, saved: str) -> Heard:
    """An audio file (`kind`: "voice note", "audio", "audio file"; saved under media/ as `saved`) as the lines the
    model gets: its transcript, marked, or why there is none. Blocking: the gateway runs it in a thread."""
    line = f"[{kind} {name} saved as {saved}" if name and name != saved else f"[{kind} saved as {saved}"
    if settings is None:
        return Heard(f"{line}; not transcribed: transcription is off]", HINT)
    try:
        heard = transcribe(settings, data, name or saved)
    except TranscriptionError as e:
        return Heard(f"{line}; it could not be transcribed: {e}]", f"The {kind} could not be transcribed: {e}.")
    label = f"transcript of {kind} {name or saved}"
    text = f"{line}; its transcript follows]\n{wrap_untrusted(label, heard.text or '(no speech heard)')}"
    if not heard.cut:
        return Heard(text, transcribed=True)
    cut = (f"only the first {_size(heard.sent)} of the {_size(heard.size)} {kind} were transcribed: it is over the "
           "limit (tools.transcribe.maxBytes)")
    return Heard(f"{text}\n[{cut}]", f"The {kind} is long: {cut}.", transcribed=True)


def _refusal(settings: Transcriber, status: int, body: str) -> str:
    """An HTTP error as one line: the status, the service's own message (cut short), and what to check."""
    import json

    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body
    message = escape_untrusted(" ".join(str(message).split())[:200])
    reason = f"the transcription service answered HTTP {status}" + (f" ({message})" if message else "")
    if status in (401, 403):
        where = KEY_VARIABLES.get(settings.provider)
        reason += "; check tools.transcribe.apiKey" + (f" or {where}" if where else "")
    return reason


def _size(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB".replace(".0 MB", " MB")
    return f"{n / 1000:.0f} KB" if n >= 1000 else f"{n} bytes"
