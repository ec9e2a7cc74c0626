"""Images, documents and audio in OpenAI's two request formats.

- Chat Completions: images are `image_url` parts (a URL, or a `data:` URL for bytes); PDFs
  given as bytes are `file` parts (`file_data`, a `data:` URL, with a `filename`); WAV and
  MP3 bytes are `input_audio` parts. The API fetches no document by URL and takes no other
  file type (OpenAI's file-input guide: "Chat Completions accepts only PDF files").
- Responses: images are `input_image` parts, documents `input_file` parts (`file_url`, or
  `file_data` with a `filename`) of the types the file-input guide lists; no audio.

A media type the API cannot take raises `unsupported_media` while the request is built,
so the run fails naming it before anything is sent.
"""

from __future__ import annotations

import hashlib
import mimetypes
from typing import Any

from towline.messages import BinaryContent, DocumentUrl, ImageUrl

from ._common import unsupported_media
from ._media import Media, media_type

__all__ = ["IMAGE_TYPES", "RESPONSES_FILE_TYPES", "chat_part", "responses_part", "filename"]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
"""The image types both APIs take."""

CHAT_AUDIO: dict[str, str] = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav",
                              "audio/mpeg": "mp3", "audio/mp3": "mp3"}
"""Audio Chat Completions takes (`input_audio`), and the `format` each is sent with."""

RESPONSES_FILE_TYPES = frozenset({
    "application/pdf", "text/plain", "text/markdown", "text/csv", "text/html", "text/xml",
    "application/json", "application/xml", "text/tab-separated-values",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/msword", "application/vnd.ms-excel", "application/vnd.ms-powerpoint",
})
"""Document types the Responses API takes as `input_file`."""


def filename(part: Media, kind: str | None) -> str:
    """A file name for a document: the URL's last segment, or the bytes' hash with the
    type's extension (stable, so the same bytes always read the same)."""
    if isinstance(part, BinaryContent):
        stem = hashlib.sha256(part.data).hexdigest()[:12]
    else:
        tail = part.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if tail and "." in tail and not part.url.startswith("data:"):
            return tail
        stem = "document"
    ext = mimetypes.guess_extension(kind or "") or ""
    return f"{stem}{ext}"


def _data_url(part: Media) -> str | None:
    """The part as a `data:` URL, when it is bytes or already one."""
    if isinstance(part, BinaryContent):
        return part.data_url
    return part.url if part.url.startswith("data:") else None


def chat_part(part: Media, where: str) -> dict[str, Any]:
    """A media part as a Chat Completions content part (raises `unsupported_media`)."""
    kind = media_type(part)
    if isinstance(part, ImageUrl):
        if kind is not None and kind not in IMAGE_TYPES:
            raise unsupported_media("openai", kind, where)
        return {"type": "image_url", "image_url": {"url": part.url}}
    data = _data_url(part)
    if kind in IMAGE_TYPES and data is not None:
        return {"type": "image_url", "image_url": {"url": data}}
    if kind == "application/pdf" and data is not None:
        return {"type": "file", "file": {"filename": filename(part, kind), "file_data": data}}
    if isinstance(part, BinaryContent) and kind in CHAT_AUDIO:
        return {"type": "input_audio", "input_audio": {"data": part.base64,
                                                       "format": CHAT_AUDIO[kind]}}
    if isinstance(part, DocumentUrl) and data is None:
        raise unsupported_media("openai", kind, f"{where} (Chat Completions fetches no document "
                                                f"by URL: send its bytes)")
    raise unsupported_media("openai", kind, where)


def responses_part(part: Media, where: str) -> dict[str, Any]:
    """A media part as a Responses API content part (raises `unsupported_media`)."""
    kind = media_type(part)
    if isinstance(part, ImageUrl):
        if kind is not None and kind not in IMAGE_TYPES:
            raise unsupported_media("openai", kind, where)
        return {"type": "input_image", "image_url": part.url, "detail": "auto"}
    if kind in IMAGE_TYPES and isinstance(part, BinaryContent):
        return {"type": "input_image", "image_url": part.data_url, "detail": "auto"}
    if isinstance(part, DocumentUrl) and not part.url.startswith("data:"):
        if kind is not None and kind not in RESPONSES_FILE_TYPES:
            raise unsupported_media("openai", kind, where)
        return {"type": "input_file", "file_url": part.url}
    data = _data_url(part)
    if kind in RESPONSES_FILE_TYPES and data is not None:
        return {"type": "input_file", "filename": filename(part, kind), "file_data": data}
    raise unsupported_media("openai", kind, where)
