"""Write the JSON Schemas of what a client exchanges with `AgentRun` (`towline.contract`).

One file per payload under ``docs/schemas/`` (the default output directory), e.g.
``docs/schemas/RunInput.json``; ``tests/test_schemas.py`` compares the committed files with
the models, so a model that changed without this script fails the tests.

Usage: ``python scripts/gen_schemas.py [OUTPUT_DIR]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

from towline.contract import json_schemas, schema_text

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = REPO_ROOT / "docs" / "schemas"


def write_schemas(out: Path = SCHEMA_DIR) -> list[Path]:
    """Write every schema to `out` (stale ones removed); the files written."""
    out.mkdir(parents=True, exist_ok=True)
    schemas = json_schemas()
    for stale in out.glob("*.json"):
        if stale.stem not in schemas:
            stale.unlink()
    written: list[Path] = []
    for name, schema in schemas.items():
        path = out / f"{name}.json"
        path.write_text(schema_text(schema), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Write the JSON Schemas of the client contract.")
    parser.add_argument("out", nargs="?", type=Path, default=SCHEMA_DIR)
    for written in write_schemas(parser.parse_args().out):
        print(written)
