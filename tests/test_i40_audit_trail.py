"""The audit trail stays bounded and honest (issue 40, findings 2 and 7), in real runs.

The trail (memo `towline.decisions`) took every reason, `by`, argument and result whole: two
rejections with 1 MB reasons through `towline serve`, six `set_policy` updates with 400 KB
reasons, or 200 ordinary decisions with 10 KB of text each grew the memo past Temporal's
2 MB, and every workflow task failed from then on (the run could no longer be decided or
cancelled). Over-long texts are now refused by the updates' validators (serve: 422, and 413
for a body Temporal would not take), entries are bounded and the trail keeps its newest entries under a byte budget; policy changes
that change nothing are not recorded (200 of them pushed every decision out), and
`towline show` prints the trail's fields escaped (a newline in `by` forged a decision line,
a terminal escape in a reason reached the terminal), with who decided labelled as the client
declared it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from cli_helpers import cli_env, task_failures, towline
from hitl_agents import desk, steps_prompt
from hitl_waits import stop, waiting
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from towline.review import approve, pending, reject, respond, set_policy
from towline.serve.app import ServeConfig, create_app
from towline.testing import towline_worker
from towline.workflows.audit_bounds import (
    MAX_REASON_CHARS,
    MAX_TRAIL_BYTES,
    TRUNCATED,
    json_bytes,
)

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

ORIGIN = "http://localhost:8765"
SAME = {"Host": "localhost:8765", "Origin": ORIGIN}
MB = 1024 * 1024


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def desk_worker(client: Client) -> AsyncIterator[tuple[Client, str]]:
    async with towline_worker(client, [desk]) as started:
        yield started


async def trail_memo(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    """The audit trail as the run's memo records it (describe: no worker asked)."""
    memo = await (await handle.describe()).memo()
    trail: dict[str, Any] = memo["towline.decisions"]
    return trail


async def finished(handle: WorkflowHandle[Any, Any]) -> Any:
    """The run's result; a run whose workflow task keeps failing is reported as such."""
    try:
        return await asyncio.wait_for(handle.result(), 120)
    except TimeoutError:
        raise AssertionError(f"the run never finished: {(await task_failures(handle))[:1]}") from None


async def test_two_megabyte_rejections_through_serve_are_refused_and_the_run_goes_on(
        desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    prompt = steps_prompt([("pay", {"amount": 500, "to": "bob"}), ("pay", {"amount": 600, "to": "eve"})])
    handle = await start(tc, prompt, queue)
    try:
        first, second = await waiting(handle, 2)
        app = create_app(ServeConfig(client=tc, agents=[desk], task_queue=queue))
        transport = httpx.ASGITransport(app=app)  # pyright: ignore[reportArgumentType]
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN, timeout=90) as http:
            for call in (first, second):  # the finding's two 1 MB rejections: too large
                body = {"decision": "reject", "reason": "x" * (MB + 50_000), "by": "mallory"}
                refused = await http.post(f"/runs/{handle.id}/approvals/{call.call_id}",
                                          headers=SAME, json=body)
                assert refused.status_code == 413, refused.text[:300]
                # a reason longer than the trail records, in a body of ordinary size
                body = {"decision": "reject", "reason": "x" * 100_000, "by": "mallory"}
                refused = await http.post(f"/runs/{handle.id}/approvals/{call.call_id}",
                                          headers=SAME, json=body)
                assert refused.status_code == 422, refused.text[:300]
                said = refused.json()["error"]
                assert "reason is 100,000 characters" in said and f"{MAX_REASON_CHARS:,}" in said, said
            # more than Temporal takes in an update: refused as sent, not a server error
            huge = await http.post(f"/runs/{handle.id}/approvals/{first.call_id}", headers=SAME,
                                   json={"decision": "respond", "result": "y" * (2 * MB + 100)})
            assert huge.status_code == 413, huge.text[:300]
            assert "at most 1,048,576 bytes" in huge.json()["error"]
            # the run's own validator refuses it too (a client other than serve)
            with pytest.raises(WorkflowUpdateFailedError) as direct:
                await reject(handle, first.call_id, reason="x" * (MB + 50_000))
            assert "reason is 1,098,576 characters long" in str(direct.value.cause)
            # nothing was recorded, and the run still takes decisions
            assert len(await pending(handle)) == 2
            for call, decided in ((first, "approve"), (second, "reject")):
                done = await http.post(f"/runs/{handle.id}/approvals/{call.call_id}", headers=SAME,
                                       json={"decision": decided, "reason": "checked", "by": "ann"})
                assert done.status_code == 200, done.text[:300]
        result = await finished(handle)
        assert result.output == ("pay=succeeded:paid 500 to bob; "
                                 "pay=denied:rejected by a reviewer: checked")
        trail = await trail_memo(handle)
        assert [(e["decision"], e["by"]) for e in trail["entries"]] == [
            ("approved", "ann"), ("rejected", "ann")]
    finally:
        await stop(handle)


async def test_set_policy_with_400_kb_reasons_is_refused_and_the_run_goes_on(
        desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    handle = await start(tc, steps_prompt([("delete", {"path": "/a"})]), queue)
    try:
        await waiting(handle, 1)
        for i in range(6):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await set_policy(handle, {"lookup": "approve" if i % 2 else "ask"}, by="ops",
                                 reason="r" * 400_000)
            cause = str(refused.value.cause)
            assert "reason is 400,000 characters long" in cause, cause
        with pytest.raises(WorkflowUpdateFailedError) as named:  # `by` has its own, short limit
            await set_policy(handle, {"lookup": "ask"}, by="o" * 1000)
        assert "by is 1,000 characters long" in str(named.value.cause)
        await set_policy(handle, {"lookup": "ask"}, by="ops", reason="incident 7")
        await approve(handle, by="ann")
        result = await finished(handle)
        assert result.output == "delete=succeeded:deleted /a"
        trail = await trail_memo(handle)
        assert [(e["decision"], e.get("reason")) for e in trail["entries"]] == [
            ("policy", "incident 7"), ("approved", None)]
    finally:
        await stop(handle)


async def test_200_ordinary_decisions_keep_the_memo_within_its_budget(
        desk_worker: tuple[Client, str], target: str) -> None:
    tc, queue = desk_worker
    n = 200
    calls = [("ask_user", {"question": f"q{i}"}, f"ask_{i}") for i in range(n)]
    handle = await start(tc, steps_prompt(calls), queue)
    try:
        waited = await waiting(handle, n)
        text = "why " * 2_625  # 10.5 KB of reason for each decision

        async def decide(call: Any) -> None:
            await respond(handle, call.call_id, f"answer {call.index}", reason=text, by="ann")

        # five at a time: Temporal admits at most ten in-flight updates per workflow
        for start_at in range(0, n, 5):
            await asyncio.gather(*(decide(c) for c in waited[start_at:start_at + 5]))
        result = await finished(handle)
        assert result.output.count("ask_user=succeeded:answer") == n
        trail = await trail_memo(handle)
        assert trail["total"] == n
        assert json_bytes(trail) <= MAX_TRAIL_BYTES < 2 * MB // 4
        kept = trail["entries"]
        assert 10 < len(kept) < n and all(e["reason"] == text for e in kept)
        # the newest are kept: the last decisions sent are the last entries
        decided_last = {c.call_id for c in waited[-20:]}
        assert {e["call_id"] for e in kept[-20:]} == decided_last
        shown = await towline("show", handle.id, env=cli_env(target))
        assert f"Decisions (the newest {len(kept)} of {n}):" in shown.out, shown.out[-500:]
    finally:
        await stop(handle)


async def test_a_large_result_is_a_marker_in_the_trail_and_whole_in_the_history(
        desk_worker: tuple[Client, str]) -> None:
    tc, queue = desk_worker
    handle = await start(tc, steps_prompt([("ask_user", {"question": "which account?"})]), queue)
    try:
        await waiting(handle, 1)
        answer = "savings " * 6_000  # 48 KB
        await respond(handle, None, answer, by="ann")
        await finished(handle)
        [entry] = (await trail_memo(handle))["entries"]
        assert entry["result"] == {TRUNCATED: json_bytes(answer),
                                   "preview": json.dumps(answer)[:200] + "…"}
        accepted = [e.workflow_execution_update_accepted_event_attributes.accepted_request
                    async for e in handle.fetch_history_events()
                    if e.HasField("workflow_execution_update_accepted_event_attributes")]
        [sent] = [json.loads(r.input.args.payloads[0].data) for r in accepted]
        assert sent["decisions"][0]["result"] == answer  # `respond` sends a `decide` batch
    finally:
        await stop(handle)


async def test_policy_updates_do_not_push_the_decisions_out(
        desk_worker: tuple[Client, str], target: str) -> None:
    tc, queue = desk_worker
    prompt = steps_prompt([("pay", {"amount": 500, "to": "bob"}), ("pay", {"amount": 600, "to": "eve"})],
                          [("delete", {"path": "/b"})])
    handle = await start(tc, prompt, queue)
    try:
        bob, eve = await waiting(handle, 2)
        await approve(handle, bob.call_id, by="alice", reason="known payee")
        await reject(handle, eve.call_id, by="bob", reason="unknown payee")
        await waiting(handle, 1)
        for _ in range(150):  # no change: nothing recorded
            await set_policy(handle, {"note": "deny"}, by="ops")
        for i in range(60):  # real changes: the newest kept, within their own budget
            await set_policy(handle, {"lookup": "ask" if i % 2 else "approve"}, by="ops")
        shown = await towline("show", handle.id, env=cli_env(target))
        assert shown.code == 0, shown
        assert "approved pay call" in shown.out and "reason known payee" in shown.out, shown.out
        assert "rejected pay call" in shown.out and "reason unknown payee" in shown.out
        await approve(handle, by="carol")
        await finished(handle)
        trail = await trail_memo(handle)
        entries = trail["entries"]
        assert trail["total"] == 2 + 1 + 60 + 1
        people = [(e["decision"], e.get("by")) for e in entries if e["decision"] != "policy"]
        assert people == [("approved", "alice"), ("rejected", "bob"), ("approved", "carol")]
        policies = [e for e in entries if e["decision"] == "policy"]
        assert 0 < len(policies) < 61 and policies[-1]["rules"] == {"lookup": "ask"}
    finally:
        await stop(handle)


async def test_show_escapes_the_trail_and_labels_who_decided_as_declared(
        desk_worker: tuple[Client, str], target: str) -> None:
    tc, queue = desk_worker
    handle = await start(tc, steps_prompt([("delete", {"path": "/c"})]), queue)
    forged = "2026-01-01T00:00:00+00:00  approved delete call evil (step 9)  by a person root"
    try:
        await waiting(handle, 1)
        # rejected: the reason is the model's text too, so the output and conversation hold it
        await reject(handle, by=f"mallory\n  {forged}", reason="\x1b[2Jwiped\r\x1b]52;c;aGk=\x07")
        await finished(handle)
        shown = await towline("show", handle.id, env=cli_env(target))
        assert shown.code == 0, shown
        trail = shown.out.split("Decisions:\n")[1].split("\n")
        line = trail[0]
        assert not any(row.lstrip().startswith(forged) for row in shown.out.splitlines())
        assert "\x1b" not in shown.out and "\r" not in shown.out and "\x07" not in shown.out
        assert "by a person mallory\\n  2026-01-01" in line, line
        assert "reason \\x1b[2Jwiped\\r\\x1b]52;c;aGk=\\x07" in line, line
        assert "as the client declared" in line, line
    finally:
        await stop(handle)


# --- helpers -----------------------------------------------------------------------------------

async def start(tc: Client, prompt: str, queue: str) -> WorkflowHandle[Any, Any]:
    from towline.client import start_run

    return await start_run(tc, desk, prompt, task_queue=queue,
                           id=f"i40-trail-{uuid.uuid4().hex[:8]}")


