"""What replay checks beyond Temporal's commands: each model request, as recorded.

Every model call of a run, the run's own or a hook's (a summariser, a tool
selector, a completion check), is the same activity type,
`towline.model_request`. Temporal's replay compares commands by type and order
only, so swapping two model-calling capabilities replays "ok" while each one
reads the other's recorded answer. `RequestJournal` is a workflow interceptor
for the `Replayer`: it notes every model request the replayed code schedules
(its model, the summary that names who asks, a digest of its input), and
`first_mismatch` compares those with the `ActivityTaskScheduled` events of the
history. The first difference is a nondeterminism, reported with the request's
step and both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from pydantic_core import to_jsonable_python
from temporalio import workflow
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter
from temporalio.worker import (
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from towline.activities.model_request import MODEL_ACTIVITY
from towline.messages import COMPACT
from towline.replay.run_history import read_executions, request_digest

__all__ = ["ModelRequestNote", "RequestJournal", "recorded_requests", "first_mismatch"]


@dataclass(frozen=True)
class ModelRequestNote:
    """One model request: who asked for which model, and what it sent."""

    model: str
    """The model name the request selects."""
    step: int
    """The run step it belongs to."""
    summary: str
    """The activity's summary: the model, the hook or capability that asks, and the step."""
    digest: str | None
    """SHA-256 of the messages the request sends, as JSON (None: the recorded input could not
    be read)."""
    protocol: str = "chain"
    """How the input carries the messages: `chain` (by reference, today's), or `inline` (an
    earlier protocol); digests of two protocols are not comparable."""

    def show(self) -> str:
        """The note in one line, for a replay failure."""
        digest = self.digest[:12] if self.digest else "unreadable"
        return f"{self.model} asked by {self.summary!r}, input {digest}"


def _note(value: Any, summary: str | None) -> ModelRequestNote:
    data: Any = to_jsonable_python(value, context={COMPACT: True})
    fields = cast(dict[str, Any], data) if isinstance(data, dict) else {}
    step = fields.get("run_step", 0)
    digest, protocol = request_digest(value)
    return ModelRequestNote(model=str(fields.get("model", "")),
                            step=step if isinstance(step, int) else 0,
                            summary=summary or "", digest=digest, protocol=protocol)


class RequestJournal(Interceptor):
    """Notes the model requests replayed code schedules, per workflow id (replay only)."""

    def __init__(self) -> None:
        self.notes: dict[str, list[ModelRequestNote]] = {}

    def take(self, workflow_id: str) -> list[ModelRequestNote]:
        """The notes of one replayed execution (and forget them)."""
        return self.notes.pop(workflow_id, [])

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        journal = self

        class _Outbound(WorkflowOutboundInterceptor):
            def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
                if input.activity == MODEL_ACTIVITY and input.args:
                    notes = journal.notes.setdefault(workflow.info().workflow_id, [])
                    notes.append(_note(input.args[0], input.summary))
                return super().start_activity(input)

        class _Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_Outbound(outbound))

        return _Inbound


async def recorded_requests(
    events: Sequence[HistoryEvent], converter: DataConverter
) -> list[ModelRequestNote]:
    """The model requests a history scheduled, in order (read by the one reader of a run's
    record, `towline.replay.run_history`; a request it cannot decode has no digest)."""
    if not events:
        return []
    run = await read_executions("", [("", events)], converter, lenient=True)
    return [ModelRequestNote(model=r.model, step=r.step, summary=r.summary, digest=r.digest,
                             protocol=r.protocol) for r in run.requests]


def first_mismatch(
    recorded: Sequence[ModelRequestNote], replayed: Sequence[ModelRequestNote]
) -> str | None:
    """Why the replayed model requests differ from the recorded ones (None: they agree).

    Inputs are compared by digest when both use one protocol: a run recorded before the
    request chain sent its messages inline, which today's code no longer writes, so for
    such a run the model and who asked are compared, not the bytes.

    Only the requests both made are compared: a run recorded mid-way replays no further
    than its history, and a request the replay did not make at all is a nondeterminism
    Temporal reports itself."""
    for i, (was, now) in enumerate(zip(recorded, replayed, strict=False), start=1):
        same_input = (was.digest is None or was.protocol != now.protocol
                      or was.digest == now.digest)
        if was.summary == now.summary and same_input and (not was.model or was.model == now.model):
            continue
        step = was.step or now.step
        return (f"model request {i} (step {step}) differs from the recorded one: recorded "
                f"{was.show()}; replayed {now.show()}")
    return None
