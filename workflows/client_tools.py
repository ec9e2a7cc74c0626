"""Tools a client runs, named by a run's input (`RunInput.client_tools`, an AG-UI client's
`tools`): checked when the run starts, then part of its inventory like the agent's own.

A call of one is recorded like any other; the run then waits durably for its result
(`ApprovalDesk.client_result`: the `tool_result` update, `towline respond`), checked
against the tool's result schema.

The client's tools are the run's, not one agent's: they stay across handoffs, and
`check_names` (the one home of the rule) refuses a client tool named like a reserved tool
(`final_result`) or like a server tool of the agent or of any agent it may hand the run to,
however many handoffs away: such a tool would replace the server's, and the model's call of
it would wait for the client, whose answer would become the server tool's result. It runs when
an execution starts (`InvalidRunInput` before the first step) and at every handoff.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from towline.agent import OUTPUT_TOOL_NAME, Agent
from towline.errors import ConfigurationError, InvalidRunInput
from towline.results import ClientToolSpec
from towline.runtime.registry import WorkerAgents
from towline.tools import HANDOFF_KEY, Tool

__all__ = ["run_client_tools", "check_names", "reachable", "RESERVED_TOOL_NAMES"]

RESERVED_TOOL_NAMES: frozenset[str] = frozenset({OUTPUT_TOOL_NAME})
"""Tool names only towline gives: `final_result` is the structured-output tool of any agent
the run may become (a client tool of that name would be taken for the run's output)."""


def run_client_tools(specs: Sequence[ClientToolSpec] | None, agent: Agent,
                     worker: WorkerAgents) -> list[Tool]:
    """The input's client tools as tools, each checked (`check_names`) against
    `agent` and every agent it may hand the run to."""
    tools = _as_tools(specs)
    check_names(tools, reachable(agent, worker))
    return tools


def check_names(tools: Iterable[Tool], agents: Sequence[Agent]) -> None:
    """Refuse (`InvalidRunInput`, naming the tool) a client tool with a reserved name or the
    name of a tool of one of `agents` (the first: the run's agent; the others: agents the run
    may be handed to). MCP tools, listed while the run runs, are not here: a listed tool whose
    name is taken is left out (`mcp_tools.restore_mcp_tools`)."""
    for t in tools:
        if t.name in RESERVED_TOOL_NAMES:
            raise InvalidRunInput(f"client tool {t.name!r}: the name is reserved (the tool the "
                                  "model gives a structured output with): rename the client's tool")
        for i, agent in enumerate(agents):
            if t.name in agent.inventory:
                whose = (f"agent {agent.name!r}" if i == 0 else
                         f"agent {agent.name!r}, which the run may be handed to")
                raise InvalidRunInput(
                    f"client tool {t.name!r} has the name of a tool of {whose}: it would take "
                    "that tool's place (its calls would wait for the client, whose answer would "
                    "become their result). Rename the client's tool")


def reachable(agent: Agent, worker: WorkerAgents) -> list[Agent]:
    """`agent`, then every agent a chain of handoffs from it may reach (in the order found;
    a target this worker has not registered is skipped: the handoff itself fails then)."""
    found: dict[str, Agent] = {agent.name: agent}
    queue = [agent]
    while queue:
        current = queue.pop(0)
        for t in current.inventory.values():
            target = t.metadata.get(HANDOFF_KEY)
            known = worker.agent(str(target)) if target is not None else None
            if known is not None and known.name not in found:
                found[known.name] = known
                queue.append(known)
    return list(found.values())


def _as_tools(specs: Sequence[ClientToolSpec] | None) -> list[Tool]:
    """The specs as tools (`InvalidRunInput` for two of one name, or a bad schema)."""
    tools: list[Tool] = []
    for spec in specs or ():
        if any(t.name == spec.name for t in tools):
            raise InvalidRunInput(f"client tool {spec.name!r}: the run already has a tool of "
                                  "that name")
        try:
            tools.append(Tool.client(spec.name, spec.description, spec.parameters,
                                     result_schema=spec.result_schema,
                                     client_timeout=spec.timeout, idempotent=spec.idempotent,
                                     metadata=spec.metadata or {}))
        except ImportError:
            raise InvalidRunInput("client tools are checked with jsonschema and google-re2: "
                                  "install towline[serve] on the worker") from None
        except (ConfigurationError, ValueError) as e:
            named = f"client tool {spec.name!r}"
            said = str(e)
            raise InvalidRunInput(said if said.startswith(named) else f"{named}: {said}") from None
    return tools
