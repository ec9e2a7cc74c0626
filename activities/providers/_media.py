"""What the providers share about media parts: the media type a part stands for, the bytes of
a `data:` URL, and a tool return split into its text and its media.

Each provider maps the parts into its own blocks (`anthropic`, `openai_media`,
`google`); these are the readings they all make first, so that a part means the same
to every provider.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

from towline.messages import BinaryContent, DocumentUrl, ImageUrl, ToolReturnPart, media_in

from ._common import return_text

__all__ = ["Media", "media_type", "data_url_bytes", "split_return"]

Media = ImageUrl | DocumentUrl | BinaryContent


def media_type(part: Media) -> str | None:
    """A part's media type: as given (lower case, without parameters), else read from a
    `data:` URL or guessed from the URL's suffix (None when neither tells)."""
    if part.media_type:
        return part.media_type.split(";")[0].strip().lower()
    if isinstance(part, BinaryContent):
        return None
    url = part.url
    if url.startswith("data:"):
        head = url[5:].split(",", 1)[0]
        return head.split(";")[0].strip().lower() or None
    guessed, _ = mimetypes.guess_type(urlsplit(url).path)
    return guessed


def data_url_bytes(url: str) -> tuple[str, bytes] | None:
    """A `data:` URL's media type and bytes (None for any other URL, or a malformed one)."""
    if not url.startswith("data:") or "," not in url:
        return None
    head, payload = url[5:].split(",", 1)
    try:
        data = (base64.b64decode(payload, validate=True) if head.endswith(";base64")
                else unquote_to_bytes(payload))
    except (binascii.Error, ValueError):
        return None
    return head.split(";", 1)[0].lower(), data


def split_return(part: ToolReturnPart) -> tuple[str, list[Media]]:
    """A tool return's text (`return_text` of what it returned besides media) and its media
    parts (instances, or their JSON form read back from history)."""
    rest, media = media_in(part.content)
    if not media:
        return return_text(part), []
    content: Any = rest[0] if len(rest) == 1 else (rest or "")
    return return_text(part.model_copy(update={"content": content})), media
