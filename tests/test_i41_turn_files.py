"""`bench/turn_files.py` measures the files one model turn passes through (issue 41's figure).

Its function runs a one-turn agent twice on a worker in this process against the session's
dev server and records the second run's turn. What it reports must hold what a turn surely
passes through: the workflow's `run_turn` module, called from the workflow's thread, and the
model activity's module, called from the worker's (so the profile reached both threads, and
the window stayed open while the activity ran). Names are the files' real paths under their
towline folder, so the symlinked `workflows/` counts once, as `workflows/`.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

from temporalio.client import Client

from towline.activities.model_request import ModelActivities
from towline.workflows.turn import run_turn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from turn_files import ENGINE, roots, shown, turn_files  # pyright: ignore[reportMissingImports]


async def test_a_turn_passes_through_run_turn_and_the_model_activity(client: Client) -> None:
    measured = await turn_files(client)
    folders = roots()
    turn = shown(inspect.getfile(run_turn), folders)
    activity = shown(inspect.getfile(ModelActivities), folders)
    assert turn == "workflows/turn.py"
    assert activity is not None and activity.startswith("activities/")
    assert turn in measured.workflow, measured.functions
    assert activity in measured.files and activity not in measured.workflow, measured.functions
    assert {turn, activity} <= set(measured.engine)
    assert all(f.startswith(ENGINE) for f in measured.engine)
    assert len(set(measured.files)) == len(measured.files)  # each file once, symlinks resolved
