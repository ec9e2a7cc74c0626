"""A web backend streaming a run's live events to the browser as server-sent events.

    uvicorn examples.sse:app --port 8000
    curl -N http://localhost:8000/runs/research-1/events
"""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Header, Request
from fastapi.responses import StreamingResponse

from towline.client import connect, events


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.temporal = await connect()  # TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, ...
    yield


app = FastAPI(lifespan=lifespan)


@app.get("/runs/{workflow_id}/events")
async def run_events(workflow_id: str, request: Request,
                     last_event_id: int | None = Header(default=None)) -> StreamingResponse:
    """The run's events from the start; a reconnecting browser resumes after the last it saw."""
    handle = request.app.state.temporal.get_workflow_handle(workflow_id)
    start = 0 if last_event_id is None else last_event_id + 1

    async def sse() -> AsyncIterator[str]:
        async for event in events(handle, from_offset=start):
            yield f"id: {event.offset}\nevent: {event.type}\ndata: {json.dumps(event.to_json())}\n\n"

    return StreamingResponse(sse(), media_type="text/event-stream")
