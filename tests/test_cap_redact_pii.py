"""RedactPII: the detectors, and what the model sees and history keeps in real runs.

Input and tool results are redacted in the request projection (the canonical
history keeps them as given / as confirmed); model output is redacted before it
is committed; `hash` is deterministic; `block` fails the run with
`ContentBlocked` before the content reaches a model (or history).
"""

from __future__ import annotations

import hashlib

import pytest
from temporalio.client import Client

from scripts import Script, assert_paired, call, calls, returns, text
from towline import Agent, tool
from towline.capabilities import RedactPII
from towline.capabilities.redact_pii import find_pii, iban_valid, luhn_valid, redact_text
from towline.client import run
from towline.errors import ConfigurationError, RunError
from towline.messages import Message, ModelRequest, ModelResponse, UserPart
from towline.testing import towline_worker

# --- detectors ------------------------------------------------------------------------


def kinds_in(value: str) -> list[tuple[str, str]]:
    return [(m.kind, m.value) for m in find_pii(value)]


def test_luhn() -> None:
    assert luhn_valid("4111 1111 1111 1111")
    assert luhn_valid("5500-0000-0000-0004")
    assert luhn_valid("378282246310005")  # Amex, 15 digits
    assert not luhn_valid("4111 1111 1111 1112")
    assert not luhn_valid("1234567890123456")


def test_iban_mod_97() -> None:
    assert iban_valid("DE89 3704 0044 0532 0130 00")
    assert iban_valid("GB82WEST12345698765432")
    assert iban_valid("fr1420041010050500013m02606")  # case and spacing do not matter
    assert not iban_valid("DE89 3704 0044 0532 0130 01")  # one digit off
    assert not iban_valid("DE89")


@pytest.mark.parametrize(("sample", "expected"), [
    ("write to john.doe+tag@mail.example.co.uk now", [("email", "john.doe+tag@mail.example.co.uk")]),
    ("call 555-123-4567", [("phone", "555-123-4567")]),
    ("call (555) 123-4567", [("phone", "(555) 123-4567")]),
    ("call +44 20 7946 0958", [("phone", "+44 20 7946 0958")]),
    ("call +14155552671.", [("phone", "+14155552671")]),
    ("card 4111 1111 1111 1111", [("credit_card", "4111 1111 1111 1111")]),
    ("card 4111-1111-1111-1111", [("credit_card", "4111-1111-1111-1111")]),
    ("host 192.168.1.10.", [("ip_address", "192.168.1.10")]),
    ("host 2001:db8::8a2e:370:7334", [("ip_address", "2001:db8::8a2e:370:7334")]),
    ("host fe80::1", [("ip_address", "fe80::1")]),
    ("IBAN DE89 3704 0044 0532 0130 00 please", [("iban", "DE89 3704 0044 0532 0130 00")]),
    ("key sk-proj-AbCdEf1234567890GhIjKl", [("api_key", "sk-proj-AbCdEf1234567890GhIjKl")]),
    ("aws AKIAIOSFODNN7EXAMPLE", [("api_key", "AKIAIOSFODNN7EXAMPLE")]),
    ("gh ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5", [
        ("api_key", "ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5")]),
    ("api_key=Zx9Qm2Lp8Rt4Vw6Yb1Nc3Hd5", [("api_key", "Zx9Qm2Lp8Rt4Vw6Yb1Nc3Hd5")]),
    ("token_q8ZrT2vX9mK4pL7wN3bY6cD1", [("api_key", "token_q8ZrT2vX9mK4pL7wN3bY6cD1")]),
])
def test_each_kind_is_found(sample: str, expected: list[tuple[str, str]]) -> None:
    assert kinds_in(sample) == expected


@pytest.mark.parametrize("sample", [
    "the answer is 42 and 12345 and 1234567890",  # plain numbers
    "on 2024-01-15, 15.01.2024, 01/15/2024 at 12:30:45",  # dates and times
    "2024-01-15 1030",  # a date followed by a number
    "a population of 1 000 000 or 1.000.000",  # grouped numbers
    "order 1234567890123456",  # 16 digits that fail the Luhn check
    "card 4111 1111 1111 1112",  # one digit off
    "IBAN DE89 3704 0044 0532 0130 01",  # fails mod 97
    "version 1.2.3 and 999.1.1.1",  # not IP addresses
    "std::vector and a::b",  # C++, not IPv6
    "the token_bucket_rate_limiter_settings and api_key=changeme",  # words, not keys
    "sk-short and AKIA123",  # too short to be keys
    "email at example dot com",
])
def test_look_alikes_are_not_found(sample: str) -> None:
    assert find_pii(sample) == []


def test_a_card_is_not_half_redacted_as_a_phone_when_only_phones_are_selected() -> None:
    assert find_pii("card 4111 1111 1111 1111", ["phone"]) == []


def test_strategies() -> None:
    sample = "mail a.b@example.com, card 4111 1111 1111 1111, ip 10.0.0.1"
    assert redact_text(sample) == (
        "mail [REDACTED_EMAIL], card [REDACTED_CREDIT_CARD], ip [REDACTED_IP_ADDRESS]")
    assert redact_text(sample, strategy="mask") == (
        "mail a***@example.com, card **** **** **** 1111, ip **.*.*.*")
    hashed = redact_text(sample, strategy="hash")
    digest = hashlib.sha256(b"4111111111111111").hexdigest()[:12]
    assert f"[CREDIT_CARD:{digest}]" in hashed
    # deterministic, and normalised: the same card written differently hashes the same
    assert redact_text("4111-1111-1111-1111", strategy="hash") == f"[CREDIT_CARD:{digest}]"
    assert redact_text(sample, strategy="hash") == hashed
    # redaction is idempotent: replacements are never found again
    for strategy in ("redact", "mask", "hash"):
        once = redact_text(sample, strategy=strategy)  # type: ignore[arg-type]
        assert redact_text(once, strategy=strategy) == once  # type: ignore[arg-type]
    assert redact_text(sample, ["email"]) == (
        "mail [REDACTED_EMAIL], card 4111 1111 1111 1111, ip 10.0.0.1")


def test_options_are_validated() -> None:
    assert RedactPII(kinds=["email"]).kinds == frozenset({"email"})
    with pytest.raises(ConfigurationError):
        RedactPII(kinds=["ssn"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError):
        RedactPII(strategy="shred")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        RedactPII(apply_to=[])
    with pytest.raises(ConfigurationError):
        RedactPII(apply_to=["everything"])  # type: ignore[list-item]


# --- real runs ------------------------------------------------------------------------

PROMPT = "I am alice@example.com, phone 555-123-4567. Find bob."
CUSTOMER = {"name": "Bob", "email": "bob@corp.example", "notes": ["card 4111 1111 1111 1111"]}


@tool
def find_customer(name: str) -> dict[str, object]:
    """Look a customer up."""
    return dict(CUSTOMER)


@tool
def leak_key() -> str:
    """Returns a secret."""
    return "use sk-proj-AbCdEf1234567890GhIjKl"


def user_text(messages: list[Message]) -> str:
    return next(p.text for m in messages if isinstance(m, ModelRequest)
                for p in m.parts if isinstance(p, UserPart))


async def test_input_output_and_tool_results_are_redacted(client: Client) -> None:
    script = Script([
        calls(call("find_customer", {"name": "Bob"}, "f1")),
        text("Bob is bob@corp.example, last seen from 10.0.0.1."),
    ])
    agent = Agent(name="pii-redact", model=script.model, tools=[find_customer],
                  capabilities=[RedactPII()])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, PROMPT, task_queue=queue)

    redacted_prompt = "I am [REDACTED_EMAIL], phone [REDACTED_PHONE]. Find bob."
    first, second = (s.messages for s in script.seen)
    assert user_text(first) == redacted_prompt
    assert user_text(second) == redacted_prompt
    assert [r.content for r in returns(second)] == [
        {"name": "Bob", "email": "[REDACTED_EMAIL]", "notes": ["card [REDACTED_CREDIT_CARD]"]}]
    assert_paired(second)
    # the output was redacted before it was committed
    assert result.output == "Bob is [REDACTED_EMAIL], last seen from [REDACTED_IP_ADDRESS]."
    final = result.messages[-1]
    assert isinstance(final, ModelResponse) and final.text == result.output
    # the canonical history keeps the user's words and the confirmed tool result
    assert user_text(result.messages) == PROMPT
    assert [r.content for r in returns(result.messages)] == [CUSTOMER]
    assert_paired(result)


async def test_hash_on_input_only_is_deterministic_and_leaves_output(client: Client) -> None:
    script = Script([text("Noted, alice@example.com.")])
    agent = Agent(name="pii-hash", model=script.model,
                  capabilities=[RedactPII(kinds=["email"], strategy="hash", apply_to=["input"])])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, PROMPT, task_queue=queue)
    digest = hashlib.sha256(b"alice@example.com").hexdigest()[:12]
    assert user_text(script.seen[0].messages) == (
        f"I am [EMAIL:{digest}], phone 555-123-4567. Find bob.")
    assert result.output == "Noted, alice@example.com."


async def test_block_on_input_fails_the_run_before_any_model_call(client: Client) -> None:
    script = Script([text("never")])
    agent = Agent(name="pii-block-in", model=script.model,
                  capabilities=[RedactPII(strategy="block")])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, PROMPT, task_queue=queue)
    assert info.value.reason == "ContentBlocked"
    assert "email" in info.value.message and "alice" not in info.value.message
    assert script.seen == []
    assert info.value.partial is not None and info.value.partial.request_count == 0


async def test_block_on_tool_results_fails_right_after_the_tool(client: Client) -> None:
    script = Script([calls(call("leak_key", {}, "k1")), text("never")])
    agent = Agent(name="pii-block-tool", model=script.model, tools=[leak_key],
                  capabilities=[RedactPII(strategy="block", apply_to=["tool_results"])])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "hello sk-proj-AbCdEf1234567890GhIjKl", task_queue=queue)
    assert info.value.reason == "ContentBlocked"
    assert "api_key" in info.value.message and "leak_key" in info.value.message
    assert len(script.seen) == 1  # the input was not checked; the result never reached a model
    partial = info.value.partial
    assert partial is not None
    assert [(r.tool_call_id, r.status) for r in returns(partial.messages)] == [
        ("k1", "succeeded")]
    assert_paired(partial)


async def test_block_on_output_keeps_the_response_out_of_history(client: Client) -> None:
    script = Script([text("Your card is 4111 1111 1111 1111.")])
    agent = Agent(name="pii-block-out", model=script.model,
                  capabilities=[RedactPII(strategy="block", apply_to=["output"])])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as info:
            await run(tc, agent, "what is my card?", task_queue=queue)
    assert info.value.reason == "ContentBlocked"
    assert "credit_card" in info.value.message
    partial = info.value.partial
    assert partial is not None
    assert not any(isinstance(m, ModelResponse) for m in partial.messages)
