"""Agents for the human-in-the-loop tests: a desk whose scripted model makes the calls its
prompt lists, step by step, then answers with every return it got.

The prompt (or a session's latest message) is JSON: a list of steps, each a list of
`[tool, args]` (and, optionally, a call id as a third item). The model's answer reads
`tool=status:content; ...` over every return. `pay` appends one line per execution to the file
named by `$HITL_LEDGER` (when set): the tool's own record, which exactly-once tests count.

Crash points for those tests, each armed by a marker file that the crash removes (so the next
worker goes on): `$HITL_CRASH_DURING` SIGKILLs the worker inside `pay`, after its effect;
`$HITL_CRASH_MODEL` SIGKILLs it as a model request after the first begins.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import timedelta
from typing import Any

from towline import (
    Agent,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolContext,
    ToolReturnPart,
    UserPart,
    tool,
)
from towline.capabilities import Ask, Deny, ToolApproval
from towline.messages import Message, ResponsePart
from towline.models import FunctionModel, ModelInfo

__all__ = ["desk", "exact_desk", "AGENTS", "script", "pay", "answer_of", "LEDGER_ENV", "steps_prompt"]

LEDGER_ENV = "HITL_LEDGER"
CRASH_DURING_ENV = "HITL_CRASH_DURING"
CRASH_MODEL_ENV = "HITL_CRASH_MODEL"


def _crash_if_armed(variable: str) -> None:
    marker = os.environ.get(variable)
    if marker and os.path.exists(marker):
        os.remove(marker)
        os.kill(os.getpid(), signal.SIGKILL)


@tool
def pay(ctx: ToolContext, amount: int, to: str) -> str:
    """Pay `amount` to `to` (not idempotent)."""
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(json.dumps({"key": ctx.idempotency_key, "amount": amount, "to": to}) + "\n")
    _crash_if_armed(CRASH_DURING_ENV)
    return f"paid {amount} to {to}"


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@tool
def note(text: str) -> str:
    """Write a note."""
    return f"noted {text}"


@tool
def ask_user(question: str) -> str:
    """Ask the user a question (a reviewer answers it)."""
    return "the tool ran"


@tool
def delete(path: str) -> str:
    """Delete a file (no rule names it: the default applies)."""
    return f"deleted {path}"


def _returns(messages: list[Message]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart)]


def answer_of(messages: list[Message]) -> str:
    """Every return of the run, as the model answers with them."""
    return "; ".join(f"{r.tool_name}={r.status}:{r.content}" for r in _returns(messages))


def steps_prompt(*steps: list[tuple[Any, ...]]) -> str:
    """The prompt for a run whose model makes these steps' calls."""
    return json.dumps([[list(c) for c in step] for step in steps])


def script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Step N after the latest user message makes its N-th list of calls; then the answer."""
    asked = max(i for i, m in enumerate(messages) if isinstance(m, ModelRequest)
                and any(isinstance(p, UserPart) for p in m.parts))
    latest = next(p for p in messages[asked].parts if isinstance(p, UserPart))
    steps: list[list[list[Any]]] = json.loads(str(latest.content))
    made = sum(isinstance(m, ModelResponse) for m in messages[asked:])
    if made:
        _crash_if_armed(CRASH_MODEL_ENV)
    if made >= len(steps):
        return answer_of(messages[asked:])
    turn = sum(isinstance(m, ModelRequest) and any(isinstance(p, UserPart) for p in m.parts)
               for m in messages)
    calls: list[ResponsePart] = [ToolCallPart(tool_name=c[0], args=c[1],
                          tool_call_id=c[2] if len(c) > 2 else f"t{turn}s{made}c{i}")
             for i, c in enumerate(steps[made])]
    return ModelResponse(parts=calls)


def _pay_rule(args: dict[str, Any]) -> str:
    """Small payments run; large ones ask a person (a pure function of the arguments)."""
    return "ask" if args["amount"] > 100 else "approve"


desk = Agent(
    name="hitl-desk", model=FunctionModel(script, model_name="hitl-desk"),
    tools=[pay, lookup, note, ask_user, delete],
    capabilities=[ToolApproval(
        rules={"pay": _pay_rule, "note": Deny("notes are off today"), "lookup": "approve",
               "ask_user": Ask(decisions=("respond", "reject"))},
        default="ask", timeout=timedelta(hours=1))],
)

exact_desk = Agent(
    name="hitl-exact", model=FunctionModel(script, model_name="hitl-exact"),
    tools=[pay, delete], tool_heartbeat_timeout=timedelta(seconds=4),
    model_heartbeat_timeout=timedelta(seconds=4),
    capabilities=[ToolApproval(tools=["pay", "delete"], timeout=timedelta(hours=1))],
)
"""The exactly-once tests' desk: every payment asks, and a lost worker is noticed in 4 s."""

AGENTS = [desk, exact_desk]


@tool(executor="client")
def pick_color(prompt: str) -> dict[str, str]:
    """Ask the user to pick a color in the browser (the client runs it)."""
    raise NotImplementedError  # never runs: the client answers


@tool(executor="client", client_timeout=timedelta(milliseconds=300))
def confirm_in_app(question: str) -> bool:
    """Ask the app's user to confirm (not idempotent: a timeout leaves it uncertain)."""
    raise NotImplementedError


@tool(executor="client", client_timeout=timedelta(milliseconds=300), idempotent=True)
def read_location() -> str:
    """Read the browser's location (idempotent: a timeout denies it, the model may ask again)."""
    raise NotImplementedError


front = Agent(name="hitl-front", model=FunctionModel(script, model_name="hitl-front"),
              tools=[pick_color, confirm_in_app, read_location, lookup])
"""An agent whose tools the client runs (no approval capability at all)."""

AGENTS = [desk, exact_desk, front]
