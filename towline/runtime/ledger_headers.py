"""The ledger's header on every activity a run schedules.

`LedgerHeaders` is a worker interceptor (`TowlinePlugin` adds it): its workflow outbound
interceptor asks the running run for its header (`ledger_header()`, which `AgentRun` answers
with the counters it has confirmed, as a `json/protobuf` `RunCounters` payload) and
puts it under `towline.counters` in the activity's Temporal header. Being a property of
scheduling an activity, not of any call site, every activity a run schedules carries it: its
model requests (the run's own and its hooks'), its tool calls, MCP listings, the activities a
capability's hooks call, and any added later. A workflow that answers nothing (another
workflow type) schedules its activities unchanged.

The run is found in its scope (`towline.workflows.scope`: an interceptor has no caller that
could hand it over), set in the task of `AgentRun.run` and so in every task it starts; an
activity scheduled from a signal, update or query handler would go without the header (none
is: the run's activities are all scheduled from the run's code and its hooks).

Headers are encoded by the payload codec like every payload only where the client says so:
`TowlinePlugin(encryption=...)` sets `HeaderCodecBehavior.CODEC` (Temporal's default leaves
headers alone), so the counters are encrypted in the history with everything else.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.worker import (
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from towline.runtime.ledger import HEADER_KEY
from towline.workflows import scope

__all__ = ["LedgerHeaders"]


def _header() -> Payload | None:
    source: Any = getattr(scope.current(), "ledger_header", None)
    if not callable(source):
        return None
    header: Any = source()
    return header if isinstance(header, Payload) else None


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        header = _header()
        if header is not None:
            input.headers = {**input.headers, HEADER_KEY: header}
        return super().start_activity(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class LedgerHeaders(Interceptor):
    """Puts the run's confirmed counters in the header of every activity it schedules."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _Inbound
