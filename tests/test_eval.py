"""`towline eval` / `towline.testing.evals.run_eval`: a dataset's cases as durable, scored runs.

The docs' dataset runs through the CLI exactly as written (twice: the second attaches to
the runs of the first); 20 cases survive their worker process being SIGKILLed mid-way,
each scored exactly once (one workflow execution per case); the evaluators (JSON schema,
Python function, an LLM judge that is itself a run) score in Python.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import TESTS_ON_PATH, towline_process
from durable_agents import WorkerProcess
from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import EqualsExpected
from readme import cli_env, readme
from rerun_agents import eval_agent
from temporalio.client import Client

from towline import Limits
from towline.messages import Message, ModelRequest, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.testing.evals import run_eval
from towline.testing.evaluators import JsonSchema, Judge, Python, verdict

pytestmark = pytest.mark.timeout(120)


async def _executions(client: Client, prefix: str) -> list[str]:
    return [w.id async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{prefix}'")]


async def _closed(client: Client, prefix: str) -> int:
    query = f"WorkflowId STARTS_WITH '{prefix}' AND ExecutionStatus = 'Completed'"
    return (await client.count_workflows(query)).count


def test_a_judge_verdict_is_read_from_its_first_line() -> None:
    assert verdict("PASS\nit says 42").value is True
    assert verdict("FAIL: wrong number").value is False
    assert verdict("maybe").value is False and "neither PASS nor FAIL" in (verdict("maybe").reason or "")


async def test_docs_eval_commands_attach_to_the_runs_already_done(client: Client, target: str) -> None:
    env = cli_env(target)
    first = await readme("towline eval examples/evals/calculator.yaml --agent examples.calculator:agent",
                         env=env, timeout=120)
    assert first.code == 0, first
    assert "3 cases: 3 passed, mean score 1.00, 6 steps, 90 tokens" in first.out
    assert "/workflows/eval-calculator-" in first.out  # the UI link of each case's run
    again = await readme(
        "towline eval examples/evals/calculator.yaml --agent examples.calculator:agent --json",
        env=env, timeout=120)
    report = json.loads(again.out)
    assert again.code == 0 and report["totals"]["passed"] == 3
    ids = sorted(c["workflow_id"] for c in report["cases"])
    assert sorted(await _executions(client, "eval-calculator-")) == ids  # one execution each


async def test_twenty_cases_survive_a_worker_sigkill(client: Client, target: str, namespace: str,
                                                     tmp_path: Path, task_queue: str) -> None:
    cases = [{"name": f"n{n}", "inputs": f"square {n}?", "expected_output": f"{n} squared is {n * n}",
              "evaluators": ["EqualsExpected"]} for n in range(20)]
    name = f"squares-{task_queue[-8:]}"
    dataset = tmp_path / "squares.json"
    dataset.write_text(json.dumps({"name": name, "cases": cases}))
    workers = [WorkerProcess(target, task_queue, tmp_path, namespace, agents="rerun_agents:EVAL_AGENTS")]
    workers[0].start()
    env = cli_env(target, namespace, extra={"PYTHONPATH": TESTS_ON_PATH})
    proc = await towline_process("eval", str(dataset), "--agent", "rerun_agents:eval_agent",
                                 "--no-worker", "--task-queue", task_queue, "--concurrency", "5",
                                 "--json", env=env)
    try:
        prefix = f"eval-{name}-"
        async with asyncio.timeout(60):
            while await _closed(client, prefix) < 3:
                await asyncio.sleep(0.2)
        workers[0].kill()  # mid-eval: some cases done, some under way, most not started
        done_before = await _closed(client, prefix)
        assert done_before < 20
        workers.append(WorkerProcess(target, task_queue, tmp_path, namespace,
                                     agents="rerun_agents:EVAL_AGENTS"))
        workers[1].start()
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        for w in workers:
            w.kill()
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0, (out, err, workers[0].log())
    report: dict[str, Any] = json.loads(out)
    assert report["totals"] == {**report["totals"], "cases": 20, "passed": 20, "steps": 40}
    assert all(c["score"] == 1.0 for c in report["cases"])
    executions = await _executions(client, prefix)
    assert len(executions) == 20 and len(set(executions)) == 20  # no case ran twice


def _judge(messages: list[Message], info: ModelInfo) -> str:
    prompt = next(str(p.content) for m in messages if isinstance(m, ModelRequest)
                  for p in m.parts if isinstance(p, UserPart))
    return "PASS\nthe answer is right" if 'Answer: "3 squared is 9"' in prompt else "FAIL\nnot 9"


async def test_evaluators_and_a_judge_that_is_a_run(client: Client, task_queue: str) -> None:
    judged = Judge(rubric="The answer says 3 squared is 9.", model="judge")
    dataset = Dataset[Any, Any, Any](name=f"judged-{task_queue[-8:]}", cases=[
        Case(name="three", inputs="square 3?", expected_output="3 squared is 9",
             evaluators=[judged, Python("rerun_agents:one_word_shorter")]),
        Case(name="four", inputs="square 4?", evaluators=[judged]),
        Case(name="broken", inputs={"prompt": "square 5?", "limits": Limits(max_steps=1).model_dump()}),
    ], evaluators=[EqualsExpected(), JsonSchema({"type": "string", "pattern": "squared"})])
    models = {"judge": FunctionModel(_judge)}
    report = await run_eval(dataset, eval_agent, client=client, task_queue=task_queue,
                            judge_models=models, ui_base="http://ui")
    rows = {r.case: r for r in report.rows}
    assert rows["three"].passed and rows["three"].score == 1.0, rows["three"]
    assert rows["four"].results is not None and rows["four"].results["Judge"] is False
    assert rows["four"].score == 0.5  # the schema held (no expected output: EqualsExpected skips)
    assert not rows["broken"].passed and rows["broken"].score == 0.0
    assert rows["broken"].failure is not None and rows["broken"].failure.startswith("MaxStepsExceeded")
    assert rows["three"].ui_url == f"http://ui/namespaces/default/workflows/{rows['three'].workflow_id}"
    assert not report.all_passed and "3 cases: 1 passed" in report.text()
    judges = await _executions(client, f"{rows['three'].workflow_id}-judge-")
    assert len(judges) == 1
    again = await run_eval(dataset, eval_agent, client=client, task_queue=task_queue, judge_models=models)
    assert [r.score for r in again.rows] == [r.score for r in report.rows]
    assert len(await _executions(client, f"eval-{dataset.name}-")) == 3 + 2  # 3 cases, 2 judges


async def test_without_a_server_eval_embeds_one_and_a_second_run_attaches(tmp_path: Path) -> None:
    """Like `towline run`: nothing answers at the local address, so the command starts the
    embedded server on its state folder; the runs stay there, and running it again scores
    the same runs instead of starting new ones."""
    from ports import free_port

    address = f"127.0.0.1:{free_port()}"
    args = ("eval", "examples/evals/calculator.yaml", "--agent", "examples.calculator:agent",
            "--address", address, "--state-dir", str(tmp_path / "state"),
            "--ui-port", str(free_port()), "--json")
    reports = []
    for _ in range(2):
        proc = await towline_process(*args, env=cli_env())
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        assert "starting an embedded one" in err.decode()
        reports.append(json.loads(out))
    first, second = ([(c["case"], c["workflow_id"], c["score"]) for c in r["cases"]]
                     for r in reports)
    assert first == second and len(first) == 3
    assert all(score == 1.0 for _, _, score in first)
