"""The Guardrails and Handoffs pages' commands (docs/guardrails.md, docs/handoffs.md), run exactly
as written, against a `towline dev` serving `examples.support:agents` (its own SQLite state in
a temporary folder), from "other terminals".
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from readme import cli_env, read_until, readme, readme_process, stop_process

pytestmark = pytest.mark.timeout(120)


async def test_the_guardrail_and_handoff_pages_as_they_show(tmp_path: Path) -> None:
    dev = await readme_process("towline dev --agent examples.support:agents", env=cli_env(),
                               cwd=tmp_path)
    said = await read_until(dev.stderr, "Ctrl-C stops.")
    match = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
    assert match, said
    env = cli_env(match.group(1))
    try:
        # guardrails: an input guardrail trips before the model is asked
        tripped = await readme(
            'towline run examples.support:agent "Can you do my maths homework?" --id support-homework',
            env=env, cwd=tmp_path)
        assert tripped.code == 1 and tripped.out == "", tripped
        assert ("towline: run support-homework failed: GuardrailTripped: guardrail 'on_topic' "
                "tripped on the input: the support desk does not do homework") in tripped.err
        shown = (await readme("towline show support-homework", env=env, cwd=tmp_path)).out
        assert ("Failure   GuardrailTripped: guardrail 'on_topic' tripped on the input: the "
                "support desk does not do homework") in shown
        assert re.search(r"^  requests\s+0$", shown, flags=re.MULTILINE), shown

        # a tool guardrail denies a refund; the prompt-injection guard redacts the FAQ
        big = await readme(
            'towline run examples.support:agent "Refund 500 EUR for order B2" --id support-big-refund',
            env=env, cwd=tmp_path)
        assert big.code == 0 and big.out == (
            "I cannot do that refund myself (denied by guardrail 'refund_limit': refunds over "
            "100 EUR need a person); a colleague will call you.\n"), big
        faq = await readme(
            'towline run examples.support:agent "What does the FAQ say about shipping?" --id support-faq '
            "--no-worker",
            env=env, cwd=tmp_path)
        assert faq.code == 0 and faq.out == (
            "Here is what I found: Orders ship within two days.\n[removed: prompt injection]\n"
            "Returns are free for 30 days.\n"), faq
        watched = await readme("towline watch support-faq", env=env, cwd=tmp_path)
        assert watched.code == 0, watched
        assert re.search(r"^\[step 1\] guardrail PromptInjectionGuard redacted call call_\w+: "
                         r"instructions to the assistant$", watched.out, flags=re.MULTILINE), watched

        # handoffs: triage hands the run to billing, which refunds
        refund = await readme(
            'towline run examples.support:agent "I was charged twice for order A1" --id support-refund',
            env=env, cwd=tmp_path)
        assert refund.code == 0 and refund.out == "Done: refunded 25 EUR for order A1.\n", refund
        for line in ("[step 1] model calls transfer_to_support_billing()",
                     ("[step 1]   transfer_to_support_billing -> Transferred to support-billing: "
                      "it handles the conversation from here.  (succeeded)"),
                     "[step 1] handed off to support-billing",
                     '[step 2] model calls refund(order="A1", amount=25.0)'):
            assert line in refund.err.splitlines(), refund.err
        shown = (await readme("towline show support-refund", env=env, cwd=tmp_path)).out
        assert re.search(r"^Agent     support-triage  \(version \w{12}\), now support-billing$",
                         shown, flags=re.MULTILINE), shown
        assert "Handoffs  support-triage -> support-billing  (at step 1)" in shown.splitlines()
    finally:
        stop_process(dev)
        await asyncio.wait_for(dev.wait(), 60)
    assert dev.returncode == 0
