"""A bank's support agent: a typed run context, worker-side dependencies, dynamic instructions.

`towline run examples.bank_support:agent "What is my balance?" --context '{"customer_id": 123}'
--deps examples.bank_support:database` runs it offline. The run's context (`SupportContext`,
the agent's `context_type`) says which customer asks; it is plain JSON in the run's input,
validated when the run starts. The database connection (`DatabaseConn`, a stand-in for a
pool) is a worker-side dependency: handed to `TowlinePlugin(deps=...)` (or `--deps`), never
serialised. The instructions are a function that looks the customer's name up: it runs as
an activity once per run, and its text is recorded in the history. The model is a small
deterministic stand-in (`support_model`), so the example needs no API key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from towline import Agent, InstructionsContext, ToolContext, tool
from towline.messages import Message, ModelResponse, SystemPart, ToolCallPart, ToolReturnPart
from towline.models import FunctionModel, ModelInfo

__all__ = ["agent", "SupportContext", "DatabaseConn", "database", "support_model", "balance",
           "support_instructions"]


class SupportContext(BaseModel):
    """The run's context: who is asking."""

    customer_id: int
    """The bank's id of the customer."""


@dataclass
class DatabaseConn:
    """A stand-in for a database pool: lives on the worker, never in a run's history."""

    names: dict[int, str] = field(default_factory=lambda: {123: "John"})
    balances: dict[int, float] = field(default_factory=lambda: {123: 123.45})
    pending: dict[int, float] = field(default_factory=lambda: {123: 100.0})
    lookups: int = 0
    """How many queries it answered (the tests count them)."""

    async def customer_name(self, customer_id: int) -> str | None:
        """The customer's name, if known."""
        self.lookups += 1
        return self.names.get(customer_id)

    async def customer_balance(self, customer_id: int, *, include_pending: bool) -> float:
        """The customer's balance, with the pending payments or without."""
        self.lookups += 1
        if customer_id not in self.balances:
            raise ValueError("customer not found")
        return self.balances[customer_id] + (self.pending[customer_id] if include_pending else 0)


database = DatabaseConn()
"""The worker's connection (`TowlinePlugin(deps=database)`, `towline run --deps ...`)."""


async def support_instructions(ctx: InstructionsContext) -> str:
    """The instructions, with the customer's name: a lookup, so an activity (once per run)."""
    db: DatabaseConn = ctx.deps
    name = await db.customer_name(ctx.context.customer_id)
    return (f"You are a support agent in our bank. The customer's name is {name!r}. "
            "Give the customer support and judge the risk level of their query.")


@tool
async def balance(ctx: ToolContext, include_pending: bool) -> str:
    """The customer's current account balance."""
    db: DatabaseConn = ctx.deps
    amount = await db.customer_balance(ctx.context.customer_id, include_pending=include_pending)
    return f"${amount:.2f}"


def support_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Asks for the balance (pending payments included), then answers with it by name."""
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart(tool_name="balance",
                                                 args={"include_pending": True})])
    system = [p.content for m in messages for p in getattr(m, "parts", [])
              if isinstance(p, SystemPart)]
    name = system[0].split("name is ", 1)[1].split(".", 1)[0] if system else "customer"
    return f"Hello {name.strip(chr(39))}, your current balance is {returns[-1].content}."


agent = Agent(name="bank-support", model=FunctionModel(support_model, model_name="support-offline"),
              instructions=support_instructions, context_type=SupportContext, tools=[balance])
