"""The run's typed context reaches middleware, and handoffs keep it typed (issue 40, porting 1).

Capability hooks read the context (`ModelRequestState.context`); middleware hooks
(`before_model`, `wrap_model_call`, `after_model`) did not get it at all. They now get a copy
each: what one changes reaches neither the run nor the next hook. And a run keeps its context
when it is handed off, typed with the running agent's `context_type` on the worker: an agent
that hands off to one with another `context_type` is refused when it is registered, naming
both agents.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client

from towline import Agent, ConfigurationError, Middleware, TowlinePlugin
from towline.capabilities import Handoff
from towline.capabilities.state import ModelCallRequest
from towline.client import run
from towline.messages import Message, ModelRequest, ModelResponse, SystemPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker

pytestmark = [pytest.mark.timeout(120)]


class Account(BaseModel):
    user_id: int
    tier: str = "basic"


class Order(BaseModel):
    order_id: str


def _seen(context: Any) -> str:
    return f"{type(context).__name__}:{context.user_id}:{context.tier}"


def before(state: dict[str, Any]) -> dict[str, Any]:
    account: Account = state["context"]
    seen = _seen(account)
    account.tier = "hacked"  # a copy: neither the run nor the next hook sees it
    return {"seen_before": seen}


def after(state: dict[str, Any]) -> dict[str, Any]:
    return {"seen_after": _seen(state["context"])}


def wrapper(name: str) -> Any:
    async def wrap(request: ModelCallRequest, next_call: Any) -> ModelResponse:
        seen = f"{name} saw {_seen(request.context)}"
        request.context.tier = "hacked"  # passed on to `next`: the next wrapper gets its own copy
        note = ModelRequest(parts=[SystemPart(content=seen)])
        return await next_call(request.model_copy(update={"messages": [note, *request.messages]}))
    return wrap


def echo(messages: list[Message], info: ModelInfo) -> str:
    """Answers with the system texts the wrappers put first."""
    return json.dumps([str(p.content) for m in messages for p in getattr(m, "parts", [])
                       if isinstance(p, SystemPart) and " saw " in str(p.content)])


middleware_agent = Agent(
    name="i40-middleware-context", model=FunctionModel(echo, model_name="i40-echo"),
    context_type=Account,
    capabilities=[
        Middleware("watch", before_model=before, after_model=after,
                   state_schema={"seen_before": "", "seen_after": ""}),
        Middleware("outer", wrap_model_call=wrapper("outer")),
        Middleware("inner", wrap_model_call=wrapper("inner")),
    ])


@pytest.mark.asyncio(loop_scope="session")
async def test_middleware_hooks_read_the_typed_context_as_a_copy(client: Client) -> None:
    async with towline_worker(client, [middleware_agent]) as (tc, queue):
        result = await run(tc, middleware_agent, "who?", task_queue=queue,
                           context={"user_id": 7})
    assert result.state["seen_before"] == "Account:7:basic"
    assert result.state["seen_after"] == "Account:7:basic"  # the edits before reached nothing
    assert sorted(json.loads(result.output)) == ["inner saw Account:7:basic",
                                                 "outer saw Account:7:basic"]


def _desk(name: str, context_type: type[BaseModel] | None, target: Agent | None = None) -> Agent:
    return Agent(name=name, model="test", context_type=context_type,
                 capabilities=[Handoff(target)] if target is not None else [])


def test_a_handoff_to_an_agent_of_another_context_type_is_refused_when_registered() -> None:
    orders = _desk("i40-orders", Order)
    triage = _desk("i40-triage", Account, orders)
    with pytest.raises(ConfigurationError) as refused:
        TowlinePlugin(agents=[triage])
    said = str(refused.value)
    assert "'i40-triage'" in said and "'i40-orders'" in said, said
    assert "Order" in said and "Account" in said, said
    with pytest.raises(ConfigurationError, match="'i40-untyped-triage'.*'i40-orders'"):
        TowlinePlugin(agents=[_desk("i40-untyped-triage", None, orders), orders])
    # the same type, or a target without one (it gets the plain JSON), are taken
    TowlinePlugin(agents=[_desk("i40-triage-2", Account, _desk("i40-billing", Account))])
    TowlinePlugin(agents=[_desk("i40-triage-3", Account, _desk("i40-faq", None))])
