"""Durable evals: every case of a dataset is a towline run, scored by pydantic-evals.

A dataset is pydantic-evals' (`Dataset`, `Case`, YAML or JSON: `name`, `inputs`,
`expected_output`, `evaluators`); a case's `inputs` is the prompt, or an object of
`RunInput` fields (`prompt`, `context`, `limits`, `message_history`, `model`).
`run_eval` runs the cases concurrently through `Dataset.evaluate`, each as an `AgentRun`
whose workflow id is derived from the dataset's name, a digest (of the cases' names and
inputs, the agent's name and version, and an optional label) and the case's name. A
run already started under that id is attached to, not repeated: an eval interrupted by a
crash (of the worker, or of the eval itself) is finished by running it again, and
evaluators changed since re-score the same runs. Steps, tokens and cost come from each
run's ledger. The judge evaluator (`Judge`) is a towline run too (`eval_evaluators`).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from pydantic import ValidationError
from pydantic_evals import Case, Dataset
from pydantic_evals.dataset import set_eval_attribute
from pydantic_evals.lifecycle import CaseLifecycle
from pydantic_evals.reporting import ReportCase
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.worker import Worker

from towline.agent import Agent
from towline.client import run_error, start_run, with_towline
from towline.models import Model
from towline.results import Counters, RunInput, RunResult
from towline.runtime import search_attributes as sa
from towline.runtime.fingerprint import agent_version
from towline.runtime.ledger import format_cost
from towline.testing.evaluators import (
    JUDGE_AGENT,
    JUDGE_CONTEXT,
    TOWLINE_EVALUATORS,
    Judge,
    JudgeContext,
)

__all__ = ["EvalError", "CaseRow", "EvalReport", "load_dataset", "run_eval", "case_workflow_id"]

_CASE: contextvars.ContextVar[str] = contextvars.ContextVar("towline_eval_case", default="")


class EvalError(Exception):
    """A dataset that cannot be read or run."""


def load_dataset(path: Path) -> Dataset[Any, Any, Any]:
    """A dataset file (YAML or JSON) with pydantic-evals' and towline's evaluators."""
    try:
        dataset = Dataset[Any, Any, Any].from_file(path, custom_evaluator_types=TOWLINE_EVALUATORS)
    except FileNotFoundError:
        raise EvalError(f"no dataset file {path}") from None
    except Exception as e:  # noqa: BLE001 - pydantic-evals raises several kinds for a bad file
        raise EvalError(f"cannot read the dataset {path}: {' '.join(str(e).split())[:300]}") from None
    for i, case in enumerate(dataset.cases, start=1):
        case.name = case.name or f"case-{i}"
    return dataset


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "x"


def dataset_digest(dataset: Dataset[Any, Any, Any], agent: Agent, label: str = "") -> str:
    """What the runs' ids depend on: the cases' names and inputs, the agent and its version,
    the label (not the evaluators, so a changed evaluator re-scores the same runs)."""
    cases = [[c.name, c.inputs] for c in dataset.cases]
    data = json.dumps([cases, agent.name, agent_version(agent), label], sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:10]


def case_workflow_id(dataset: Dataset[Any, Any, Any], digest: str, case: str) -> str:
    """The workflow id of a case's run."""
    return f"eval-{_slug(dataset.name)}-{digest}-{_slug(case)}"


def run_input(agent: Agent, inputs: Any) -> RunInput:
    """The `RunInput` of a case (`inputs`: the prompt, or an object of RunInput fields)."""
    fields = {"prompt": inputs} if isinstance(inputs, str) else inputs
    if not isinstance(fields, dict):
        raise EvalError(f"a case's inputs are a prompt or an object, not {type(inputs).__name__}")
    try:
        return RunInput.model_validate({**cast(dict[str, Any], fields), "agent": agent.name})
    except ValidationError as e:
        raise EvalError(f"a case's inputs are not run input: {e.errors()[0]['msg']}") from None


@dataclass(frozen=True)
class CaseRow:
    """One case of an eval: its score, its run's ledger, its run."""

    case: str
    score: float
    """The mean of its assertions (1 or 0) and scores (clipped to 0..1); 0 for a failed run."""
    passed: bool
    """Every assertion held (and the run succeeded)."""
    workflow_id: str
    counters: Counters | None
    ui_url: str | None
    failure: str | None = None
    """Why the run (or an evaluator) failed."""
    results: Mapping[str, Any] | None = None
    """Each evaluator's value."""
    output: Any = None

    @property
    def tokens(self) -> int:
        """Input plus output tokens of the run."""
        return self.counters.total_tokens if self.counters else 0


@dataclass(frozen=True)
class EvalReport:
    """The rows of an eval and their totals."""

    dataset: str
    rows: list[CaseRow]

    @property
    def all_passed(self) -> bool:
        """Every case passed."""
        return all(r.passed for r in self.rows)

    @property
    def mean_score(self) -> float:
        """The mean score of the cases."""
        return sum(r.score for r in self.rows) / len(self.rows) if self.rows else 0.0

    def _cost(self) -> tuple[int | None, int]:
        known = [r.counters.cost_micros for r in self.rows if r.counters and r.counters.cost_micros is not None]
        unpriced = sum(r.counters.unpriced_requests for r in self.rows if r.counters)
        return (sum(known) if known else None), unpriced

    def text(self) -> str:
        """The table `towline eval` prints, with the totals."""
        head = ("CASE", "SCORE", "STEPS", "TOKENS", "COST", "RUN")
        rows: list[tuple[str, ...]] = []
        for r in self.rows:
            c = r.counters
            cost = format_cost(c.cost_micros, c.unpriced_requests) if c and c.cost_micros is not None else "-"
            mark = "" if r.passed else "  FAILED" + (f": {r.failure}" if r.failure else "")
            rows.append((r.case, f"{r.score:.2f}", str(c.run_step if c else 0), str(r.tokens),
                         cost, (r.ui_url or r.workflow_id) + mark))
        widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head) - 1)]
        lines = ["  ".join(v.ljust(w) for v, w in zip(x, widths, strict=False)) + "  " + x[-1]
                 for x in [head, *rows]]
        cost, unpriced = self._cost()
        passed = sum(r.passed for r in self.rows)
        lines.append(
            f"{len(self.rows)} cases: {passed} passed, mean score {self.mean_score:.2f}, "
            f"{sum(r.counters.run_step for r in self.rows if r.counters)} steps, "
            f"{sum(r.tokens for r in self.rows)} tokens, cost "
            + (format_cost(cost, unpriced) if cost is not None else "-"))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The JSON form of `towline eval --json`."""
        cost, unpriced = self._cost()
        return {
            "dataset": self.dataset,
            "cases": [{
                "case": r.case, "score": r.score, "passed": r.passed, "workflow_id": r.workflow_id,
                "steps": r.counters.run_step if r.counters else 0, "tokens": r.tokens,
                "cost_micros": r.counters.cost_micros if r.counters else None,
                "ui_url": r.ui_url, "failure": r.failure, "results": dict(r.results or {}),
                "output": r.output,
            } for r in self.rows],
            "totals": {"cases": len(self.rows), "passed": sum(r.passed for r in self.rows),
                       "mean_score": self.mean_score,
                       "steps": sum(r.counters.run_step for r in self.rows if r.counters),
                       "tokens": sum(r.tokens for r in self.rows), "cost_micros": cost,
                       "unpriced_requests": unpriced},
        }


class _Lifecycle(CaseLifecycle[Any, Any, Any]):
    async def setup(self) -> None:
        _CASE.set(self.case.name or "")


async def _attach(client: Client, agent: Agent, inp: RunInput, workflow_id: str,
                  task_queue: str) -> WorkflowHandle[Any, RunResult]:
    """Start the run, or attach to the one already started under `workflow_id`."""
    try:
        return await start_run(client, agent, inp.prompt, task_queue=task_queue, id=workflow_id,
                               limits=inp.limits, message_history=inp.message_history,
                               context=inp.context, model=inp.model,
                               id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE)
    except WorkflowAlreadyStartedError:
        handle = client.get_workflow_handle(workflow_id, result_type=RunResult)
        await _check_attached(client, handle, agent, inp, task_queue)
        return handle


def _input_digest(inp: RunInput) -> str:
    """What a case's run was asked: its input's fields an eval sets, as a digest."""
    fields = inp.model_dump(mode="json", include={
        "agent", "prompt", "message_history", "limits", "context", "model", "session"})
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


async def _check_attached(client: Client, handle: WorkflowHandle[Any, RunResult], agent: Agent,
                          inp: RunInput, task_queue: str) -> None:
    """Refuse to attach to a run under a case's (predictable) id that this eval did not start:
    anyone who can start a workflow could start an impostor agent's run there and forge the
    case's score, output and ledger. Its type, agent, version, task queue and input must be
    what this eval would have started."""
    desc = await handle.describe()
    found = desc.typed_search_attributes
    wrong: list[str] = []
    if desc.workflow_type != "AgentRun":
        wrong.append(f"it is a {desc.workflow_type}")
    if desc.task_queue != task_queue:
        wrong.append(f"its task queue is {desc.task_queue!r}")
    if found.get(sa.AGENT_VERSION) != agent_version(agent):
        wrong.append(f"its agent version is {found.get(sa.AGENT_VERSION)!r}")
    given: RunInput | None = None
    async for event in handle.fetch_history_events():
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        with contextlib.suppress(Exception):  # an input that does not decode is not ours
            [given] = await client.data_converter.decode(payloads, [RunInput])
        break
    if given is None or given.agent != agent.name:
        wrong.append(f"its agent is {given.agent if given else None!r}")
    elif _input_digest(given) != _input_digest(inp):
        wrong.append("its input is not the case's")
    if wrong:
        raise EvalError(f"workflow {handle.id!r} holds a run this eval did not start "
                        f"({'; '.join(wrong)}): its score would not be this agent's. Terminate "
                        "it, or run the eval under another --label")


def _score(case: ReportCase[Any, Any, Any]) -> tuple[float, bool, dict[str, Any]]:
    values: list[float] = []
    results: dict[str, Any] = {}
    passed = True
    for name, a in case.assertions.items():
        values.append(1.0 if a.value else 0.0)
        passed = passed and bool(a.value)
        results[name] = a.value
    for name, s in case.scores.items():
        values.append(min(1.0, max(0.0, float(s.value))))
        results[name] = s.value
    for name, label in case.labels.items():
        results[name] = label.value
    for failure in case.evaluator_failures:
        values.append(0.0)
        passed = False
        results[failure.name] = f"error: {failure.error_message}"
    return (sum(values) / len(values) if values else 1.0), passed, results


async def run_eval(
    dataset: Dataset[Any, Any, Any] | Path | str,
    agent: Agent,
    *,
    client: Client,
    task_queue: str = "towline",
    concurrency: int = 8,
    worker: bool = True,
    label: str = "",
    judge_models: Mapping[str, Model] | None = None,
    ui_base: str | None = None,
) -> EvalReport:
    """Run every case of `dataset` (or a dataset file) as a run of `agent`, and score it.

    `worker`: run a worker for the agent in this process (False: workers elsewhere serve
    `task_queue`). `concurrency` cases run at once. `label` is part of every run's id:
    another label runs every case again. `judge_models` registers models a `Judge` may
    name (provider strings need none); judges run on an in-process worker.
    """
    if not isinstance(dataset, Dataset):
        dataset = load_dataset(Path(dataset))
    cases: Sequence[Case[Any, Any, Any]] = dataset.cases
    if concurrency < 1:
        raise EvalError("concurrency must be at least 1")
    digest = dataset_digest(dataset, agent, label)
    inputs = {c.name or "": run_input(agent, c.inputs) for c in cases}
    tclient = with_towline(client, [agent])
    judged = any(isinstance(e, Judge) for e in [*dataset.evaluators, *(e for c in cases for e in c.evaluators)])
    facts: dict[str, tuple[str, Counters | None, str | None]] = {}

    async def task(_inputs: Any) -> Any:
        name = _CASE.get()
        workflow_id = case_workflow_id(dataset, digest, name)
        set_eval_attribute("workflow_id", workflow_id)
        handle = await _attach(tclient, agent, inputs[name], workflow_id, task_queue)
        try:
            result = await handle.result()
        except WorkflowFailureError as e:
            err = run_error(e)
            counters = err.partial.counters if err.partial else None
            facts[name] = (workflow_id, counters, f"{err.reason}: {' '.join(str(err).split())[:160]}")
            raise
        facts[name] = (workflow_id, result.counters, None)
        return result.output

    async def judge(workflow_id: str, model: str, prompt: str) -> str:
        handle = await _attach(judge_client, JUDGE_AGENT, RunInput(agent=JUDGE_AGENT.name, prompt=prompt,
                                                                   model=model), workflow_id, judge_queue)
        return str((await handle.result()).output)

    judge_queue = f"{task_queue}-judge"
    judge_client = with_towline(client, [JUDGE_AGENT], judge_models, allowed_models=["*"])
    async with AsyncExitStack() as stack:
        if worker:
            await stack.enter_async_context(Worker(tclient, task_queue=task_queue))
        if judged:
            await stack.enter_async_context(Worker(judge_client, task_queue=judge_queue))
        token = JUDGE_CONTEXT.set(JudgeContext(start=judge))
        try:
            report = await dataset.evaluate(task, name=dataset.name, max_concurrency=concurrency,
                                            progress=False, lifecycle=_Lifecycle)
        finally:
            JUDGE_CONTEXT.reset(token)
    rows: list[CaseRow] = []
    done = {c.name: c for c in report.cases}
    for case in cases:
        name = case.name or ""
        workflow_id, counters, failure = facts.get(name, (case_workflow_id(dataset, digest, name), None, None))
        url = (f"{ui_base}/namespaces/{quote(client.namespace, safe='')}/workflows/"
               f"{quote(workflow_id, safe='')}") if ui_base else None
        found = done.get(name)
        if found is None:
            failed = next((f for f in report.failures if f.name == name), None)
            reason = failure or (failed.error_message if failed else "not run")
            rows.append(CaseRow(name, 0.0, False, workflow_id, counters, url, reason))
            continue
        score, passed, results = _score(found)
        rows.append(CaseRow(name, score, passed, workflow_id, counters, url, None, results, found.output))
    return EvalReport(dataset.name, rows)
