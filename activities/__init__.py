"""Activity side: all I/O of a run (model calls and tool executions)."""

from .io import ModelActivityInput, ToolActivityInput, ToolActivityResult
from .model_request import MODEL_ACTIVITY, ModelActivities
from .tool import make_tool_activity

__all__ = [
    "ModelActivityInput",
    "ToolActivityInput",
    "ToolActivityResult",
    "MODEL_ACTIVITY",
    "ModelActivities",
    "make_tool_activity",
]

from .search_attributes import SEARCH_ATTRIBUTES_ACTIVITY, search_attributes

__all__ += ["SEARCH_ATTRIBUTES_ACTIVITY", "search_attributes"]
