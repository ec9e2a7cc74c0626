"""Tools a client runs, named by a run's input (`RunInput.client_tools`, an AG-UI client's
`tools`): checked when the run starts, then part of its inventory like the agent's own.

A call of one is recorded like any other; the run then waits durably for its result
(`ApprovalHandlers.client_result`: the `tool_result` update, `towline respond`), checked
against the tool's result schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from towline.errors import ConfigurationError, InvalidRunInput
from towline.results import ClientToolSpec
from towline.tools import Tool

__all__ = ["client_tools"]


def client_tools(specs: Sequence[ClientToolSpec] | None, inventory: Mapping[str, Tool]) -> list[Tool]:
    """The input's client tools as tools; `InvalidRunInput` for a clash or a bad schema."""
    tools: list[Tool] = []
    for spec in specs or ():
        if spec.name in inventory or any(t.name == spec.name for t in tools):
            raise InvalidRunInput(f"client tool {spec.name!r}: the run already has a tool of "
                                  "that name")
        try:
            tools.append(Tool.client(spec.name, spec.description, spec.parameters,
                                     result_schema=spec.result_schema))
        except ImportError:
            raise InvalidRunInput("client tools are checked with jsonschema: install "
                                  "towline[serve] on the worker") from None
        except (ConfigurationError, ValueError) as e:
            raise InvalidRunInput(f"client tool {spec.name!r}: {e}") from None
    return tools
