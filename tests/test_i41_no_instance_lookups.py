"""No `workflow.instance()` lookups outside the workflow class (issue 41, item 2).

The run's state is passed to what runs it (the turn, the model call, the tool calls get the
`Run`, which carries the run's stream, request book, dispatch, payload limit and steering);
code no caller can hand it to (the activity-header interceptor, a hook's own `call_model`, a
child run's routing) finds the run in its scope (`towline.workflows.scope`). So no module but
`workflows/agent_run.py` (the workflow class itself) may call `workflow.instance()`: checked
with `ast` over every module of the package, the symlinked `workflows/`, `activities/` and
`capabilities/` folders included.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "towline"
ALLOWED = frozenset({Path("workflows/agent_run.py")})
"""The workflow class: the one place that may read the workflow instance."""


def _is_workflow(node: ast.expr) -> bool:
    """`workflow` or `temporalio.workflow` (however the module was imported)."""
    return (isinstance(node, ast.Name) and node.id == "workflow") or (
        isinstance(node, ast.Attribute) and node.attr == "workflow")


def instance_lookups(source: str) -> list[str]:
    """Where `source` reads the workflow instance: `workflow.instance()` calls and imports of
    `instance` from `temporalio.workflow` (by line)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "instance" and _is_workflow(node.func.value)):
            found.append((node.lineno, "workflow.instance()"))
        elif (isinstance(node, ast.ImportFrom) and node.module == "temporalio.workflow"
              and any(a.name == "instance" for a in node.names)):
            found.append((node.lineno, "from temporalio.workflow import instance"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def _modules() -> Iterator[Path]:
    """Every module of the package, through the symlinked role folders (`os.walk` follows them)."""
    for folder, dirs, files in os.walk(PACKAGE, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                yield Path(folder, name).relative_to(PACKAGE)


def test_the_scan_sees_every_way_of_looking_the_instance_up() -> None:
    source = ("from temporalio import workflow\nimport temporalio\n"
              "a = workflow.instance()\n"
              "b = getattr(temporalio.workflow.instance(), 'x', None)\n"
              "from temporalio.workflow import instance\n"
              "c = other.instance()\n")  # another object's `instance` is not the workflow's
    assert instance_lookups(source) == [
        "line 3: workflow.instance()", "line 4: workflow.instance()",
        "line 5: from temporalio.workflow import instance"]


def test_only_the_workflow_class_looks_up_the_workflow_instance() -> None:
    modules = sorted(_modules())
    assert Path("workflows/turn.py") in modules and Path("capabilities/base.py") in modules
    found = {
        str(path): hits for path in modules if path not in ALLOWED
        if (hits := instance_lookups((PACKAGE / path).read_text(encoding="utf-8")))
    }
    assert found == {}
