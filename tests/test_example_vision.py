"""`examples/vision.py` as the README runs it: an agent that reads an image and a PDF and
answers with a typed `Reading` (native output), offline; and files attached with `--attach`,
a large one riding the payload store."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from readme import cli_env, readme
from temporalio.client import Client

from examples.vision import MEDIA, Attachment, Reading, sample_pdf, sample_png
from towline.testing import history_events

pytestmark = pytest.mark.timeout(240)

INVOICE = ("a 1-page PDF that reads: Invoice 17 - Otter Supplies Ltd / 3 river stones, 14.00 EUR "
           "each / Total: 42.00 EUR")
SAMPLES = Reading(attachments=[Attachment(media_type="image/png", description="a 96 x 64 PNG image"),
                               Attachment(media_type="application/pdf", description=INVOICE)],
                  answer="I was given 2 files; the invoice's total is 42.00 EUR.")


def test_the_samples_are_what_the_code_makes() -> None:
    assert (MEDIA / "chart.png").read_bytes() == sample_png()
    assert (MEDIA / "invoice.pdf").read_bytes() == sample_pdf()


async def test_the_example_reads_its_samples(target: str, namespace: str) -> None:
    env = cli_env(target, namespace)
    script = await readme("python examples/vision.py", env=env, timeout=120)
    assert script.code == 0, script
    assert Reading.model_validate_json(script.out) == SAMPLES  # typed, from the model's JSON
    assert "Run vision-" in script.err and "Done: 1 step" in script.err

    attached = await readme(
        'towline run examples.vision:agent "What do these show?" --attach '
        'examples/media/chart.png --attach examples/media/invoice.pdf', env=env, timeout=120)
    assert attached.code == 0, attached
    assert Reading.model_validate_json(attached.out) == SAMPLES


async def test_a_large_photo_rides_the_payload_store(
    client: Client, target: str, namespace: str, tmp_path: Path
) -> None:
    photo = b"\xff\xd8\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + os.urandom(3_000_000)
    (tmp_path / "photo.jpg").write_bytes(photo)
    done = await readme('towline run examples.vision:agent "What is in this photo?" --attach '
                        'photo.jpg --payload-store file://./payloads',
                        env=cli_env(target, namespace), cwd=tmp_path, timeout=120)
    assert done.code == 0, done
    reading = Reading.model_validate_json(done.out)
    assert reading.attachments == [Attachment(media_type="image/jpeg",
                                              description=f"{len(photo)} bytes of image/jpeg")]
    run_id = next(w for w in done.err.split() if w.startswith("vision-"))
    events = await history_events(client.get_workflow_handle(run_id))
    assert sum(e.ByteSize() for e in events) < 64_000  # references, not the photo
    stored = sum(f.stat().st_size for f in (tmp_path / "payloads").rglob("*") if f.is_file())
    assert stored > len(photo)
