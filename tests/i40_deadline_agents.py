"""The agent of the late-approval test (`tests/test_i40_deadlines.py`), served by a worker
process that the test stops and starts again: a desk whose every payment (`hitl_agents.pay`,
not idempotent, one ledger line per execution) waits at most two seconds for approval."""

from __future__ import annotations

from datetime import timedelta

from hitl_agents import pay, script

from towline import Agent
from towline.capabilities import ToolApproval
from towline.models import FunctionModel

__all__ = ["late_desk", "AGENTS", "APPROVAL_TIMEOUT"]

APPROVAL_TIMEOUT = timedelta(seconds=2)
"""How long a payment waits for its approval."""

late_desk = Agent(
    name="i40-late-desk", model=FunctionModel(script, model_name="i40-late-desk"), tools=[pay],
    capabilities=[ToolApproval(tools=["pay"], timeout=APPROVAL_TIMEOUT)],
)

AGENTS = [late_desk]
