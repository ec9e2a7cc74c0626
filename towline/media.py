"""Guessing a file's media type from its content, for attachments (`towline run --attach`).

A file's name says little (`scan.pdf` may be a PNG, `notes` a text file), and a
provider refuses bytes labelled with the wrong type, so the type is read from the
first bytes: the signatures of the formats the providers take (PNG, JPEG, GIF,
WebP, PDF, WAV, MP3, Ogg), else UTF-8 text without control characters is
`text/plain`. Anything else is unknown (None): the caller says so rather than guess.
"""

from __future__ import annotations

import re
from typing import Final

from towline.messages import BinaryContent

__all__ = ["media_type_of", "binary_content", "UnknownMediaType"]

_PREFIXES: Final[tuple[tuple[bytes, str], ...]] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"ID3", "audio/mpeg"),  # an MP3 starting with its ID3 tag
    (b"OggS", "audio/ogg"),
)
_NOT_TEXT: Final = re.compile(r"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")
"""Control characters plain text does not hold (tabs, line ends, form feeds and terminal
colours it may)."""


class UnknownMediaType(ValueError):
    """The bytes are in no format `media_type_of` recognises."""


def _mp3_frame(head: bytes) -> bool:
    """An MPEG audio layer III frame header (an MP3 without an ID3 tag)."""
    return len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and (head[1] >> 1) & 3 == 1


def _text(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _NOT_TEXT.search(text) is None


def media_type_of(data: bytes) -> str | None:
    """The media type of `data` read from its content (one of the formats this module
    names), or None. Empty data is None: there is nothing to attach.
    """
    if not data:
        return None
    for prefix, media_type in _PREFIXES:
        if data.startswith(prefix):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if _mp3_frame(data[:2]):
        return "audio/mpeg"
    if _text(data):
        return "text/plain"
    return None


def binary_content(data: bytes, media_type: str | None = None) -> BinaryContent:
    """`data` as a prompt's or a tool's media part, its type read from its content unless given.

    Raises `UnknownMediaType` when the type is neither given nor recognised.
    """
    guessed = media_type or media_type_of(data)
    if guessed is None:
        raise UnknownMediaType("not an image, PDF, audio or UTF-8 text file this can recognise "
                               "(PNG, JPEG, GIF, WebP, PDF, WAV, MP3, Ogg, text)")
    return BinaryContent(data=data, media_type=guessed)
