"""What `towline run` (and `towline mcp call`) print while they follow a run: each new
message once, status changes, approvals waiting, and a session's first answer.

A response's thinking is shown apart from its answer, as `[step N] thinking: ...`
(dimmed on a terminal), unless `--hide-thinking`."""

from __future__ import annotations

import json
import sys
from typing import Any

from towline.agent import OUTPUT_TOOL_NAME, Agent
from towline.cli.common import say
from towline.cli.render import (
    content,
    dim,
    format_call,
    native_call,
    native_result,
    short,
    styled,
    terminal_text,
    waiting_line,
)
from towline.events import thinking_text
from towline.messages import Message, ModelRequest, ModelResponse
from towline.results import HandoffRecord, RunStatus
from towline.tools import Tool

__all__ = ["Progress", "Session"]


class Progress:
    """Prints each new message of a run once: tool calls, their returns, retries, answers."""

    def __init__(self, workflow_id: str, *, quiet: bool = False, show_thinking: bool = True,
                 agent: Agent | None = None) -> None:
        self.workflow_id = workflow_id
        self.tools: dict[str, Tool] = {name: tool for a in (agent.all_agents() if agent else ())
                                       for name, tool in a.inventory.items()}
        """The agent's tools (its handoff targets' too): a call's arguments are shown as the
        tool runs them (`multiply(a=6.0, b=7.0)`), as its approval and the UI show them."""
        self.quiet = quiet
        self.show_thinking = show_thinking
        self.styled = styled(sys.stderr)
        """Dim the thinking (progress goes to stderr: a terminal?)."""
        self.printed: set[str] = set()
        self.step = 0
        self.status: str = RunStatus.RUNNING
        self.announced: set[str] = set()
        self.approving = False
        self.returned: dict[str, int] = {}
        """The step of each tool call whose return was printed, by call id."""
        self.handed: dict[str, str] = {}
        """Handoffs (`towline.capabilities.Handoff`) by their call id: the agent handed to,
        reported after that call's return."""

    def _say(self, line: str) -> None:
        if not self.quiet:
            say(line)

    def hint(self, line: str) -> None:
        """A one-off remark about the run (shown even when nothing else is)."""
        self._say(line)

    def messages(self, messages: list[Message]) -> None:
        """Print the messages not printed yet (by stable id), in order."""
        for m in messages:
            if m.id and m.id in self.printed:
                continue
            if m.id:
                self.printed.add(m.id)
            if isinstance(m, ModelResponse):
                self._response(m)
            else:
                self._request(m)

    def _response(self, m: ModelResponse) -> None:
        self.step += 1
        if m.thinking and self.show_thinking:
            self._say(dim(f"[step {self.step}] thinking: {short(thinking_text(m.thinking), 100)}",
                          self.styled))
        for call, result in m.native_tool_calls:  # the provider ran these itself
            done = f" -> {native_result(result, 60)}" if result is not None else ""
            self._say(f"[step {self.step}] model runs {native_call(call, 80)}{done}")
        calls = [format_call(c.tool_name, self._args(c.tool_name, c.args), 80) for c in m.tool_calls]
        if calls:
            self._say(f"[step {self.step}] model calls {', '.join(calls)}")
        if m.text:
            self._say(f"[step {self.step}] model answers: {short(m.text, 100)}")
        if not calls and not m.text and not m.native_tool_calls:
            self._say(f"[step {self.step}] model gave an empty response")

    def _args(self, tool_name: str, args: dict[str, Any]) -> dict[str, Any]:
        """`args` as the tool validates them (the model's own when it refuses them)."""
        tool = self.tools.get(tool_name)
        if tool is None:
            return args
        try:
            return tool.validate_args(args)
        except Exception:  # noqa: BLE001 - invalid arguments: the model is told, shown as sent
            return args

    def _request(self, m: ModelRequest) -> None:
        for p in m.parts:
            if p.part_kind == "tool_return":
                self._say(f"[step {self.step}]   {p.tool_name} -> {content(p.content, 80)}"
                          f"  ({p.status})")
                self.returned[p.tool_call_id] = self.step
                if p.tool_call_id in self.handed:
                    self._say(f"[step {self.step}] handed off to {self.handed[p.tool_call_id]}")
            elif p.part_kind == "retry":
                self._say(f"[step {self.step}]   retry: {short(p.content, 100)}")
            elif p.part_kind == "user" and self.step > 0:
                self._say(f"[user] {content(p.content, 100)}")

    def handoffs(self, records: list[Any]) -> None:
        """Note the run's handoffs (`HandoffRecord`s or their JSON), before the messages whose
        returns they follow are printed."""
        for h in records:
            data: dict[str, Any] = h.model_dump() if isinstance(h, HandoffRecord) else dict(h)
            call_id, to = str(data.get("call_id")), str(data.get("to_agent"))
            known = call_id in self.handed
            self.handed[call_id] = to
            if not known and call_id in self.returned:  # its return came first (an earlier poll)
                self._say(f"[step {self.returned[call_id]}] handed off to {to}")

    def state(self, state: dict[str, Any]) -> None:
        """Report status changes, handoffs and tool calls waiting for approval."""
        status = str(state.get("status", self.status))
        self.handoffs(state.get("handoffs") or [])
        pending: dict[str, Any] = state.get("pending_approvals") or {}
        for call_id, info in pending.items():
            if call_id in self.announced:
                continue
            self.announced.add(call_id)
            self._say(waiting_line(self.workflow_id, str(info.get("kind") or "approval"),
                                   str(info.get("tool_name")), dict(info.get("args") or {}),
                                   call_id))
        self.approving = bool(pending)  # a session waiting for a message is not "resumed"
        self.status = status

    def resumed(self, state: dict[str, Any]) -> None:
        """Say `resumed` when the run goes on after an approval it waited for: called before
        the poll's messages are printed, so it comes before the allowed call's return."""
        status = str(state.get("status", self.status))
        if self.approving and self.status == RunStatus.WAITING and status == RunStatus.RUNNING:
            self._say("resumed")
            self.approving = False


class Session:
    """`towline run --session`: prints the answer to the prompt once the session waits."""

    def __init__(self, agent: Agent, workflow_id: str) -> None:
        self.agent = agent
        self.workflow_id = workflow_id
        self.answered = False

    def answer(self, messages: list[Message]) -> Any:
        """The output of the last response: its text, or the output tool's arguments."""
        last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
        if last is None:
            return None
        for call in last.tool_calls:
            if call.tool_name == OUTPUT_TOOL_NAME:
                return call.args.get("response") if self.agent.output_wrapped else call.args
        return last.text

    def observe(self, state: dict[str, Any], messages: list[Message]) -> None:
        """Print the first answer when the session first waits for a message."""
        if self.answered or state.get("status") != RunStatus.WAITING or state.get("pending_approvals"):
            return
        if not any(isinstance(m, ModelResponse) for m in messages):
            return
        self.answered_with(self.answer(messages))

    def answered_with(self, answer: Any) -> None:
        """Print the session's first answer (stdout) and how to go on (once)."""
        if self.answered:
            return
        self.answered = True
        print(terminal_text(answer) if isinstance(answer, str) else terminal_text(
            json.dumps(answer, indent=2, ensure_ascii=False), in_json=True))
        sys.stdout.flush()
        wid = self.workflow_id
        say(f"Session {wid} waits for the next message: towline send {wid} \"...\" (from another "
            f"terminal); it ends after an idle timeout, with towline end {wid}, or with "
            f"towline cancel {wid}. Ctrl-C "
            "leaves it open.")
