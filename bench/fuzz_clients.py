"""The long profile of the client fuzz test (`tests/test_fuzz_clients.py`).

The suite runs each property with 40 generated cases (about a minute in all); this runs
the same properties with more, against a dev server of their own, and prints how each
case ended. Any case that leaves a workflow task failing, or a run stuck, fails it.

    python bench/fuzz_clients.py                # 400 cases per property
    python bench/fuzz_clients.py --cases 2000   # longer

Exit status: pytest's (0 when every case ended safely).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description="The long profile of the client fuzz test.")
    parser.add_argument("--cases", type=int, default=400, help="generated cases per property")
    args = parser.parse_args()
    env = {**os.environ, "TOWLINE_FUZZ_CASES": str(args.cases)}
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-n", "0", "-p", "no:cacheprovider",
               "--timeout", str(max(600, args.cases * 10)), "tests/test_fuzz_clients.py"]
    return subprocess.run(command, cwd=REPO, env=env, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
