"""Where `towline rerun` gets a recorded run, and where it runs today's agent.

`load_histories` reads an exported JSON history and the executions it continued as new
into (each exported on its own, found beside it); `histories_of` accepts any of the forms
`rerun` takes; `embedded_server` is a throwaway dev server whose output never reaches
our stdout (`towline rerun --json` prints one object).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

from temporalio.client import Client, WorkflowHistory

from towline.replay import load_history

__all__ = ["RerunError", "load_histories", "histories_of", "embedded_server"]


class RerunError(Exception):
    """A rerun that cannot be made (an unreadable recording, a run of another agent)."""


def load_histories(path: str | Path) -> list[WorkflowHistory]:
    """The histories of a run exported as JSON: the file, and the executions it continued
    as new into, found beside it (each execution is exported on its own)."""
    path = Path(path)
    first = load_history(path)
    data = _started(path)
    continued = bool(first.events) and first.events[-1].HasField(
        "workflow_execution_continued_as_new_event_attributes")
    if data is None or not (continued or data.get("continuedExecutionRunId")):
        return [first]  # one execution: nothing beside it is read
    family: dict[str, tuple[Path, dict[str, Any]]] = {}
    for other in sorted(path.parent.glob("*.json")):
        if other != path and not other.is_file():  # a pipe or a device is no export
            continue
        if other == path:
            family[str(data.get("continuedExecutionRunId") or "")] = (other, data)
            continue
        found = _started(other)
        if (found is not None and found.get("workflowId", data.get("workflowId")) == data.get("workflowId")
                and found.get("firstExecutionRunId") == data.get("firstExecutionRunId")):
            family[str(found.get("continuedExecutionRunId") or "")] = (other, found)
    if "" not in family:
        raise RerunError(f"{path} is a later execution of a run whose first execution is not "
                         f"beside it (workflow {first.workflow_id})")
    chain: list[WorkflowHistory] = []
    current, run_id = family[""][0], str(data.get("firstExecutionRunId") or "")
    while len(chain) <= len(family):
        history = first if current == path else load_history(current)
        chain.append(history)
        follow = family.get(run_id)
        if follow is None or not history.events:
            break
        last = history.events[-1]
        current = follow[0]
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return chain


def _started(path: Path) -> dict[str, Any] | None:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        attrs: Any = data["events"][0]["workflowExecutionStartedEventAttributes"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return cast(dict[str, Any], attrs) if isinstance(attrs, dict) else None


async def histories_of(history: Any, client: Client | None) -> list[WorkflowHistory]:
    from towline.testing.harness import execution_histories

    if isinstance(history, WorkflowHistory):
        return [history]
    if isinstance(history, list | tuple) and all(isinstance(h, WorkflowHistory) for h in cast(Sequence[Any], history)):
        return list(cast(Sequence[WorkflowHistory], history))
    if isinstance(history, Path) or (isinstance(history, str) and (
            history.endswith(".json") or Path(history).is_file())):
        try:
            return load_histories(history)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RerunError(f"cannot read the history {history}: {e}") from None
    if isinstance(history, str) and client is not None:
        return await execution_histories(client, history)
    raise RerunError(f"{history!r} is neither a history nor a run id (a run id needs a client)")


@asynccontextmanager
async def embedded_server() -> AsyncGenerator[Client]:
    """A throwaway dev server (SQLite in a temporary folder, no UI, its output in a log file
    there, never on our stdout); yields a client of it."""
    from towline.devserver import DevServerProcess
    from towline.runtime.registration import register_search_attributes

    with tempfile.TemporaryDirectory(prefix="towline-rerun-") as folder:
        process = DevServerProcess(db_path=Path(folder) / "temporal.db", log_level="error",
                                   log_path=Path(folder) / "temporal.log")
        await process.start()
        try:
            client = await Client.connect(process.address)
            await register_search_attributes(client, client.namespace)
            yield client
        finally:
            await process.stop()
