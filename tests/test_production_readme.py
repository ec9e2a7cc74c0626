"""README "Running in production": every command run as written, against real servers.

Tracing commands export to an OTLP/HTTP receiver the test runs on the README's port;
metrics are scraped from the worker's Prometheus endpoint; encrypted runs are read back
through `towline show --encrypt`, a codec server and the `temporal` CLI. Tests that bind
the README's fixed ports hold a machine-wide lock, so concurrent suites never collide.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from google.protobuf import json_format
from obs_helpers import (
    OtlpReceiver,
    fixed_ports,
    http,
    metric_value,
    trace_of,
    tree_lines,
    wait_for,
)
from readme import cli_env, read_until, readme, readme_process, stop_process
from temporalio.api.common.v1 import Payloads
from temporalio.client import Client

from towline.devserver import temporal_binary
from towline.encryption.codec import ENCODING

READY = "Ctrl-C stops"


@contextlib.asynccontextmanager
async def serving(proc: asyncio.subprocess.Process) -> AsyncIterator[str]:
    """A long-running README command until the block ends; yields what it said when ready."""
    try:
        yield await read_until(proc.stderr, READY)
    finally:
        stop_process(proc, signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            stop_process(proc, signal.SIGKILL)
            await proc.wait()


async def command(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """A command that is not the README's (e.g. the same one without a flag)."""
    proc = await asyncio.create_subprocess_exec(
        *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def test_tracing_commands(target: str) -> None:
    env = cli_env(target)
    with fixed_ports(), OtlpReceiver(port=4318) as receiver:
        async with serving(await readme_process(
                "towline worker --agent examples.calculator:agent --otel-endpoint http://localhost:4318",
                env=env)) as said:
            assert "http://localhost:4318  (OTLP/HTTP traces)" in said
            done = await readme(
                'towline run examples.calculator:agent "What is 2 plus 3 and 6 times 7?" '
                "--no-worker --otel-endpoint http://localhost:4318", env=env)
            assert done.code == 0, done.err
            assert done.out.strip() == "2 plus 3 is 5; 6 times 7 is 42."
        # the worker flushed its spans when it stopped; the run's client sent its own
        spans = wait_for(lambda: [s for s in receiver.snapshot() if s.name == "RunWorkflow:AgentRun"],
                         "the workflow span")
        trace = trace_of([s for s in receiver.snapshot() if s.trace_id == spans[-1].trace_id],
                         "StartWorkflow:AgentRun")
    assert tree_lines(trace) == [
        "StartWorkflow:AgentRun",
        "  RunWorkflow:AgentRun",
        "    StartActivity:towline.search_attributes",
        "      RunActivity:towline.search_attributes",
        "    invoke_agent calculator",
        "      turn 1",
        "        StartActivity:towline.model_request",
        "          RunActivity:towline.model_request",
        "            chat calculator-offline",
        "        StartActivity:towline.tool.add",
        "          RunActivity:towline.tool.add",
        "            execute_tool add",
        "        StartActivity:towline.tool.multiply",
        "          RunActivity:towline.tool.multiply",
        "            execute_tool multiply",
        "      turn 2",
        "        StartActivity:towline.model_request",
        "          RunActivity:towline.model_request",
        "            chat calculator-offline",
    ], "\n".join(tree_lines(trace))
    chat = next(s for s in trace if s.name == "chat calculator-offline")
    assert chat.attributes["gen_ai.system"] == "towline.function"
    assert chat.attributes["gen_ai.request.model"] == "calculator-offline"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert "gen_ai.input.messages" not in chat.attributes  # content is opt-in


async def test_metrics_commands(target: str) -> None:
    env = cli_env(target)
    with fixed_ports():
        async with serving(await readme_process(
                "towline worker --agent examples.calculator:agent --metrics-port 9464",
                env=env)) as said:
            assert "http://127.0.0.1:9464/metrics  (Prometheus)" in said
            done = await readme(
                'towline run examples.calculator:agent "What is 6 times 7?" --no-worker', env=env)
            assert done.code == 0 and done.out.strip() == "6 times 7 is 42.", done.err
            scraped = await readme("curl -s http://127.0.0.1:9464/metrics", env=env)
    assert scraped.code == 0
    text = scraped.out
    assert metric_value(text, "towline_runs_started", agent="calculator") == 1
    assert metric_value(text, "towline_runs_succeeded", agent="calculator") == 1
    assert metric_value(text, "towline_tool_calls", agent="calculator", tool="multiply",
                        status="succeeded") == 1
    assert metric_value(text, "towline_model_requests", agent="calculator",
                        model="calculator-offline", status="ok") == 2
    assert (metric_value(text, "towline_model_tokens", agent="calculator", type="input") or 0) > 0
    assert (metric_value(text, "temporal_workflow_completed", workflow_type="AgentRun") or 0) >= 1
    assert metric_value(text, "temporal_activity_execution_latency_count",
                        activity_type="towline.tool.multiply") == 1


async def test_encryption_commands(target: str, client: Client) -> None:
    key = await readme("towline codec-server --generate-key", env=cli_env())
    assert key.code == 0 and len(key.out.strip()) == 44  # 32 bytes, base64
    env = cli_env(target, extra={"TOWLINE_ENCRYPTION_KEY": key.out.strip()})
    async with serving(await readme_process(
            "towline worker --agent examples.calculator:agent --encrypt", env=env)) as said:
        assert "payloads encrypted with key id k-" in said
        done = await readme(
            'towline run examples.calculator:agent "What is 6 times 7?" --no-worker --encrypt '
            "--id calc-secret", env=env)
        assert done.code == 0 and done.out.strip() == "6 times 7 is 42.", done.err
    shown = await readme("towline show calc-secret --encrypt", env=env)
    assert shown.code == 0, shown.err
    assert "user       What is 6 times 7?" in shown.out
    assert "tool_calls           1" in shown.out
    # without --encrypt: a clear one-line error, not ciphertext
    code, _, err = await command(sys.executable, "-m", "towline.cli", "show", "calc-secret",
                                 env=env)
    assert code == 1 and err.strip() == ("towline: error: run 'calc-secret' is encrypted: pass "
                                         "--encrypt, with the key in TOWLINE_ENCRYPTION_KEY")
    # at rest, on the server: ciphertext only
    history = await client.get_workflow_handle("calc-secret").fetch_history()
    blob = b"".join(e.SerializeToString() for e in history.events)
    assert b"6 times 7" not in blob and ENCODING in blob
    with fixed_ports():
        async with serving(await readme_process(
                "towline codec-server --port 8234 --ui-origin http://localhost:8233",
                env=env)) as said:
            assert "auth off" in said
            shown = await readme(
                "temporal workflow show --workflow-id calc-secret "
                "--codec-endpoint http://localhost:8234", env=env)
    assert shown.code == 0, shown.err
    result = re.search(r"Result\s+(\{.*\})", shown.out)
    assert result is not None, shown.out
    assert '"content":"What is 6 times 7?"' in result.group(1)
    code, raw, _ = await command(str(temporal_binary()), "workflow", "show", "--workflow-id",
                                 "calc-secret", env=env)  # the same, without the codec server
    assert code == 0 and "What is 6 times 7?" not in raw


async def test_dev_serves_a_codec_server_to_its_ui(tmp_path: Path) -> None:
    key = await readme("towline codec-server --generate-key", env=cli_env())
    env = cli_env(extra={"TOWLINE_ENCRYPTION_KEY": key.out.strip()})
    with fixed_ports():
        async with serving(await readme_process(
            "towline dev --agent examples.calculator:agent --encrypt", env=env,
            cwd=tmp_path)) as said:
            address = re.search(r"^Temporal server\s+(\S+)\s+\(namespace", said, re.MULTILINE)
            ui = re.search(r"^Temporal UI\s+(http\S+)", said, re.MULTILINE)
            codec = re.search(r"^Codec server\s+(http\S+)", said, re.MULTILINE)
            assert address and ui and codec, said
            run_env = cli_env(address.group(1), extra={"TOWLINE_ENCRYPTION_KEY": key.out.strip()})
            done = await readme(
                'towline run examples.calculator:agent "What is 6 times 7?" --no-worker --encrypt '
                "--id calc-secret", env=run_env, cwd=tmp_path)
            assert done.code == 0 and done.out.strip() == "6 times 7 is 42.", done.err
            # the UI is configured with the codec endpoint ...
            status, _, settings = http(f"{ui.group(1)}/api/v1/settings")
            assert status == 200
            assert json.loads(settings)["Codec"]["Endpoint"] == codec.group(1)
            # ... which answers the UI's origin (CORS) with the decoded memo
            client = await Client.connect(address.group(1))
            desc = await client.get_workflow_handle("calc-secret").describe()
            memo = desc.raw_description.workflow_execution_info.memo.fields["towline.counters"]
            assert memo.metadata["encoding"] == ENCODING
            body = json_format.MessageToJson(Payloads(payloads=[memo])).encode()
            status, headers, answer = http(f"{codec.group(1)}/decode", body, {
                "Content-Type": "application/json", "Origin": ui.group(1), "X-Namespace": "default"})
            assert status == 200 and headers["Access-Control-Allow-Origin"] == ui.group(1)
            decoded = Payloads()
            json_format.Parse(answer.decode(), decoded)
            assert decoded.payloads[0].metadata["messageType"] == b"towline.v1.RunCounters"
            assert json.loads(decoded.payloads[0].data)["toolCalls"] == 1
