"""A payments desk that asks a person before money moves: `towline run examples.payments:desk
"pay 250 to bob"`.

Its approval policy (`ToolApproval`): a payment of 100 or less runs, a larger one asks a
person (a pure function of the validated arguments), `ask_user` questions are answered by the
reviewer (`respond`: the tool does not run), `balance` always runs, and anything else is
denied. The model is a deterministic stand-in, so the example needs no API key: it pays what
the prompt says (`pay 250 to bob and 40 to carol`: two calls in one response, which wait
together), asks what the prompt asks (`ask: which account?`), and reports every return.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from towline import Agent, tool
from towline.capabilities import Ask, Deny, ToolApproval
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo

__all__ = ["desk", "pay", "balance", "ask_user", "desk_model", "payment_rule"]


@tool
def pay(amount: int, to: str) -> str:
    """Pay `amount` dollars to `to`."""
    return f"paid ${amount} to {to}"


@tool(idempotent=True)
def balance() -> int:
    """The account's balance in dollars."""
    return 1200


@tool
def ask_user(question: str) -> str:
    """Ask the person who requested the payments (a reviewer answers)."""
    return "nobody answered"


def payment_rule(args: dict[str, Any]) -> str:
    """Up to $100 runs; more asks a person."""
    return "approve" if args["amount"] <= 100 else "ask"


_PAY = re.compile(r"(\d+) to (\w+)")


def desk_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Pay what the prompt says and ask what it asks; then report every return."""
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
               if isinstance(p, ToolReturnPart)]
    if returns:
        return "; ".join(f"{r.tool_name}: {r.content} ({r.status})" for r in returns)
    prompt = " ".join(str(p.content) for m in messages if isinstance(m, ModelRequest)
                      for p in m.parts if isinstance(p, UserPart))
    wants, _, question = prompt.partition("ask:")
    calls = [ToolCallPart(tool_name="pay", args={"amount": int(n), "to": who},
                          tool_call_id=f"pay_{i + 1}")
             for i, (n, who) in enumerate(_PAY.findall(wants))]
    if question.strip():
        calls.append(ToolCallPart(tool_name="ask_user", args={"question": question.strip()},
                                  tool_call_id="ask_1"))
    return ModelResponse(parts=calls) if calls else "Nothing to pay."


desk = Agent(
    name="payments", model=FunctionModel(desk_model, model_name="payments-offline"),
    tools=[pay, balance, ask_user],
    capabilities=[ToolApproval(
        rules={"pay": payment_rule, "balance": "approve",
               "ask_user": Ask(decisions=("respond", "reject"))},
        default=Deny("this desk only pays"), timeout=timedelta(hours=24))],
)
