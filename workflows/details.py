"""The run's current details: the markdown the Temporal UI shows for a workflow (its *User
Metadata*), set at every confirmed transition (`Ledger.confirm`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from towline.results import Counters, HandoffRecord
from towline.runtime.ledger import format_cost

from .waiting import pending_lines

__all__ = ["current_details"]


def current_details(agent: str, status: str, counters: Counters,
                    handoffs: Sequence[HandoffRecord], pending: Mapping[str, Any],
                    waiting_for: str | None, lineage: str,
                    native_tool_uses: Mapping[str, int] | None = None) -> str:
    """The active agent and status, the counters, the cost, what the provider ran itself (web
    searches, code, ...), the path of handoffs, what a waiting run waits for, and a fork's
    lineage line."""
    c = counters
    lines = [
        f"**{agent}** — {status}",
        f"- step {c.run_step}/{c.max_steps}, tool calls {c.tool_calls}, requests {c.requests}",
        f"- tokens {c.input_tokens} in / {c.output_tokens} out",
    ]
    if c.cost_micros is not None:
        lines.append(f"- cost {format_cost(c.cost_micros, c.unpriced_requests)}")
    if native_tool_uses:
        uses = ", ".join(f"{k} ×{n}" for k, n in native_tool_uses.items())
        lines.append(f"- native tools {uses}")
    if handoffs:
        path = " → ".join([handoffs[0].from_agent, *(h.to_agent for h in handoffs)])
        lines.append(f"- handoffs: {path} (last at step {handoffs[-1].step})")
    if pending:
        lines.extend(pending_lines(dict(pending)))
    elif status == "waiting" and waiting_for == "message":
        lines.append("- waiting for the next message (`towline send`)")
    if lineage:
        lines.append(lineage)
    return "\n".join(lines)
