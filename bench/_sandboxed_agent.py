"""A workflow module that imports an agent module, as design (a) would per run (see hook_guard.py).

Importing it inside Temporal's sandbox re-imports `examples.calculator` there (towline
and third-party libraries passed through): the per-run cost the sandbox design pays.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import towline  # noqa: F401  # pyright: ignore[reportUnusedImport]

import examples.calculator  # noqa: F401  # pyright: ignore[reportUnusedImport]


@workflow.defn(name="SandboxedAgentProbe")
class SandboxedAgentProbe:
    """Does nothing: only its module's import is measured."""

    @workflow.run
    async def run(self) -> None:
        return None
