"""A live `AgentRun`'s session with its client (`Session`, a part the workflow composes): what
the `send` update, the `cancel` and `end` signals do, the session's wait for its next message,
and the `state` query's answer (`run_state`).

Kept apart from the run's loop so that `agent_run.py` reads as the loop alone. The handlers
only queue a message or set a flag; the loop acts on them at its next step boundary, so no
handler changes the conversation or the counters in the middle of a step.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from towline.events import EventType, preview
from towline.messages import ModelRequest, UserContent, UserPart, prompt_text
from towline.results import PendingApproval, RunInput, RunStatus, StateQueryResult

from .events import emit
from .run import PAYLOAD_LIMIT, Run, oversize
from .run_input import decode_argument
from .steering import Steering

__all__ = ["SendInput", "Session", "run_state"]


class SendInput(BaseModel):
    """The argument of the `send` update: the next user message."""

    model_config = ConfigDict(extra="forbid")

    content: str | list[UserContent]
    """The message: text, or a list of text and media parts (like `RunInput.prompt`)."""


def _message(value: Any, *, accepted: bool = False) -> SendInput:
    return decode_argument(SendInput, value, "send", '{"content": "And 2 plus 3?"}',
                           accepted=accepted)


def _too_large(run: Run | None, message: SendInput,
               queued: list[str | list[UserContent]], limit: int) -> str | None:
    """Why `message` cannot join the conversation: with it, the next model request would be
    over the payload `limit` (the run's), and the session would fail `PayloadTooLarge` (refused
    instead).

    The messages `queued` before it (sent while the run was busy) join the conversation
    first, so they count too: each may be small, and all of them together too large."""
    size = oversize(message, 0)
    if size > limit:
        return f"the message is {size} bytes, over the {limit}-byte payload limit"
    waiting = oversize(list(queued), 0) if queued else 0
    total = size + waiting + (oversize(list(run.conversation.messages), 0) if run is not None else 0)
    if total <= limit:
        return None
    if not queued:
        return (f"the message ({size} bytes) would make the conversation {total} bytes, over "
                f"the {limit}-byte payload limit of a model request")
    return (f"the message ({size} bytes) would make the conversation {total} bytes with the "
            f"{len(queued)} message(s) queued before it ({waiting} bytes), over the "
            f"{limit}-byte payload limit of a model request: it was not queued")


class Session:
    """The run's side of its session with a client: the messages `send` queued (the inbox) and
    the answers they wait for, the session's wait for its next message and its end. `AgentRun`
    builds it, hands it the run's `Run` once it exists (`run`) and the run's payload limit, and
    its handlers call it."""

    def __init__(self, steering: Steering) -> None:
        self.steering = steering
        """The run's steering: `cancel` sets it, an interrupting `send` asks through it."""
        self.run: Run | None = None
        """The run's state, once `AgentRun` has built it."""
        self.payload_limit = PAYLOAD_LIMIT
        """The run's payload limit (`WorkerFacts.payload_limit`), which a `send` must fit."""
        self.on_busy = "queue"
        """What a `send` does while a turn runs (`RunInput.on_busy`, in a session)."""
        self.inbox: list[str | list[UserContent]] = []
        """Messages sent and not yet in the conversation."""
        self.sends = 0
        """`send`s waiting for their answer."""
        self._answers: list[tuple[int, Any]] = []
        """The run's answers, each with the number of messages taken before it."""
        self._consumed = 0
        """Messages taken into the conversation."""
        self._ending = False
        """The `end` signal came."""
        self.ended = False
        """The run has ended: a `send` is refused."""
        self._closed: tuple[str, str] | None = None
        """Why the run ended before answering a `send` still waiting (the run's failure:
        its reason and message), which that `send` fails with, as an `ApplicationError` of that
        type, rather than being left unfinished (Temporal would say only "the Workflow completed
        before the Update completed")."""
        self.session_end: str | None = None
        """Why the session stopped waiting for its next message: `request` (the `end` signal) or
        `idle` (its timeout); `RunResult.session_end`."""

    def answered(self, output: Any) -> None:
        """The run answered the messages taken so far with `output` (their `send`s return it)."""
        self._answers.append((self._consumed, output))

    async def next_message(self, run: Run, inp: RunInput) -> bool:
        """In a session, wait for the next `send`; False when the session ends."""
        if not inp.session:
            return False
        run.approvals.waiting_for = "message"  # what the run waits for: in its memo, details and timeline
        run.ledger.confirm(RunStatus.WAITING)
        try:
            await workflow.wait_condition(
                lambda: bool(self.inbox) or self.steering.cancelled or self._ending,
                timeout=inp.session_timeout,
                timeout_summary="session: waiting for the next message",
            )
        except TimeoutError:
            self.session_end = "idle"
            return False
        finally:
            run.approvals.waiting_for = None
        if self.steering.cancelled:
            self.steering.check_cancelled()
            return False
        if not self.inbox:  # `end`: the session is over, with its last answer as output
            self.session_end = "request"
            return False
        run.ledger.confirm(RunStatus.RUNNING)
        return True

    def drain_inbox(self, run: Run) -> None:
        while self.inbox:
            content = self.inbox.pop(0)
            emit(run.stream, EventType.USER, content=preview(prompt_text(content)))  # streaming
            run.conversation.append(ModelRequest(parts=[UserPart(content=content)]))
            self._consumed += 1

    async def send(self, message: Any) -> Any:
        """Queue the next user message (a `SendInput`, decoded by the validator); returns the
        answer the run gives to it."""
        self.inbox.append(_message(message, accepted=True).content)
        if self.on_busy == "interrupt" and self.steering.model_in_flight:  # `steering`
            self.steering.interrupt_requested = True
        target = self._consumed + len(self.inbox)
        self.sends += 1
        try:
            await workflow.wait_condition(
                lambda: any(n >= target for n, _ in self._answers) or self._closed is not None)
        finally:
            self.sends -= 1
        answers = [out for n, out in self._answers if n >= target]
        if not answers and self._closed is not None:  # the run ended first
            reason, said = self._closed
            raise ApplicationError(said, type=reason, non_retryable=True)
        return answers[0]

    async def close_sends(self, reason: str, message: str) -> None:
        """The run ends (`reason`, `message`) with `send`s still waiting for an
        answer it will not give: each fails with them, and the run ends once they have (none
        is left unfinished), refusing any later `send`."""
        self.ended = True
        if self.sends == 0:
            return
        self._closed = (reason, message)
        await workflow.wait_condition(lambda: self.sends == 0)

    def validate_send(self, message: Any) -> None:
        """Refuse (ValueError, nothing queued) an empty message, one after the run ended, one
        over the payload limit, and one while busy under `on_busy=reject`."""
        if not prompt_text(_message(message).content).strip():  # a media part is never empty
            raise ValueError("empty message")
        if self.ended:
            raise ValueError("the run has ended; start a new run with its messages as history")
        if (too_large := _too_large(self.run, _message(message), self.inbox,
                                    self.payload_limit)) is not None:
            raise ValueError(too_large)
        run = self.run
        if self.on_busy == "reject" and (run is None or run.ledger.status != RunStatus.WAITING
                                          or run.approvals.waiting_for != "message"):
            raise ValueError("the run is busy: it takes a message once it has answered "
                             "(on_busy=reject); send it again then")

    def cancel(self) -> None:
        """Cancel the run at its next step boundary (or while it waits): it fails `Cancelled`."""
        self.steering.cancelled = True

    def end(self) -> None:
        """End a session once it has answered what it was sent: it completes with that answer."""
        self._ending = True


def run_state(run: Run | None) -> StateQueryResult:
    """The `state` query's answer (`AgentRun.state` says what it holds) for `run`: an empty
    one before the run has started."""
    if run is None:
        return StateQueryResult()
    workflow_id = workflow.info().workflow_id
    return StateQueryResult(
        agent=run.agent.name, status=run.ledger.status, handoffs=list(run.handoffs),
        counters=run.ledger.counters, usage=run.ledger.usage,
        pending_approvals={call_id: PendingApproval.model_validate(
            {**entry, "call_id": call_id, "workflow_id": workflow_id})
            for call_id, entry in run.approvals.pending.items()},
        state=run.state,
        waiting_for=run.approvals.waiting_for if run.ledger.status == RunStatus.WAITING else None,
        remembered=run.approvals.hitl.remembered, policy=run.approvals.hitl.policy,
        decisions=run.approvals.hitl.audit, decisions_total=run.approvals.hitl.total,
    )

