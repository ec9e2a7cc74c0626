"""Counting the heartbeats a benchmark worker sends (billable Actions that no history holds)."""

from __future__ import annotations

from typing import Any

__all__ = ["HeartbeatCounter"]


class HeartbeatCounter:
    """Counts the heartbeats this worker process sends (they are billable Actions, and not
    in any history): every direct `RecordActivityTaskHeartbeat` RPC, and every
    `activity.heartbeat` call (the SDK sends at most one per throttle interval, so these
    are an upper bound; towline's activities in the benchmarks finish before their first)."""

    count = 0

    @classmethod
    def install(cls) -> None:
        from temporalio import activity
        from temporalio.service import WorkflowService

        rpc = WorkflowService.record_activity_task_heartbeat
        beat = activity.heartbeat

        async def counted_rpc(self: WorkflowService, *args: Any, **kwargs: Any) -> Any:
            cls.count += 1
            return await rpc(self, *args, **kwargs)

        def counted_beat(*details: Any) -> None:
            cls.count += 1
            beat(*details)

        WorkflowService.record_activity_task_heartbeat = counted_rpc  # type: ignore[method-assign]
        activity.heartbeat = counted_beat
