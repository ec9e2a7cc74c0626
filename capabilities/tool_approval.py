"""`ToolApproval`: a human approves or rejects listed tools before they run.

Before a listed tool executes, the run waits durably (no worker needs to stay
up) for a decision given with the workflow update `approve` or `reject`
(`ApprovalDecision(call_id=..., reason=...)`), or with the CLI. While it waits,
`TowlineStatus` is `waiting`, the current details list the call, and the
`state` query shows it under `pending_approvals`. A rejection, or no decision
within `timeout`, records the call `denied` with the reason, and the model is
told; an approval lets the call execute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from towline.errors import ConfigurationError, ToolDenied
from towline.tools import ToolCall, ToolContext

from ._config import check_names, check_timeout
from .base import Capability

__all__ = ["ToolApproval"]


@dataclass(frozen=True)
class ToolApproval(Capability):
    """Waits for a human decision before each call of the listed tools (`before_tool_execute`).

    Calls of one response are admitted in order, so when a response calls two
    listed tools the second waits until the first is decided.
    """

    tools: Sequence[str] = ()  # pyright: ignore[reportIncompatibleVariableOverride]
    """Names of the tools that need approval (any other tool runs without one)."""
    timeout: timedelta | None = None
    """How long to wait for a decision before rejecting; None waits indefinitely."""

    def __post_init__(self) -> None:
        names = check_names("ToolApproval", "tools", self.tools)
        if not names:
            raise ConfigurationError("ToolApproval: tools must name at least one tool")
        check_timeout("ToolApproval", "timeout", self.timeout, optional=True)
        object.__setattr__(self, "tools", names)

    async def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        """Wait for the decision on a listed tool's call; deny it on rejection or timeout."""
        if call.tool_name not in self.tools:
            return call
        from towline.workflows import current_run

        run = current_run()
        decision = await run.request_approval(ctx, call, self.timeout)
        if decision is None:
            raise ToolDenied(f"not approved: no decision within {self.timeout}")
        if not run.is_approved(call.tool_call_id):
            raise ToolDenied(f"rejected by a reviewer: {decision.reason or 'no reason given'}")
        return call
