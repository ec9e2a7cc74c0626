"""Calling hooks inside a run: enforcement for model hooks, accumulation for middleware.

Model hooks (`before_model_request`, `after_model_request`) get the state and
must return a state. After every callback the six runtime-owned counters are
restored from the confirmed values; a result that is not a state, lacks
fields, or replaces an internal field fails the run with `CapabilityViolation`.

Middleware updates accumulate over a turn: `messages` instructions apply in
order, `llm_usage` is summed, other keys are last-write-wins, and a custom
reducer is applied once, at commit.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from towline.capabilities.base import (
    CapabilityLike,
    Middleware,
    cap_name,
    cap_state_schema,
    hook_of,
)
from towline.capabilities.state import (
    INTERNAL,
    RUNTIME_OWNED,
    AgentView,
    ModelRequestParams,
    ModelRequestState,
)
from towline.errors import (
    CapabilityViolation,
    ContentBlocked,
    GuardrailTripped,
    RunFailure,
    is_runtime_failure,
    runtime_failure,
)
from towline.messages import (
    MESSAGES,
    Message,
    ModelRequest,
    ModelResponse,
    Remove,
    RemoveAll,
    Usage,
)
from towline.options import ModelSettings
from towline.runtime.escapes import raised_name
from towline.runtime.fingerprint import describe_capability
from towline.runtime.registry import worker_agents
from towline.telemetry import tracing as telemetry

from .guard import Guard, guarded, guarded_sync, is_user_code

__all__ = [
    "maybe_await", "run_model_hooks", "TurnUpdate", "apply_reducers", "copy_messages",
    "check_jsonable", "JUMPS", "hook_failure", "call_hook",
]

JUMPS = ("model", "tools", "end")



def copy_messages(messages: Sequence[Message]) -> list[Message]:
    """Validated deep copies of `messages`, for hooks: in-place edits never reach the history."""
    return MESSAGES.validate_python(MESSAGES.dump_python(list(messages), warnings=False))


def check_jsonable(value: Any, what: str) -> Any:
    """`value`, if it can be persisted as JSON (run state is); else the run fails."""
    try:
        to_jsonable_python(value)
    except (PydanticSerializationError, ValueError, TypeError) as e:
        raise CapabilityViolation(f"{what}, a value that is not JSON: {e}") from None
    return value


def hook_failure(error: Exception, where: str) -> RunFailure:
    """What an exception raised by a hook (`where`: capability.hook) does to the run.

    A failure the runtime raised while the hook awaited it (its own `call_model`,
    the wrapped model call, a cancellation) passes through unchanged. `ContentBlocked`
    and `GuardrailTripped` are the deliberate ways for hook code to end a run: the first is
    told where it came from, the second names its guardrail already. Anything else, a
    `RunFailure` subclass included, is a `CapabilityViolation` naming the capability and
    the hook (and what it raised: `SystemExit`, say, which the guard contained,
    `towline.runtime.escapes`).
    """
    if is_runtime_failure(error):
        return error
    if isinstance(error, GuardrailTripped):
        return runtime_failure(error)
    if isinstance(error, ContentBlocked):
        return runtime_failure(ContentBlocked(f"{where}: {error.message}"))
    text = error.message if isinstance(error, RunFailure) else str(error)
    return CapabilityViolation(f"{where} raised {raised_name(error)}: {text}")


async def call_hook(cap: CapabilityLike, where: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call one hook of `cap` as workflow code: under the determinism guard (when it is
    user code), and checking that it left the capability's configuration (shared by every
    run) as it was."""
    try:
        if not is_user_code(fn, None if isinstance(cap, Middleware) else cap):
            return await maybe_await(fn(*args))
        return await guarded(Guard(where), fn, *args)
    finally:
        _check_unchanged(cap, where)


def _check_unchanged(cap: CapabilityLike, where: str) -> None:
    """Fail the run if a hook changed its capability in place (and undo the change)."""
    worker = worker_agents()
    entry = worker.watched.get(id(cap)) if worker is not None else None
    if entry is None:
        return
    before, attributes = entry
    after = describe_capability(cap)
    if after == before:
        return
    old: dict[str, Any] = before.get("config", {})
    new: dict[str, Any] = after.get("config", {})
    changed = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
    if attributes is not None:  # put the worker's copy back, for the runs after this one
        state: dict[str, Any] = vars(cap)
        state.clear()
        state.update(copy.deepcopy(attributes))
    raise runtime_failure(CapabilityViolation(
        f"{where} changed its capability's configuration ({', '.join(changed) or 'in place'}): "
        "a capability is shared by every run on the worker, so it must hold configuration "
        "only; keep per-run values in state (state_schema), which runs persist and replay"
    ))


async def maybe_await(value: Any) -> Any:
    """Await `value` if it is awaitable (hooks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


def _check_state(result: Any, confirmed: ModelRequestState, where: str) -> ModelRequestState:
    if not isinstance(result, ModelRequestState):
        raise CapabilityViolation(f"{where} returned {type(result).__name__}, not a ModelRequestState")
    # Hook results are untrusted: every field is checked at runtime, whatever its type says.
    untrusted: Any = result
    missing = [f for f in ModelRequestState.model_fields if f not in untrusted.__dict__]
    if missing:
        raise CapabilityViolation(f"{where} returned a state without {', '.join(missing)}")
    if not isinstance(untrusted.agent, AgentView):
        raise CapabilityViolation(f"{where} returned a state whose agent was removed or replaced")
    for name in INTERNAL:
        if name == "validators":
            same = result.validators is confirmed.validators
        else:
            same = getattr(result, name) == getattr(confirmed, name)
        if not same:
            raise CapabilityViolation(f"{where} replaced the internal field {name!r}")
    checks: dict[str, type | tuple[type, ...]] = {
        "model": str, "settings": ModelSettings, "params": ModelRequestParams,
        "request_messages": list,
    }
    for name, kind in checks.items():
        if not isinstance(getattr(result, name), kind):
            raise CapabilityViolation(f"{where} set {name!r} to an invalid value")
    sent: list[Any] = untrusted.request_messages
    if not all(isinstance(m, ModelRequest | ModelResponse) for m in sent):
        raise CapabilityViolation(f"{where} put a non-message in request_messages")
    if untrusted.response is not None and not isinstance(untrusted.response, ModelResponse):
        raise CapabilityViolation(f"{where} set 'response' to an invalid value")
    if confirmed.response is not None and result.response is None:
        raise CapabilityViolation(f"{where} removed the response")
    return result


def _fresh(result: ModelRequestState, where: str) -> dict[str, Any]:
    """The hook-editable fields of `result`, re-validated into fresh objects.

    `model_copy(update=...)` does not validate, so a hook can hand back, say, tool
    names where definitions belong, or a tool call whose arguments are a list;
    that fails the run here (not the workflow task, later). Fresh objects also
    mean nothing a hook still holds (or got from the agent, like its settings)
    is shared with the next hook, the request or the history.
    """
    untrusted: Any = result
    response: ModelResponse | None = untrusted.response
    try:
        return {
            "request_messages": copy_messages(untrusted.request_messages),
            "settings": ModelSettings.model_validate(untrusted.settings.model_dump(warnings=False)),
            "params": ModelRequestParams.model_validate(
                untrusted.params.model_dump(warnings=False)),
            "agent": AgentView.model_validate(untrusted.agent.model_dump(warnings=False)),
            "response": None if response is None
            else ModelResponse.model_validate(response.model_dump(warnings=False)),
        }
    except (ValidationError, PydanticSerializationError) as e:
        raise CapabilityViolation(f"{where} returned an invalid state: {e}") from None


def restore(
    result: ModelRequestState, confirmed: ModelRequestState, where: str
) -> ModelRequestState:
    """`result` with the confirmed runtime-owned values put back (writes to them are ignored).

    Built from `confirmed` (a plain `ModelRequestState`, so a subclass a hook
    returns cannot keep its writes), with fresh copies each time, so a hook
    mutating what it was given in place (a dict or list) cannot reach the
    confirmed values, the canonical history or what the next hook sees.
    """
    update: dict[str, Any] = {
        name: copy.deepcopy(getattr(confirmed, name)) for name in RUNTIME_OWNED
    }
    update.update(_fresh(result, where))
    update["model"] = result.model
    update["messages"] = list(confirmed.messages)
    update["state"] = copy.deepcopy(confirmed.state)
    update["context"] = copy.deepcopy(confirmed.context)  # read-only: a copy for each hook
    update["agent"] = update["agent"].model_copy(
        update={"output_retries": confirmed.agent.output_retries, "name": confirmed.agent.name}
    )
    return confirmed.model_copy(update=update)


def _snapshot(state: ModelRequestState) -> ModelRequestState:
    """A private copy of the confirmed values, which no hook ever receives."""
    return state.model_copy(update={
        **{name: copy.deepcopy(getattr(state, name)) for name in RUNTIME_OWNED},
        "agent": state.agent.model_copy(), "messages": copy_messages(state.messages),
        "state": copy.deepcopy(state.state), "context": copy.deepcopy(state.context),
    })


async def run_model_hooks(
    caps: Sequence[CapabilityLike], hook: str, state: ModelRequestState
) -> ModelRequestState:
    """Apply `hook` of every capability in order, enforcing the run's invariants."""
    if all(hook_of(cap, hook) is None for cap in caps):
        return state  # nothing to enforce, and no copies to make
    confirmed = _snapshot(state)
    state = restore(state, confirmed, f"the runtime's {hook} state")
    for cap in caps:
        fn = hook_of(cap, hook)
        if fn is None:
            continue
        where = f"{cap_name(cap)}.{hook}"
        with telemetry.hook_span(where):
            try:
                result = await call_hook(cap, where, fn, state)
            except Exception as e:
                raise hook_failure(e, where) from e
            state = restore(_check_state(result, confirmed, where), confirmed, where)
    return state


class TurnUpdate:
    """The accumulated middleware update of one turn."""

    def __init__(
        self,
        messages: list[Message],
        state: Mapping[str, Any],
        schema: Mapping[str, Any],
        new_id: Callable[[], str],
    ) -> None:
        self.messages = list(messages)
        self.base = dict(state)
        self.schema = schema
        self.values: dict[str, Any] = {}
        self.writers: dict[str, str] = {}
        """The hook (`Capability.hook`) that last wrote each key of `values`."""
        self.llm_usage = Usage()
        self.jump: str | None = None
        self._new_id = new_id

    def view(self, **extra: Any) -> dict[str, Any]:
        """The working state a middleware hook sees (a copy: mutating it changes nothing);
        the run's `context` (a copy too) comes as `extra`."""
        return {"messages": copy_messages(self.messages), **self.working_state(), **extra}

    def working_state(self) -> dict[str, Any]:
        """Contributed keys as the model sees them this turn (last writes, no reducers yet).

        A deep copy, so a hook mutating a value in place (a list, say) cannot reach
        the committed state or what later hooks see.
        """
        return copy.deepcopy({**self.base, **self.values})

    def apply(self, update: Any, where: str, *, allow_jump: bool) -> None:
        """Fold one hook's update in; invalid updates fail the run."""
        if update is None:
            return
        if not isinstance(update, Mapping):
            raise CapabilityViolation(f"{where} returned {type(update).__name__}, not an update mapping")
        items: Mapping[Any, Any] = update  # pyright: ignore[reportUnknownVariableType]
        for key, value in items.items():
            if key == "messages":
                self._apply_messages(value, where)
            elif key == "llm_usage":
                try:
                    usage = value if isinstance(value, Usage) else Usage.model_validate(value)
                except ValidationError as e:
                    raise CapabilityViolation(f"{where} returned invalid llm_usage: {e}") from e
                self.llm_usage = self.llm_usage + usage
            elif key == "jump_to":
                if not allow_jump:
                    raise CapabilityViolation(f"{where}: jump_to is only honoured in after_model")
                if value is not None and value not in JUMPS:
                    raise CapabilityViolation(f"{where}: jump_to must be one of {JUMPS}, not {value!r}")
                self.jump = value
            elif key == "context":
                raise CapabilityViolation(f"{where} wrote 'context': the run's context is "
                                          "read-only (a hook gets a copy of it)")
            elif key in self.schema:
                self.values[key] = check_jsonable(value, f"{where} wrote {key!r}")
                self.writers[key] = where
            else:
                raise CapabilityViolation(f"{where} wrote {key!r}, which no state_schema declares")

    def _apply_messages(self, value: Any, where: str) -> None:
        instructions: list[Any] = (
            list(value) if isinstance(value, list | tuple) else [value]  # pyright: ignore[reportUnknownArgumentType]
        )
        for item in instructions:
            if isinstance(item, RemoveAll):
                self.messages = []
            elif isinstance(item, Remove):
                self.messages = [m for m in self.messages if m.id != item.id]
            elif isinstance(item, ModelRequest | ModelResponse):
                try:  # a fresh, valid copy: the hook keeps no handle on the history
                    [message] = copy_messages([item])
                except (ValidationError, PydanticSerializationError) as e:
                    raise CapabilityViolation(f"{where} returned an invalid message: {e}") from None
                self.messages.append(
                    message if message.id else message.model_copy(update={"id": self._new_id()})
                )
            else:
                raise CapabilityViolation(f"{where} returned a non-message in 'messages': {item!r}")


def apply_reducers(
    committed: Mapping[str, Any], values: Mapping[str, Any], schema: Mapping[str, Any],
    caps: Sequence[CapabilityLike] = (),
) -> dict[str, Any]:
    """The committed state after a turn: each written key reduced once (or replaced).

    A reducer is user code run as workflow code, so it runs under the determinism
    guard, named after the capability (of `caps`) that declares its key.
    """
    out = dict(committed)
    for key, value in values.items():
        spec: Any = schema.get(key)
        if _is_reducer_pair(spec):
            reducer: Callable[[Any, Any], Any] = spec[1]
            try:
                if is_user_code(reducer):
                    guard = Guard(f"{_declaring(caps, key)}.state_schema[{key!r}] reducer")
                    out[key] = guarded_sync(guard, reducer, committed.get(key), value)
                else:
                    out[key] = reducer(committed.get(key), value)
            except Exception as e:
                if is_runtime_failure(e):
                    raise
                raise CapabilityViolation(
                    f"the reducer of state key {key!r} raised {raised_name(e)}: {e}"
                ) from e
            check_jsonable(out[key], f"the reducer of state key {key!r} returned")
        else:
            out[key] = value
    return out


def _declaring(caps: Sequence[CapabilityLike], key: str) -> str:
    """The name of the capability whose `state_schema` declares `key` (the last one wins)."""
    names = [cap_name(cap) for cap in caps if key in cap_state_schema(cap)]
    return names[-1] if names else "state"


def _is_reducer_pair(spec: Any) -> bool:
    """Whether a state_schema entry is `(default, reducer)` rather than a plain default."""
    return isinstance(spec, tuple) and len(spec) == 2 and callable(spec[1])  # pyright: ignore[reportUnknownArgumentType]


def where_of(cap: CapabilityLike, hook: str) -> str:
    """`"<capability>.<hook>"`, as failures name it."""
    return f"{cap_name(cap)}.{hook}"
