"""A guardrail that ends only the turn of a session (`on_trip="end_turn"`).

An `InputGuardrail` or `OutputGuardrail` trips by raising `GuardrailTripped`, as always; one
given `on_trip="end_turn"` puts its `refusal` in the failure (`_guardrail.tripwire`). In a
session, the run's loop takes such a trip as the turn's end rather than the run's: the
refusal is recorded as the turn's answer (an assistant message after the user's, as the
OpenAI Agents SDK's example appends one), the answer an output guardrail stopped is left out
of the conversation (the model never sees it again; the Temporal history keeps its
response), the `send` that brought the message is answered with the refusal, and the session
waits for the next message. Anywhere else (a run that is no session, a run of an older
engine) the trip ends the run, `GuardrailTripped`.
"""

from __future__ import annotations

from towline.errors import GuardrailTripped
from towline.messages import ModelResponse, TextPart

from .events import emit_response
from .run import Run

__all__ = ["refused_turn", "refusal_of"]


def refusal_of(trip: GuardrailTripped) -> tuple[str, str | None] | None:
    """A trip that may end only the turn of a session: its refusal and the response it leaves
    out (None: the trip ends the run), as `capabilities._guardrail.tripwire` put them in its
    `extra` (read here: the capabilities may not be imported by the workflow's modules)."""
    refusal = trip.extra.get("refusal")
    if not isinstance(refusal, str):
        return None
    dropped = trip.extra.get("response_id")
    return refusal, dropped if isinstance(dropped, str) else None


def refused_turn(run: Run, trip: GuardrailTripped, step: int) -> str | None:
    """The answer of the turn `trip` ended at `step`, recorded in the conversation; None when
    the trip ends the run instead."""
    found = refusal_of(trip)
    if found is None:
        return None
    refusal, dropped = found
    if dropped is not None:  # the answer an output guardrail stopped
        run.conversation.messages = [m for m in run.conversation.messages if m.id != dropped]
    response = run.conversation.append(ModelResponse(parts=[TextPart(content=refusal)]))
    assert isinstance(response, ModelResponse)
    run.ledger.confirm()
    emit_response(run.stream, step, response)  # streaming: the turn's answer, as a model's would be
    return refusal
