"""Capabilities see and steer MCP tools like any tool: ToolSelector, ToolApproval, Subagent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import effects, executed_tools, stdio_server, stop_pids, wait_for
from temporalio.client import Client

from scripts import Script, call, calls, returns, text
from towline import Agent, ModelResponse
from towline.capabilities import Subagent, ToolApproval, ToolSelector
from towline.client import run, start_run
from towline.messages import Message, UserPart
from towline.models import ModelInfo
from towline.testing import towline_worker
from towline.workflows import ApprovalDecision

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """The stdio servers' counting directory; any server left running is stopped."""
    folder = tmp_path / "server"
    folder.mkdir()
    yield folder
    stop_pids(folder)


def _statuses(messages: list[Message]) -> dict[str, str]:
    return {r.tool_name: r.status for r in returns(messages)}


async def test_tool_selector_selects_among_listed_mcp_tools(client: Client, root: Path) -> None:
    selector = Script([text('["t_add"]')] * 2, name="mcp-selector")
    script = Script([calls(call("t_add", {"a": 4, "b": 5}), call("t_echo", {"text": "x"})), text("9")])
    agent = Agent(name="mcp-selected", model=script.model,
                  mcp_servers=[stdio_server("t", root, tools=["add", "echo", "record"])],
                  capabilities=[ToolSelector(model=selector.name, max_tools=1)])
    async with towline_worker(client, [agent], models={selector.name: selector.model}) as (tc, queue):
        result = await run(tc, agent, "add four and five", task_queue=queue)

    # the selector saw the listed tools, named and described like any tool
    prompt = "".join(p.text for m in selector.seen[0].messages for p in m.parts
                     if isinstance(p, UserPart))
    assert "- t_add: Add two integers." in prompt and "- t_record: Record" in prompt
    assert [d.name for d in script.seen[0].info.tools] == ["t_add"]
    # a listed tool that was not selected is not executed
    assert _statuses(result.messages) == {"t_add": "succeeded", "t_echo": "denied"}
    assert executed_tools(root) == ["add"]  # `echo` never ran


async def test_tool_approval_gates_an_mcp_tool(client: Client, root: Path) -> None:
    script = Script([calls(call("t_record", {"label": "approved"}, call_id="a1"),
                           call("t_record", {"label": "rejected"}, call_id="r1")), text("done")])
    agent = Agent(name="mcp-approval", model=script.model, mcp_servers=[stdio_server("t", root)],
                  capabilities=[ToolApproval(tools=["t_record"])])
    async with towline_worker(client, [agent]) as (tc, queue):
        handle = await start_run(tc, agent, "record two things", task_queue=queue)

        async def both_pending() -> dict[str, Any] | None:
            state: dict[str, Any] = await handle.query("state")
            waiting = state.get("pending_approvals") or {}
            return waiting if len(waiting) == 2 else None

        waiting = await wait_for(both_pending, timeout=60)
        assert waiting["a1"]["tool_name"] == "t_record" and waiting["a1"]["args"] == {"label": "approved"}
        assert effects(root) == []  # nothing reached the server while waiting
        await handle.execute_update("approve", ApprovalDecision(call_id="a1"))
        await handle.execute_update("reject", ApprovalDecision(call_id="r1", reason="no"))
        result = await handle.result()

    by_id = {r.tool_call_id: (r.status, r.content) for r in returns(result.messages)}
    assert by_id["a1"] == ("succeeded", {"result": "recorded approved"})
    assert by_id["r1"] == ("denied", "rejected by a reviewer: no")
    assert [line.split()[1] for line in effects(root)] == ["approved"]


async def test_a_sub_agent_never_gains_mcp_tools_its_parent_lacks(client: Client, root: Path) -> None:
    shared = stdio_server("t", root, tools=["echo"])

    def child_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
        if info.run_step == 1:
            return calls(call("t_echo", {"text": "from the child"}), call("x_echo", {"text": "escape"}))
        return ", ".join(f"{r.tool_name}:{r.status}" for r in returns(messages))

    child_model = Script([child_script] * 2)
    child = Agent(name="mcp-child", model=child_model.model,
                  mcp_servers=[shared, stdio_server("x", root, tools=["echo"])])
    parent_model = Script([calls(call("task", {"prompt": "echo something"})),
                           lambda messages, info: str(returns(messages)[-1].content)])
    parent = Agent(name="mcp-parent", model=parent_model.model, mcp_servers=[shared],
                   capabilities=[Subagent(child)])
    async with towline_worker(client, [parent]) as (tc, queue):
        result = await run(tc, parent, "delegate", task_queue=queue)

    # the child listed both servers, but is offered (and runs) only what its parent may run
    assert [d.name for d in child_model.seen[0].info.tools] == ["t_echo"]
    assert result.output == "t_echo:succeeded, x_echo:denied"
    assert executed_tools(root) == ["echo"]  # the child's t_echo only
