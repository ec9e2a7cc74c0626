"""What `towline run` (and `mcp-serve`'s progress notifications) print while they follow a
run's event stream: each step's response, tool returns, handoffs, approvals waiting, and a
session's first answer.

A response's thinking is shown apart from its answer, as `[step N] thinking: ...`
(dimmed on a terminal), unless `--hide-thinking`."""

from __future__ import annotations

import sys
from functools import partialmethod
from typing import Any

from towline.agent import Agent
from towline.cli.common import say
from towline.cli.render import content, dim, format_call, native_lines, output_text, short
from towline.cli.watch import EventPrinter
from towline.events import RunEvent
from towline.tools import Tool

__all__ = ["Progress", "Session"]


class Progress(EventPrinter):
    """Prints a run's events as `towline run` shows them when it does not stream: each step
    once done (responses, tool returns, handoffs), calls waiting and the run resuming after
    them; on stderr, `towline watch`'s lines where they are the same (`EventPrinter`)."""

    def __init__(self, workflow_id: str, *, quiet: bool = False, show_thinking: bool = True,
                 agent: Agent | None = None) -> None:
        super().__init__(workflow_id, sys.stderr, run_header=False, outcome=False,
                         show_thinking=show_thinking)
        self.tools: dict[str, Tool] = {name: tool for a in (agent.all_agents() if agent else ())
                                       for name, tool in a.inventory.items()}
        """The agent's tools (its handoff targets' too): a call's arguments are shown as the
        tool runs them (`multiply(a=6.0, b=7.0)`), as its approval and the UI show them."""
        self.quiet = quiet
        self.waiting: set[str] = set()
        """The calls waiting for a decision or a client's result, by call id."""
        self.returned: dict[str, int] = {}
        """The step of each tool call whose return was printed, by call id."""
        self.handed: dict[str, str] = {}
        """Handoffs (`towline.capabilities.Handoff`) by their call id: the agent handed to,
        reported after that call's return."""

    def _write(self, text: str) -> None:
        if not self.quiet:
            super()._write(text)

    def _unshown(self, e: RunEvent) -> None:
        """What `watch` shows and `run` does not: streamed text, tool starts, guardrails."""

    _on_text = _on_thinking = _on_tool_start = _on_guardrail = _unshown

    def _on_tool_end(self, e: RunEvent) -> None:
        super()._on_tool_end(e)
        call_id = str(e.field("call_id"))
        self.returned[call_id] = e.step or 0
        if call_id in self.handed:
            self.line(f"[step {e.step or 0}] handed off to {self.handed[call_id]}")

    def _on_handoff(self, e: RunEvent) -> None:
        call_id, to = str(e.field("call_id")), str(e.field("to_agent"))
        self.handed[call_id] = to
        if call_id in self.returned:  # its return came first
            self.line(f"[step {self.returned[call_id]}] handed off to {to}")

    def _on_approval(self, e: RunEvent, kind: str = "approval") -> None:
        self.waiting.add(str(e.field("call_id")))
        super()._on_approval(e, kind)

    _on_client_tool = partialmethod(_on_approval, kind="client")

    def _on_decision(self, e: RunEvent) -> None:
        if str(e.field("call_id")) in self.waiting:
            self.waiting.discard(str(e.field("call_id")))
            if not self.waiting:  # the run goes on: before the return of the call it allowed
                self.line("resumed")

    def _on_user(self, e: RunEvent) -> None:
        self.line(f"[user] {content(e.field('content'), 100)}")

    def _on_output_retry(self, e: RunEvent) -> None:
        self.line(f"[step {e.step}]   retry: {short(str(e.field('message')), 100)}")

    def _on_response(self, e: RunEvent) -> None:
        step = e.step or 0
        thinking = e.field("thinking")
        if thinking and self.show_thinking:
            self.line(dim(f"[step {step}] thinking: {short(str(thinking), 100)}", self.color))
        native: list[dict[str, Any]] = e.field("native_tools") or []
        for line in native_lines(step, native):
            self.line(line)
        raw: list[dict[str, Any]] = e.field("tool_calls") or []
        calls = [format_call(str(c.get("tool")), self._args(str(c.get("tool")),
                                                            dict(c.get("args") or {})), 80)
                 for c in raw]
        if calls:
            self.line(f"[step {step}] model calls {', '.join(calls)}")
        text = e.field("text")
        if text:
            self.line(f"[step {step}] model answers: {short(str(text), 100)}")
        if not calls and not text and not native:
            self.line(f"[step {step}] model gave an empty response")

    def _args(self, tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
        """`args` as the tool validates them (the model's own when it refuses them)."""
        tool = self.tools.get(tool_name)
        if tool is None:
            return args
        try:
            return tool.validate_args(args)
        except Exception:  # noqa: BLE001 - invalid arguments: the model is told, shown as sent
            return args


class Session:
    """`towline run --session`: prints the answer to the prompt once the session waits."""

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self.answered = False

    def answered_with(self, answer: Any) -> None:
        """Print the session's first answer (stdout) and how to go on (once)."""
        if self.answered:
            return
        self.answered = True
        print(output_text(answer))
        sys.stdout.flush()
        wid = self.workflow_id
        say(f"Session {wid} waits for the next message: towline send {wid} \"...\" (from another "
            f"terminal); it ends after an idle timeout, with towline end {wid}, or with "
            f"towline cancel {wid}. Ctrl-C "
            "leaves it open.")
