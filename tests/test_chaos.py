"""The chaos bench (`bench/chaos.py`) at small scale: SIGKILLs, exact ledgers, no duplicates.

Six runs of the bench's four agents (idempotent and non-idempotent tools, multi-step
loops, parallel calls, tools that take a second or two) on the bench's own dev server,
with two worker processes of which three are SIGKILLed, one every 1-3 s, each replaced,
and the server SIGKILLed once and restarted on the same SQLite file. The expectations are
the bench's: every run ends (completed, or `UncertainToolEffect` because its
non-idempotent tool had entered on a lost worker), each run's ledger read back from its
history is the one its plan must produce, no call's effect happened twice, no run is stuck.
The second test shows the verdict catches what it claims to: a duplicated effect and a
ledger that disagrees with the plan, planted into the same session's records.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from chaos import ChaosConfig, Session, run_session, verdict
from chaos_agents import NON_IDEMPOTENT, read_log
from chaos_report import analyse

pytestmark = pytest.mark.timeout(180)

SMALL = ChaosConfig(runs=6, kills=3, kill_server=1, seconds=60.0, drain=90.0, spread=0.0,
                    workers=2, seed=8)
"""Six runs started at once; one server kill; the storm ends after the third worker kill."""


@pytest_asyncio.fixture(scope="module")
async def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Session, Path]:
    out = tmp_path_factory.mktemp("chaos")
    return await run_session(SMALL, out), out


async def test_small_chaos_session_keeps_every_promise(session: tuple[Session, Path]) -> None:
    result, out = session
    report = verdict(result, SMALL, out)
    print(report.table())

    assert (report.worker_kills, report.server_kills) == (3, 1)
    assert report.started == 6
    assert report.completed + report.uncertain == 6, report.failures
    assert report.failed_other == 0, report.failures
    assert report.stuck == 0, report.failures
    assert report.mismatches == []
    assert report.duplicate_effects == 0, report.failures
    assert report.duplicate_idempotent == 0, report.failures
    assert report.lost_effects == []
    # each honest UncertainToolEffect is explained by a lost attempt that had entered the tool
    assert len(report.explanations) >= report.uncertain
    assert all("entered the tool and" in e for e in report.explanations)
    assert report.ok
    # the tools ran in several worker processes, and counted there
    attempts = read_log(out / "effects", "attempts.log")
    assert len({a["pid"] for a in attempts}) >= 2
    assert json.loads((out / "report.json").read_text())["ok"] is True


async def test_verdict_catches_a_duplicate_effect_and_a_wrong_ledger(
    session: tuple[Session, Path], tmp_path: Path
) -> None:
    """The same session's records, with one planted defect at a time."""
    result, out = session
    folder = shutil.copytree(out / "effects", tmp_path / "effects")
    assert analyse(result.records, folder, result.kills, SMALL.seed).ok

    effects = read_log(folder, "effects.log")
    once = next(e for e in effects if e["tool"] in NON_IDEMPOTENT)
    with (folder / "effects.log").open("a") as f:  # the same call's effect, a second time
        f.write(json.dumps(once) + "\n")
    doubled = analyse(result.records, folder, result.kills, SMALL.seed)
    assert doubled.duplicate_effects == 1 and not doubled.ok

    (folder / "effects.log").write_text("".join(json.dumps(e) + "\n" for e in effects))
    mark = next(p for p in sorted((folder / "marks").iterdir()) if not p.name.startswith("."))
    label = json.loads(mark.read_text())["label"]
    kept = mark.read_bytes()
    mark.unlink()  # an idempotent call's effect, lost
    try:
        lost = analyse(result.records, folder, result.kills, SMALL.seed)
    finally:
        mark.write_bytes(kept)
    assert any(label in m for m in lost.lost_effects) and not lost.ok

    records = [r for r in result.records if r.status == "COMPLETED"]
    wrong = records[0]
    last = wrong.snapshots[-1]
    wrong.snapshots.append(last.model_copy(update={"tool_calls": last.tool_calls + 1}))
    try:
        skewed = analyse(result.records, folder, result.kills, SMALL.seed)
    finally:
        wrong.snapshots.pop()
    assert any("tool_calls" in m and wrong.workflow_id in m for m in skewed.mismatches)
    assert not skewed.ok
