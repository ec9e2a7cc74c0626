"""docs/human-in-the-loop.md, run as written: every decision kind, a remembered decision, a
batch rejected at once, the policy changed live, the audit trail in `towline show`, and the
updates as a `temporal` CLI user sends them (each `towline run` serves its run in-process)."""

from __future__ import annotations

import asyncio
import json

import pytest
from cli_helpers import towline
from readme import cli_env, read_until, readme, readme_process

pytestmark = pytest.mark.timeout(240)


async def _finished(proc: asyncio.subprocess.Process) -> str:
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def _pending(env: dict[str, str], workflow_id: str, n: int) -> list[dict[str, object]]:
    for _ in range(200):
        done = await readme("towline pending", env={**env, "COLUMNS": "200"})
        listed = [line for line in done.out.splitlines() if line.startswith(workflow_id + " ")]
        if len(listed) == n:
            return [{"line": line} for line in listed]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never had {n} pending calls")


async def test_the_human_in_the_loop_page_runs_as_written(target: str) -> None:
    env = cli_env(target)
    run = await readme_process('towline run examples.payments:desk "pay 250 to bob and 180 to '
                               'carol, ask: which account?" --id pay-1', env=env)
    await read_until(run.stderr, "ask_user")
    rows = await _pending(env, "pay-1", 3)
    assert [r["line"].split()[1:4] for r in rows] == [  # type: ignore[union-attr]
        ["1", "pay_1", "pay"], ["2", "pay_2", "pay"], ["3", "ask_1", "ask_user"]]

    edited = await readme('towline edit pay-1 1 --args \'{"amount": 200, "to": "bob"}\' --reason '
                          '"the invoice says 200" --by alice', env=env)
    assert edited.code == 0, edited
    assert edited.out.startswith("edited tool call pay_1 in run pay-1: #1 pay(")
    remembered = await readme('towline approve pay-1 2 --remember session --pattern \'{"to": '
                              '"carol"}\' --by alice', env=env)
    assert remembered.code == 0 and "(remembered for the session)" in remembered.out, remembered
    responded = await readme('towline respond pay-1 3 --result \'"savings"\' --by alice', env=env)
    assert responded.code == 0, responded
    assert await _finished(run) == ("pay: paid $200 to bob (succeeded); pay: paid $180 to carol "
                                    "(succeeded); ask_user: savings (succeeded)\n")

    shown = await readme("towline show pay-1", env=env)
    assert shown.code == 0, shown
    trail = shown.out.split("Decisions:\n")[1]
    assert ('edited pay call pay_1 (step 1): args {"amount": 250, "to": "bob"} -> {"amount": 200, '
            '"to": "bob"}  by a person alice (') in trail
    assert "reason the invoice says 200  digest " in trail
    assert "approved pay call pay_2 (step 1)  by a person alice (" in trail
    assert 'responded ask_user call ask_1 (step 1): result "savings"  by a person alice' in trail

    frozen = await readme_process('towline run examples.payments:desk "pay 900 to dave and 500 to '
                                  'erin" --id pay-2', env=env)
    await read_until(frozen.stderr, "pay_2")  # the run says its second call waits
    await _pending(env, "pay-2", 2)
    policy = await readme('towline policy pay-2 --rule pay=deny:"payments are frozen until Monday" '
                          '--by ops --reason "quarter close"', env=env)
    assert policy.code == 0, policy
    assert policy.out == ("policy of run pay-2: rules pay=deny:payments are frozen until Monday; "
                          "default the agent’s\n")
    assert await _finished(frozen) == ("pay: payments are frozen until Monday (denied); pay: "
                                       "payments are frozen until Monday (denied)\n")

    batch = await readme_process('towline run examples.payments:desk "pay 300 to frank and 400 to '
                                 'gina" --id pay-3', env=env)
    await read_until(batch.stderr, "pay_2")  # the run says its second call waits
    await _pending(env, "pay-3", 2)
    rejected = await readme('towline reject pay-3 --all --reason "no payments today" --by alice',
                            env=env)
    assert rejected.code == 0 and rejected.out.count("rejected tool call") == 2, rejected
    assert "(denied)" in await _finished(batch)

    plain = await readme_process('towline run examples.payments:desk "pay 300 to hank and 350 to '
                                 'ivy" --id pay-4', env=env)
    await read_until(plain.stderr, "pay_2")  # the run says its second call waits
    await _pending(env, "pay-4", 2)
    queried = await readme("temporal workflow query --name state --workflow-id pay-4", env=env)
    assert queried.code == 0 and '"digest"' in queried.out, queried
    approved = await readme('temporal workflow update execute --name approve --workflow-id pay-4 '
                            '--input \'{"call_id": "pay_1", "by": "alice"}\'', env=env)
    assert approved.code == 0, approved
    opened = await readme('temporal workflow update execute --name set_policy --workflow-id pay-4 '
                          '--input \'{"rules": {"pay": "approve"}, "by": "ops"}\'', env=env)
    assert opened.code == 0, opened
    assert await _finished(plain) == ("pay: paid $300 to hank (succeeded); pay: paid $350 to ivy "
                                      "(succeeded)\n")
    trail = json.loads((await towline("show", "pay-4", "--json", env=env)).out)["decisions"]
    assert [(e["decision"], e["source"], e.get("by")) for e in trail] == [
        ("approved", "person", "alice"), ("policy", "person", "ops"), ("approved", "policy", None)]
    assert trail[0]["identity"]  # the identity the temporal CLI sent the update with
