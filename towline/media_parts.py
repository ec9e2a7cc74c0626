"""Media parts of a message: images, documents and audio, by URL or as bytes.

A prompt (`UserPart.content`, `RunInput.prompt`) is text or a list of text and these
parts, and a tool may return them. Each provider sends them in its own form; in JSON
(a run's input, a history) bytes are standard base64, and a large payload goes through
the payload store like any other. Re-exported by `towline.messages`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_serializer

__all__ = [
    "ImageUrl",
    "DocumentUrl",
    "BinaryContent",
    "MediaPart",
    "UserContent",
    "MEDIA_KINDS",
    "as_media",
    "media_in",
    "prompt_text",
    "media_label",
]


class FrozenModel(BaseModel):
    """The base of the message types, here and in `towline.messages`: frozen, and no field
    it does not declare."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ImageUrl(FrozenModel):
    """An image the provider fetches from a URL (or a `data:` URL)."""

    kind: Literal["image-url"] = "image-url"
    url: str
    media_type: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """`image/png`, `image/jpeg`, ...; guessed from the URL's suffix when None."""


class DocumentUrl(FrozenModel):
    """A document (a PDF, a text file) the provider fetches from a URL."""

    kind: Literal["document-url"] = "document-url"
    url: str
    media_type: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """`application/pdf`, `text/plain`, ...; guessed from the URL's suffix when None."""


class BinaryContent(FrozenModel):
    """Bytes of an image, a document or audio, with their media type.

    In JSON (a run's input, a history) the bytes are base64 text; a large one
    travels through the payload store like any other large payload.
    """

    model_config = ConfigDict(val_json_bytes="base64")

    kind: Literal["binary"] = "binary"
    data: bytes
    media_type: str
    """`image/png`, `application/pdf`, `audio/wav`, ..."""

    @field_serializer("data", when_used="json")
    def _standard_base64(self, data: bytes) -> str:
        # not pydantic's `ser_json_bytes="base64"`, which writes the URL-safe alphabet: JSON
        # readers (other clients, the codec server, `base64 -d`) expect the standard one
        return base64.b64encode(data).decode("ascii")

    @property
    def base64(self) -> str:
        """The bytes as base64 text."""
        return base64.b64encode(self.data).decode("ascii")

    @property
    def data_url(self) -> str:
        """The bytes as a `data:` URL."""
        return f"data:{self.media_type};base64,{self.base64}"

    def __repr__(self) -> str:
        return f"BinaryContent(<{len(self.data)} bytes>, media_type={self.media_type!r})"


MediaPart = Annotated[ImageUrl | DocumentUrl | BinaryContent, Field(discriminator="kind")]
"""An image, a document or audio: by URL, or as bytes."""

UserContent = str | MediaPart
"""One item of a prompt: text, or a media part."""

MEDIA_KINDS = frozenset({"image-url", "document-url", "binary"})
"""The `kind` tags of the media parts (how they read in JSON)."""

_MEDIA: TypeAdapter[ImageUrl | DocumentUrl | BinaryContent] = TypeAdapter(MediaPart)


def as_media(value: Any) -> ImageUrl | DocumentUrl | BinaryContent | None:
    """`value` as a media part: the part itself, or its JSON form (a tool's return read back
    from history is a dict); None for anything else."""
    if isinstance(value, ImageUrl | DocumentUrl | BinaryContent):
        return value
    if isinstance(value, dict) and value.get("kind") in MEDIA_KINDS:  # pyright: ignore[reportUnknownMemberType]
        try:
            if value.get("kind") == "binary" and isinstance(value.get("data"), str):  # pyright: ignore[reportUnknownMemberType]
                return _MEDIA.validate_json(json.dumps(value))
            return _MEDIA.validate_python(value)
        except (ValidationError, ValueError):
            return None
    return None


def media_in(content: Any) -> tuple[list[Any], list[ImageUrl | DocumentUrl | BinaryContent]]:
    """A prompt's or a tool return's content split into its other items and its media parts.

    A single value is read as a one-item list. Text and any other JSON stay in the first
    list, in order; media parts (instances or their JSON form) go to the second."""
    values: list[Any] = list(content) if isinstance(content, list | tuple) else [content]  # pyright: ignore[reportUnknownArgumentType]
    rest: list[Any] = []
    media: list[ImageUrl | DocumentUrl | BinaryContent] = []
    for v in values:
        m = as_media(v)
        if m is None:
            rest.append(v)
        else:
            media.append(m)
    return rest, media


def media_label(value: Any) -> str | None:
    """`[image/png, 5000000 bytes]` or `[image-url: https://...]` for a media part or its JSON
    form (sized from its base64 text, which is not decoded): how previews, events and
    summaries name media, never with their bytes; None for anything else."""
    if isinstance(value, BinaryContent):
        return f"[{value.media_type}, {len(value.data)} bytes]"
    if isinstance(value, ImageUrl | DocumentUrl):
        return f"[{value.kind}: {value.url[:80]}]"
    if not isinstance(value, dict):
        return None
    item: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    kind = item.get("kind")
    if kind not in MEDIA_KINDS:
        return None
    if kind != "binary":
        return f"[{kind}: {str(item.get('url'))[:80]}]"
    data = item.get("data")
    if isinstance(data, str):  # base64 text
        size = len(data) * 3 // 4 - data[-2:].count("=")
    else:
        size = len(data) if isinstance(data, bytes) else 0
    return f"[{item.get('media_type')}, {size} bytes]"


def prompt_text(content: str | Sequence[Any]) -> str:
    """A prompt's text (its media parts named by `media_label`), for previews and summaries."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for item in content:
        label = item if isinstance(item, str) else media_label(item)
        if label is not None:
            texts.append(label)
    return "\n".join(texts)
