"""The `towline.search_attributes` local activity: what a run needs to know of its worker.

Which towline attributes exist: the workflow upserts only attributes the
namespace has registered, so a missing registration degrades the UI's search
instead of failing workflow tasks forever. And the run's payload limit, larger
when the worker has a payload store (`towline.payloads.payload_limit`).

Why a local activity, and why it asks the server at every run start: it records
the answer in the run's history (a marker). Which attributes a run upserts
decides whether it emits an upsert command at all, and its payload limit whether
it fails or goes on, so a worker replaying the run must take the same decisions
as the one that ran it, even if the two disagree. Answering from a per-worker
cache instead (no RPC) was tried and measured, and refused: a local activity that
completes at once races a query arriving during the run's first workflow task,
and the SDK then records a history its own replay rejects (the marker and the
code after it in different workflow tasks; `tests/test_cap_tool_approval.py`
failed so). An execution continued as new carries the answer in its input
instead (`ResumeState.facts`): no local activity there.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from towline.payloads import payload_limit
from towline.registration import registered_search_attributes
from towline.results import WorkerFacts

__all__ = ["SEARCH_ATTRIBUTES_ACTIVITY", "search_attributes"]

SEARCH_ATTRIBUTES_ACTIVITY = "towline.search_attributes"


@activity.defn(name=SEARCH_ATTRIBUTES_ACTIVITY)
async def search_attributes() -> dict[str, Any]:
    """`WorkerFacts`: the registered towline attributes and the payload limit. (Earlier
    versions answered the attribute list alone.)

    One operator call: the worker registered the attributes when it started
    (`TowlinePlugin`), so a run only lists them. Registering again here cost two more
    calls per run, three on SQL visibility, where `TowlineCostMicros` never fits."""
    info = activity.info()
    names = await registered_search_attributes(activity.client(), info.namespace)
    return WorkerFacts(attributes=sorted(names),
                       payload_limit=payload_limit(info.task_queue)).model_dump(mode="json")
