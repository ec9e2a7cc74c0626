"""The `towline.search_attributes` local activity: which towline attributes exist.

The workflow upserts only attributes the namespace has registered, so a missing
registration degrades the UI's search instead of failing workflow tasks forever.
"""

from __future__ import annotations

from temporalio import activity

from towline.registration import register_search_attributes, registered_search_attributes

__all__ = ["SEARCH_ATTRIBUTES_ACTIVITY", "search_attributes"]

SEARCH_ATTRIBUTES_ACTIVITY = "towline.search_attributes"


@activity.defn(name=SEARCH_ATTRIBUTES_ACTIVITY)
async def search_attributes() -> list[str]:
    """Register missing towline attributes where allowed; return those registered."""
    client = activity.client()
    namespace = activity.info().namespace
    try:
        await register_search_attributes(client, namespace)
    except Exception as e:  # noqa: BLE001 - a namespace may forbid operator calls; listing still works
        activity.logger.warning("could not register towline search attributes: %s", e)
    return sorted(await registered_search_attributes(client, namespace))
