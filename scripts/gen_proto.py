"""Regenerate the Python code for towline's protobuf sources.

Runs ``grpc_tools.protoc`` with ``-I towline/proto`` so that ``towline/v1/ledger.proto``
produces ``towline/v1/ledger_pb2.py`` and ``ledger_pb2.pyi`` (mypy-protobuf stubs) under the
output directory. The default output directory is ``towline/proto`` itself, i.e. the
committed files are regenerated in place; ``tests/test_proto.py`` regenerates into a
temporary directory and compares byte for byte, so a stale committed file fails the tests.

Usage: ``python scripts/gen_proto.py [OUTPUT_DIR]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "towline" / "proto"


def proto_sources(root: Path = PROTO_ROOT) -> list[Path]:
    """Every ``.proto`` file under ``root``, relative to it, in a stable order."""
    return sorted(p.relative_to(root) for p in root.rglob("*.proto"))


def _mypy_plugin() -> str:
    """Locate ``protoc-gen-mypy`` (installed by mypy-protobuf) even if the venv is not on PATH."""
    name = "protoc-gen-mypy.exe" if os.name == "nt" else "protoc-gen-mypy"
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / name
        if candidate.is_file():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError("protoc-gen-mypy not found; install the dev extra (mypy-protobuf)")
    return found


def generate(out_dir: Path = PROTO_ROOT) -> list[Path]:
    """Generate ``*_pb2.py`` and ``*_pb2.pyi`` for every source into ``out_dir``.

    Returns the generated files. Raises ``RuntimeError`` with protoc's output if it fails.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = proto_sources()
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--plugin=protoc-gen-mypy={_mypy_plugin()}",
        "-I.",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        *(str(s) for s in sources),
    ]
    # Run from the proto root so the sources' recorded names are the relative paths.
    proc = subprocess.run(cmd, cwd=PROTO_ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"protoc failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    generated: list[Path] = []
    for source in sources:
        stem = out_dir / source.with_suffix("")
        generated += [stem.with_name(stem.name + "_pb2.py"), stem.with_name(stem.name + "_pb2.pyi")]
    return generated


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the generated files."""
    parser = argparse.ArgumentParser(description="Regenerate towline's protobuf code.")
    parser.add_argument("out_dir", nargs="?", type=Path, default=PROTO_ROOT)
    args = parser.parse_args(argv)
    for path in generate(args.out_dir.resolve()):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
