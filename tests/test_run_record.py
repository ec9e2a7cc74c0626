"""The one reader of a run's record (`towline.replay.run_history`), in both of its modes for a
message the history holds only by reference: a placeholder (`RecordedRequest.messages`, what
rerun compares as "any message") or unknown with the reason (`RecordedRequest.resolved` and
`problem`, what fork needs). Fork, reset, rerun and replay have their own tests; `towline show`
of a run no worker can answer for reads its conversation here too."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import cli_env, towline, until_state
from temporalio.client import Client
from temporalio.converter import DataConverter

from towline import Agent, tool
from towline.client import start_run
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from towline.models import FunctionModel, ModelInfo
from towline.replay import load_history
from towline.replay.run_history import read_histories, read_run_history
from towline.runtime.request_chain import INLINE_LIMIT
from towline.runtime.request_rebuild import UNKNOWN_PREFIX, UNRESOLVED
from towline.testing import towline_worker

HISTORIES = Path(__file__).parent / "histories"
BIG = "row " * (INLINE_LIMIT // 2)
"""A tool result over `INLINE_LIMIT`: the next request names it by its content reference."""


@tool
def export() -> str:
    """The whole table."""
    return BIG


def _script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step == 1:
        return ModelResponse(parts=[ToolCallPart(tool_name="export", args={}, tool_call_id="e1")])
    return "exported"


exporter = Agent(name="record-exporter", model=FunctionModel(_script), tools=[export])


async def test_a_message_known_only_by_reference_is_a_placeholder_or_unknown_with_its_reason(
    client: Client, target: str, namespace: str
) -> None:
    async with towline_worker(client, [exporter]) as (tc, queue):
        handle = await start_run(tc, exporter, "export it", task_queue=queue, session=True)
        await until_state(handle, "waiting")  # answered; the session waits for a message
        run = await read_run_history(tc, handle.id)
    step2 = run.request(2)
    assert step2 is not None and run.request(1) is not None
    # placeholder mode: every message in place, the big tool result as its reference
    placeholders = [m for m in step2.messages if isinstance(m, str)]
    assert len(placeholders) == 1 and len(step2.messages) == 3
    assert isinstance(step2.messages[0], ModelRequest) and "export it" in str(step2.messages[0].parts)
    assert isinstance(step2.messages[1], ModelResponse)
    # unknown mode: no messages at all, and why
    assert step2.resolved is None and step2.problem == UNRESOLVED
    first = run.request(1)
    assert first is not None and first.resolved == first.messages and first.problem is None
    assert [c.tool for c in run.tool_calls] == ["export"] and run.tool_calls[0].outcome == "succeeded"

    # the session waits for its next message with no worker left: `towline show` reads the
    # conversation from the history, the placeholder left out and said so
    await handle.terminate("the test is over")
    shown = await towline("show", handle.id, env=cli_env(target, namespace))
    assert shown.code == 0, shown
    assert "user       export it\n  model      calls export() [e1]\n  model      exported" in shown.out
    assert ("(the conversation as the run's history records it; 1 message(s) it names only by "
            "reference left out)") in shown.out


async def test_a_continued_execution_read_alone_lacks_its_earlier_messages() -> None:
    names = ["history-continue-as-new.json", "history-continue-as-new.run2.json",
             "history-continue-as-new.run3.json"]
    histories = [load_history(HISTORIES / name) for name in names]
    whole = await read_histories(histories, DataConverter.default)
    alone = await read_histories(histories[1:2], DataConverter.default)

    assert [r.step for r in whole.requests] == [1, 2, 3, 4, 5]
    assert all(r.resolved is not None for r in whole.requests)
    read_alone = alone.requests[0]
    assert read_alone.step == 3 and read_alone.missing_prefix
    # placeholder mode: the tail the execution holds; unknown mode: none, and why
    full = whole.request(3)
    assert full is not None and full.resolved is not None and len(full.resolved) == 5
    assert read_alone.messages == full.resolved[-len(read_alone.messages):]
    assert 0 < len(read_alone.messages) < 5
    assert read_alone.resolved is None and read_alone.problem == UNKNOWN_PREFIX
    returns = [p for m in full.resolved if isinstance(m, ModelRequest) for p in m.parts
               if isinstance(p, ToolReturnPart)]
    assert [p.tool_name for p in returns] == ["tick", "tick"]
    assert whole.outcome.status == "succeeded" and alone.outcome.status == "running"
    assert whole.counters is not None and whole.counters.run_step == 5
