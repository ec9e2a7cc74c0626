"""One turn of a run: middleware and capability hooks around the model activity.

Order: `before_model` (first → last) → `before_model_request` → the
`wrap_model_call` chain (first outermost) around the model activity → usage
merged → `after_model_request` → `after_model` (last → first) → commit and
persist. Tool admission and execution follow in `tool_exec`.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from towline.capabilities.base import CapabilityLike, hook_of
from towline.capabilities.state import (
    AgentView,
    ModelCallRequest,
    ModelRequestParams,
    ModelRequestState,
    PreparedValidators,
    RunScope,
)
from towline.errors import (
    CapabilityViolation,
    PayloadTooLarge,
    RunFailure,
    UsageLimitExceeded,
    runtime_failure,
)
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    RequestPart,
    SystemPart,
    ToolCallPart,
    Usage,
)
from towline.telemetry import tracing as telemetry
from towline.tools import HANDOFF_KEY, ToolDefinition

from .hooks import (
    TurnUpdate,
    apply_reducers,
    call_hook,
    hook_failure,
    run_model_hooks,
    where_of,
)
from .model_call import request_model
from .output import output_instructions
from .run import Run, check_state_fits
from .steering import interruptible
from .tool_exec import refuse_too_many_calls

__all__ = ["TurnOutcome", "run_turn", "render_instructions"]


@dataclass
class TurnOutcome:
    """What a committed turn produced: the response, its executable tools, and any jump."""

    response: ModelResponse
    executable: dict[str, ToolDefinition]
    jump: str | None
    output_tools: list[ToolDefinition] = field(default_factory=list[ToolDefinition])


def render_instructions(
    messages: list[Message], instructions: str | None, output: str | None = None
) -> list[Message]:
    """What is sent: the instructions first (their own message), then `messages`.

    `output` is what the prompted output mode asks for (`output.output_instructions`): a
    system part after the agent's instructions, in the same message.
    """
    parts: list[RequestPart] = [SystemPart(content=t) for t in (instructions, output) if t]
    if not parts:
        return list(messages)
    return [ModelRequest(id="instructions", parts=parts), *messages]


def _offered(run: Run) -> list[ToolDefinition]:
    allowed = run.inventory.allowed_tools
    return [t.definition() for t in run.inventory.tools.values()
            if allowed is None or t.name in allowed or HANDOFF_KEY in t.metadata]


def _validated(response: Any, where: str) -> ModelResponse:
    """A fresh, valid copy of a response a hook (or wrapper) produced.

    `model_copy(update=...)` skips validation, so a tool call's args may not even
    be a dict; that fails the run here rather than the workflow task later. The
    copy also keeps a hook from editing the history through a handle it kept.
    """
    if not isinstance(response, ModelResponse):
        raise CapabilityViolation(f"{where} returned {type(response).__name__}, not a ModelResponse")
    try:
        return ModelResponse.model_validate(response.model_dump(warnings=False))
    except (ValidationError, PydanticSerializationError) as e:
        raise CapabilityViolation(f"{where} returned an invalid ModelResponse: {e}") from None


def normalize(run: Run, response: Any, where: str) -> ModelResponse:
    """Give a response and its tool calls ids (generated: unique and deterministic)."""
    response = _validated(response, where)
    parts = [
        p.model_copy(update={"tool_call_id": f"call_{run.conversation.new_id()}"})
        if isinstance(p, ToolCallPart) and not p.tool_call_id else p
        for p in response.parts
    ]
    update: dict[str, Any] = {"parts": parts}
    if not response.id:
        update["id"] = run.conversation.new_id()
    return response.model_copy(update=update)


async def run_turn(run: Run, step: int) -> TurnOutcome:
    """Run one turn up to and including commit; returns the admitted response."""
    turn = TurnUpdate(run.conversation.messages, run.state, run.agent.state_schema, run.conversation.new_id)
    try:
        return await _turn(run, step, turn)
    except RunFailure:
        _keep_spent(run, turn)
        raise


def _keep_spent(run: Run, turn: TurnUpdate) -> None:
    """A failed turn still counts what hooks spent, and keeps what `before_model` said.

    The partial run then shows the history as the model last saw it (a summary a
    hook wrote, say), and the ledger every token paid for.
    """
    run.conversation.messages = list(turn.messages)
    run.ledger.add_usage(turn.llm_usage)
    turn.llm_usage = Usage()


async def _turn(run: Run, step: int, turn: TurnUpdate) -> TurnOutcome:
    agent = run.agent
    caps: Sequence[CapabilityLike] = agent.capabilities
    for cap in caps:
        fn = hook_of(cap, "before_model")
        if fn is not None:
            turn.apply(await _call(cap, fn, where_of(cap, "before_model"), turn.view(**_context(run))),
                       where_of(cap, "before_model"), allow_jump=False)

    output_tool = agent.output_tool()
    if output_tool is not None:  # the run's own limit, which its input may have overridden
        output_tool = output_tool.model_copy(update={"max_retries": run.limits.output_retries})
    # Built without validation: every value comes from the runtime's own validated
    # records, and validating the history again would cost time linear in its length
    # at every step. Hook results are validated (`hooks._fresh`).
    state = ModelRequestState.model_construct(
        messages=list(turn.messages), request_messages=list(turn.messages),
        model=run.model, settings=run.settings,  # streaming: `RunInput.stream`
        params=ModelRequestParams(
            function_tools=_offered(run),
            output_tools=[output_tool] if output_tool else [],
            native_tools=list(agent.native_tools),
        ),
        agent=AgentView(name=agent.name,  # a function's text, as recorded
                        instructions=run.instructions.get(agent.name, agent.static_instructions),
                        output_retries=run.limits.output_retries),
        state=turn.working_state(), context=run.context,
        tool_retries=dict(run.ledger.counters.tool_retries),
        output_retries_used=run.ledger.counters.output_retries_used,
        run_step=step, tool_calls=run.ledger.counters.tool_calls, max_steps=run.limits.max_steps,
        run_id=run.run_id,
        scope=RunScope(run_id=run.run_id, agent=agent.name, allowed_tools=run.inventory.allowed_tools),
        validators=PreparedValidators(frozenset(run.inventory.tools)), usage=run.ledger.usage,
    )
    state = await run_model_hooks(caps, "before_model_request", state)

    authorised = {d.name for d in _offered(run)}
    selected = [d for d in state.params.function_tools if d.name in authorised]
    request = ModelCallRequest.model_construct(
        messages=render_instructions(state.request_messages, state.agent.instructions,
                                     output_instructions(agent)),
        tools=selected, state=turn.working_state(), model=state.model, settings=state.settings,
        output_tools=state.params.output_tools, native_tools=state.params.native_tools,
        run_step=step,  # its `context`: each wrap_model_call hook's own copy (`_wrap`)
    )
    response, offered = await _call_chain(run, caps, request, {d.name for d in selected}, step)
    refuse_too_many_calls(response, step)

    after = state.model_copy(update={"response": response, "usage": run.ledger.usage})
    after = await run_model_hooks(caps, "after_model_request", after)
    assert after.response is not None
    response = normalize(run, after.response, "after_model_request")

    turn.messages.append(response)  # from here on, a failure keeps it in the partial run
    for cap in reversed(caps):
        fn = hook_of(cap, "after_model")
        if fn is not None:
            turn.apply(await _call(cap, fn, where_of(cap, "after_model"), turn.view(**_context(run))),
                       where_of(cap, "after_model"), allow_jump=True)

    run.conversation.messages = turn.messages
    state_after = apply_reducers(run.state, turn.values, agent.state_schema, caps)
    if turn.values:  # too large: not committed (the partial run keeps it out)
        check_state_fits(state_after, turn.writers, run.payload_limit)
    run.state = state_after
    run.ledger.add_usage(turn.llm_usage)
    turn.llm_usage = Usage()
    run.ledger.merge_reported_usage()
    run.ledger.confirm()
    executable = {d.name: d for d in offered}
    return TurnOutcome(response, executable, turn.jump, list(state.params.output_tools))


async def _call(cap: CapabilityLike, fn: Callable[..., Any], where: str, *args: Any) -> Any:
    with telemetry.hook_span(where):
        try:
            return await call_hook(cap, where, fn, *args)
        except Exception as e:
            raise hook_failure(e, where) from e


async def _call_chain(
    run: Run, caps: Sequence[CapabilityLike], request: ModelCallRequest,
    authorised: set[str], step: int,
) -> tuple[ModelResponse, list[ToolDefinition]]:
    """Run the wrap_model_call chain; returns the response and the tools it was offered."""
    made: list[tuple[list[ToolDefinition], ModelResponse]] = []
    limit_hit: list[UsageLimitExceeded] = []
    run.ledger.bump(run_step=step)
    mode = run.agent.output_mode
    schema = run.agent.output_schema() if mode != "tool" else None  # native: the response format

    async def innermost(req: ModelCallRequest) -> ModelResponse:
        if not isinstance(req, ModelCallRequest):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise CapabilityViolation(f"wrap_model_call passed {type(req).__name__} to next")
        limit = run.limits.request_limit
        if limit is not None and run.ledger.requests_paid() >= limit:
            limit_hit.append(runtime_failure(UsageLimitExceeded(f"request_limit {limit} reached")))
            raise limit_hit[-1]
        try:
            run.ledger.check_spend()  # e.g. a wrapper's second call
        except UsageLimitExceeded as e:
            limit_hit.append(e)
            raise
        tools = [d for d in req.tools if d.name in authorised]  # wrappers narrow, never widen
        try:
            # a busy session's `send` may interrupt it (`steering`)
            call = await interruptible(run.steering, lambda: request_model(
                run, req.model, req.messages, tools=tools, output_tools=req.output_tools,
                output_mode=mode, output_schema=schema, native_tools=req.native_tools,
                settings=req.settings, run_step=step, agent=run.agent.name,
                timeout=run.agent.model_timeout, retry_policy=run.agent.model_retry_policy,
                heartbeat_timeout=run.agent.model_heartbeat_timeout,
                poll_interval=run.agent.model_poll_interval,
                poll_max_interval=run.agent.model_poll_max_interval,
                background_timeout=run.agent.model_background_timeout,
                max_requests=None if limit is None else limit - run.ledger.counters.requests,
                answered=lambda piece: _answered(run, piece),
            ))
        except RunFailure as e:
            _count_spent(run, e)
            if isinstance(e, UsageLimitExceeded):
                limit_hit.append(e)
            raise
        response = call.response
        run.ledger.bump(requests=run.ledger.counters.requests + 1)  # the call's last request
        run.ledger.add_usage(call.unreported)
        response = normalize(run, response, "model")
        made.append((tools, response))
        return response

    chain: Callable[[ModelCallRequest], Awaitable[ModelResponse]] = innermost
    for cap in reversed(caps):
        fn = hook_of(cap, "wrap_model_call")
        if fn is not None:
            chain = _wrap(cap, fn, chain, where_of(cap, "wrap_model_call"), run)
    response = normalize(run, await chain(request), "wrap_model_call")
    if limit_hit:
        raise limit_hit[0]
    for tools, made_response in reversed(made):
        if made_response.id == response.id:
            return response, tools
    return response, (made[-1][0] if made else list(request.tools))


def _answered(run: Run, piece: ModelResponse) -> None:
    """A piece of a paused turn is done: counted now, so the request that continues
    it carries it in its ledger header, and checked against the run's spending limits."""
    run.ledger.bump(requests=run.ledger.counters.requests + 1)
    run.ledger.add_usage(piece.usage)
    run.ledger.check_spend()


def _count_spent(run: Run, failure: RunFailure) -> None:
    """A model call that failed after the model answered still counts what it spent: a
    response too large to return."""
    usage = failure.extra.get("usage")
    if isinstance(failure, PayloadTooLarge) and isinstance(usage, Usage):
        run.ledger.bump(requests=run.ledger.counters.requests + 1)  # the model did answer
        run.ledger.add_usage(usage)


def _context(run: Run) -> dict[str, Any]:
    """What gives a middleware hook the run's context, when it has one
    (`ModelCallRequest.context`, the `context` key of its state): a copy, so that what it
    changes in it reaches nothing."""
    return {"context": copy.deepcopy(run.context)} if run.context is not None else {}


def _wrap(
    cap: CapabilityLike, fn: Callable[..., Any],
    inner: Callable[[ModelCallRequest], Awaitable[ModelResponse]], where: str, run: Run,
) -> Callable[[ModelCallRequest], Awaitable[ModelResponse]]:
    async def wrapped(req: ModelCallRequest) -> ModelResponse:
        fresh = _context(run)  # each wrapper its own copy, whatever the outer one passed on
        if fresh and isinstance(req, ModelCallRequest):  # pyright: ignore[reportUnnecessaryIsInstance]
            req = req.model_copy(update=fresh)
        return _validated(await _call(cap, fn, where, req, inner), where)

    return wrapped
