"""`towline eval` never scores an impostor's run under a case's predictable workflow id.

A dataset's `JsonSchema` fetches no `$ref` to another document (an URL, a file) unless asked.
Anyone who can start a workflow can start a run of another agent under
`eval-<dataset>-<digest>-<case>` before the eval does; the eval attached to it and reported
its output, score and ledger as the case's. Now it checks the run's agent, version, task
queue and input first, and fails the case naming why (real runs on the dev server).
"""

from __future__ import annotations

import http.server
import threading
import uuid
from pathlib import Path
from typing import ClassVar

from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import EqualsExpected
from temporalio.client import Client

from towline import Agent
from towline.client import start_run
from towline.models import TestModel
from towline.testing import towline_worker
from towline.testing.evals import case_workflow_id, dataset_digest, run_eval
from towline.testing.evaluators import JsonSchema

genuine = Agent(name="audit-eval-genuine", model=TestModel(custom_output_text="5"))
impostor = Agent(name="audit-eval-impostor", model=TestModel(custom_output_text="4"))


async def test_an_impostor_run_under_a_case_id_is_not_scored(client: Client) -> None:
    dataset = Dataset[str, str, None](
        name=f"audit-{uuid.uuid4().hex[:6]}",
        cases=[Case(name="sum", inputs="2+2?", expected_output="4")],
        evaluators=[EqualsExpected()])
    queue = f"eval-{uuid.uuid4().hex[:8]}"
    forged = case_workflow_id(dataset, dataset_digest(dataset, genuine), "sum")
    async with towline_worker(client, [impostor], task_queue=queue) as (tclient, _):
        handle = await start_run(tclient, impostor, "2+2?", id=forged, task_queue=queue)
        assert (await handle.result()).output == "4"
    report = await run_eval(dataset, genuine, client=client, task_queue=queue)
    [row] = report.rows
    assert row.workflow_id == forged
    assert not row.passed and row.score == 0, row
    assert row.failure is not None and "did not start" in row.failure, row
    assert "audit-eval-impostor" in row.failure, row


class _Counting(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Counting.hits.append(self.path)
        body = b'{"type": "integer"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


async def test_a_dataset_schema_fetches_no_remote_ref(client: Client, tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "integer"}')
    try:
        remote = f"http://127.0.0.1:{server.server_address[1]}/schema.json"
        dataset = Dataset[str, str, None](
            name=f"audit-ref-{uuid.uuid4().hex[:6]}",
            cases=[Case(name="url", inputs="2+3?", evaluators=[JsonSchema({"$ref": remote})]),
                   Case(name="file", inputs="2+3?",
                        evaluators=[JsonSchema({"$ref": secret.as_uri()})])])
        report = await run_eval(dataset, genuine, client=client,
                                task_queue=f"eval-{uuid.uuid4().hex[:8]}")
    finally:
        server.shutdown()
    assert _Counting.hits == []  # nothing fetched
    for row in report.rows:  # the output, 5, is an integer: only an unfetched schema fails it
        assert not row.passed and row.results == {"JsonSchema": False}, row
