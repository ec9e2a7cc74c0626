"""The chaos bench's verdict: every run's ledger, output and tool effects against its plan.

`analyse` takes what `bench/chaos.py` collected (each run's final status, result or failure,
and the ledger snapshots read back from its workflow history), the tools' counting logs and
the kill log, and returns a `Report`; `Report.table()` prints it, `Report.ok` is the verdict.
The payload store's figures (`chaos_store`) are added by the bench (`chaos.verdict`).
"""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos_agents import IDEMPOTENT, NON_IDEMPOTENT, Call, expected, read_effects, read_log

from towline.messages import ModelResponse, ToolReturnPart
from towline.results import Counters, PartialRun, RunResult

__all__ = ["Kill", "RunRecord", "Report", "analyse"]


@dataclass(frozen=True)
class Kill:
    """One blow the bench dealt: a SIGKILL of a worker (by pid) or of the server, or the
    payload store going away (`store-down`, pid 0) or coming back (`store-up`)."""

    t: float
    """Wall-clock time (`time.time()`)."""
    what: str
    """`worker`, `server`, `store-down` or `store-up`."""
    pid: int


@dataclass
class RunRecord:
    """What the bench collected about one run."""

    workflow_id: str
    agent: str
    plan: list[list[Call]]
    status: str
    """Temporal's final status: COMPLETED, FAILED, RUNNING (stuck), ..."""
    result: RunResult | None = None
    reason: str | None = None
    """The failure type of a failed run."""
    message: str = ""
    partial: PartialRun | None = None
    snapshots: list[Counters] = field(default_factory=list[Counters])
    """The confirmed counters its history records, in order (`counters_from_history`)."""
    stored: int = 0
    """Payload-store references in its history (payloads kept out of it)."""
    task_failures: int = 0
    """Workflow tasks that failed (e.g. on the store) and were retried, in its history."""


@dataclass
class Report:
    """The figures of one chaos run; `ok` when every expectation holds."""

    seed: int
    started: int = 0
    completed: int = 0
    uncertain: int = 0
    """Runs that failed `UncertainToolEffect` because the tool had really started."""
    false_uncertain: int = 0
    """Runs that failed `UncertainToolEffect` although none of their `unknown` calls' tool
    functions had started (no entry in `exec.log`, no effect): a run lost for nothing."""
    uncertain_not_started: int = 0
    """`unknown` calls whose function had in fact not started (the worker died after the
    server recorded the entry): no effect happened, but towline cannot tell."""
    failed_other: int = 0
    stuck: int = 0
    mismatches: list[str] = field(default_factory=list[str])
    duplicate_effects: int = 0
    """Calls of non-idempotent tools whose effect happened more than once."""
    duplicate_idempotent: int = 0
    """Calls of idempotent tools whose (keyed) effect happened more than once."""
    lost_effects: list[str] = field(default_factory=list[str])
    """Calls recorded `succeeded` without their effect, or `not_executed` with it."""
    workers: int = 0
    """Worker processes alive at once."""
    worker_kills: int = 0
    server_kills: int = 0
    store_outages: int = 0
    outage_seconds: float = 0.0
    """How long each payload-store outage lasted (as configured)."""
    runs_stored: int = 0
    """Runs whose history refers to the payload store."""
    stored_payloads: int = 0
    """Payloads in the store at the end."""
    store_refusals: int = 0
    """Store reads and writes that failed (logged by the processes): the outage, felt."""
    task_failures: int = 0
    """Workflow tasks that failed and were retried (all runs' histories)."""
    store_lost: list[str] = field(default_factory=list[str])
    """References in a history whose payload is missing from the store or not whole."""
    attempts: int = 0
    attempts_retried: int = 0
    """Activity attempts after the first (a lost worker's attempt retried elsewhere)."""
    lost_before_entry: int = 0
    """Attempts of non-idempotent tools lost before the function started, so safely retried."""
    reexecutions_absorbed: int = 0
    """Extra executions of idempotent tools whose effect the idempotency key kept single."""
    explanations: list[str] = field(default_factory=list[str])
    failures: list[str] = field(default_factory=list[str])
    per_agent: dict[str, dict[str, int]] = field(default_factory=dict[str, dict[str, int]])
    seconds: float = 0.0
    drain_limit: float = 0.0
    out: str = ""

    @property
    def ok(self) -> bool:
        """Every run ended (completed, or honestly uncertain), exact ledgers, no duplicate."""
        return (self.completed + self.uncertain == self.started and self.failed_other == 0
                and self.false_uncertain == 0 and self.stuck == 0 and not self.mismatches
                and self.duplicate_effects == 0 and self.duplicate_idempotent == 0
                and not self.lost_effects and not self.store_lost)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def table(self) -> str:
        """The report as text: the headline table, per-agent figures, then every finding."""
        rows: list[tuple[str, str, str]] = [
            ("runs completed / started", f"{self.completed} / {self.started}",
             "all, but for the honestly uncertain"),
            ("runs failed UncertainToolEffect, honestly (tool started)", str(self.uncertain),
             "explained below"),
            ("false UncertainToolEffect (tool never started)", str(self.false_uncertain), "0"),
            ("  unknown calls whose function never started", str(self.uncertain_not_started),
             ""),
            ("runs failed otherwise", str(self.failed_other), "0"),
            (f"runs left stuck (RUNNING after a {self.drain_limit:.0f} s drain)",
             str(self.stuck), "0"),
            ("counter mismatches", str(len(self.mismatches)), "0"),
            ("duplicate effects, non-idempotent tools", str(self.duplicate_effects), "0"),
            ("duplicate effects, idempotent tools", str(self.duplicate_idempotent), "0"),
            ("effects lost or misreported", str(len(self.lost_effects)), "0"),
            ("worker processes at once", str(self.workers), ""),
            ("worker SIGKILLs", str(self.worker_kills), ""),
            ("server SIGKILLs (restarted on the same file)", str(self.server_kills), ""),
            ("payload store outages", f"{self.store_outages} x {self.outage_seconds:.0f} s", ""),
            ("  store reads/writes refused meanwhile", str(self.store_refusals), ""),
            ("  workflow task failures in histories, retried", str(self.task_failures), ""),
            ("  runs with stored payloads", str(self.runs_stored), ""),
            ("  payloads in the store", str(self.stored_payloads), ""),
            ("  stored payloads missing or corrupt", str(len(self.store_lost)), "0"),
            ("activity attempts (retried after a loss)",
             f"{self.attempts} ({self.attempts_retried})", ""),
            ("non-idempotent attempts lost before the tool started, rerun",
             str(self.lost_before_entry), ""),
            ("idempotent re-executions kept single by key", str(self.reexecutions_absorbed), ""),
            ("wall time", f"{self.seconds:.0f} s", "< 180 s"),
        ]
        width = max(len(r[0]) for r in rows)
        lines = [f"towline chaos bench (seed {self.seed})", ""]
        lines += [f"  {name:<{width}}  {value:>10}   {want}".rstrip() for name, value, want in rows]
        lines += ["", "  agent               started  completed  uncertain  failed  stuck  mismatched"]
        for agent, n in sorted(self.per_agent.items()):
            lines.append(f"  {agent:<18} {n['started']:>8} {n['completed']:>10} {n['uncertain']:>10}"
                         f" {n['failed']:>7} {n['stuck']:>6} {n['mismatched']:>11}")
        for title, items in (("UncertainToolEffect, why", self.explanations),
                             ("counter mismatches", self.mismatches),
                             ("effects lost or misreported", self.lost_effects),
                             ("stored payloads missing or corrupt", self.store_lost),
                             ("failures", self.failures)):
            if items:
                lines += ["", f"  {title}:"] + [f"    - {item}" for item in items]
        lines += ["", f"  verdict: {'PASS' if self.ok else 'FAIL'}   (logs and histories: {self.out})"]
        return "\n".join(lines)


def _returns(messages: Sequence[Any]) -> list[ToolReturnPart]:
    return [p for m in messages if getattr(m, "kind", "") == "request"
            for p in m.parts if isinstance(p, ToolReturnPart)]


def _check_ledger(run: RunRecord, steps: int | None, output: Any) -> list[str]:
    """Differences between the run's recorded ledger and what its plan must produce."""
    want = expected(run.plan, steps)
    if not run.snapshots:
        return [f"{run.workflow_id}: no ledger in its history"]
    last = run.snapshots[-1]
    found: list[str] = []
    for name in ("run_step", "requests", "tool_calls", "input_tokens", "output_tokens"):
        got, exp = getattr(last, name), getattr(want, name)
        if got != exp:
            found.append(f"{run.workflow_id}: {name} {got}, the plan makes {exp}")
    for a, b in zip(run.snapshots, run.snapshots[1:], strict=False):
        if (b.run_step, b.requests, b.tool_calls) < (a.run_step, a.requests, a.tool_calls):
            found.append(f"{run.workflow_id}: the ledger went backwards ({a} -> {b})")
    if steps is None and output != want.output:
        found.append(f"{run.workflow_id}: output {output!r}, the plan makes {want.output!r}")
    if last.output_retries_used or any(last.tool_retries.values()):
        found.append(f"{run.workflow_id}: retries counted although no tool or output failed: "
                     f"{last.tool_retries}, output {last.output_retries_used}")
    return found


class _Logs:
    """The counting logs of a session's tools and workers."""

    def __init__(self, folder: Path) -> None:
        self.execs = read_log(folder, "exec.log")
        self.effects = read_effects(folder)
        self.attempts = read_log(folder, "attempts.log")


_ENTERED = re.compile(r"attempt (\d+) of this call entered the tool")
_UNMARKED = re.compile(r"attempt (\d+) of this call was lost before it could record")


def _explain(run: RunRecord, ret: ToolReturnPart, call: Call, logs: _Logs,
             kills: Sequence[Kill]) -> tuple[str, bool, bool]:
    """Why one call is `unknown`; whether that is honest (an earlier attempt had recorded
    entering the tool, so the function may have run, and was lost); whether it did run."""
    where = f"{run.workflow_id} {call.tool}({call.label})"
    text = str(ret.content)
    entered = _ENTERED.search(text)
    unmarked = _UNMARKED.search(text)
    if unmarked is not None:  # a tool without an entry mark (`--no-entry-mark`)
        n = int(unmarked.group(1))
        ran = any(e["workflow_id"] == run.workflow_id and e["label"] == call.label
                  and e["attempt"] == n for e in logs.execs)
        what = ("the function ran" if ran else
                "the function had not started: lost before its first line, which only an "
                "entry mark would have proved")
        return (f"{where}: attempt {n} (no entry mark) was lost; {what}", ran, ran)
    if entered is None:
        return f"{where}: `unknown` but no attempt had entered the tool: {text}", False, False
    n = int(entered.group(1))
    execs, effects, attempts = logs.execs, logs.effects, logs.attempts
    mine_all = [a for a in attempts if a["workflow_id"] == run.workflow_id]
    ids = {a["activity_id"] for a in mine_all if a.get("label") == call.label}
    mine = {a["attempt"]: a for a in mine_all if a["activity_id"] in ids}
    later = sorted(k for k in mine if k > n)
    if len(ids) != 1 or n not in mine or not later:
        return (f"{where}: attempt {n} entered the tool, yet no worker logged it or a retry",
                False, False)
    # attempts between them may have been lost before they logged anything
    lost, after = mine[n], mine[later[0]]
    ran = any(e["workflow_id"] == run.workflow_id and e["label"] == call.label
              and e["attempt"] == n for e in execs)
    applied = sum(1 for e in effects if e["label"] == call.label)
    what = (f"the function ran (effects applied: {applied})" if ran else
            "the function had not started: the server had recorded the entry, the worker died "
            "before the tool's first line (no effect; towline cannot tell)")
    window = [k for k in kills if lost["t"] <= k.t <= after["t"]]
    killed = [k for k in window if k.what == "worker" and k.pid == lost["pid"]]
    if killed:
        how = f"its worker {lost['pid']} was SIGKILLed {killed[0].t - lost['t']:.2f} s in"
    elif any(k.what == "server" for k in window):
        how = (f"the server was SIGKILLed while it ran on worker {lost['pid']}, so its result "
               "never reached the server")
    else:
        how = (f"worker {lost['pid']} was not killed, but its heartbeats or result did not "
               "reach the server within the heartbeat timeout")
    return (f"{where}: attempt {n} entered the tool and {how}; {what}; attempt {later[0]} "
            f"({after['t'] - lost['t']:.1f} s later) refused to run it again"), True, ran


def _started(run: RunRecord, call: Call, logs: _Logs) -> bool:
    """Whether the call's tool function started in any attempt (its first line logs it)."""
    return any(e["workflow_id"] == run.workflow_id and e["label"] == call.label
               for e in logs.execs)


def _lost_before_entry(execs: list[dict[str, Any]]) -> int:
    """Attempts of non-idempotent tools lost before the function started, then rerun.

    A call whose function first ran on attempt k had k - 1 attempts lost before that
    (some so early that no worker logged them).
    """
    first: dict[tuple[str, str], int] = {}
    for e in execs:
        if e["tool"] in NON_IDEMPOTENT:
            key = (e["workflow_id"], e["activity_id"])
            first[key] = min(first.get(key, e["attempt"]), e["attempt"])
    return sum(k - 1 for k in first.values())


def analyse(runs: Sequence[RunRecord], folder: Path, kills: Sequence[Kill], seed: int) -> Report:
    """Judge every run against its plan, and every tool effect against the runs' records."""
    report = Report(seed=seed, started=len(runs))
    logs = _Logs(folder)
    execs, effects, attempts = logs.execs, logs.effects, logs.attempts
    report.worker_kills = sum(1 for k in kills if k.what == "worker")
    report.server_kills = sum(1 for k in kills if k.what == "server")
    report.store_outages = sum(1 for k in kills if k.what == "store-down")
    report.runs_stored = sum(1 for r in runs if r.stored)
    report.task_failures = sum(r.task_failures for r in runs)
    report.attempts = len(attempts)
    report.attempts_retried = sum(1 for a in attempts if a["attempt"] > 1)
    report.lost_before_entry = _lost_before_entry(execs)

    per_key = Tally(e["key"] for e in effects)
    per_label = Tally(e["label"] for e in effects)
    tool_of_key = {e["key"]: e["tool"] for e in effects}
    for key, n in per_key.items():
        if n > 1:
            if tool_of_key[key] in NON_IDEMPOTENT:
                report.duplicate_effects += 1
            else:
                report.duplicate_idempotent += 1
            report.failures.append(f"{n} effects of one call: {tool_of_key[key]} key {key}")
    keys_of_label: dict[tuple[str, str], set[str]] = {}
    for e in execs:  # one call, one key: a second key would defeat every idempotent tool
        keys_of_label.setdefault((e["tool"], e["label"]), set()).add(e["key"])
    for (tool, label), keys in keys_of_label.items():
        if len(keys) > 1:
            report.failures.append(f"{tool}({label}) ran under {len(keys)} keys: {sorted(keys)}")
            if tool in NON_IDEMPOTENT:
                report.duplicate_effects += 1
            else:
                report.duplicate_idempotent += 1
    idem_execs = Tally(e["key"] for e in execs if e["tool"] in IDEMPOTENT)
    report.reexecutions_absorbed = sum(n - 1 for n in idem_execs.values())

    for run in runs:
        _judge(run, report, logs, kills, per_label)
    return report


def _judge(run: RunRecord, report: Report, logs: _Logs, kills: Sequence[Kill],
           per_label: Tally[str]) -> None:
    """Count one run by its outcome; check its ledger, output and effects."""
    n = report.per_agent.setdefault(run.agent, dict.fromkeys(
        ("started", "completed", "uncertain", "failed", "stuck", "mismatched"), 0))
    n["started"] += 1
    by_id = {f"c{s}-{i}": c for s, step in enumerate(run.plan, 1) for i, c in enumerate(step)}
    found: list[str] = []
    messages: Sequence[Any] = ()
    if run.status == "COMPLETED" and run.result is not None:
        report.completed += 1
        n["completed"] += 1
        messages = run.result.messages
        found = _check_ledger(run, None, run.result.output)
        if run.snapshots and run.snapshots[-1] != run.result.counters:
            found.append(f"{run.workflow_id}: result counters differ from the history's ledger")
    elif run.status == "FAILED" and run.reason == "UncertainToolEffect" and run.partial:
        messages = run.partial.messages
        steps = sum(1 for m in messages if isinstance(m, ModelResponse))
        found = _check_ledger(run, steps, None)
        why = [_explain(run, ret, by_id[ret.tool_call_id], logs, kills)
               for ret in _returns(messages)
               if ret.status == "unknown" and ret.tool_call_id in by_id]
        for ret in _returns(messages):
            call = by_id.get(ret.tool_call_id)
            if ret.status == "unknown" and call is not None and call.tool not in NON_IDEMPOTENT:
                found.append(f"{run.workflow_id}: {call.tool} is idempotent, yet `unknown`")
        started = [_started(run, by_id[ret.tool_call_id], logs) for ret in _returns(messages)
                   if ret.status == "unknown" and ret.tool_call_id in by_id]
        if why and all(honest for _, honest, _ in why):
            report.uncertain_not_started += sum(1 for _, _, ran in why if not ran)
            if any(started):
                report.uncertain += 1
                n["uncertain"] += 1
                report.explanations += [text for text, _, _ in why]
            else:
                report.false_uncertain += 1
                n["failed"] += 1
                report.failures += [f"false UncertainToolEffect: {text}" for text, _, _ in why]
        else:
            report.failed_other += 1
            n["failed"] += 1
            report.failures += [text for text, _, _ in why] or [
                f"{run.workflow_id}: UncertainToolEffect without an `unknown` call: {run.message}"]
    elif run.status == "RUNNING":
        report.stuck += 1
        n["stuck"] += 1
        report.failures.append(f"{run.workflow_id}: still RUNNING after the drain")
    else:
        report.failed_other += 1
        n["failed"] += 1
        report.failures.append(f"{run.workflow_id}: {run.status} {run.reason}: {run.message}")
    for ret in _returns(messages):
        call = by_id.get(ret.tool_call_id)
        if call is None:
            found.append(f"{run.workflow_id}: a return for unplanned call {ret.tool_call_id}")
            continue
        applied = per_label[call.label]
        if ret.status == "succeeded" and applied != 1:
            report.lost_effects.append(
                f"{run.workflow_id} {call.tool}({call.label}) succeeded with {applied} effects")
        if ret.status in ("not_executed", "denied") and applied:
            report.lost_effects.append(f"{run.workflow_id} {call.tool}({call.label}) recorded "
                                       f"{ret.status}, yet its effect happened {applied}x")
    if found:
        n["mismatched"] += 1
        report.mismatches += found
