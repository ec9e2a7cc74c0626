"""The exceptions towline raises, and the run failures a workflow ends with.

    TowlineError
    ├── ConfigurationError        an agent, tool or plugin is defined wrongly (ValueError)
    ├── ModelRetry                raised by a tool: ask the model to try again
    ├── ToolError                 raised by a tool: it failed and had no effect
    ├── ToolDenied                raised by `before_tool_execute`: the call is `denied`
    ├── ToolResponded             raised by `before_tool_execute`: the call's return is given
    │                             (a reviewer's `respond`); the tool does not run
    ├── RunError                  client side: a run failed (.reason, .message, .partial);
    │   │                         `towline.client.run` raises it as the failure's own class
    │   │                         too (`failed_run`): `except MaxStepsExceeded` catches it
    │   └── RunEnded              a message (`towline.client.send`) reached a run that had
    │                             ended, or the run ended before answering it (.status)
    ├── DecisionNotApplied        client side: no worker took an update (a decision, a
    │   │                         message, a policy change) within the wait
    │   ├── DecisionPending       the server holds it: a worker that starts applies it (or
    │   │                         refuses it), unless the server restarts first
    │   └── DecisionNotDelivered  the server does not hold it: nothing will apply it
    ├── AgentVersionMismatch      a worker replaying a run started with another version of
    │                             its agent: fails the workflow *task* (the one deliberate
    │                             task failure), so the run waits for a worker that has it
    └── RunFailure                a run's deterministic failure (non-retryable ApplicationError,
        │                         `type` = the class name, details[0] = the partial run)
        ├── MaxStepsExceeded
        ├── UsageLimitExceeded
        ├── ToolRetriesExhausted
        ├── OutputRetriesExhausted
        ├── CapabilityViolation
        │   └── NondeterministicHook    hook code read the clock, randomness, the environment,
        │                               object ids, did I/O or started a thread (it would
        │                               not replay)
        ├── ToolCallIdentityChanged
        ├── DuplicateToolCallId
        ├── UncertainToolEffect
        ├── ModelRequestFailed
        │   ├── ContextLengthExceeded   the request did not fit the model's context window
        │   └── BackgroundTimeout       a background model call did not finish in time
        ├── PayloadTooLarge
        ├── MCPServerUnavailable
        ├── ContentBlocked
        ├── ContentFiltered       the provider filtered or refused the answer (or the prompt):
        │                         Gemini's SAFETY or MODEL_ARMOR, Anthropic's `refusal`, ...
        ├── GuardrailTripped      a guardrail's tripwire: names the guardrail and what it said
        ├── Cancelled             the `cancel` signal, or Temporal's own cancel (UI, CLI, client)
        ├── UnknownAgent
        ├── InvalidRunInput
        ├── InstructionsFailed    the agent's instructions function failed, or gave no text
        └── InternalError

`RunFailure` subclasses are registered as workflow failure exception types, so
raising one fails the *run* (the workflow), never the workflow task. On the client, a
run that failed with one of them raises a `RunError` that is also an instance of that
class (`failed_run`): `except GuardrailTripped` and `except RunError` both catch it,
with `.reason`, `.message` and `.partial`; a reason towline does not define (an
`ApplicationError` of the user's own type) stays a plain `RunError`.

Hooks and run failures: a failure the runtime raised while a hook awaited it (a
`call_model` that failed, a wrapped model call over its limit, a cancellation)
passes through the hook unchanged, and so does `NondeterministicHook`, which the
determinism guard raises in hook code that would not replay (it fails the run even
from `before_tool_execute`, and even when the hook caught it); the two deliberate
ways for hook code to end a run are `ContentBlocked` (a capability refusing the
content), which names the hook, and `GuardrailTripped` (a guardrail's tripwire), which
names the guardrail.
Any other exception a hook raises, `RunFailure` subclasses included, is reported
as `CapabilityViolation` naming the capability and the hook (model hooks), or
records the call `not_executed` (`before_tool_execute`; `ToolDenied` records it `denied`).
A `BaseException` that is not an `Exception` (`SystemExit`, `KeyboardInterrupt`, ...) from
any user code is contained (`towline.runtime.escapes`): `CapabilityViolation` from every
hook, `before_tool_execute` included; `UncertainToolEffect` (or a `failed` call,
idempotent) from a tool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from temporalio.exceptions import ApplicationError

if TYPE_CHECKING:
    from towline.messages import Usage
    from towline.results import PartialRun

__all__ = [
    "TowlineError",
    "ConfigurationError",
    "ModelRetry",
    "ToolError",
    "ToolDenied",
    "ToolResponded",
    "RunError",
    "RunEnded",
    "DecisionNotApplied",
    "DecisionPending",
    "DecisionNotDelivered",
    "AgentVersionMismatch",
    "RunFailure",
    "MaxStepsExceeded",
    "UsageLimitExceeded",
    "ToolRetriesExhausted",
    "OutputRetriesExhausted",
    "CapabilityViolation",
    "NondeterministicHook",
    "ToolCallIdentityChanged",
    "DuplicateToolCallId",
    "UncertainToolEffect",
    "ModelRequestFailed",
    "ContextLengthExceeded", "BackgroundTimeout",
    "PayloadTooLarge",
    "MCPServerUnavailable",
    "ContentBlocked",
    "ContentFiltered",
    "GuardrailTripped",
    "Cancelled",
    "UnknownAgent",
    "InvalidRunInput",
    "InternalError",
    "FAILURE_TYPES",
    "failed_run",
    "runtime_failure",
    "is_runtime_failure",
]


class TowlineError(Exception):
    """Base of every towline exception."""


class ConfigurationError(TowlineError, ValueError):
    """An agent, tool, capability or plugin is defined wrongly."""


class ModelRetry(TowlineError):
    """Raised by a tool to ask the model to try again; consumes one of the tool's retries."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ToolError(TowlineError):
    """Raised by a tool that failed *without* effect; the model is told (status `failed`).

    `usage` is model usage the failed tool still incurred (e.g. a sub-agent that
    failed after some model calls); the runtime folds it into the run's ledger.
    """

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage


class ToolDenied(TowlineError):
    """Raised by a `before_tool_execute` hook to deny a call (status `denied`, the model is told)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ToolResponded(TowlineError):
    """Raised by a `before_tool_execute` hook to give a call its return without running the
    tool (status `succeeded`, `result` is what the model sees): a reviewer's `respond`."""

    def __init__(self, result: Any) -> None:
        super().__init__("the call was answered without running the tool")
        self.result = result


class RunError(TowlineError):
    """Client side: the run's workflow failed. `reason` is the failure type name."""

    def __init__(self, reason: str, message: str, partial: PartialRun | None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.partial = partial


class RunEnded(RunError):
    """Client side: a message sent to a run (`towline.client.send`) that had ended, or that
    ended before it answered the message. `status` is how it ended (Temporal's
    `WorkflowExecutionStatus` name: `FAILED`, `COMPLETED`, `CANCELED`, `TERMINATED`,
    `TIMED_OUT`, ...); `reason` is the failure's reason (`GuardrailTripped`, `Cancelled`, ...)
    for a run that failed, else the status; `message` says what ended it (a `GuardrailTripped`
    names its guardrail), `partial` is the failed run's partial run when it was read."""

    def __init__(self, status: str, reason: str, message: str,
                 partial: PartialRun | None = None) -> None:
        super().__init__(reason, message, partial)
        self.status = status


class DecisionNotApplied(TowlineError):
    """Client side: no worker took update `update` (a decision, a session's message, a policy
    change) of run `workflow_id` within `wait` seconds, so it has not been applied, and it is
    not known whether the run would refuse it. Which of the two it is says whether it still
    may be (`towline.review.delivery`); raised as itself when the server could not be asked
    (then it may still be applied)."""

    def __init__(self, message: str, update: str, workflow_id: str, wait: float) -> None:
        super().__init__(message)
        self.message = message
        self.update = update
        self.workflow_id = workflow_id
        self.wait = wait


class DecisionPending(DecisionNotApplied):
    """The Temporal server holds the update, but no worker took it within the wait: a worker
    that starts will apply it (or refuse it, if the run's checks fail then). Until a worker
    takes it, it is in the server's memory only (not in the run's history): a restart of the
    Temporal server loses it. `update_id` follows it:
    `await handle.get_update_handle(e.update_id).result()` waits for its outcome."""

    def __init__(self, update: str, workflow_id: str, wait: float, update_id: str) -> None:
        super().__init__(
            f"{update} pending: the Temporal server holds it, but no worker took it within "
            f"{wait:g}s. A worker that starts will apply it (or refuse it, if the run's checks "
            "fail then); until then it is in the server's memory only, and a restart of the "
            "Temporal server loses it", update, workflow_id, wait)
        self.update_id = update_id


class DecisionNotDelivered(DecisionNotApplied):
    """No worker took the update within the wait and the Temporal server does not hold it (it
    never arrived): nothing will apply it."""

    def __init__(self, update: str, workflow_id: str, wait: float, why: str | None = None) -> None:
        super().__init__(
            f"{update} not delivered: " + (why or f"no worker took it within {wait:g}s and the "
                                           "Temporal server does not hold it")
            + "; nothing will apply it", update, workflow_id, wait)


class AgentVersionMismatch(TowlineError, RuntimeError):
    """A worker picked up a run started with a version of its agent that it does not have.

    Not a run failure: replaying the run with another definition could take another
    path, so the *workflow task* fails (Temporal retries it) and the run waits, with
    nothing lost, until a worker with the run's version (or one that accepts it)
    picks it up. `towline runs --stuck` lists such runs.
    """


class RunFailure(TowlineError, ApplicationError):
    """A deterministic run failure: fails the workflow, non-retryably, with the partial run."""

    def __init__(self, message: str, partial: PartialRun | None = None, **extra: Any) -> None:
        details: list[Any] = []
        if partial is not None:
            details.append(partial.model_dump(mode="json"))
        ApplicationError.__init__(
            self, message, *details, type=type(self).__name__, non_retryable=True
        )
        self.reason: str = type(self).__name__
        """The failure's type name, as `RunError.reason` gives it on the client."""
        self.partial = partial
        self.extra = extra

    def with_partial(self, partial: PartialRun) -> RunFailure:
        """The same failure carrying `partial` (raised where the run state is known)."""
        return type(self)(self.message, partial, **self.extra)


_RUNTIME = "_towline_runtime"
_F = TypeVar("_F", bound=RunFailure)


def runtime_failure(failure: _F) -> _F:
    """Mark `failure` as raised by the runtime (it may pass through hooks unchanged)."""
    setattr(failure, _RUNTIME, True)
    return failure


def is_runtime_failure(error: BaseException) -> TypeGuard[RunFailure]:
    """Whether `error` is a run failure the runtime raised (not hook code)."""
    return isinstance(error, RunFailure) and bool(getattr(error, _RUNTIME, False))


class MaxStepsExceeded(RunFailure):
    """Another model request would exceed `max_steps`."""


class UsageLimitExceeded(RunFailure):
    """`request_limit`, `tool_calls_limit` or a token limit was exceeded."""


class ToolRetriesExhausted(RunFailure):
    """A tool kept failing past its `max_retries`."""


class OutputRetriesExhausted(RunFailure):
    """The model's output failed validation past `output_retries`."""


class CapabilityViolation(RunFailure):
    """A hook raised, or returned a result that is not a valid state."""


class NondeterministicHook(CapabilityViolation):
    """Hook code called something that would not replay: the clock (local time included),
    unseeded randomness, the environment, `hash()` of a string, `id()`, I/O, or a thread or
    process of its own (see `towline.workflows.guard`).

    Raised where the call was made (so the call never happens); the run fails with it
    even if the hook caught it. `extra` names the `capability`, the `hook`, what it
    `touched` (`time.time()`) and the `location` (file:line) of the call.
    """


class ToolCallIdentityChanged(RunFailure):
    """`before_tool_execute` changed a call's id, name, kind or metadata."""


class DuplicateToolCallId(RunFailure):
    """One response used the same tool call id twice."""


class UncertainToolEffect(RunFailure):
    """A non-idempotent tool raised or timed out after it may have taken effect."""


class ModelRequestFailed(RunFailure):
    """The model activity failed for good (non-retryable error or retries exhausted)."""


class ContextLengthExceeded(ModelRequestFailed):
    """The provider refused the request as too long for the model's context window.

    A `ModelRequestFailed`, so a `ModelFallback` tries the next model; a capability
    can also catch it in `wrap_model_call` and retry with a shorter request
    (summarise, window).
    """


class BackgroundTimeout(ModelRequestFailed):
    """A background model call outlasted `Agent.model_background_timeout` (or
    `MAX_BACKGROUND_POLLS` polls): cancelled; `extra` holds `response_id` and `polls`."""


class PayloadTooLarge(RunFailure):
    """A payload would exceed Temporal's size limit."""


class MCPServerUnavailable(RunFailure):
    """A required MCP server's tools could not be listed (after Temporal's retries)."""


class ContentBlocked(RunFailure):
    """A capability blocked the run's content (e.g. `RedactPII(strategy="block")`)."""


class ContentFiltered(RunFailure):
    """The provider filtered or refused the model's answer, or blocked the prompt.

    The message names the provider's own reason (`google: MODEL_ARMOR: ...`, `anthropic:
    refusal`); the partial run holds the filtered response (its `provider_details` say
    the same) and the usage it was billed. A filtered answer is never retried as "empty":
    asking the same again gets the same refusal. A capability reacts before the run ends:
    its `after_model_request` hook sees `response.finish_reason == "content_filter"` and
    may replace the response, or its `after_model` hook jumps (`"model"` to ask again,
    `"end"` to end the run with what there is); a `wrap_model_call` wrapper may call
    `next` again with another request. Not a `ModelRequestFailed`, so `ModelFallback`
    does not send the filtered content to another model behind the filter's back.
    """


class GuardrailTripped(RunFailure):
    """A guardrail's tripwire ended the run (`InputGuardrail`, `OutputGuardrail`, `ToolGuardrail`,
    `PromptInjectionGuard`, or a capability of the user's own raising it).

    The message names the guardrail and what it said; `extra` holds them apart: `guardrail`
    (its name), `kind` (`input`, `output`, `tool_call` or `tool_result`) and `said`.
    """


class Cancelled(RunFailure):
    """A client cancelled the run: the `cancel` signal, or Temporal's cancel (UI, CLI, API)."""


class UnknownAgent(RunFailure):
    """The run names an agent this worker has not registered."""


class InvalidRunInput(RunFailure):
    """The workflow's input is not a valid `RunInput` (e.g. JSON typed into the UI)."""


class InstructionsFailed(RunFailure):
    """The agent's instructions function (`Agent(instructions=function)`) failed."""


class InternalError(RunFailure):
    """A bug in towline itself; reported rather than leaving the run stuck."""


def _subclasses(cls: type[RunFailure]) -> list[type[RunFailure]]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


FAILURE_TYPES: tuple[type[RunFailure], ...] = tuple(_subclasses(RunFailure))
"""Every run failure above, in the order they are defined."""


class _FailedRun(RunError, RunFailure):
    """Client side: a run that failed with a `RunFailure` (`failed_run`). Its concrete
    classes (one per failure type, made on first use) are also that failure's class, so
    `except MaxStepsExceeded` catches the run's error as well as `except RunError`."""

    def __init__(self, reason: str, message: str, partial: PartialRun | None) -> None:
        # RunError's own __init__ would assign `message`, which ApplicationError keeps
        # read-only: initialise the ApplicationError side, as the workflow's failure was.
        RunFailure.__init__(self, message, partial)
        self.reason = reason

    def with_partial(self, partial: PartialRun) -> RunFailure:
        """The same failure carrying `partial`."""
        return failed_run(self.reason, self.message, partial)  # pyright: ignore[reportReturnType]

    def __reduce__(self) -> tuple[Any, ...]:
        # the concrete classes are made at run time, so they are rebuilt, not looked up
        return failed_run, (self.reason, self.message, self.partial)


_CLIENT_CLASSES: dict[str, type[_FailedRun]] = {}
_BY_NAME: dict[str, type[RunFailure]] = {cls.__name__: cls for cls in FAILURE_TYPES}


def failed_run(reason: str, message: str, partial: PartialRun | None) -> RunError:
    """The client-side error of a run that failed with `reason` (the failure's type name).

    For a reason towline defines (`FAILURE_TYPES`) it is a `RunError` that is also an
    instance of that failure class (`MaxStepsExceeded`, `GuardrailTripped`, ...), so
    either `except` catches it; otherwise a plain `RunError`.
    """
    failure = _BY_NAME.get(reason)
    if failure is None:
        return RunError(reason, message, partial)
    cls = _CLIENT_CLASSES.get(reason)
    if cls is None:
        cls = _CLIENT_CLASSES[reason] = type(
            failure.__name__, (_FailedRun, failure),
            {"__module__": __name__, "__qualname__": failure.__qualname__,
             "__doc__": f"Client side: a run that failed with `{failure.__name__}`."})
    return cls(reason, message, partial)
