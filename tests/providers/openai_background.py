"""The Responses API's background mode on the fake provider (`BackgroundResponses`, a
`FakeProvider.handlers` entry): responses started, polled and cancelled as the real API does.

From the recorded traffic of pydantic/pydantic-ai
(`tests/models/cassettes/test_openai_responses/test_background_mode_vcr.yaml` and
`test_background_mode_with_tool_vcr.yaml`, commit 4fda38988f2939fa6ea9cdefcf120693e10ef491)
and OpenAI's background-mode guide:

- `POST /v1/responses` with `background: true` answers at once: the response object with
  `status: "queued"`, an id, no output and `usage: null`;
- `GET /v1/responses/{id}` answers `in_progress` while the model works (`output: []`),
  then the whole response, `completed`, with its output and usage;
- `POST /v1/responses/{id}/cancel` answers the response `cancelled` (a background one only);
- an id the server never created is a 404 (`{"error": {"message": "Response with id
  '...' not found.", "type": "invalid_request_error", "param": "response_id", "code":
  "response_not_found"}}`), both to poll and to cancel.

The model "works" until `finish()` is called (or for `polls_before_done` polls), so a test
decides how long a background response runs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fake_server import Recorded, Reply
from openai_replies import responses_answer

__all__ = ["BackgroundResponses", "not_found"]


def not_found(response_id: str) -> Reply:
    """The 404 of an id the server never created."""
    return Reply({"error": {"message": f"Response with id '{response_id}' not found.",
                            "type": "invalid_request_error", "param": "response_id",
                            "code": "response_not_found"}}, status=404)


@dataclass
class _Job:
    body: dict[str, Any]
    output: list[dict[str, Any]]
    status: str = "queued"
    polls: int = 0


@dataclass
class BackgroundResponses:
    """Background responses: each created one answers `output` once it is finished."""

    output: list[dict[str, Any]]
    """What a finished response holds (the same for every one created)."""
    polls_before_done: int | None = None
    """Finish on its own after this many polls (None: only when `finish()` is called)."""
    jobs: dict[str, _Job] = field(default_factory=dict[str, _Job])
    done: threading.Event = field(default_factory=threading.Event)
    polls: list[str] = field(default_factory=list[str])
    """The ids polled, in order."""
    cancels: list[str] = field(default_factory=list[str])
    """The ids cancelled, in order."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def finish(self) -> None:
        """The model is done: the next poll answers the completed response."""
        self.done.set()

    def _object(self, response_id: str, job: _Job) -> dict[str, Any]:
        body = job.body
        if job.status == "completed":
            answer = responses_answer(job.output, model="o3-deep-research-2025-06-26")
        else:
            answer = responses_answer([], model="o3-deep-research-2025-06-26")
            answer["usage"] = None
        answer.update(id=response_id, status=job.status, background=True,
                      store=bool(body.get("store")), tools=body.get("tools") or [])
        return answer

    def __call__(self, request: Recorded) -> Reply | None:
        path = urlsplit(request.path).path
        if not path.startswith("/v1/responses"):
            return None
        with self._lock:
            if request.method == "POST" and path == "/v1/responses":
                body: dict[str, Any] = request.body if isinstance(request.body, dict) else {}
                if not body.get("background"):
                    return None  # a plain request: the script answers it
                response_id = f"resp_bg_{len(self.jobs) + 1:04d}"
                job = self.jobs[response_id] = _Job(body=body, output=self.output)
                return Reply(self._object(response_id, job))
            parts = path.split("/")  # ["", "v1", "responses", id, ("cancel")]
            if len(parts) < 4:
                return None
            response_id = parts[3]
            job = self.jobs.get(response_id)
            if request.method == "GET" and len(parts) == 4:
                self.polls.append(response_id)
                if job is None:
                    return not_found(response_id)
                if job.status in ("queued", "in_progress"):
                    job.polls += 1
                    finished = self.done.is_set() or (
                        self.polls_before_done is not None and job.polls > self.polls_before_done)
                    job.status = "completed" if finished else "in_progress"
                return Reply(self._object(response_id, job))
            if request.method == "POST" and parts[4:] == ["cancel"]:
                self.cancels.append(response_id)
                if job is None:
                    return not_found(response_id)
                if job.status in ("queued", "in_progress"):
                    job.status = "cancelled"
                return Reply(self._object(response_id, job))
        return None
