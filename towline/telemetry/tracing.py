"""Workflow-side telemetry: towline's spans and metrics, from deterministic workflow code.

Spans (`invoke_agent`, `turn`, `hook`, `execute_tool` for in-workflow tools) are made
through the process's OpenTelemetry tracer provider only when it is the replay-safe
one of `temporalio.contrib.opentelemetry` (`create_tracer_provider`, set up by
`towline.telemetry.metrics.configure_tracing`): its span and trace ids come from the
workflow's deterministic random, its spans started while replaying take the
workflow's own time, and spans ended while replaying are dropped — so a replayed
run never duplicates a span, and nothing here reads a clock. With any other
provider (or without the `towline[otel]` extra) these are no-ops. No content
(prompts, arguments, results) goes on a workflow span.

Metrics go through `workflow.metric_meter()`, which Temporal makes replay-safe
(nothing is recorded while replaying) and exports with its own runtime metrics
(`towline worker --metrics-port`). Names are listed in `METRICS`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow

__all__ = [
    "METRICS",
    "span",
    "agent_span",
    "turn_span",
    "hook_span",
    "workflow_tool_span",
    "run_started",
    "run_ended",
    "tool_returns",
    "approval_waited",
]

try:  # towline[otel]; without it, spans are no-ops
    from opentelemetry import trace as _trace
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider as _ReplaySafe
except ImportError:  # pragma: no cover - exercised only without the extra
    _trace = None
    _ReplaySafe = None

METRICS: Mapping[str, str] = {
    "towline_runs_started": "counter {agent}: runs started (a continued execution is not a new run)",
    "towline_runs_succeeded": "counter {agent}: runs that ended with an output",
    "towline_runs_failed": "counter {agent, reason}: runs that failed, by failure reason",
    "towline_tool_calls": "counter {agent, tool, status}: tool call return records, by status",
    "towline_approval_wait": "histogram {agent, tool, outcome}: time a tool call waited for a "
                             "decision (approved, rejected, timeout)",
}
"""Workflow-side metrics (recorded once, never on replay) and their labels."""

Attributes = Mapping[str, str | int | float | bool]


def _tracer() -> Any:
    if _trace is None or _ReplaySafe is None:
        return None
    provider = _trace.get_tracer_provider()
    if not isinstance(provider, _ReplaySafe):
        return None  # a provider that would duplicate spans on replay: stay silent
    return provider.get_tracer("towline")


@contextlib.contextmanager
def span(name: str, attributes: Attributes) -> Generator[None]:
    """A replay-safe span around the block (a no-op unless tracing is configured)."""
    tracer = _tracer()
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span(name, attributes=dict(attributes), record_exception=False,
                                      set_status_on_exception=False) as current:
        try:
            yield
        except Exception as e:
            if isinstance(e, workflow.NondeterminismError):
                current.record_exception(e)  # a task failure: the span must not end (it retries)
            else:  # a hook's error, a run failure: the run goes on or fails, the span ends
                current.set_attribute("error.type", type(e).__name__)
                current.set_status(_trace.StatusCode.ERROR, type(e).__name__)  # pyright: ignore[reportOptionalMemberAccess]
            raise
        except BaseException as e:  # eviction: the span ends in the execution that finishes it
            current.record_exception(e)
            raise


def agent_span(agent: str, run_id: str) -> contextlib.AbstractContextManager[None]:
    """`invoke_agent <agent>`: one execution of a run (GenAI agent-invocation span)."""
    return span(f"invoke_agent {agent}", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
        "towline.agent": agent, "towline.run_id": run_id,
    })


def turn_span(agent: str, step: int) -> contextlib.AbstractContextManager[None]:
    """`turn <n>`: hooks, the model call and the tool calls of one run step."""
    return span(f"turn {step}", {
        "gen_ai.agent.name": agent, "towline.agent": agent, "towline.run_step": step,
    })


def hook_span(where: str) -> contextlib.AbstractContextManager[None]:
    """`hook <Capability>.<hook>`: one hook call (`where` as failures name it)."""
    capability, _, hook = where.rpartition(".")
    return span(f"hook {where}", {"towline.capability": capability, "towline.hook": hook})


def workflow_tool_span(tool: str, call_id: str) -> contextlib.AbstractContextManager[None]:
    """`execute_tool <tool>` for a tool that runs in the workflow (activities make their own)."""
    return span(f"execute_tool {tool}", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function",
    })


def _count(name: str, attributes: Attributes) -> None:
    workflow.metric_meter().create_counter(name, METRICS[name]).add(1, dict(attributes))


def run_started(agent: str) -> None:
    """A new run (not a continued execution of one)."""
    _count("towline_runs_started", {"agent": agent})


def run_ended(agent: str, reason: str | None) -> None:
    """A run ended: with an output (`reason` None) or failed for `reason`."""
    if reason is None:
        _count("towline_runs_succeeded", {"agent": agent})
    else:
        _count("towline_runs_failed", {"agent": agent, "reason": reason})


def tool_returns(agent: str, returns: Iterable[tuple[str, str]]) -> None:
    """Recorded return records, as (tool name, status) pairs."""
    counter = workflow.metric_meter().create_counter(
        "towline_tool_calls", METRICS["towline_tool_calls"])
    for tool, status in returns:
        counter.add(1, {"agent": agent, "tool": tool, "status": status})


def approval_waited(agent: str, tool: str, outcome: str, waited: timedelta) -> None:
    """A tool call's approval wait ended (workflow time, so replay gives the same value)."""
    workflow.metric_meter().create_histogram_timedelta(
        "towline_approval_wait", METRICS["towline_approval_wait"], unit="duration",
    ).record(max(waited, timedelta(0)), {"agent": agent, "tool": tool, "outcome": outcome})
