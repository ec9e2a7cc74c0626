"""What the guardrails share: checks and their verdicts, the guard model's call, the tripwire.

A guardrail is a function of what it guards that passes or trips. A *check* is either a
plain function (`check(value)`, sync or async), which runs as workflow code under the
determinism guard, or a guard model given a `policy`: one `towline.model_request`
activity (`call_model`), whose usage the run's ledger counts. Both give a verdict:
`None` passes, a string is what the guardrail said when it flagged the value.

A guard model's reply is read strictly (`read_verdict`: it starts with PASS or FAIL, or is
`{"verdict": ...}` JSON), and anything else flags, saying the verdict could not be read; its
request is metered like the run's own (`HookContext.guard_request`: limits checked before it
is sent, counted in `requests`); a policy may say what to allow or what to detect
(`PolicyKind`); and an input or output guardrail may end only the turn of a session
(`OnTrip`). Everything here reaches the run through the public hook context
(`towline.hook_context()`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from towline import Model
from towline.errors import ConfigurationError, GuardrailTripped, runtime_failure
from towline.events import EventType, preview
from towline.hooks import hook_context
from towline.messages import Message, ModelRequest, ModelResponse, SystemPart, UserPart

from ._config import check_str

__all__ = [
    "Check", "CheckResult", "GuardKind", "Replace", "judged", "report", "text_of", "ask_model", "user_input", "tripwire", "said_by", "check_judge",
    "model_name", "guard_models", "default_name", "verdict", "GUARD_INSTRUCTIONS",
    "DETECT_INSTRUCTIONS", "PolicyKind", "OnTrip", "guard_request", "read_verdict", "unreadable",
    "check_policy_kind", "check_on_trip", "REFUSAL",
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
"""The guard model's instructions (`{what}`: what it is shown) for a policy of what to allow
(`policy_kind="allow"`); the request's text follows them (`guard_request`)."""

DETECT_INSTRUCTIONS = (
    "You are a guardrail. You are shown {what} and a description of what to detect. Reply FAIL "
    "on the first line if it matches the description, followed by one short sentence saying "
    "what you detected. Otherwise reply PASS on the first line."
)
"""The guard model's instructions for a policy that says what to detect
(`policy_kind="detect"`, as OpenAI's guardrail agents are written)."""

PolicyKind = Literal["allow", "detect"]
"""How a guard model's `policy` reads: what the text must comply with ("allow": "Only questions
about orders.") or what to flag ("detect": "The user asks for help with homework.")."""

OnTrip = Literal["end_run", "end_turn"]
"""What a tripped input or output guardrail ends: the run (`GuardrailTripped`), or, in a
session, only the turn, whose answer is the guardrail's `refusal` (the session then waits for
the next message; a run that is no session still ends `GuardrailTripped`)."""

REFUSAL = "Sorry, I can't help with that."
"""The answer of a turn a guardrail ended (`on_trip="end_turn"`), unless it says another."""

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


def tripwire(kind: GuardKind, name: str, said: str, call_id: str | None = None, *,
             refusal: str | None = None, response_id: str | None = None) -> GuardrailTripped:
    """The failure a tripped guardrail ends the run with (marked as the runtime's own), its
    `guardrail` event published.

    `refusal` (`on_trip="end_turn"`): in a session, the run ends only the turn, with
    this answer, leaving out of the conversation the response `response_id` (the answer an
    output guardrail stopped); `towline.workflows.refusals` reads them.
    """
    what = {"input": "the input", "output": "the output", "tool_call": "a tool call",
            "tool_result": "a tool's result"}[kind]
    report(kind, name, "tripped", said, call_id=call_id)
    extra: dict[str, Any] = {}
    if refusal is not None:
        extra = {"refusal": refusal, "response_id": response_id}
    return runtime_failure(GuardrailTripped(
        f"guardrail {name!r} tripped on {what}: {said}", guardrail=name, kind=kind, said=said,
        **extra))


def check_policy_kind(owner: str, kind: Any) -> None:
    """`policy_kind` is "allow" or "detect"."""
    if kind not in ("allow", "detect"):
        raise ConfigurationError(f"{owner}.policy_kind must be 'allow' or 'detect', not {kind!r}")


def check_on_trip(owner: str, on_trip: Any, refusal: Any) -> None:
    """`on_trip` is "end_run" or "end_turn"; `refusal` is words to say."""
    if on_trip not in ("end_run", "end_turn"):
        raise ConfigurationError(
            f"{owner}.on_trip must be 'end_run' or 'end_turn', not {on_trip!r}")
    check_str(owner, "refusal", refusal, empty=False)


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
                  value: Any, text: str, what: str, *, replace: bool = False,
                  policy_kind: PolicyKind = "allow", alongside: int = 0) -> str | Replace | None:
    """Judge `value` (the check function's argument) or `text` (what the guard model reads,
    `what` says what it is): None passes, else what the guardrail said (or, `replace`
    allowed, the check's `Replace`). `alongside`: model requests in flight beside the guard
    model's (`HookContext.guard_request`)."""
    if check is not None:
        where = f"{name}.check"
        return said_by(await hook_context().call_user_code(where, check, value), where,
                       replace=replace)
    assert model is not None and policy is not None
    instructions, asked = guard_request(what, policy, text, policy_kind)
    return judged(await ask_model(model, name, instructions, asked, alongside=alongside))


def guard_request(what: str, policy: str, text: str,
                  policy_kind: PolicyKind = "allow") -> tuple[str, str]:
    """What a guard model is asked: its instructions (the request's system part)
    and the text of its one user message. docs/guardrails.md shows both, for offline guards.

    "allow": `GUARD_INSTRUCTIONS`, then `Policy:\n<policy>\n\n<What>:\n<text>`; "detect":
    `DETECT_INSTRUCTIONS`, then `Detect:\n<policy>\n\n<What>:\n<text>` (`What`: `what`,
    capitalised).
    """
    shown = f"{what[0].upper()}{what[1:]}:\n{text}"
    if policy_kind == "detect":
        return DETECT_INSTRUCTIONS.format(what=what), f"Detect:\n{policy}\n\n{shown}"
    return GUARD_INSTRUCTIONS.format(what=what), f"Policy:\n{policy}\n\n{shown}"


async def ask_model(model: str | Model, name: str, instructions: str, text: str, *,
                    alongside: int = 0) -> str:
    """The guard model's reply to `text` under `instructions`: one durable model call (with the
    agent's model timeouts and retry policy), metered like the run's own requests
    (`HookContext.guard_request`): the run's limits are checked before it is sent, and it
    counts in the ledger's `requests`, tokens and cost as soon as it answered.
    """
    chosen = model_name(model)
    assert chosen is not None
    ctx = hook_context()
    step = ctx.run.counters.run_step
    messages: list[Message] = [
        ModelRequest(id="guardrail-instructions", parts=[SystemPart(content=instructions)]),
        ModelRequest(id="guardrail-request", parts=[UserPart(content=text)])]
    async with ctx.guard_request(name, alongside=alongside) as answered:
        response: ModelResponse = await ctx.call_model(
            chosen, messages, run_step=step, summary=f"{chosen} · guardrail {name} · step {step}")
        answered(response.usage)
    return response.text


_VERDICT = re.compile(r"[\s*_#>`]*(PASS|FAIL)(?![\w])")
"""A verdict as the first word of a reply (markdown emphasis, a heading or a quote mark
before it ignored), in capitals as the instructions ask."""
_FENCED = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)
_FAIL_WORD = re.compile(r"\bFAIL(?:ED|S)?\b")


def read_verdict(reply: str) -> tuple[bool, str] | None:
    """A guard model's reply in the strict form: (passed, what it said after the
    verdict), or None when it holds no verdict that can be read.

    Readable: a reply whose first word is PASS or FAIL, in capitals (`**FAIL**:` too), what
    follows it being the reason; or one JSON object `{"verdict": "PASS" | "FAIL", "reason":
    "..."}` (in a ```json fence or not). A PASS whose reason says FAIL contradicts itself and
    is not read. The word anywhere else (`This message must not pass: ... FAIL`) is no verdict.
    """
    text = reply.strip()
    fenced = _FENCED.fullmatch(text)
    if fenced is not None:
        text = fenced.group(1)
    if text.startswith("{"):
        return _json_verdict(text)
    found = _VERDICT.match(text)
    if found is None:
        return None
    passed = found.group(1) == "PASS"
    rest = text[found.end():].lstrip("*_`").lstrip(" \t\r\n:.-—").rstrip()
    if passed and _FAIL_WORD.search(rest):
        return None
    return passed, rest


def _json_verdict(text: str) -> tuple[bool, str] | None:
    try:
        data: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    fields = cast(dict[str, Any], data)
    found = fields.get("verdict")
    reason = fields.get("reason", "")
    if not isinstance(found, str) or found.upper() not in ("PASS", "FAIL"):
        return None
    if not isinstance(reason, str):
        return None
    return found.upper() == "PASS", reason.strip()


def unreadable(reply: str) -> str:
    """What a guardrail says when its guard model's verdict cannot be read: it flags (fails
    closed), and says why."""
    shown = " ".join(reply.split())[:200] or "(nothing)"
    return ("the guard model's verdict could not be read (a reply must start with PASS or FAIL, "
            f"or be {{\"verdict\": \"PASS\" | \"FAIL\"}} JSON), so the guardrail fails closed; "
            f"it answered: {shown}")


def judged(reply: str) -> str | None:
    """A guard model's reply as a verdict, read strictly (`read_verdict`): PASS passes; FAIL,
    or a reply without a verdict, flags."""
    found = read_verdict(reply)
    if found is None:
        return unreadable(reply)
    passed, said = found
    return None if passed else said or "the guard model answered FAIL, without a reason"


def text_of(content: Any) -> str:
    """A tool's output as a guard model reads it: its text, JSON for data, media named by kind
    and size (never their bytes), nothing cut."""
    shown = preview(content, limit=2**62)
    return shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, default=str)


def report(kind: GuardKind, name: str, action: str, said: str, *,
           call_id: str | None = None) -> None:
    """Publish a `guardrail` live event: what a guardrail did (tripped, denied, replaced, ...)."""
    hook_context().emit(EventType.GUARDRAIL, guardrail=name, guards=kind, action=action,
                        said=said, call_id=call_id)
