"""What protecting hook code costs: the determinism guard per hook call, against the
alternative of re-importing the agent's module in Temporal's sandbox for every run.

    python bench/hook_guard.py            # a table
    python bench/hook_guard.py --json     # machine-readable

1. Per hook call (design b, what towline does): a hook called directly, and the same
   hook called the way a run calls it (`call_hook`: the guard's profiler watching its
   calls, and the check of the capability's configuration). User-written hooks: one
   that returns its state, a projection of the last messages, and one with more
   Python work (a token estimate over the conversation, five times). And towline's own
   `HistoryWindow`, whose code is towline's and is not watched.
2. Per run start (design a): creating a sandboxed workflow instance whose module
   imports an agent module (`examples.calculator`, re-imported in the sandbox with
   towline and third-party libraries passed through), against one whose module is
   passed through (AgentRun's today). The difference is what every run would pay.

Timings depend on the machine (the README quotes a 2-core container) and on its load:
read the ratios (guarded / direct, both measured in the same run, interleaved), and
compare two versions of the guard by their ratios, not by their microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from temporalio.api.common.v1 import Payloads
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter
from temporalio.worker import WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _fake_info  # pyright: ignore[reportPrivateUsage]
from temporalio.workflow import _Definition  # pyright: ignore[reportPrivateUsage]

from towline import Capability, ModelRequest, ModelResponse, TextPart, UserPart
from towline.capabilities import HistoryWindow
from towline.capabilities.state import (
    AgentView,
    ModelRequestParams,
    ModelRequestState,
    PreparedValidators,
    RunScope,
)
from towline.capabilities.summarization import estimate_tokens
from towline.messages import Message, Usage
from towline.options import ModelSettings
from towline.runtime.plugin import PASSTHROUGH_MODULES
from towline.workflows import AgentRun
from towline.workflows.hooks import call_hook, maybe_await


def _state(n: int) -> ModelRequestState:
    messages: list[Message] = []
    for i in range(n):
        messages.append(ModelRequest(id=f"q{i}", parts=[UserPart(content=f"question {i} " * 20)]))
        messages.append(ModelResponse(id=f"a{i}", parts=[TextPart(content=f"answer {i} " * 30)]))
    return ModelRequestState(
        messages=messages, request_messages=messages, model="test", settings=ModelSettings(),
        params=ModelRequestParams(), agent=AgentView(name="bench", output_retries=1), state={},
        tool_retries={}, output_retries_used=0, run_step=1, tool_calls=0, max_steps=50,
        run_id="bench", scope=RunScope(run_id="bench", agent="bench"),
        validators=PreparedValidators(frozenset()), usage=Usage(),
    )


class User(Capability):
    """Hooks as a user writes them (this file is user code to the guard)."""

    def trivial(self, state: ModelRequestState) -> ModelRequestState:
        return state

    def window(self, state: ModelRequestState) -> ModelRequestState:
        return state.model_copy(update={"request_messages": state.messages[-6:]})

    def estimating(self, state: ModelRequestState) -> ModelRequestState:
        tokens = [estimate_tokens(state.messages) for _ in range(5)]
        return state.model_copy(update={"state": {"tokens": tokens[-1]}})


USER = User()
WINDOW = HistoryWindow(max_messages=6)


async def _per_call(cap: Any, hook: Callable[[ModelRequestState], Any],
                    state: ModelRequestState, n: int) -> tuple[float, float]:
    """Microseconds per call: direct, and as a run calls it (`call_hook`)."""

    async def direct() -> None:
        for _ in range(n):
            await maybe_await(hook(state))

    async def guarded() -> None:
        for _ in range(n):
            await call_hook(cap, "Bench.before_model_request", hook, state)

    runs: dict[Any, list[float]] = {direct: [], guarded: []}
    for _ in range(7):  # interleaved: a burst of load on the machine hits both alike
        for body, times in runs.items():
            start = time.perf_counter()
            await body()
            times.append((time.perf_counter() - start) / n * 1e6)
    return min(runs[direct]), min(runs[guarded])


def _details(cls: type) -> WorkflowInstanceDetails:
    return WorkflowInstanceDetails(
        payload_converter_factory=DataConverter.default._new_payload_converter,  # pyright: ignore[reportPrivateUsage]
        failure_converter_class=DataConverter.default.failure_converter_class,
        interceptor_classes=[], defn=_Definition.must_from_class(cls), info=_fake_info,
        randomness_seed=1, extern_functions={}, disable_eager_activity_execution=False,
        worker_level_failure_exception_types=[], patch_activation_callback=None,
        last_completion_result=Payloads(), last_failure=Failure(),
    )


def _instance_ms(cls: type, n: int) -> float:
    """Milliseconds to create one sandboxed workflow instance (what each run start pays).

    towline's passthrough list (towline itself, pydantic, protobuf, ...) either way: the
    agent module (`examples`) is what design (a) re-imports.
    """
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    runner = SandboxedWorkflowRunner(restrictions=restrictions)
    details = _details(cls)
    runner.create_instance(details)  # warm the import caches outside the sandbox
    runs: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        runner.create_instance(details)
        runs.append((time.perf_counter() - start) * 1e3)
    return min(runs)


async def measure(calls: int, starts: int) -> dict[str, Any]:
    state = _state(10)
    hooks: dict[str, tuple[Any, Callable[[ModelRequestState], Any]]] = {
        "user: returns its state": (USER, USER.trivial),
        "user: keeps the last 6 messages": (USER, USER.window),
        "user: token estimate x5 (20 messages)": (USER, USER.estimating),
        "towline's HistoryWindow (not watched)": (WINDOW, WINDOW.before_model_request),
    }
    per_hook = {}
    for name, (cap, hook) in hooks.items():
        direct, guarded = await _per_call(cap, hook, state, calls)
        per_hook[name] = {"direct_us": round(direct, 1), "guarded_us": round(guarded, 1),
                          "overhead_us": round(guarded - direct, 1),
                          "ratio": round(guarded / direct, 2)}
    from _sandboxed_agent import SandboxedAgentProbe  # pyright: ignore[reportMissingImports]

    passthrough = _instance_ms(AgentRun, starts)
    reimported = _instance_ms(SandboxedAgentProbe, starts)
    return {
        "per_hook_call": per_hook,
        "per_run_start": {
            "agents_passed_through_ms": round(passthrough, 2),
            "agent_module_reimported_ms": round(reimported, 2),
            "design_a_extra_ms": round(reimported - passthrough, 2),
            "design_b_extra_ms": 0.0,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--starts", type=int, default=30)
    args = parser.parse_args()
    result = asyncio.run(measure(args.calls, args.starts))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'hook':40} {'direct':>10} {'guarded':>10} {'overhead':>10} {'ratio':>6}")
    for name, row in result["per_hook_call"].items():
        print(f"{name:40} {row['direct_us']:>8.1f}us {row['guarded_us']:>8.1f}us "
              f"{row['overhead_us']:>8.1f}us {row['ratio']:>5.2f}x")
    starts = result["per_run_start"]
    print()
    print(f"sandbox instance, agents passed through (b): {starts['agents_passed_through_ms']} ms")
    print(f"sandbox instance, agent module re-imported (a): {starts['agent_module_reimported_ms']} ms")
    print(f"extra per run start: design (a) {starts['design_a_extra_ms']} ms, design (b) 0 ms")


if __name__ == "__main__":
    main()
