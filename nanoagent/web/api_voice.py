"""Voice notes from the web app: `POST /api/sessions/{key}/voice` takes what the page recorded (MediaRecorder: WebM
or Ogg Opus in Chromium and Firefox, MP4 in Safari), keeps it under media/ and has it transcribed as every channel's
voice notes are (`transcribe.hear`: the transcript marked as untrusted data, counted against the session's spend
caps), then sends the result as the person's message. `GET /api/chat/features` tells the page whether to offer the
microphone (transcription set up) and the image limit."""

from __future__ import annotations

import asyncio
import hashlib
from typing import TYPE_CHECKING

from aiohttp import web

from nanoagent.web.api_chat import BadRequest, Rooms, read_body, session_key, start_send

if TYPE_CHECKING:
    from nanoagent.web.context import WebContext

WEBM = b"\x1a\x45\xdf\xa3"  # EBML: Chromium's MediaRecorder writes audio as WebM (Opus)


def voice_kind(data: bytes) -> str | None:
    """The file extension of a recording the page sent, or None when it is no audio the recorder makes."""
    from nanoagent.transcribe import sniff_audio

    if data.startswith(WEBM):
        return "webm"
    if data[4:8] == b"ftyp":  # Safari's recorder: MP4 audio (whatever its brand)
        return "m4a"
    found = sniff_audio(data)
    return found[1] if found else None


def keep(ctx: WebContext, data: bytes, ext: str) -> str:
    """The recording under the workspace's media/ (by its hash, private), as a path relative to the workspace."""
    from nanoagent.attachments import MEDIA_DIR, _media_folder
    from nanoagent.fsutil import atomic_write

    relative = f"{MEDIA_DIR}/voice-{hashlib.sha256(data).hexdigest()[:16]}.{ext}"
    _media_folder(ctx.paths.workspace, "the voice note")
    target = ctx.paths.workspace / relative
    if not target.is_file():
        atomic_write(target, data)
    return relative


def add_voice(app: web.Application, ctx: WebContext, rooms: Rooms) -> None:
    async def features(request: web.Request) -> web.Response:
        return web.json_response({"voice": bool(ctx.config.tools.transcribe.model),
                                  "max_image_bytes": ctx.config.tools.attachments.max_image_bytes})

    async def voice(request: web.Request) -> web.Response:
        from nanoagent.attachments import AttachmentError
        from nanoagent.transcribe import FILE_LIMIT, HINT, hear, size_text, transcriber

        key = session_key(request.match_info["key"])
        settings = transcriber(ctx.config, ctx.paths)
        if settings is None:
            raise BadRequest(f"Voice notes are not transcribed here. {HINT}")
        data = await read_body(request, FILE_LIMIT)
        if data is None:
            raise BadRequest(f"The voice note is over {size_text(FILE_LIMIT)}; record a shorter one.")
        ext = voice_kind(data)
        if ext is None:
            raise BadRequest("That is not a recording the page makes (WebM, Ogg, MP4 or WAV audio).")
        try:
            saved = await asyncio.to_thread(keep, ctx, data, ext)
        except AttachmentError as e:
            raise BadRequest(str(e)) from None
        heard = await asyncio.to_thread(hear, settings, data, "voice note", "", saved, key)
        start_send(ctx, rooms, key, heard.text, [])
        return web.json_response({"accepted": True, "note": heard.note or ""}, status=202)

    app.router.add_get("/api/chat/features", features)
    app.router.add_post("/api/sessions/{key}/voice", voice)


__all__ = ["add_voice", "voice_kind"]
