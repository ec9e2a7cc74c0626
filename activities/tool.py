"""The `towline.tool.<name>` activities: one per tool, one execution per call.

`ModelRetry` and `ToolError` are results, not activity failures (they are
certain: the tool says what happened). Any other exception of an idempotent
tool is left to Temporal's retry policy. For a non-idempotent tool, an attempt
first records durably that it enters the function (`heartbeat.mark_entered`):
an attempt lost before that point is retried, since provably nothing ran; an
exception raised by the function, or a later attempt finding an earlier one
entered, is reported non-retryably as an uncertain effect (status `unknown`).
A tool may go without the entry record (`entry_mark=False`); then a
retry after a lost attempt cannot know whether the tool ran, and refuses
(only a first attempt runs). Every attempt heartbeats while it runs, so a lost worker is noticed within the
tool's heartbeat timeout. A `SystemExit`, `KeyboardInterrupt` or other `BaseException` the
tool raises (not a cancellation of the activity) is contained (`towline.runtime.escapes`): it
fails the call (`failed` for an idempotent tool, `unknown` for another), never the worker.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from towline.errors import ModelRetry, ToolError
from towline.runtime.deps import current_deps, typed_context
from towline.runtime.escapes import UserCodeExit, contain
from towline.tools import Tool, ToolContext, ToolResult, tool_content

from .guard import require_agent_run
from .heartbeat import (
    ENTERED_KEY,
    UNCERTAIN,
    entered_before,
    mark_entered,
    with_heartbeats,
)
from .io import ToolActivityInput, ToolActivityResult
from .reports import check_usage, fit, not_json

__all__ = ["make_tool_activity", "run_tool_function"]


TOOL_THREADS = 256
"""Most sync tool calls a worker process runs at once, each in its own thread (more wait)."""


@functools.cache
def _tool_threads() -> ThreadPoolExecutor:
    """The sync tools' own threads, made as needed up to `TOOL_THREADS`.

    Not asyncio's default executor (cores + 4 threads): there a few tools sleeping or waiting
    on I/O held every thread, so other calls queued for seconds before their function
    started, and so did the payload store's reads, which use that executor. The bench of
    chaos measured it: attempts that had started but not entered their tool 150-800 ms
    after the task arrived, lost with their worker.
    """
    return ThreadPoolExecutor(TOOL_THREADS, thread_name_prefix="towline-tool")


class _NotEntered(Exception):
    """The entry mark was not recorded, so the function did not run: the attempt fails as
    the mark's RPC did (its `__cause__`), and Temporal retries it."""


async def _enter(enter: Callable[[], Awaitable[object]] | None) -> None:
    if enter is not None:
        try:
            await enter()
        except Exception as e:
            raise _NotEntered() from e


async def _in_thread(call: Callable[[], Any], enter: Callable[[], Awaitable[object]] | None) -> Any:
    """`call` in one of the tools' threads, started once `enter` is on record.

    The thread is running before the entry mark is sent, and the function starts as soon as
    the mark is acknowledged: a worker lost in between leaves a call that is recorded as
    entered but never ran (a false uncertain effect), so that gap is kept to one wake-up, not
    a thread's creation and a task's scheduling (the chaos bench saw 130 ms there once).
    """
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    go = threading.Event()
    entered = False

    def gated() -> Any:
        loop.call_soon_threadsafe(lambda: ready.done() or ready.set_result(None))
        go.wait()
        return call() if entered else None

    running = loop.run_in_executor(_tool_threads(), gated)
    try:
        if enter is not None:
            await ready
            await _enter(enter)
        entered = True
    finally:
        go.set()  # run the function, or (not entered: the mark failed or was cancelled) return
        if not entered:
            running.cancel()
    return await running


async def run_tool_function(
    tool: Tool, inp: ToolActivityInput, enter: Callable[[], Awaitable[object]] | None = None
) -> Any:
    """Call the tool's function with validated arguments (sync tools in a thread); `enter`,
    when given, records entering it, acknowledged, right before its first line runs."""
    parsed = tool.args_model.model_validate(inp.args)
    kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
    args: list[Any] = [_context(tool, inp)] if tool.takes_ctx else []
    try:
        if inspect.iscoroutinefunction(tool.function):
            await _enter(enter)
            result = await tool.function(*args, **kwargs)
        else:  # a sync tool must not block the worker's event loop
            call = functools.partial(contextvars.copy_context().run, tool.function, *args, **kwargs)
            result = await _in_thread(call, enter)
        if inspect.isawaitable(result):
            result = await result
    except BaseException as e:
        # In this task's own frame: a SystemExit or KeyboardInterrupt leaving it would end
        # the worker's event loop (asyncio re-raises them out of the task).
        if (contained := contain(e)) is not None:
            raise contained from e
        raise
    return result


def _context(tool: Tool, inp: ToolActivityInput) -> ToolContext:
    """The call's `ToolContext`, with the run's context typed by the agent's `context_type`
    and the worker's dependencies (`towline.runtime.deps`), neither of which travels typed."""
    ctx = inp.context(tool.name, activity.info().workflow_id or "")
    return ctx.model_copy(update={"context": typed_context(ctx.agent, ctx.context),
                                  "deps": current_deps()})


def make_tool_activity(tool: Tool) -> Callable[[ToolActivityInput], Awaitable[ToolActivityResult]]:
    """Build the activity that runs `tool`."""

    async def run_tool(inp: ToolActivityInput) -> ToolActivityResult:
        require_agent_run()
        details: tuple[Any, ...] = ()
        enter: Callable[[], Awaitable[object]] | None = None
        if not tool.idempotent:
            earlier = entered_before()
            if earlier is not None:
                raise ApplicationError(
                    f"attempt {earlier} of this call entered the tool and its worker was lost; "
                    "the tool is not idempotent, so it is not run again",
                    type=UNCERTAIN, non_retryable=True,
                )
            if inp.entry_mark:  # recorded right before the function's first line
                details, enter = ({ENTERED_KEY: activity.info().attempt},), mark_entered
            elif activity.info().attempt == 1:
                details = ({ENTERED_KEY: 1},)
            else:
                raise ApplicationError(
                    f"attempt {activity.info().attempt - 1} of this call was lost before it could "
                    "record whether it entered the tool, which records no entry mark "
                    "(Tool.entry_mark); the tool is not idempotent, so it is not run again",
                    type=UNCERTAIN, non_retryable=True,
                )
        try:
            result = await with_heartbeats(run_tool_function(tool, inp, enter), lambda: details)
        except _NotEntered as e:
            raise e.__cause__ or e from None
        except ModelRetry as e:
            return ToolActivityResult(status="retry", content=e.message)
        except ToolError as e:
            if e.usage is not None:
                check_usage(e.usage, f"tool {tool.name!r}")
                return ToolActivityResult(status="failed", content=e.message, usage=e.usage)
            return ToolActivityResult(status="failed", content=e.message)
        except UserCodeExit as e:  # SystemExit & co.: retrying would raise it again
            if tool.idempotent:
                raise ApplicationError(f"{e.kind}: {e}", type=e.kind, non_retryable=True) from e
            raise ApplicationError(f"{e.kind}: {e}", type=UNCERTAIN, non_retryable=True) from e
        except Exception as e:
            if tool.idempotent:
                raise  # Temporal retries it, per the tool's retry policy
            raise ApplicationError(f"{type(e).__name__}: {e}", type=UNCERTAIN,
                                   non_retryable=True) from e
        if isinstance(result, ToolResult):
            check_usage(result.usage, f"tool {tool.name!r}")
            return fit(ToolActivityResult(
                status="succeeded", content=_carried(tool, result.content), usage=result.usage,
                state=result.state,
            ), tool.name)
        return fit(ToolActivityResult(status="succeeded", content=_carried(tool, result)),
                   tool.name)

    run_tool.__name__ = f"tool_{tool.name}"
    return activity.defn(name=tool.activity_name)(run_tool)


def _carried(tool: Tool, value: Any) -> Any:
    """The return record's content for what the tool returned; a note saying what it was
    when JSON cannot carry it (the tool did run: reported, not failed, and never silently
    changed, as a NaN turned into null would be)."""
    content = tool_content(value)
    why = not_json(content)
    if why is None:
        return content
    return f"[tool {tool.name!r} returned a value JSON cannot carry ({why}); omitted]"
