"""The task queues towline names: the fleet's default and one `towline run` command's own.

Their one home, below both the client (`towline.client` re-exports them) and time travel
(a fork of a run whose queue was a command's own goes to the default queue).
"""

from __future__ import annotations

import uuid

__all__ = ["DEFAULT_TASK_QUEUE", "OWN_QUEUE_PREFIX", "own_task_queue", "is_own_queue"]

DEFAULT_TASK_QUEUE = "towline"
OWN_QUEUE_PREFIX = "towline-run-"
"""How the task queue of one `towline run` invocation's own worker begins (`own_task_queue`):
no other worker polls it, so no other worker can take its run's tasks."""


def own_task_queue() -> str:
    """A new task queue for one command's in-process worker: `towline-run-<random>`."""
    return f"{OWN_QUEUE_PREFIX}{uuid.uuid4().hex[:12]}"


def is_own_queue(task_queue: str) -> bool:
    """Whether `task_queue` was one `towline run` command's own: nothing polls it once the
    command has ended (a fork of its run goes to `DEFAULT_TASK_QUEUE` instead)."""
    return task_queue.startswith(OWN_QUEUE_PREFIX)
