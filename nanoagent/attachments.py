"""Files a user attaches to a message: images by reference into the workspace's `media/`, text files as text.
Images a tool returns are kept the same way (`store_image`).

An image is copied to `media/image-<hash>.<ext>` (content-addressed, 0600) and the message carries only its
path and SHA-256 (`messages.ImageBlock`); `resolve` reads it again whenever a request is built, so the session
file never holds base64 and a changed or deleted file becomes a short note instead of a failed turn. The kind
of a file is told by its first bytes, never by its name.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from nanoagent import messages as msg
from nanoagent.errors import NanoagentError
from nanoagent.fsutil import atomic_write, private_dir
from nanoagent.transcribe import FILE_LIMIT, HINT, Heard, Transcriber, hear, size_text, sniff_audio

MEDIA_DIR = "media"
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
_CLOSE_TAG = re.compile(r"<(?=\s*/\s*attached_file)", re.IGNORECASE)
_PIPED_CLOSE = re.compile(r"<(?=\s*/\s*piped_input)", re.IGNORECASE)


class AttachmentError(NanoagentError):
    """A file that cannot be attached, or a reference that no longer matches its file; the message says why."""


@dataclass(frozen=True)
class Limits:
    max_image_bytes: int = 5_000_000
    max_text_bytes: int = 200_000


@dataclass(frozen=True)
class Attached:
    """One prepared attachment: an image stored under media/, the text of a text file, or an audio file stored
    under media/ with its transcript (`heard`: the lines the model gets)."""

    name: str  # as the user gave it
    size: int
    image: msg.ImageBlock | None = None
    text: str | None = None
    heard: Heard | None = None

    def describe(self) -> str:
        if self.heard is not None:
            heard = self.heard
            how = "not transcribed" if not heard.transcribed else "partly transcribed" if heard.note else "transcribed"
            return f"{self.name} (audio, {size_text(self.size)}, {how})"
        kind = self.image["media_type"].removeprefix("image/").upper() + " image" if self.image else "text file"
        return f"{self.name} ({kind}, {size_text(self.size)})"


def sniff(data: bytes) -> str | None:
    """The image media type the bytes start like, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def as_text(data: bytes) -> str | None:
    """The bytes as text (UTF-8, a byte-order mark dropped), or None when they are not text."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def prepare(path: Path, workspace: Path, limits: Limits, shown: str | None = None,
            transcriber: Transcriber | None = None, session: str | None = None) -> Attached:
    """Read a file the user attaches: an image is stored under the workspace's media/, a text file is kept as
    text, an audio file is stored under media/ and transcribed (`transcriber`; None: transcription is off, and the
    file is refused with how to turn it on). AttachmentError, one line saying why, for anything else."""
    name = shown or str(path)
    try:
        if path.is_dir():
            raise AttachmentError(f"Cannot attach {name}: it is a folder; attach the files in it one by one.")
        with path.open("rb") as f:
            head = f.read(16)
            kind = sniff(head)
            audio = None if kind else sniff_audio(head)
            cap = limits.max_image_bytes if kind else FILE_LIMIT if audio else limits.max_text_bytes
            data = head + f.read(cap + 1 - len(head))
    except FileNotFoundError:
        raise AttachmentError(f"Cannot attach {name}: no such file.") from None
    except OSError as e:
        raise AttachmentError(f"Cannot attach {name}: {e.strerror or e}.") from None
    if audio is not None:
        return _audio(name, path.name, data, workspace, audio[1], transcriber, session)
    if len(data) > cap:
        what, setting = ("an image", "maxImageBytes") if kind else ("a text file", "maxTextBytes")
        raise AttachmentError(f"Cannot attach {name}: it is over the {size_text(cap)} limit for {what} "
                              f"(tools.attachments.{setting} in config.json).")
    if kind is not None:
        return Attached(name, len(data), image=store_image(workspace, data, kind, path.name))
    if path.suffix.lower() in IMAGE_SUFFIXES:
        raise AttachmentError(f"Cannot attach {name}: its name says image but its bytes are not a PNG, JPEG, GIF "
                              "or WebP image.")
    text = as_text(data)
    if text is None:
        raise AttachmentError(f"Cannot attach {name}: it is neither text (UTF-8) nor a PNG, JPEG, GIF or WebP "
                              "image; only those can go to the model.")
    return Attached(name, len(data), text=text)


def _audio(name: str, base: str, data: bytes, workspace: Path, ext: str, transcriber: Transcriber | None,
           session: str | None = None) -> Attached:
    """An audio file: refused when over the file limit or when transcription is off; else stored under media/ by
    its hash and transcribed (a failure is in its lines for the model, not an error)."""
    if transcriber is None:
        raise AttachmentError(f"Cannot attach {name}: it is audio, and voice notes are not transcribed. {HINT}")
    if len(data) > FILE_LIMIT:
        raise AttachmentError(f"Cannot attach {name}: it is over the {size_text(FILE_LIMIT)} limit for an audio file.")
    relative = f"{MEDIA_DIR}/audio-{hashlib.sha256(data).hexdigest()[:16]}.{ext}"
    target = workspace / relative
    if not target.is_file():
        _media_folder(workspace, name)
        atomic_write(target, data)
    return Attached(name, len(data), heard=hear(transcriber, data, "audio file", base, relative, session))


def store_image(workspace: Path, data: bytes, media_type: str, name: str = "") -> msg.ImageBlock:
    """Keep an image under media/ by its hash (the same image twice is one file) and return its reference."""
    digest = hashlib.sha256(data).hexdigest()
    relative = f"{MEDIA_DIR}/image-{digest[:16]}.{EXTENSIONS[media_type]}"
    target = workspace / relative
    if not (target.is_file() and _digest(target) == digest):
        _media_folder(workspace, name or "the image")
        atomic_write(target, data)
    return msg.image_block(relative, digest, media_type, name)


def _media_folder(workspace: Path, name: str) -> None:
    """Make the workspace's media/ and check it is that folder itself: an exec command could plant a link there to a
    folder the sandbox hides (`~/.ssh`), and nanoagent would write through it."""
    folder = workspace / MEDIA_DIR
    private_dir(folder)
    if os.path.realpath(folder) != os.path.join(os.path.realpath(workspace), MEDIA_DIR):
        raise AttachmentError(f"Cannot keep {name}: {MEDIA_DIR}/ in the workspace is a link to another folder; "
                              f"remove the link ({folder}) and try again.")


def compose(text: str, attached: list[Attached]) -> tuple[str, list[msg.ImageBlock]]:
    """The message text with each attached text file before it, marked as the user's file, and each audio file's
    transcript (marked as such), and the images."""
    parts = [_as_text(a.name, a.text) if a.text is not None else a.heard.text if a.heard is not None else ""
             for a in attached]
    parts = [p for p in parts if p]
    return "\n\n".join([*parts, text] if text else parts), [a.image for a in attached if a.image is not None]


def _as_text(name: str, text: str) -> str:
    label = " ".join(name.split()).replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    body = _CLOSE_TAG.sub("&lt;", text.rstrip("\n"))
    return f'<attached_file name="{label}">\nThe user attached this file.\n\n{body}\n</attached_file>'


def piped(text: str, message: str) -> str:
    """Text piped into a one-shot, marked as such, then the message that came with it."""
    body = _PIPED_CLOSE.sub("&lt;", text.rstrip("\n"))
    return f"<piped_input>\n{body}\n</piped_input>\n\n{message}"


def verify(workspace: Path, images: list[msg.ImageBlock]) -> None:
    """Each reference names a file under media/ whose bytes still have its hash (a client's references are
    checked before its message is stored)."""
    for image in images:
        checked, problem = msg.checked_image(image)
        if checked is None:
            raise AttachmentError(f"Bad attachment: {problem}.")
        if _load(workspace, image) is None:
            raise AttachmentError(f"The attached image {image['path']} is missing or changed since it was attached; "
                                  "attach it again.")


def resolve(messages: list[msg.Message], workspace: Path, model: str, takes_images: bool) -> list[msg.Message]:
    """The messages as a request sends them: each image reference (a user's attached image, a tool's returned one)
    replaced by its bytes, or by a short note when the file is gone or changed, or when the model does not take
    images. Other messages are the same objects."""
    out: list[msg.Message] = []
    for message in messages:
        if not msg.images_of(message):
            out.append(message)
        elif msg.is_tool(message):
            sent = message.copy()
            sent["images"] = [_sent(b, workspace, model, takes_images) for b in message.get("images") or ()]
            out.append(sent)
        else:  # a user message whose content is blocks
            blocks = message["content"] if isinstance(message["content"], list) else []
            out.append({"role": "user", "content": [_sent(b, workspace, model, takes_images) for b in blocks]})
    return out


def _sent(block: msg.UserBlock, workspace: Path, model: str, takes_images: bool) -> msg.UserBlock:
    """One block as a request sends it: an image reference becomes its bytes, or a note saying why it is not sent."""
    if block["type"] != "image":
        return block
    label = msg.image_label(block)
    if not takes_images:
        return {"type": "text", "text": f"[image {label} not sent: {model} does not take images]"}
    if (data := _load(workspace, block)) is None:
        return {"type": "text", "text": f"[image {label} no longer available]"}
    return {"type": "image_data", "media_type": block["media_type"], "data": data}


def _load(workspace: Path, image: msg.ImageBlock) -> str | None:
    """The image's bytes as base64 when its file is under media/ and still has its hash; else None."""
    media = (workspace / MEDIA_DIR).resolve()
    try:
        path = (workspace / image["path"]).resolve()
        if not path.is_relative_to(media):
            return None
        st = path.stat()
    except (OSError, RuntimeError):
        return None
    found = _read(str(path), st.st_size, st.st_mtime_ns)
    return found[1] if found is not None and found[0] == image["sha256"] else None


@lru_cache(maxsize=8)
def _read(path: str, size: int, mtime_ns: int) -> tuple[str, str] | None:
    """(sha256, base64) of a file, cached by its size and modification time: every model call of a turn sends
    the session's images again."""
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW)) as f:
            data = f.read()
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest(), base64.b64encode(data).decode("ascii")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()




_MARKED = re.compile(r'<attached_file name="([^"]*)">\nThe user attached this file\.\n\n(.*?)\n</attached_file>'
                     r"|<piped_input>\n(.*?)\n</piped_input>", re.DOTALL)


def folded(text: str) -> str:
    """A user's message with each attached text file and piped input (as `compose` and `piped` mark them) folded to
    one line, `[attached notes.txt, 2 lines]` or `[piped input, 40 lines]`: for replays, where the whole file
    would bury the conversation."""
    def fold(match: re.Match[str]) -> str:
        name, body = (match.group(1), match.group(2)) if match.group(1) is not None else (None, match.group(3))
        count = len(body.splitlines())
        size = f"{count} line{'' if count == 1 else 's'}"
        if name is None:
            return f"[piped input, {size}]"
        name = name.replace("&lt;", "<").replace("&quot;", '"').replace("&amp;", "&")
        return f"[attached {Path(name).name or name}, {size}]"

    return _MARKED.sub(fold, text)


def outgoing(path: Path) -> tuple[str, bytes, str | None]:
    """A file the agent sends to a chat: (its name as the chat shows it, its bytes, the image media type its bytes
    start like or None). An image whose name does not end as its kind does gets that ending, so the app shows it
    as an image."""
    data = path.read_bytes()
    image = sniff(data)
    name = path.name
    endings = (".jpg", ".jpeg") if image == "image/jpeg" else (f".{EXTENSIONS[image]}",) if image else ()
    if endings and not name.lower().endswith(endings):
        name += endings[0]
    return name, data, image
