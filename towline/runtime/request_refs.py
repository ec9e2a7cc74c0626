"""The name of the earlier request protocol's query (a reference per message), which
`AgentRun` still answers; requests now travel by chain key (`towline.runtime.request_chain`).
"""

from __future__ import annotations

__all__ = ["REQUEST_QUERY"]

REQUEST_QUERY = "towline.request_messages"
