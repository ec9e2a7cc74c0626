"""`towline watch WORKFLOW_ID`: follow a run's live events (text as it arrives, tools as they run).

Reads the run's Workflow Stream (`towline.client.events`) from the start or from
`--from-offset`, running or finished, and prints each event: as text (`EventPrinter`, also
what `towline run` shows for an agent that streams), or as JSON lines with `--json`.
`towline show WORKFLOW_ID --follow` is the same. Ctrl-C stops watching (the run goes on) and
says the offset to resume from. The model's thinking is shown apart from its answer: each
line of it starts with `[step N] thinking: `, dimmed on a terminal (`NO_COLOR` turns that
off); `--hide-thinking` leaves it out (`--json` always has every event).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partialmethod
from typing import Any, TextIO

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from towline.cli.args import Subcommands, add_json, command, non_negative
from towline.cli.attempts import ATTEMPT_FAILED, FailedAttempt, watch_attempts
from towline.cli.common import CliError, connected, stop_event
from towline.cli.readback import ENDED_WAIT, ended_events, events_read_back, unreadable
from towline.cli.render import (
    content,
    dim,
    done_line,
    format_call,
    inline,
    native_lines,
    short,
    styled,
    terminal_text,
    tool_end_line,
    waiting_line,
)
from towline.cli.runstate import agent_name, describe_run, workers_polling
from towline.client import events
from towline.events import EventType, RunEvent
from towline.results import RunResult

__all__ = ["EventPrinter", "watch_command", "follow", "follow_run", "register",
           "add_watch_options", "add_thinking_option", "IDLE_HINT_AFTER"]

IDLE_HINT_AFTER = 10.0
"""Seconds without an event after which `watch` asks whether a worker is running."""


class EventPrinter:
    """Renders run events as lines a person reads; a step's streamed text is written as it comes.

    `run_header` and `outcome` are off for `towline run`, which prints its own. Thinking
    (streamed, or in a `response` event) is shown unless `show_thinking` is off, each line
    prefixed `[step N] thinking: ` and dimmed when `color` (default: `out` is a terminal).
    """

    def __init__(self, workflow_id: str, out: TextIO, *, run_header: bool = True,
                 outcome: bool = True, show_thinking: bool = True,
                 color: bool | None = None) -> None:
        self.workflow_id = workflow_id
        self.out = out
        self.run_header = run_header
        self.outcome = outcome
        self.show_thinking = show_thinking
        self.color = styled(out) if color is None else color
        self.open: tuple[int, str] | None = None
        """The step and kind (`text`, `thinking`) whose streamed line is not finished yet."""
        self.attempts: dict[int, int] = {}
        """Per step: the attempt of the model call whose text or thinking was streamed."""
        self.streamed: set[tuple[int, str]] = set()
        """(step, kind) of what was streamed: the `response` event does not repeat it."""
        self.last_text: str | None = None
        """The text of the last response shown (streamed or whole)."""
        self.told: set[tuple[str, int]] = set()
        """(activity id, attempt) of the failed attempts shown (from Temporal or the stream)."""

    def _write(self, text: str) -> None:
        self.out.write(terminal_text(text))  # model and tool text: no terminal control
        self.out.flush()

    def _close(self) -> None:
        if self.open is not None:
            self._write("\n")
            self.open = None

    def line(self, text: str) -> None:
        """A whole line (after any open streamed text)."""
        self._close()
        self._write(text + "\n")

    def _thinking(self, step: int, text: str, *, opening: bool = True) -> str:
        """`text` as thinking lines: each prefixed with its step, dimmed on a terminal
        (`opening` off: `text` continues a line already prefixed)."""
        prefix = f"[step {step}] thinking: "
        return dim((prefix if opening else "") + text.replace("\n", "\n" + prefix), self.color)

    def __call__(self, e: RunEvent) -> None:
        handler: Callable[[RunEvent], None] | None = getattr(self, f"_on_{e.type}", None)
        if handler is not None:
            handler(e)

    def _on_run(self, e: RunEvent) -> None:
        if not self.run_header:
            return
        how = ", streaming" if e.field("streaming") else ""
        self.line(f"Run {self.workflow_id}: agent {e.field('agent')}, model {e.field('model')}{how}")
        if e.field("prompt"):
            self.line(f"[user] {short(e.field('prompt'), 200)}")

    def _streamed(self, e: RunEvent, kind: str) -> None:
        """A piece of streamed text or thinking: continue its line, or open a new one."""
        step = e.step or 0
        attempt = int(e.field("attempt") or 1)
        shown = self.attempts.get(step)
        if shown is not None and attempt > shown:
            self.line(f"[step {step}] (the model call was retried: attempt {attempt} starts over)")
        self.attempts[step] = attempt
        self.streamed.add((step, kind))
        if kind == "thinking" and not self.show_thinking:
            return
        delta = str(e.field("delta") or "")
        opening = self.open != (step, kind)
        if opening:
            self._close()
            self.open = (step, kind)
        if kind == "thinking":
            self._write(self._thinking(step, delta, opening=opening))
        else:
            self._write(f"[step {step}] {delta}" if opening else delta)

    def _on_thinking(self, e: RunEvent) -> None:
        self._streamed(e, "thinking")

    def _on_text(self, e: RunEvent) -> None:
        self._streamed(e, "text")

    def _on_response(self, e: RunEvent) -> None:
        step = e.step or 0
        text = e.field("text")
        thinking = e.field("thinking")
        self.last_text = text
        self._close()  # the end of what was streamed
        if thinking and self.show_thinking and (step, "thinking") not in self.streamed:
            self.line(self._thinking(step, str(thinking)))
        if text and (step, "text") not in self.streamed:
            self.line(f"[step {step}] {text}")
        native: list[dict[str, Any]] = e.field("native_tools") or []
        for line in native_lines(step, native):  # the provider ran these, within the response
            self.line(line)
        raw: list[dict[str, Any]] = e.field("tool_calls") or []
        calls = [format_call(str(c.get("tool")), dict(c.get("args") or {}), 80) for c in raw]
        if calls:
            self.line(f"[step {step}] model calls {', '.join(calls)}")
        elif not text and not native:
            self.line(f"[step {step}] model gave an empty response")

    def attempt(self, a: FailedAttempt) -> None:
        """A failed attempt, once (`towline.cli.attempts` and the `retry` event tell of it)."""
        if (a.activity_id, a.attempt) not in self.told:
            self.told.add((a.activity_id, a.attempt))
            self.line(a.line())

    def _on_retry(self, e: RunEvent) -> None:
        self.attempt(FailedAttempt.of_event(e))

    def _on_tool_start(self, e: RunEvent) -> None:
        self.line(f"[step {e.step}]   {e.field('tool')} started  (call id {e.field('call_id')})")

    def _on_tool_end(self, e: RunEvent) -> None:
        self.line(tool_end_line(e))

    def _on_approval(self, e: RunEvent, kind: str = "approval") -> None:
        self.line(waiting_line(self.workflow_id, kind, str(e.field("tool")),
                               dict(e.field("args") or {}), str(e.field("call_id"))))

    _on_client_tool = partialmethod(_on_approval, kind="client")

    def _on_decision(self, e: RunEvent) -> None:
        decision = str(e.field("decision"))
        reason = e.field("reason")
        said = (f": {inline(str(reason))}"  # a reviewer's text: on this line, escaped
                if reason and reason not in (decision, "approval timed out") else "")
        self.line(f"call {e.field('call_id')} {decision.replace('_', ' ')}{said}")

    def _on_guardrail(self, e: RunEvent) -> None:
        call = f" call {e.field('call_id')}" if e.field("call_id") else ""
        self.line(f"[step {e.step}] guardrail {e.field('guardrail')} {e.field('action')}"
                  f"{call}: {short(str(e.field('said')), 200)}")

    def _on_handoff(self, e: RunEvent) -> None:
        path: list[Any] = e.field("path") or []
        self.line(f"[step {e.step}] handed off from {e.field('from_agent')} to "
                  f"{e.field('to_agent')}  (path {' -> '.join(str(a) for a in path)})")

    def _on_user(self, e: RunEvent) -> None:
        self.line(f"[user] {content(e.field('content'), 200)}")

    def _on_answer(self, e: RunEvent) -> None:
        if self.outcome:
            output = e.field("output")
            self.line(f"[answer] {output if isinstance(output, str) else json.dumps(output)}")
            self.line("(the session waits for the next message)")

    def _on_result(self, e: RunEvent) -> None:
        self._close()
        if not self.outcome:
            return
        c: dict[str, Any] = e.field("counters") or {}
        tokens = int(c.get("input_tokens") or 0) + int(c.get("output_tokens") or 0)
        self.line(done_line(int(c.get("run_step") or 0), int(c.get("tool_calls") or 0),
                            int(c.get("requests") or 0), tokens))
        output = e.field("output")
        if isinstance(output, str):
            if output != self.last_text:  # an answer just shown is not repeated
                self.line(output)
        else:
            self.line(json.dumps(output, indent=2, ensure_ascii=False))

    def _on_failed(self, e: RunEvent) -> None:
        self._close()
        if self.outcome:
            self.line(f"Failed: {e.field('reason')}: {e.field('message')}")


async def _idle_hint(client: Client, workflow_id: str, seen: list[RunEvent]) -> None:
    """After a while with no event, say why one may not come (no worker polls the queue)."""
    await asyncio.sleep(IDLE_HINT_AFTER)
    if seen:
        return
    try:
        desc = await describe_run(client.get_workflow_handle(workflow_id))
        polled = await workers_polling(client, desc.task_queue, datetime.now(UTC))
    except (CliError, RPCError):
        return
    if polled is False:
        agent = await agent_name(client, desc)
        print(f"no events yet: no worker polls task queue {desc.task_queue!r}; start one for "
              f"agent {agent or '...'!r} (towline worker --agent MODULE:ATTR --task-queue "
              f"{desc.task_queue})", file=sys.stderr, flush=True)


async def follow(
    client: Client, workflow_id: str, on_event: Callable[[RunEvent], None], *,
    from_offset: int = 0, stop: asyncio.Event | None = None,
    ended_wait: float = ENDED_WAIT, on_attempt: Callable[[FailedAttempt], None] | None = None,
) -> tuple[list[RunEvent], bool]:
    """Feed the run's events to `on_event` until the run ends (or `stop` is set), its failed
    activity attempts (Temporal retries them) to `on_attempt` as they happen.

    A run that has ended is read back from its stream by a worker for its agent; when none
    answers within `ended_wait` seconds, from its history (`events_from_history`). Returns
    the events seen and whether `stop` interrupted. `CliError` when the run does not exist,
    or has ended and its events cannot be read.
    """
    handle = client.get_workflow_handle(workflow_id)
    desc = await describe_run(handle)
    closed = desc.status != WorkflowExecutionStatus.RUNNING
    if closed:
        found = await ended_events(client, desc, on_event, from_offset)
        if found is not None:
            return found, False
    seen: list[RunEvent] = []

    async def read() -> None:
        stream = events(handle, from_offset=from_offset, client=client)
        if closed and not from_offset:  # a worker answers at once, or none will
            try:
                first = await asyncio.wait_for(anext(stream), ended_wait)
            except StopAsyncIteration:
                return
            except TimeoutError:
                await stream.aclose()
                seen.extend(await events_read_back(client, desc, on_event))
                return
            seen.append(first)
            on_event(first)
        async for event in stream:
            seen.append(event)
            on_event(event)

    reading = asyncio.ensure_future(read())
    hint = asyncio.ensure_future(_idle_hint(client, workflow_id, seen))
    retries = asyncio.ensure_future(watch_attempts(client, workflow_id, on_attempt))
    stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        waiting: set[asyncio.Future[Any]] = {reading, *([stopped] if stopped else [])}
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if reading not in done:
            reading.cancel()
            return seen, True
        try:
            reading.result()
        except WorkflowQueryFailedError as e:
            # a closed run's stream is answered by a replaying worker; one that cannot replay it
            # (another agent's, say, on a shared queue) fails the query: its history still tells
            closed = await client.get_workflow_handle(workflow_id).describe()
            if seen or closed.status in (None, WorkflowExecutionStatus.RUNNING):
                raise await unreadable(client, closed, e) from None
            return await events_read_back(client, closed, on_event), False
        except RPCError as e:
            raise await unreadable(client, desc, e) from None
        return seen, False
    finally:
        hint.cancel()
        retries.cancel()
        if stopped is not None:
            stopped.cancel()


async def follow_run(
    client: Client, handle: WorkflowHandle[Any, RunResult], stop: asyncio.Event,
    on_event: Callable[[RunEvent], None], on_attempt: Callable[[FailedAttempt], None],
) -> RunResult | None:
    """`towline run`: feed the run's events to `on_event` as they come (its failed attempts to
    `on_attempt`) until its stream ends, then its result (None on Ctrl-C)."""
    _, interrupted = await follow(client, handle.id, on_event, stop=stop, on_attempt=on_attempt)
    return None if interrupted else await handle.result()


async def watch_command(args: Any) -> int:
    """`towline watch WORKFLOW_ID` (and `towline show WORKFLOW_ID --follow`)."""
    client, _ = await connected(args)
    if args.json:
        def on_event(e: RunEvent) -> None:
            print(json.dumps(e.to_json(), ensure_ascii=False, default=str), flush=True)

        def attempted(a: FailedAttempt) -> None:  # not from the stream: offset -1
            print(json.dumps({"offset": -1, "type": ATTEMPT_FAILED, **a.to_json()},
                             ensure_ascii=False), flush=True)
    else:
        printer = EventPrinter(args.workflow_id, sys.stdout, show_thinking=not args.hide_thinking)
        on_event, attempted = printer, printer.attempt
    seen, interrupted = await follow(client, args.workflow_id, on_event,
                                     from_offset=args.from_offset, stop=stop_event(),
                                     on_attempt=attempted)
    if interrupted:
        resume = seen[-1].offset + 1 if seen else args.from_offset
        print(f"stopped watching run {args.workflow_id} (it goes on); resume with: towline watch "
              f"{args.workflow_id} --from-offset {resume}", file=sys.stderr, flush=True)
        return 130
    last = seen[-1].type if seen else None
    if last == EventType.RESULT:
        return 0
    if last != EventType.FAILED:  # ended without its own last word: terminated, timed out
        desc = await describe_run(client.get_workflow_handle(args.workflow_id))
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            return 0
        status = desc.status.name if desc.status is not None else "UNKNOWN"
        print(f"towline: run {args.workflow_id} ended: {status}", file=sys.stderr, flush=True)
    return 1


def add_watch_options(parser: argparse.ArgumentParser) -> None:
    """`--from-offset` and `--hide-thinking` (and `--json`, for `watch`)."""
    parser.add_argument("--from-offset", type=non_negative, default=0, metavar="N",
                        help="start at the event with this offset (default 0: from the start); "
                        "after an interruption, one more than the last offset seen")
    add_thinking_option(parser)


def add_thinking_option(parser: argparse.ArgumentParser) -> None:
    """`--hide-thinking`: thinking is shown by default, dimmed on a terminal."""
    parser.add_argument("--hide-thinking", action="store_true",
                        help="leave the model's thinking out (by default it is shown apart from "
                        "the answer: lines starting '[step N] thinking:', dimmed on a terminal)")


def register(sub: Subcommands) -> None:
    """`towline watch`."""
    p = command(
        sub, "watch", watch_command,
        help="follow a run's live events: text as it arrives, tool calls as they run",
        description="Follow a run (running or finished) from its first event, or from "
        "--from-offset: the model's text as it arrives (for agents that stream), tool calls as "
        "they start and end, approvals, and the result. Exit 0 when the run succeeded, 1 when it "
        "failed; Ctrl-C stops watching (not the run) and prints the offset to resume from.")
    p.add_argument("workflow_id", metavar="WORKFLOW_ID")
    add_json(p, "one JSON object per event and line, with its offset and type")
    add_watch_options(p)
