"""The `towline.runtime.search_attributes` local activity: what a run needs to know of its worker.

Which towline attributes exist: the workflow upserts only attributes the
namespace has registered, so a missing registration degrades the UI's search
instead of failing workflow tasks forever. The answer comes from the worker's
`ATTRIBUTE_CACHE` (registered once per worker, asked again after `CACHE_TTL`), so
a run costs the server no RPC here. And the run's payload limit, larger when the
worker has a payload store (`towline.runtime.payloads.payload_limit`).

Why a local activity at all, when the answer is at hand: it records the answer
in the run's history (a marker). Which attributes a run upserts decides whether
it emits an upsert command at all, and its payload limit whether it fails or
goes on, so a worker replaying the run must take the same decisions as the one
that ran it, even if the two disagree (one started before an attribute was
registered, one lacks the permission to list them, one has no store). The marker
costs ~460 bytes and no round trip (it is completed inside the run's first
workflow task); an execution continued as new carries the answer in its input
instead (`ResumeState.facts`). A query arriving during that first task may make
the SDK send the marker and the commands after it in different tasks; replay
copes with that as long as no `workflow.patched` follows the activity in the
same activation, which is why a run decides its agent version before it
(`towline.workflows.agent_run`).
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from towline.fleet.routing import model_queues_of
from towline.results import WorkerFacts
from towline.runtime.payloads import payload_limit
from towline.runtime.registration import ATTRIBUTE_CACHE

from .io import SEARCH_ATTRIBUTES_ACTIVITY

__all__ = ["SEARCH_ATTRIBUTES_ACTIVITY", "search_attributes"]


@activity.defn(name=SEARCH_ATTRIBUTES_ACTIVITY)
async def search_attributes() -> dict[str, Any]:
    """`WorkerFacts`: the registered towline attributes (registering missing ones first, once
    per worker), the payload limit and the worker's model queues."""
    info = activity.info()
    names = await ATTRIBUTE_CACHE.get(activity.client(), info.namespace)
    routes = model_queues_of(info.task_queue)
    facts = WorkerFacts(attributes=sorted(names), payload_limit=payload_limit(info.task_queue),
                        model_queues=routes)
    # without routes, the answer earlier workers understand (they refuse unknown fields)
    return facts.model_dump(mode="json", exclude=None if routes else {"model_queues"})
