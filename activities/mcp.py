"""The MCP activities: `towline.mcp.<server>.list_tools` and the calls `towline.tool.<name>`.

Listing is one activity per server, registered when the worker starts. Calls are
served by one dynamic activity, because a worker learns the tools' names only
when a run lists them: it takes every `towline.tool.*` activity this worker has no
function tool for, and its `MCPCallInput` names the server and the tool.

A call is as durable as a function tool's (`activities/tool.py`):
- the server's `isError` result is a `failed` return the model sees; a JSON-RPC
  error answer too (the server answered: nothing uncertain);
- a request that never reached the server (the server could not be started or
  connected to) is a retryable failure of type `ToolNotStarted`, for every tool,
  and after the last attempt a `failed` return, never `unknown`;
- a non-idempotent call first checks that the pooled connection still answers,
  then records durably that it enters the call (`mark_entered`) and sends it; a
  later attempt that finds that record, or a call whose connection was lost after
  sending, fails non-retryably as an uncertain effect (the workflow records
  `unknown`). An idempotent call that lost its connection is retried by Temporal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from towline.mcp import (
    IDEMPOTENCY_META,
    NOT_STARTED,
    MCPCallInput,
    MCPListInput,
    MCPListResult,
    MCPServer,
    MCPToolSpec,
    list_activity_name,
)
from towline.runtime.payloads import PAYLOAD_LIMIT, payload_size

from .guard import require_agent_run
from .heartbeat import UNCERTAIN, entered_before, mark_entered, record_now, with_heartbeats
from .io import ToolActivityResult
from .mcp_pool import ConnectFailed, MCPConnection, MCPPool

__all__ = ["MCPActivities", "tool_result"]

CONNECTION_CLOSED = -32000
"""The JSON-RPC code the SDK gives a request whose connection closed."""
_ENDED_GRACE = 2.0
"""Seconds to let a failed connection finish ending before judging how it ended."""
_MAX_PAGES = 100



def _not_started(message: str, *, retryable: bool = True) -> ApplicationError:
    """The failure of an attempt whose request certainly never reached the server."""
    return ApplicationError(message, type=NOT_STARTED, non_retryable=not retryable)


class MCPActivities:
    """The listing and call activities of a worker, over its pool of connections."""

    def __init__(self, servers: Sequence[MCPServer]) -> None:
        self.pool = MCPPool({s.name: s for s in servers})

    def definitions(self) -> list[Callable[..., Any]]:
        """A listing activity per server and the dynamic call activity (none without servers)."""
        if not self.pool.servers:
            return []
        return [*(self._lister(name) for name in self.pool.servers), self._caller()]

    def _lister(self, name: str) -> Callable[[MCPListInput], Awaitable[MCPListResult]]:
        async def list_tools(inp: MCPListInput) -> MCPListResult:
            return await self.list_tools(name)

        list_tools.__name__ = f"mcp_list_{name.replace('-', '_')}"
        return activity.defn(name=list_activity_name(name))(list_tools)

    def _caller(self) -> Callable[[Sequence[RawValue]], Awaitable[ToolActivityResult]]:
        async def mcp_tool_call(args: Sequence[RawValue]) -> ToolActivityResult:
            info = activity.info()
            inp = _call_input(info, args)
            return await self.call(inp)

        return activity.defn(dynamic=True)(mcp_tool_call)

    async def list_tools(self, name: str) -> MCPListResult:
        """Every tool the server lists (all pages), as the history will record them."""
        require_agent_run()
        try:
            conn = await self.pool.get(name)
        except ConnectFailed as e:
            raise ApplicationError(f"MCP server {name!r} unreachable: {e}", type="MCPServerUnreachable") from None
        from mcp import MCPError

        specs: list[MCPToolSpec] = []
        cursor: str | None = None
        try:
            assert conn.client is not None
            for _ in range(_MAX_PAGES):
                page = await conn.client.list_tools(cursor=cursor)
                specs.extend(_spec(t) for t in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                self.pool.discard(conn)
            raise ApplicationError(f"MCP server {name!r} did not list its tools: {e.message}",
                                   type="MCPListFailed") from None
        result = MCPListResult(tools=specs)
        size = payload_size(activity.payload_converter(), result)
        if size > PAYLOAD_LIMIT:
            raise ApplicationError(f"MCP server {name!r} lists {len(specs)} tools in {size} bytes, "
                                   f"over the {PAYLOAD_LIMIT}-byte payload limit (use MCPServer.tools "
                                   "to choose fewer)", type="MCPListTooLarge", non_retryable=True)
        return result

    async def call(self, inp: MCPCallInput) -> ToolActivityResult:
        """One attempt of one MCP tool call."""
        require_agent_run()
        info = activity.info()
        if not inp.idempotent:
            earlier = entered_before()
            if earlier is not None:
                raise ApplicationError(
                    f"attempt {earlier} of {inp.tool!r} on MCP server {inp.server!r} sent the call "
                    "and lost its worker; the tool is not idempotent, so it is not sent again",
                    type=UNCERTAIN, non_retryable=True)
        if inp.server not in self.pool.servers:
            raise _not_started(f"this worker has no MCP server {inp.server!r}")
        try:  # a non-idempotent call checks that a reused connection still answers first
            conn = await with_heartbeats(self.pool.get(inp.server, probe=not inp.idempotent),
                                         lambda: ({"phase": "connecting"},))
        except ConnectFailed as e:
            raise _not_started(f"MCP server {inp.server!r} unreachable: {e}") from None
        entered = {} if inp.idempotent else await mark_entered()
        try:
            result = await _call(info, conn, inp, entered)
        except Exception as e:  # noqa: BLE001 - sorted below: answered, never sent, or uncertain
            return await self._failed_call(inp, conn, e)
        return tool_result(result)

    async def _failed_call(self, inp: MCPCallInput, conn: MCPConnection, error: Exception) -> ToolActivityResult:
        from mcp import MCPError

        if isinstance(error, MCPError) and error.code != CONNECTION_CLOSED:
            # The server answered with an error: certain, and the model should see it.
            return ToolActivityResult(status="failed", content=f"MCP error {error.code}: {error.message}")
        if not isinstance(error, MCPError) and conn.alive:
            # The connection stands: the SDK rejected the answer (e.g. structured content
            # that breaks the tool's own output schema). The server did answer.
            return ToolActivityResult(status="failed", content=f"invalid answer from MCP server "
                                      f"{inp.server!r}: {type(error).__name__}: {error}")
        self.pool.discard(conn)
        await conn.wait_ended(_ENDED_GRACE)
        what = f"{inp.tool!r} on MCP server {inp.server!r}"
        if conn.refused():  # nothing was delivered: undo the entry record, and let Temporal retry
            if not inp.idempotent:
                await record_now({"phase": "not_sent"})
            raise _not_started(f"MCP server {inp.server!r} refused the connection") from None
        if inp.idempotent:
            raise ApplicationError(f"the connection was lost during {what}; retrying (idempotent)",
                                   type="MCPConnectionLost") from None
        raise ApplicationError(f"the connection was lost during {what}, which may have taken effect",
                               type=UNCERTAIN, non_retryable=True) from None


def _call_input(info: activity.Info, args: Sequence[RawValue]) -> MCPCallInput:
    """Decode the dynamic activity's input; anything else is an activity this worker lacks."""
    missing = ApplicationError(
        f"Activity function {info.activity_type} is not registered on this worker", type="NotFoundError"
    )
    if not info.activity_type.startswith("towline.tool.") or len(args) != 1:
        raise missing
    try:
        return activity.payload_converter().from_payload(args[0].payload, MCPCallInput)
    except Exception:  # noqa: BLE001 - a function tool's input: its activity is not on this worker
        raise missing from None


async def _call(info: activity.Info, conn: MCPConnection, inp: MCPCallInput,
                entered: Mapping[str, Any]) -> Any:
    """Call the tool, heartbeating (the entry record, and the server's progress) until it answers."""
    details: dict[str, Any] = {**entered, "phase": "sent"}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        details.update(progress=progress, total=total, message=message)
        activity.heartbeat(dict(details))

    assert conn.client is not None
    call = conn.client.call_tool(inp.tool, inp.args, progress_callback=on_progress,
                                 meta={IDEMPOTENCY_META: inp.ctx.idempotency_key})
    return await with_heartbeats(call, lambda: (dict(details),))


def _spec(tool: Any) -> MCPToolSpec:
    hints = tool.annotations
    return MCPToolSpec(
        name=tool.name, description=tool.description or tool.title or "",
        input_schema=dict(tool.input_schema or {}),
        read_only=bool(hints and hints.read_only_hint),
        idempotent_hint=bool(hints and hints.idempotent_hint),
        destructive=bool(hints and hints.destructive_hint),
    )


# --- results ------------------------------------------------------------------------------------


def _block(block: Any) -> dict[str, Any]:
    """One content block as JSON the model (and the history) can take."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind in ("image", "audio"):
        return {"type": kind, "mime_type": block.mime_type, "data": block.data}
    if kind == "resource":
        res = block.resource
        body = {"text": res.text} if hasattr(res, "text") else {"blob": getattr(res, "blob", "")}
        return {"type": "resource", "uri": str(res.uri), "mime_type": res.mime_type, **body}
    if kind == "resource_link":
        return {"type": "resource_link", "uri": str(block.uri), "name": block.name,
                "mime_type": block.mime_type}
    dump: Any = getattr(block, "model_dump", None)
    if callable(dump):
        return cast(dict[str, Any], dump(mode="json"))
    return {"type": str(kind)}


def tool_result(result: Any) -> ToolActivityResult:
    """Map a `CallToolResult` to a tool return.

    `isError` → `failed` with the text. Otherwise: the structured content when
    the server gave some and only text besides (the text then repeats it); the
    text when there is nothing else (one block: a string); else a list of blocks
    (`{"type": "text"|"image"|"audio"|"resource"|"resource_link", ...}`, plus
    `{"type": "structured", "value": ...}` first when there is structured content).
    """
    blocks = [_block(b) for b in result.content]
    texts = [b["text"] for b in blocks if b["type"] == "text"]
    only_text = len(texts) == len(blocks)
    if result.is_error:
        return ToolActivityResult(status="failed", content="\n".join(texts) or "the tool reported an error")
    structured = result.structured_content
    content: Any
    if structured is not None and only_text:
        content = structured
    elif only_text:
        content = texts[0] if len(texts) == 1 else "\n".join(texts)
    else:
        content = ([{"type": "structured", "value": structured}] if structured is not None else []) + blocks
    return _fit(ToolActivityResult(status="succeeded", content=content))


def _fit(result: ToolActivityResult) -> ToolActivityResult:
    """Keep the result within one payload: drop binary data first, then all of it."""
    converter = activity.payload_converter()
    size = payload_size(converter, result)
    if size <= PAYLOAD_LIMIT:
        return result
    content: Any = result.content
    if isinstance(content, list):
        slim: list[Any] = []
        for part in cast(list[Any], content):
            if isinstance(part, Mapping) and ("data" in part or "blob" in part):
                block = dict(cast(Mapping[str, Any], part))
                raw = str(block.pop("data", "") or block.pop("blob", "") or "")
                block.pop("blob", None)
                block["omitted"] = f"{len(raw)} base64 characters over the payload limit"
                part = block
            slim.append(part)
        result = result.model_copy(update={"content": slim})
        size = payload_size(converter, result)
        if size <= PAYLOAD_LIMIT:
            return result
    note = f"[tool result of {size} bytes exceeds the {PAYLOAD_LIMIT}-byte payload limit; omitted]"
    return result.model_copy(update={"content": note})
