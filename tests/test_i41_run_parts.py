"""Issue 41, item 2: `Run` (the workflow's record of one run) is composed of named parts.

The conversation (`workflows.conversation.Conversation`), the ledger (`workflows.ledger.Ledger`:
counters, usage, status and what the run records of them, when), the approvals
(`workflows.waiting.Approvals`) and the tools (`workflows.inventory.Inventory`) are each a
class of their own that `Run` holds, not inherits; each fact has one home (no field is both on
`Run` and in a part). Behaviour is checked by the replay, ledger, HITL, session, handoff and
continue-as-new tests; this checks the shape.
"""

from __future__ import annotations

import dataclasses

from towline.workflows.conversation import Conversation
from towline.workflows.inventory import Inventory
from towline.workflows.ledger import Ledger
from towline.workflows.run import Run
from towline.workflows.waiting import Approvals

PARTS = {"conversation": Conversation, "ledger": Ledger, "approvals": Approvals,
         "inventory": Inventory}


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_run_holds_its_parts() -> None:
    assert Run.__mro__ == (Run, object)
    hints = {f.name: f.type for f in dataclasses.fields(Run)}
    for name, part in PARTS.items():
        assert hints[name] == part.__name__, name  # annotations are strings (PEP 563)
        assert part.__mro__ == (part, object), part


def test_each_fact_has_one_home() -> None:
    run = _fields(Run)
    for part in PARTS.values():
        assert not run & _fields(part), part
    # what moved into the parts is no longer on `Run`
    assert not run & {"messages", "counters", "usage", "status", "hitl", "pending_approvals",
                      "waiting_for", "tools", "allowed_tools", "guard_requests"}
    assert not {"confirm", "header", "bump", "add_usage", "close_unpaired", "append"} & set(vars(Run))


def test_run_is_small() -> None:
    # issue 41 started from 32 fields and 19 methods on `Run`
    assert len(_fields(Run)) <= 24
    methods = [n for n, v in vars(Run).items() if callable(v) and not n.startswith("__")]
    assert sorted(methods) == ["fitted_partial", "partial"]
