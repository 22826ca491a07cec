"""Voice notes and audio files as text for the model, through an OpenAI-compatible transcription endpoint.

`POST {apiBase}/audio/transcriptions` (multipart: `model`, `file`) as OpenAI, Groq and local whisper servers answer
it. Off unless `tools.transcribe.model` is set; a model named `openai/...` or `groq/...` takes that provider's key
(`providers.<name>.apiKey`, or OPENAI_API_KEY / GROQ_API_KEY through the loader) and address unless
`tools.transcribe` gives its own; any other model needs `apiBase` (a server the user runs, no key unless given).

A note over `tools.transcribe.maxBytes` is cut: only its first bytes are sent, and the model and the user are told.
A transcript reaches the model as untrusted data (`messages.wrap_untrusted`), labelled as the transcript of its
file; a failed transcription still delivers the message, with the reason in place of the transcript.

Every transcription goes through `transcribe`, the one call to the endpoint, and counts against the session whose
message it came with (spend caps, issue 21): not made when that session's caps are already reached (the message goes
on with that reason), and its cost recorded in the spend ledger after it (the bundled table's price per second of
audio times the `duration` the endpoint reports, or per token where it reports tokens). It is the one call not
bounded before it is made: the audio's length is known only from the answer; `maxBytes` bounds it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from nanoagent.config.schema import Config
from nanoagent.errors import NanoagentError
from nanoagent.messages import escape_untrusted, wrap_untrusted
from nanoagent.paths import Paths
from nanoagent.pricing import model_entry
from nanoagent.spend import Scope, blocked, current_scope, reached_line
from nanoagent.spend.meter import most_expensive_per_second, record_cost

log = logging.getLogger("nanoagent")
_told: set[str] = set()  # transcription models whose unknown price was said in this process

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
    # With both: spend caps are checked before each transcription and its cost recorded after (the home's ledger)
    config: Config | None = field(default=None, compare=False, repr=False)
    paths: Paths | None = field(default=None, compare=False, repr=False)

    @property
    def priced_as(self) -> str:
        """The model as the price table names it ("openai/whisper-1", "groq/whisper-large-v3-turbo")."""
        return f"{self.provider}/{self.model}" if self.provider else self.model


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


def transcriber(config: Config, paths: Paths | None = None) -> Transcriber | None:
    """The transcription settings, or None when `tools.transcribe.model` is unset (voice notes stay files). With
    `paths`, each transcription counts against the spend caps of the home's ledger."""
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
                       settings.timeout, provider, config if paths is not None else None, paths)


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


def transcribe(settings: Transcriber, data: bytes, name: str, session: str | None = None) -> Transcript:
    """The one call to the transcription endpoint: the file's first `max_bytes` (all of it when shorter), named
    with the extension its bytes call for (endpoints tell the format by it). TranscriptionError says why not. It
    counts against the current spend scope, else `session`'s: not made at a reached cap, its cost recorded after."""
    import httpx

    outer = current_scope.get()  # the message's session's work, not another's; its own kind either way
    scope = outer.doing("transcription") if outer is not None and (session is None or outer.session == session) \
        else Scope(session, kind="transcription")
    if settings.config is not None and settings.paths is not None:
        reached = blocked(settings.config, settings.paths, scope)
        if reached is not None:
            line = reached_line(reached, 0.0, settings.config.defaults.timezone).rstrip(".")
            raise TranscriptionError(f"not sent: {line[0].lower()}{line[1:]}")

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
    if settings.config is not None and settings.paths is not None:
        _count(settings, scope, usage or {})
    return Transcript(text.strip(), len(chunk), len(data), usage)


def _count(settings: Transcriber, scope: Scope, usage: dict[str, Any]) -> None:
    """Record a transcription's cost in the spend ledger: per token where the endpoint reports tokens and the table
    prices them, else per second of `duration` at the table's per-second price. A model the table does not know is
    priced at its provider's dearest per second (openai/, groq/); a server the user runs (no provider), or an answer
    with neither duration nor tokens, is recorded at $0 with what is known, marked `unpriced`, and said once."""
    assert settings.config is not None and settings.paths is not None
    given = usage.get("usage")
    reported: dict[str, Any] = given if isinstance(given, dict) else {}
    seconds = _number(usage.get("duration")) or _number(reported.get("seconds"))
    tokens_in, tokens_out = int(_number(reported.get("input_tokens"))), int(_number(reported.get("output_tokens")))
    details = reported.get("input_token_details")
    audio = int(_number(details.get("audio_tokens"))) if isinstance(details, dict) else tokens_in
    entry = model_entry(settings.priced_as) or {}
    detail: dict[str, Any] = {"seconds": round(seconds, 3)}
    if tokens_in or tokens_out:
        detail.update(input_tokens=tokens_in, output_tokens=tokens_out)
    usd: float | None = None
    why = "the endpoint reported neither its duration nor its tokens"
    if (tokens_in or tokens_out) and "input_cost_per_token" in entry:
        per_audio = _number(entry.get("input_cost_per_audio_token", entry["input_cost_per_token"]))
        usd = (audio * per_audio + max(0, tokens_in - audio) * _number(entry["input_cost_per_token"])
               + tokens_out * _number(entry.get("output_cost_per_token")))
    elif not seconds:
        pass
    elif "input_cost_per_second" in entry:
        usd = seconds * _number(entry["input_cost_per_second"])
    elif settings.provider and (dearest := most_expensive_per_second(settings.provider)) > 0:
        usd = seconds * dearest
    else:
        why = "it has no price in the bundled table"
    if usd is None:
        usd, detail["unpriced"] = 0.0, True
        if settings.priced_as not in _told:
            _told.add(settings.priced_as)
            log.warning("Transcriptions by %s are recorded in the spend ledger at no cost: %s, so their cost is "
                        "unknown.", settings.priced_as, why)
    record_cost(settings.config, settings.paths, scope, settings.priced_as, usd, **detail)


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if 0 <= number < float("inf") else 0.0


def hear(settings: Transcriber | None, data: bytes, kind: str, name: str, saved: str,
         session: str | None = None) -> Heard:
    """An audio file (`kind`: "voice note", "audio", "audio file"; saved under media/ as `saved`) that came to
    `session` as the lines the model gets: its transcript, marked, or why there is none. Blocking: the gateway runs
    it in a thread."""
    line = f"[{kind} {name} saved as {saved}" if name and name != saved else f"[{kind} saved as {saved}"
    if settings is None:
        return Heard(f"{line}; not transcribed: transcription is off]", HINT)
    try:
        heard = transcribe(settings, data, name or saved, session)
    except TranscriptionError as e:
        return Heard(f"{line}; it could not be transcribed: {e}]", f"The {kind} could not be transcribed: {e}.")
    label = f"transcript of {kind} {name or saved}"
    text = f"{line}; its transcript follows]\n{wrap_untrusted(label, heard.text or '(no speech heard)')}"
    if not heard.cut:
        return Heard(text, transcribed=True)
    cut = (f"only the first {size_text(heard.sent)} of the {size_text(heard.size)} {kind} were transcribed: it is over the "
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


def size_text(n: int) -> str:
    """A size as a person reads it: `5 MB`, `120 KB`, `12 bytes`."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} MB".replace(".0 MB", " MB")
    return f"{n / 1000:.0f} KB" if n >= 1000 else f"{n} bytes"
