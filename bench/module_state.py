"""What the determinism guard's module-state check costs per hook call
(`towline/workflows/module_state.py`: a fingerprint of the hook's module and user classes
before the call, compared after it).

    python bench/module_state.py          # a table
    python bench/module_state.py --json   # machine-readable

Measured for hooks in three modules: `tests/i40_module_state_agents.py` (a small agent module),
`examples/calculator.py`, and a synthetic module of 200 names, 40 of them containers of 10
to 100 items (a big one). Each figure is the time of one fingerprint and one comparison
(what a hook call pays), the minimum over interleaved repeats; read it against a step's worker
CPU (`bench/loop.py`: a few milliseconds), not as an absolute.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from towline.workflows.module_state import Fingerprint, _scopes  # pyright: ignore[reportPrivateUsage]


def _synthetic() -> Any:
    """A hook of a big module: 200 names, 40 of them lists, dicts and sets of 10 to 100 items."""
    module = types.ModuleType("big_agents")
    module.__file__ = str(ROOT / "big_agents.py")
    for i in range(160):
        setattr(module, f"CONST_{i}", i if i % 2 else f"value {i}")
    for i in range(40):
        n = 10 + (i * 90) // 39
        kind = i % 3
        value: Any = (list(range(n)) if kind == 0 else {str(k): k for k in range(n)} if kind == 1
                      else set(range(n)))
        setattr(module, f"TABLE_{i}", value)
    exec("def hook(state):\n    return state\n", module.__dict__)  # noqa: S102
    code = module.hook.__code__
    module.hook.__code__ = code.replace(co_filename=module.__file__)
    return module.hook


def _per_call(fn: Any, n: int) -> float:
    """Microseconds to find `fn`'s scopes, fingerprint them and compare them after a call (all
    of which `module_state.fingerprint` does on every hook call)."""
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(n):
            Fingerprint(_scopes(fn)).changes()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def measure(n: int) -> dict[str, Any]:
    import i40_module_state_agents as stateful  # pyright: ignore[reportMissingImports]

    from examples import calculator

    hooks: dict[str, Any] = {
        "tests/i40_module_state_agents.py (FirstRunPause)":
            stateful.FirstRunPause().before_model_request,
        "examples/calculator.py (a function)": next(
            v for v in vars(calculator).values() if isinstance(v, types.FunctionType)
            and v.__module__ == calculator.__name__),
        "200 names, 40 containers": _synthetic(),
    }
    return {name: {"scopes": len(_scopes(fn)), "per_call_us": round(_per_call(fn, n), 2)}
            for name, fn in hooks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    result = measure(args.calls)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'hook module':45} {'scopes':>6} {'per call':>10}")
    for name, row in result.items():
        print(f"{name:45} {row['scopes']:>6} {row['per_call_us']:>8.2f}us")


if __name__ == "__main__":
    main()
