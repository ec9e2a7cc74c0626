"""Agents for the time-travel tests (`towline fork`, `towline reset`).

`shop` makes three steps: step 1 charges (a tool that is NOT idempotent), step 2 looks
the item up (an idempotent tool, which also writes contributed state), step 3 answers
with the last user message. A middleware counts the turns in contributed state, so the
state before step N is `{"turns": N - 1, ...}`. The tools note each execution, so a test
sees what a reset ran again. `other` is the same script under another model name
(`--model`).
"""

from __future__ import annotations

import operator
from typing import Any

from towline import Agent, Middleware, ToolContext, tool
from towline.messages import Message, ModelRequest, ModelResponse, ToolCallPart, UserPart
from towline.models import FunctionModel, ModelInfo
from towline.tools import ToolResult

__all__ = ["shop", "other", "charges", "lookups", "SHOP_MODEL", "OTHER_MODEL"]

SHOP_MODEL = "tt-shop-model"
OTHER_MODEL = "tt-other-model"

charges: list[str] = []
"""The idempotency key of every execution of `charge`."""
lookups: list[str] = []
"""The idempotency key of every execution of `lookup`."""


@tool
def charge(ctx: ToolContext, amount: int) -> str:
    """Charge the customer (not idempotent: it would charge twice)."""
    charges.append(ctx.idempotency_key)
    return f"charged {amount}"


@tool(idempotent=True)
def lookup(ctx: ToolContext, item: str) -> ToolResult:
    """Look an item up (idempotent); remembers it in the run state."""
    lookups.append(ctx.idempotency_key)
    return ToolResult(content=f"{item} is in stock", state={"looked_up": item})


def _last_user_text(messages: list[Message]) -> str:
    for m in reversed(messages):
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, UserPart) and isinstance(p.content, str):
                    return p.content
    return ""


def script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Charge, look up, then answer; the answer names the model and the last user message."""
    made = sum(isinstance(m, ModelResponse) for m in messages)
    if made == 0:
        return ModelResponse(parts=[ToolCallPart(tool_name="charge", args={"amount": 5},
                                                 tool_call_id="c1")])
    if made == 1:
        return ModelResponse(parts=[ToolCallPart(tool_name="lookup", args={"item": "widget"},
                                                 tool_call_id="c2")])
    return f"done by {info.model_name}: {_last_user_text(messages)}"


def _count_turn(state: dict[str, Any]) -> dict[str, Any]:
    return {"turns": 1}


turns = Middleware("turns", before_model=_count_turn,
                   state_schema={"turns": (0, operator.add), "looked_up": None})

shop = Agent(name="tt-shop", model=FunctionModel(script, model_name=SHOP_MODEL),
             instructions="You run a shop.", tools=[charge, lookup], capabilities=[turns])
other = FunctionModel(script, model_name=OTHER_MODEL)
