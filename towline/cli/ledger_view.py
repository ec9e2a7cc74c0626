"""A run's confirmed counters read from its history, for the CLI's live figures.

Engine 4 on, the memo `towline.counters` and the search attributes are the run's *visible*
counters: written at every status change, at the end, and at most every 10 steps or 300 s
between (`towline.workflows.ledger.ATTRIBUTE_STEPS`). The exact ones are in the history: the
header of each activity the run schedules, the memo written at a status change, the final
counters of its result. `towline show` and `towline runs` read them from there
(`towline.runtime.ledger.latest_counters`), decoded with the client's codec, and `show` says how
far behind them the memo is.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError

from towline.cli.common import history_from_end
from towline.encryption.codec import decode_history
from towline.results import Counters
from towline.runtime.ledger import latest_counters
from towline.workflows.ledger import ATTRIBUTE_SECONDS, ATTRIBUTE_STEPS

__all__ = ["LATEST_PAGES", "confirmed_in", "latest_recorded", "memo_line"]

LATEST_PAGES = 3
"""Pages (of 50 events) read back from a live run's end for its latest counters: a run writes
one within every step, so they are near the end; past that the memo stands in."""


async def confirmed_in(client: Client, events: Sequence[HistoryEvent]) -> Counters | None:
    """The latest confirmed counters `events` (one execution's) record, decoded with the
    client's codec; None if they hold none that can be read."""
    codec = client.data_converter.payload_codec
    try:
        readable = await decode_history(events, codec) if codec is not None else list(events)
    except Exception:  # noqa: BLE001 - a payload no key opens: no figure, not a crash
        return None
    return latest_counters(readable)


async def latest_recorded(client: Client, workflow_id: str, run_id: str) -> Counters | None:
    """The latest counters a live run's history records, read from its end."""
    try:
        async for events, _ in history_from_end(client, workflow_id, run_id, 50, LATEST_PAGES):
            found = await confirmed_in(client, events)
            if found is not None:
                return found
    except RPCError:
        return None  # gone since it was listed
    return None


def memo_line(memo: Counters | None, confirmed: Counters | None) -> str | None:
    """`towline show`'s line on how current the visible counters (memo, search attributes) are."""
    if confirmed is None:
        return None
    if memo is None:
        return "Memo      none readable (the confirmed counters above are read from the history)"
    if memo == confirmed:
        return "Memo      current: the memo and search attributes show the confirmed counters"
    behind = confirmed.run_step - memo.run_step
    steps = f"{behind} step{'s' if behind != 1 else ''} behind" if behind > 0 else "behind"
    return (f"Memo      at step {memo.run_step}, tool calls {memo.tool_calls} ({steps} the "
            f"confirmed counters; the memo and search attributes are written at status changes, "
            f"at the end and at most every {ATTRIBUTE_STEPS} steps or {ATTRIBUTE_SECONDS} s)")
