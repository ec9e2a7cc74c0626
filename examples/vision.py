"""An agent that reads an image and a PDF and answers with a typed result (native output).

    python examples/vision.py                                          # offline
    python examples/vision.py --model anthropic:claude-sonnet-4-6      # a real model
    towline run examples.vision:agent "What do these show?" --attach examples/media/chart.png --attach examples/media/invoice.pdf

The files go to the model as `BinaryContent` parts of the prompt (`--attach` reads a
file's media type from its content), and the answer is a `Reading`, a pydantic model:
`output_mode="native"` sends its strict JSON schema as the provider's response format,
so the model answers with JSON that matches it and the run's output is that JSON,
validated (an invalid answer is retried, as any output is).

With no `--model`, the agent runs on `offline_reader`, a `FunctionModel` that needs no
key and no network: it reads what it can of each attachment itself (a PNG's size, a
PDF's text, a text file's first line) and answers with the same JSON a real model would.
`python examples/vision.py [FILE ...] [--model MODEL] [--question TEXT]` is
`towline run examples.vision:agent QUESTION --attach FILE ...`: it starts the embedded
dev server if none runs (the bytes ride its payload store), runs the agent in-process,
prints the answer as JSON and the run's address in the Temporal UI. Without FILEs it
attaches the two samples in `examples/media/` (`sample_png()` and `sample_pdf()` made them).
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
import zlib
from pathlib import Path

from pydantic import BaseModel, Field

from towline import Agent
from towline.messages import BinaryContent, Message, ModelRequest, UserPart, media_in
from towline.models import FunctionModel, ModelInfo

__all__ = ["agent", "Reading", "Attachment", "offline_reader", "sample_png", "sample_pdf",
           "MEDIA", "QUESTION"]

MEDIA = Path(__file__).resolve().parent / "media"
"""The sample files: `chart.png` and `invoice.pdf`."""
QUESTION = "What do these show? What is the invoice's total?"


class Attachment(BaseModel):
    """One file the model was given."""

    media_type: str = Field(description="its media type, e.g. image/png")
    description: str = Field(description="what it shows or says, in one sentence")


class Reading(BaseModel):
    """The answer: each file described, then the answer to the question."""

    attachments: list[Attachment]
    answer: str


# --- the sample files ---------------------------------------------------------------------------

_BARS = ((12, 40, (220, 80, 60)), (36, 24, (60, 140, 220)), (60, 52, (80, 180, 90)))
"""(left, height, colour) of the chart's three bars, on a 96 x 64 canvas."""


def sample_png() -> bytes:
    """`media/chart.png`: a 96 x 64 bar chart of three bars (red, blue, green), as PNG."""
    width, height = 96, 64
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter: none
        for x in range(width):
            colour = (255, 255, 255)
            for left, tall, fill in _BARS:
                if left <= x < left + 18 and y >= height - tall:
                    colour = fill
            rows.extend(colour)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(bytes(rows), 9)) + chunk(b"IEND", b""))


_INVOICE_LINES = ("Invoice 17 - Otter Supplies Ltd", "3 river stones, 14.00 EUR each",
                  "Total: 42.00 EUR")


def sample_pdf() -> bytes:
    """`media/invoice.pdf`: a one-page invoice (three lines of text), as a minimal PDF."""
    text = " ".join(f"({line}) Tj 0 -28 Td" for line in _INVOICE_LINES)
    stream = f"BT /F1 18 Tf 72 720 Td {text} ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
         b"/Resources << /Font << /F1 5 0 R >> >> >>"),
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


# --- the offline stand-in model -----------------------------------------------------------------

_SHOWN = re.compile(rb"\(((?:[^()\\]|\\.)*)\)\s*Tj")


def _describe(part: BinaryContent) -> str:
    """What the offline model can tell of one file without a vision model."""
    data = part.data
    if part.media_type == "image/png" and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return f"a {width} x {height} PNG image"
    if part.media_type == "application/pdf":
        shown = [m.decode("latin-1") for m in _SHOWN.findall(data)]
        pages = len(re.findall(rb"/Type\s*/Page\b", data))
        return f"a {pages}-page PDF that reads: " + " / ".join(shown) if shown else \
            f"a {pages}-page PDF whose text I cannot read offline"
    if part.media_type.startswith("text/"):
        first = data.decode("utf-8", "replace").strip().splitlines()
        return f"a text file beginning: {first[0][:80]}" if first else "an empty text file"
    return f"{len(data)} bytes of {part.media_type}"


def offline_reader(messages: list[Message], info: ModelInfo) -> str:
    """Describe each attachment of the last prompt, as JSON matching the output schema."""
    prompt = next((p for m in reversed(messages) if isinstance(m, ModelRequest)
                   for p in m.parts if isinstance(p, UserPart)), None)
    _, media = media_in(prompt.content if prompt is not None else [])
    files = [m for m in media if isinstance(m, BinaryContent)]
    described = [Attachment(media_type=f.media_type, description=_describe(f)) for f in files]
    total = next((re.search(r"Total: ([\d.,]+ ?[A-Z]{3})", a.description) for a in described
                  if "Total:" in a.description), None)
    given = f"I was given {len(files)} file{'' if len(files) == 1 else 's'}"
    answer = given + (f"; the invoice's total is {total.group(1)}." if total else ".")
    return Reading(attachments=described, answer=answer).model_dump_json()


agent = Agent(
    name="vision",
    model=FunctionModel(offline_reader, model_name="vision-offline"),
    instructions="You read the images and documents you are given. Describe each in one "
                 "sentence, in the order given, then answer the question.",
    output_type=Reading,
    output_mode="native",
)
"""Reads the attachments of its prompt; its output is a `Reading`."""


def main(argv: list[str] | None = None) -> int:
    """`python examples/vision.py`: run the agent on files through `towline run`."""
    parser = argparse.ArgumentParser(
        description="Run the vision agent on files (towline run examples.vision:agent ...).")
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="files to attach (default: examples/media/chart.png and invoice.pdf)")
    parser.add_argument("--question", default=QUESTION, help=f"the prompt (default: {QUESTION!r})")
    parser.add_argument("--model", help="a real model, e.g. anthropic:claude-sonnet-4-6, "
                        "openai:gpt-4.1-mini, google:gemini-2.5-flash (its key in the environment)")
    args = parser.parse_args(argv)
    files = args.files or [str(MEDIA / "chart.png"), str(MEDIA / "invoice.pdf")]
    command = ["run", "examples.vision:agent", args.question]
    for name in files:
        command += ["--attach", name]
    if args.model:
        command += ["--model", args.model]
    from towline.cli import run_cli

    return run_cli(command)


if __name__ == "__main__":
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)  # `examples.vision` imports from any working directory
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the SDK's runtime can abort at interpreter exit (sdk-python #300)
