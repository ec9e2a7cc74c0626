"""The ledger recordings (issue 29): runs whose confirmed counters ride on the headers of
the activities they schedule, for `scripts/record_history.py`, `tests/test_replay.py` and the
contract tests (`tests/test_ledger_contract.py`).

Every agent here runs two capabilities that overwrite all six runtime-owned counters in both
model hooks, one in place on the state it is given, one in the copy it returns: the headers
must hold what the runtime confirmed all the same. The recordings: a plain run (a tool asks for
a retry, then succeeds), a failed one (`MaxStepsExceeded`), a session across two sends, a run
that continues as new, a sub-agent (its child run tampers too), and a hook that calls a model
(Summarization: its request carries the header as the run's own do).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import WorkflowHandle

from towline import Agent, Capability, Limits, ModelRequestState, ModelResponse, ToolCallPart, tool
from towline.capabilities import Subagent, Summarization
from towline.errors import ModelRetry
from towline.messages import Message
from towline.models import FunctionModel, Model, ModelInfo
from towline.results import Counters
from towline.runtime.fingerprint import agent_version
from towline.runtime.ledger import MEMO_KEY, to_proto
from towline.workflows import SendInput

__all__ = ["LEDGER_AGENTS", "LEDGER_MODELS", "TAMPERED", "wait_then_send_then_end",
           "SUMMARIZER", "start_memo"]

TAMPERED: dict[str, Any] = {
    "tool_retries": {"echo4": 0, "ghost": 5}, "output_retries_used": 9, "run_step": 0,
    "tool_calls": 77, "max_steps": 1000, "output_retries": 1000,
}
"""What the hooks write into each of the six runtime-owned counters."""

SUMMARIZER = "history-ledger-summarizer"
"""The model the hook-model agent's Summarization calls by name."""


@tool
def echo4(word: str, retry: bool = False) -> str:
    """Echo a word; asks the model to retry when told to."""
    if retry:
        raise ModelRetry("try again")
    return word


def _in_place(state: ModelRequestState) -> ModelRequestState:
    """Overwrite all six counters on the state the hook was given, and hand it back."""
    state.tool_retries.clear()
    state.tool_retries.update(TAMPERED["tool_retries"])
    for counter in ("output_retries_used", "run_step", "tool_calls", "max_steps"):
        object.__setattr__(state, counter, TAMPERED[counter])
    object.__setattr__(state.agent, "output_retries", TAMPERED["output_retries"])
    return state


def _by_copy(state: ModelRequestState) -> ModelRequestState:
    """Return a copy with all six counters overwritten."""
    return state.model_copy(update={
        **{k: v for k, v in TAMPERED.items() if k != "output_retries"},
        "tool_retries": dict(TAMPERED["tool_retries"]),
        "agent": state.agent.model_copy(update={"output_retries": TAMPERED["output_retries"]}),
    })


class TamperInPlace(Capability):
    """Overwrites every runtime-owned counter in place, in both model hooks."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return _in_place(state)

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return _in_place(state)


class TamperByCopy(Capability):
    """Overwrites every runtime-owned counter in the copy it returns, in both model hooks."""

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return _by_copy(state)

    def after_model_request(self, state: ModelRequestState) -> ModelRequestState:
        return _by_copy(state)


TAMPERING = [TamperInPlace, TamperByCopy]


def _echo(word: str, call_id: str, retry: bool = False) -> ModelResponse:
    args: dict[str, Any] = {"word": word, "retry": True} if retry else {"word": word}
    return ModelResponse(parts=[ToolCallPart(tool_name="echo4", args=args, tool_call_id=call_id)])


def plain_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Step 1: a call that asks for a retry; step 2: one that succeeds; step 3: the answer."""
    if info.run_step == 1:
        return _echo("a", "c1", retry=True)
    if info.run_step == 2:
        return _echo("b", "c2")
    return "done"


def calling_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """A call in every step (the run ends by a limit)."""
    return _echo(f"w{info.run_step}", f"w{info.run_step}")


def session_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Each turn: a call, then an answer."""
    if info.run_step % 2:
        return _echo(f"s{info.run_step}", f"s{info.run_step}")
    return f"answer {info.run_step}"


CONTINUED_STEPS = 4


def continued_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """A call in each of the first `CONTINUED_STEPS` steps, then the answer."""
    if info.run_step <= CONTINUED_STEPS:
        return _echo(f"n{info.run_step}", f"n{info.run_step}")
    return "done"


def child_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The child: one call, then its answer."""
    if info.run_step == 1:
        return _echo("x", "x1")
    return "child done"


def parent_script(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """The parent delegates once, then answers."""
    if info.run_step == 1:
        return ModelResponse(parts=[ToolCallPart(tool_name="task", args={"prompt": "echo x"},
                                                 tool_call_id="d1")])
    return "delegated"


def summarizer_script(messages: list[Message], info: ModelInfo) -> str:
    return "the user asked for echoes"


def _agent(name: str, script: Callable[[list[Message], ModelInfo], ModelResponse | str],
           **options: Any) -> Agent:
    capabilities = [*TAMPERING, *options.pop("capabilities", [])]
    return Agent(name=name, model=FunctionModel(script, model_name=f"{name}-model"),
                 tools=[echo4], capabilities=capabilities, **options)


plain_agent = _agent("history-ledger-plain", plain_script, limits=Limits(max_steps=6, output_retries=2))
max_steps_agent = _agent("history-ledger-max-steps", calling_script, limits=Limits(max_steps=2))
usage_agent = _agent("history-ledger-usage", calling_script,
                     limits=Limits(max_steps=6, total_tokens_limit=20))
session_agent = _agent("history-ledger-session", session_script)
continued_agent = _agent("history-ledger-continued", continued_script)
child_agent = _agent("history-ledger-child", child_script)
parent_agent = _agent("history-ledger-parent", parent_script, capabilities=[Subagent(child_agent)])
hook_model_agent = _agent("history-ledger-hook-model", plain_script,
                          capabilities=[Summarization(model=SUMMARIZER, trigger_messages=3, keep=2)],
                          limits=Limits(max_steps=6, output_retries=2))

LEDGER_AGENTS = [plain_agent, max_steps_agent, usage_agent, session_agent, continued_agent,
                 parent_agent, hook_model_agent]
"""The agents of the ledger recordings (the sub-agent's child comes with its parent)."""

LEDGER_MODELS: dict[str, Model] = {
    SUMMARIZER: FunctionModel(summarizer_script, model_name=SUMMARIZER),
}
"""The model the hook-model agent's Summarization calls by name."""


def start_memo(agent: Agent) -> dict[str, Any]:
    """The memo `start_run` sets in the start request of a run of `agent` (its visible
    counters before anything ran)."""
    return {MEMO_KEY: to_proto(Counters.starting(agent.limits, agent_version(agent)))}


async def _eventually(probe: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(600):
        if await probe():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run never reached the expected state")


async def wait_then_send_then_end(handle: WorkflowHandle[Any, Any]) -> None:
    """The session: wait for its first answer, send one more message, wait, then end it."""
    for answers in (1, 2):
        async def waiting(answers: int = answers) -> bool:
            state: dict[str, Any] = await handle.query("state")
            return state["status"] == "waiting" and state["counters"]["run_step"] == 2 * answers
        await _eventually(waiting)
        if answers == 1:
            await handle.execute_update("send", SendInput(content="again"))
    await handle.signal("end")
