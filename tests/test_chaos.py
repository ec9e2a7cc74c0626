"""The chaos bench (`bench/chaos.py`) at small scale: SIGKILLs, a store outage, exact ledgers.

Six runs of the bench's five agents (idempotent and non-idempotent tools, multi-step
loops, parallel calls, tools that take a second or two, large prompts and tool results)
on the bench's own dev server, with three worker processes of which three are SIGKILLed,
one every 1-3 s, each replaced; the shared `file://` payload store, which holds every
run's start input, unreachable for 4 s; and the server SIGKILLed once and restarted on the
same SQLite file. The expectations are the bench's: every run ends (completed, or
`UncertainToolEffect` because its non-idempotent tool had entered on a lost worker, never
when the tool had not started), each run's ledger read back from its history is the one
its plan must produce, no call's effect happened twice, no run is stuck, no stored payload
is lost. The second test shows the verdict catches what it claims to: a duplicated effect,
a ledger that disagrees with the plan and a false `UncertainToolEffect`, planted into the
same session's records.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from chaos import ChaosConfig, Session, run_session, verdict
from chaos_agents import NON_IDEMPOTENT, expected, read_log
from chaos_report import RunRecord, analyse

from towline.messages import Message, ModelRequest, ModelResponse, ToolReturnPart
from towline.results import PartialRun

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(180)]

SMALL = ChaosConfig(runs=6, kills=3, kill_server=1, seconds=60.0, drain=90.0, spread=0.0,
                    workers=3, store=True, store_outages=1, outage=4.0, seed=8)
"""Six runs started at once; a 4 s store outage, then one server kill; the storm ends after
the third worker kill."""


@pytest_asyncio.fixture(scope="module")
async def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Session, Path]:
    out = tmp_path_factory.mktemp("chaos")
    return await run_session(SMALL, out), out


async def test_small_chaos_session_keeps_every_promise(session: tuple[Session, Path]) -> None:
    result, out = session
    report = verdict(result, SMALL, out)
    print(report.table())

    assert (report.workers, report.worker_kills, report.server_kills) == (3, 3, 1)
    assert report.started == 6
    assert report.completed + report.uncertain == 6, report.failures
    assert report.failed_other == 0, report.failures
    assert report.false_uncertain == 0, report.failures
    assert report.stuck == 0, report.failures
    assert report.mismatches == []
    assert report.duplicate_effects == 0, report.failures
    assert report.duplicate_idempotent == 0, report.failures
    assert report.lost_effects == []
    # each honest UncertainToolEffect is explained by a lost attempt that had entered the tool
    assert len(report.explanations) >= report.uncertain
    assert all("entered the tool and" in e for e in report.explanations)
    # every run kept its payloads in the store, which went away and came back with them all
    assert report.store_outages == 1
    assert report.runs_stored == 6
    assert report.store_lost == []
    assert report.store_refusals > 0, "the outage refused no store operation"
    assert report.ok
    # the tools ran in several worker processes, and counted there
    attempts = read_log(out / "effects", "attempts.log")
    assert len({a["pid"] for a in attempts}) >= 2
    assert json.loads((out / "report.json").read_text())["ok"] is True


async def test_verdict_catches_a_duplicate_a_wrong_ledger_and_a_false_uncertain(
    session: tuple[Session, Path], tmp_path: Path
) -> None:
    """The same session's records, with one planted defect at a time."""
    result, out = session
    folder = shutil.copytree(out / "effects", tmp_path / "effects")
    baseline = analyse(result.records, folder, result.kills, SMALL.seed)
    assert baseline.ok and baseline.false_uncertain == 0
    already = baseline.uncertain  # the session's own honest ones (a storm may make some)

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

    # A non-idempotent call that the run reports `unknown` because attempt 1 had entered
    # and attempt 2 refused to rerun it: honest if the tool started, false if it never did.
    attempts = read_log(folder, "attempts.log")
    record, call_id, label = _non_idempotent_call(result.records, attempts)
    attempt = next(a for a in attempts
                   if a["workflow_id"] == record.workflow_id and a["label"] == label)
    with (folder / "attempts.log").open("a") as f:
        f.write(json.dumps({**attempt, "attempt": 2, "t": attempt["t"] + 2.0}) + "\n")
    uncertain = _uncertain(record, call_id)
    records = [uncertain if r is record else r for r in result.records]
    honest = analyse(records, folder, result.kills, SMALL.seed)
    assert (honest.uncertain, honest.false_uncertain) == (already + 1, 0) and honest.ok, \
        honest.failures

    execs = (folder / "exec.log").read_text().splitlines(keepends=True)
    (folder / "exec.log").write_text(  # the tool function never started
        "".join(line for line in execs if json.loads(line)["label"] != label))
    false = analyse(records, folder, result.kills, SMALL.seed)
    assert (false.uncertain, false.false_uncertain) == (already, 1) and not false.ok
    assert any("false UncertainToolEffect" in f and label in f for f in false.failures)


def _non_idempotent_call(records: list[RunRecord], attempts: list[dict[str, Any]]
                         ) -> tuple[RunRecord, str, str]:
    """A completed run, the id of one of its non-idempotent calls that ran in one attempt,
    and the call's label."""
    for record in records:
        if record.status != "COMPLETED":
            continue
        for s, step in enumerate(record.plan, 1):
            for i, call in enumerate(step):
                mine = [a["attempt"] for a in attempts if a["workflow_id"] == record.workflow_id
                        and a["label"] == call.label]
                if call.tool in NON_IDEMPOTENT and mine == [1]:
                    return record, f"c{s}-{i}", call.label
    raise AssertionError("no completed run made a non-idempotent call")


def _uncertain(record: RunRecord, call_id: str) -> RunRecord:
    """`record`, failed `UncertainToolEffect` at `call_id`, as towline would report it."""
    assert record.result is not None
    kept: list[Message] = []
    for message in record.result.messages:
        if isinstance(message, ModelRequest) and any(
                isinstance(p, ToolReturnPart) and p.tool_call_id == call_id for p in message.parts):
            parts = [p.model_copy(update={
                "status": "unknown", "content": "attempt 1 of this call entered the tool and its "
                "worker was lost; the tool is not idempotent, so it is not run again"})
                if isinstance(p, ToolReturnPart) and p.tool_call_id == call_id else p
                for p in message.parts]
            kept.append(message.model_copy(update={"parts": parts}))
            break
        kept.append(message)
    steps = sum(1 for m in kept if isinstance(m, ModelResponse))
    want = expected(record.plan, steps)
    ledger = record.snapshots[-1].model_copy(update={
        name: getattr(want, name)
        for name in ("run_step", "requests", "tool_calls", "input_tokens", "output_tokens")})
    return replace(record, status="FAILED", reason="UncertainToolEffect", result=None,
                   partial=PartialRun(messages=kept, counters=ledger), snapshots=[ledger])
