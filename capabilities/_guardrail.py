"""What the guardrails share: checks and their verdicts, the guard model's call, the tripwire.

A guardrail is a function of what it guards that passes or trips. A *check* is either a
plain function (`check(value)`, sync or async), which runs as workflow code under the
determinism guard, or a guard model given a `policy`: one `towline.model_request`
activity (`call_model`), whose usage the run's ledger counts. Both give a verdict:
`None` passes, a string is what the guardrail said when it flagged the value.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from towline.errors import ConfigurationError, GuardrailTripped, runtime_failure
from towline.messages import Message, ModelRequest, ModelResponse, SystemPart, Usage, UserPart
from towline.runtime.model_types import Model

from ._config import check_str
from .completion_gate import parse_verdict

__all__ = [
    "Check", "CheckResult", "GuardKind", "Replace", "judged", "report", "text_of", "ask_model", "user_input", "tripwire", "said_by", "check_judge",
    "model_name", "guard_models", "default_name", "verdict", "GUARD_INSTRUCTIONS", "engine_ready",
]

CheckResult = Any
"""What a check function returns: `True` or `None` passes; `False` or a string (what the
guardrail says, e.g. why) flags the value; a tool result's check may also return `Replace`."""
Check = Callable[[Any], CheckResult | Awaitable[CheckResult]]

GuardKind = Literal["input", "output", "tool_call", "tool_result"]
"""What a guardrail guards (`GuardrailTripped.extra["kind"]`)."""

GUARD_INSTRUCTIONS = (
    "You are a guardrail. You are shown {what} and a policy. Reply PASS on the first line if "
    "it complies with the policy. Otherwise reply FAIL on the first line, followed by one "
    "short sentence saying what breaks the policy."
)
"""The guard model's instructions (`{what}`: what it is shown); the policy follows them."""

FLAGGED = "flagged by the guardrail"
"""What a check that returned `False` (no words of its own) is reported to have said."""


@dataclass(frozen=True)
class Replace:
    """A tool guardrail's verdict on a tool's result: the model is shown `content` instead
    (the return keeps its status; the history's activity result keeps what the tool said)."""

    content: Any
    """What the model sees in place of the tool's output (JSON-ready)."""
    reason: str = "replaced by the guardrail"
    """Why, as the run's live events report it."""


def engine_ready() -> bool:
    """Whether guardrails act in the running run: engine 4 on (a run of an older engine, which
    could not have had them, replays as it was written)."""
    from towline.workflows.versions import at_least

    return at_least(4)


def said_by(result: Any, where: str, *, replace: bool = False) -> str | Replace | None:
    """A check's result as a verdict: None passes, a `Replace` (where allowed) replaces, else
    what it said."""
    if replace and isinstance(result, Replace):
        return result
    if result is True or result is None:
        return None
    if result is False:
        return FLAGGED
    if isinstance(result, str):
        return result.strip() or FLAGGED
    raise TypeError(f"{where} returns True, None, False or a string, not {type(result).__name__}")


def tripwire(kind: GuardKind, name: str, said: str, call_id: str | None = None) -> GuardrailTripped:
    """The failure a tripped guardrail ends the run with (marked as the runtime's own), its
    `guardrail` event published."""
    what = {"input": "the input", "output": "the output", "tool_call": "a tool call",
            "tool_result": "a tool's result"}[kind]
    report(kind, name, "tripped", said, call_id=call_id)
    return runtime_failure(GuardrailTripped(
        f"guardrail {name!r} tripped on {what}: {said}", guardrail=name, kind=kind, said=said))


def user_input(messages: Sequence[Message]) -> str | None:
    """The text of the user messages since the model last answered, or None if there are none.

    At a run's first request, its prompt (and trailing user messages of a given history);
    in a session, each message `send` brought; after a tool step, nothing new.
    """
    texts: list[str] = []
    for m in reversed(messages):
        if isinstance(m, ModelResponse):
            break
        texts.extend(p.text for p in reversed(m.parts) if isinstance(p, UserPart))
    return "\n".join(reversed(texts)) if texts else None


def check_judge(owner: str, check: Check | None, model: str | Model | None,
                policy: str | None) -> None:
    """A guardrail is given a check function, or a guard model and its policy."""
    if check is not None and (model is not None or policy is not None):
        raise ConfigurationError(f"{owner}: give either check or model+policy, not both")
    if check is None and (model is None or policy is None):
        raise ConfigurationError(f"{owner}: give a check function, or both model and policy")
    if check is not None and not callable(check):
        raise ConfigurationError(f"{owner}: check must be callable")
    if isinstance(model, str):
        check_str(owner, "model", model, empty=False)
    elif model is not None and not callable(getattr(model, "request", None)):
        raise ConfigurationError(f"{owner}: model must be a model name or a Model, "
                                 f"not {type(model).__name__}")
    if policy is not None:
        check_str(owner, "policy", policy, empty=False)


def model_name(model: str | Model | None) -> str | None:
    """A guard model's name (what `call_model` selects it by)."""
    return model if isinstance(model, str) or model is None else model.name


def guard_models(model: str | Model | None) -> tuple[Model, ...]:
    """The guard model, when it is a `Model` object, for workers to register."""
    return () if isinstance(model, str) or model is None else (model,)


def default_name(check: Check | None, model: str | Model | None) -> str:
    """A guardrail's name when it is given none: its check function's, or its guard model's."""
    if check is not None:
        return str(getattr(check, "__name__", None) or type(check).__name__)
    return str(model_name(model))


async def verdict(name: str, check: Check | None, model: str | Model | None, policy: str | None,
                  value: Any, text: str, what: str, *, replace: bool = False) -> str | Replace | None:
    """Judge `value` (the check function's argument) or `text` (what the guard model reads,
    `what` says what it is): None passes, else what the guardrail said (or, `replace`
    allowed, the check's `Replace`)."""
    if check is not None:
        from towline.workflows.guard import Guard, guarded

        where = f"{name}.check"
        return said_by(await guarded(Guard(where), check, value), where, replace=replace)
    assert model is not None and policy is not None
    asked = f"Policy:\n{policy}\n\n{what[0].upper()}{what[1:]}:\n{text}"
    return judged(await ask_model(model, name, GUARD_INSTRUCTIONS.format(what=what), asked))


async def ask_model(model: str | Model, name: str, instructions: str, text: str) -> str:
    """The guard model's reply to `text` under `instructions`: one durable model call (with the
    agent's model timeouts and retry policy), whose usage is reported to the run (its ledger
    counts it even when the run then ends)."""
    from towline.workflows import call_model, current_run

    chosen = model_name(model)
    assert chosen is not None
    run = current_run()
    view = run.agent_run
    step = view.counters.run_step
    agent = view.agent  # its model calls' timeouts and retries are the guard model's too
    response = await call_model(
        chosen,
        [ModelRequest(id="guardrail-instructions", parts=[SystemPart(content=instructions)]),
         ModelRequest(id="guardrail-request", parts=[UserPart(content=text)])],
        run_step=step, agent=agent.name, summary=f"{chosen} · guardrail {name} · step {step}",
        timeout=agent.model_timeout, retry_policy=agent.model_retry_policy,
        heartbeat_timeout=agent.model_heartbeat_timeout,
    )
    if response.usage != Usage():
        run.report_usage(response.usage)
    return response.text


def judged(reply: str) -> str | None:
    """A guard model's reply as a verdict: PASS passes; FAIL, or neither word, flags."""
    return parse_verdict(reply, unclear="the guard model answered neither PASS nor FAIL: "
                                        f"{reply.strip()[:200] or '(nothing)'}")


def text_of(content: Any) -> str:
    """A tool's output as a guard model reads it: its text, JSON for data, media named by kind
    and size (never their bytes), nothing cut."""
    from towline.events import preview

    shown = preview(content, limit=2**62)
    return shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, default=str)


def report(kind: GuardKind, name: str, action: str, said: str, *,
           call_id: str | None = None) -> None:
    """Publish a `guardrail` live event: what a guardrail did (tripped, denied, replaced, ...)."""
    from towline.workflows import current_run
    from towline.workflows.events import emit

    emit("guardrail", step=current_run().agent_run.counters.run_step, guardrail=name,
         guards=kind, action=action, said=said, call_id=call_id)
