"""Property-based fuzzing of everything a client can send a run (hypothesis).

Any client of the namespace can start `AgentRun` with any payload and send any update or
signal to any run. Whatever it sends, each case must end as a completed run, a typed run
failure (`RunError.reason` one of towline's), or a refused update / ignored signal with the
run still healthy. None may leave a workflow task failing: that is a run stuck for good.

Hypothesis runs in a thread (its `@given` is synchronous); each case is awaited on the test
session's loop, against the real dev server. The case counts are bounded so the module
takes about a minute; `bench/fuzz_clients.py` runs a longer profile.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from cli_helpers import task_failures, until_state
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.service import RPCError
from temporalio.worker import Worker
from test_unreadable_payloads import reference

from towline import Agent, tool
from towline.client import run_error, with_towline
from towline.encryption.codec import EncryptionCodec, StaticKeys
from towline.errors import FAILURE_TYPES, InternalError
from towline.storage.payload_store import PayloadStore
from towline.testing import towline_worker

T = TypeVar("T")

RUN_FAILURE_TYPES = frozenset(t.__name__ for t in FAILURE_TYPES if t is not InternalError)
"""The typed failures a case may end in (`InternalError` is a bug: never acceptable)."""

CASES = int(os.environ.get("TOWLINE_FUZZ_CASES", "40"))
"""Examples per property (the bench raises it)."""
WAIT = 30.0
"""Seconds a case may take before its run counts as stuck."""


@tool
def echo(text: str) -> str:
    """Returns the text."""
    return text


agent = Agent(name="fuzz", model="test", tools=[echo])

# --- strategies ----------------------------------------------------------------------------

_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=12,
)
_media = st.fixed_dictionaries({
    "kind": st.sampled_from(["image-url", "document-url", "binary", "audio", ""]),
}, optional={
    "url": st.text(max_size=30), "data": st.text(max_size=30) | _json,
    "media_type": st.sampled_from(["image/png", "application/pdf", "x/y", ""]) | _json,
})
_prompt = st.one_of(st.text(max_size=40), st.lists(st.text(max_size=10) | _media, max_size=3),
                    _json)
_limits = st.dictionaries(
    st.sampled_from(["max_steps", "output_retries", "tool_calls_limit", "request_limit",
                     "total_tokens_limit", "cost_limit", "max_step"]),
    st.integers(min_value=-5, max_value=2**66) | _json, max_size=3,
)
_message = st.fixed_dictionaries({"kind": st.sampled_from(["request", "response", "x"])},
                                 optional={"id": st.text(max_size=5), "parts": _json})
RUN_INPUT = st.fixed_dictionaries(
    {"agent": st.sampled_from(["fuzz", "fuzz", "fuzz", "nobody"]) | _json},
    optional={
        "prompt": _prompt,
        "limits": _limits | _json,
        "message_history": st.lists(_message, max_size=3) | _json,
        "context": _json,
        "session": st.booleans() | _json,
        "stream": st.booleans() | _json,
        "model": st.sampled_from(["test", "openai:gpt-x", "nope"]) | _json,
        "session_timeout": st.sampled_from([1, 0, -5, "PT1S", "soon"]) | _json,
        "continue_as_new_after_events": st.integers(min_value=-3, max_value=2**40) | _json,
        "resume": _json,
        "unknown": _json,
    },
)
_encodings = st.sampled_from([b"json/plain", b"json/plain", b"binary/plain", b"binary/null",
                              b"json/protobuf", b"", b"binary/encrypted", b"\xff\xfe"])
VALID_INPUT = st.fixed_dictionaries(
    {"agent": st.just("fuzz"), "prompt": st.text(min_size=1, max_size=30)
     | st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=2)},
    optional={
        "limits": st.fixed_dictionaries({}, optional={
            "max_steps": st.integers(1, 2**31 - 1), "output_retries": st.integers(0, 3),
            "tool_calls_limit": st.integers(0, 5), "total_tokens_limit": st.integers(0, 2**63 - 1),
        }),
        "context": st.dictionaries(st.text(max_size=5), _json_leaf, max_size=2),
        "stream": st.booleans(),
        "model": st.sampled_from(["test", "elsewhere"]),
    },
)
"""Inputs that are mostly valid: the runs get past the input check and do their steps."""
RAW = st.builds(
    lambda enc, data, extra: Payload(metadata={"encoding": enc, **extra}, data=data),
    _encodings,
    st.binary(max_size=60) | RUN_INPUT.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(["encryption-key-id", "messageType", "x"]),
                    st.binary(max_size=8), max_size=2),
)

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

# --- helpers -------------------------------------------------------------------------------


def _on_loop(loop: asyncio.AbstractEventLoop, case: Coroutine[Any, Any, T]) -> T:
    """Run a case on the session loop from hypothesis' thread, and wait for it."""
    return asyncio.run_coroutine_threadsafe(case, loop).result(WAIT * 3)


async def _ends_safely(handle: WorkflowHandle[Any, Any], case: Any) -> str:
    """Wait for the run's end (a session waiting for input is ended); its outcome."""
    try:
        await asyncio.wait_for(handle.result(), 3)
        outcome = "completed"
    except WorkflowFailureError as e:
        outcome = run_error(e).reason
    except TimeoutError:
        state = await handle.query("state")
        if state["status"] == "waiting":  # a session: healthy, waiting for its next message
            await handle.signal("end")
        try:
            await asyncio.wait_for(handle.result(), WAIT)
            outcome = "completed"
        except WorkflowFailureError as e:
            outcome = run_error(e).reason
        except TimeoutError:
            failures = await task_failures(handle)
            await handle.terminate("fuzz: stuck")
            raise AssertionError(f"run stuck ({failures[:1]}) for input {case!r}") from None
    failures = await task_failures(handle)
    assert not failures, (case, failures)
    assert outcome == "completed" or outcome in RUN_FAILURE_TYPES, (outcome, case)
    return outcome


# --- properties ----------------------------------------------------------------------------


async def test_any_start_input_ends_the_run_or_fails_it_typed(client: Client) -> None:
    loop = asyncio.get_running_loop()
    seen: dict[str, int] = {}
    async with towline_worker(client, [agent]) as (_, queue):

        async def start(value: Any) -> None:
            handle = await client.start_workflow(
                "AgentRun", value, id=f"fuzz-{uuid.uuid4().hex[:10]}", task_queue=queue)
            outcome = await _ends_safely(handle, value)
            seen[outcome] = seen.get(outcome, 0) + 1

        @settings(max_examples=CASES, deadline=None, database=None,
                  suppress_health_check=_SLOW)
        @given(st.one_of(VALID_INPUT, RUN_INPUT, RAW.map(RawValue)))
        @example({"agent": "fuzz", "prompt": "hi"})  # one of each end, whatever is generated
        @example({"agent": "fuzz", "prompt": "hi", "limits": {"max_steps": 2**40}})
        def case(value: Any) -> None:
            _on_loop(loop, start(value))

        await asyncio.to_thread(case)
    # both ends were reached (the explicit examples make sure of one of each): runs that
    # complete and runs refused as typed failures
    assert seen.get("completed", 0) > 0 and seen.get("InvalidRunInput", 0) > 0, seen
    print(f"\nstart inputs: {sum(seen.values())} cases: {seen}")


_call_id = st.sampled_from(["call-1", ""]) | st.text(max_size=6)
UPDATE_ARGS = st.one_of(
    st.fixed_dictionaries({"content": st.text(alphabet="abc xyz", min_size=1, max_size=10)}),
    st.fixed_dictionaries({"content": _prompt}, optional={"extra": _json}),
    st.fixed_dictionaries({"call_id": _call_id}, optional={"reason": _json, "x": _json}),
    _json,
    RAW.map(RawValue),
)


async def test_any_update_or_signal_leaves_a_session_healthy(client: Client) -> None:
    loop = asyncio.get_running_loop()
    counts = {"refused": 0, "answered": 0, "ended by a signal": 0}
    async with towline_worker(client, [agent]) as (tclient, queue):

        async def session() -> WorkflowHandle[Any, Any]:
            return await tclient.start_workflow(
                "AgentRun", {"agent": "fuzz", "prompt": "hi", "session": True},
                id=f"fuzz-session-{uuid.uuid4().hex[:8]}", task_queue=queue)

        handles = [await session()]

        async def send(name: str, args: list[Any], signal: bool) -> None:
            handle = handles[-1]
            raw = client.get_workflow_handle(handle.id)  # the plain client: any payload
            if signal:
                await raw.signal(name, args=args)
                try:  # `cancel` and `end` mean it, whatever their arguments: did it end?
                    await asyncio.wait_for(asyncio.shield(handle.result()), 2)
                except (TimeoutError, WorkflowFailureError):
                    pass
            else:
                try:
                    await asyncio.wait_for(raw.execute_update(name, args=args), WAIT)
                    counts["answered"] += 1
                except (WorkflowUpdateFailedError, RPCError):
                    counts["refused"] += 1
            state = await asyncio.wait_for(handle.query("state"), WAIT)
            assert not await task_failures(handle), (name, args)
            if state["status"] in ("running", "waiting"):
                return
            # only a signal may end a session (`cancel` and `end` mean it, whatever their
            # arguments), and then the run ended safely; the next case gets a new session
            assert signal, (name, args, state)
            await _ends_safely(handle, (name, args))
            counts["ended by a signal"] += 1
            handles.append(await session())

        @settings(max_examples=CASES, deadline=None, database=None,
                  suppress_health_check=_SLOW)
        @given(st.sampled_from(["send", "approve", "reject", "send", "end?", "cancel?"]),
               UPDATE_ARGS.map(lambda a: [a]) | st.lists(UPDATE_ARGS, max_size=2))
        @example("send", [{"content": "abc"}])  # one of each end, whatever is generated
        @example("send", [{"content": "abc", "extra": 1}])
        def case(name: str, args: list[Any]) -> None:
            _on_loop(loop, send(name.rstrip("?"), args, name.endswith("?")))

        await asyncio.to_thread(case)
        # still healthy: a good message gets its answer, then the session ends cleanly
        handle = handles[-1]
        if (await handle.query("state"))["status"] == "waiting":
            answer = await asyncio.wait_for(handle.execute_update("send", {"content": "again"}),
                                            WAIT)
            assert answer is not None
            await handle.signal("end")
        assert await _ends_safely(handle, "the fuzzed session") == "completed"
    assert counts["refused"] > 0 and counts["answered"] > 0, counts
    print(f"\nupdates and signals: {counts}")


_hex = st.text(alphabet="0123456789abcdef", min_size=0, max_size=66)
_key = st.one_of(_hex, st.builds(lambda h: f"{h[:2]}/{h}", _hex),
                 st.sampled_from(["../../etc/passwd", "/etc/passwd", "ab/../../x", ""]),
                 st.text(max_size=20))
REFERENCES = st.builds(
    lambda driver, key, digest, extra: reference(key, driver, digest, extra),
    st.sampled_from(["towline.file", "towline.file", "someone.s3", ""]) | st.text(max_size=8),
    _key, _hex, st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)
"""Payload-store references as a third party could write them."""
ENCRYPTED = st.builds(
    lambda key_id, data: Payload(metadata={"encoding": b"binary/encrypted",
                                           "encryption-key-id": key_id}, data=data),
    st.just(b"fuzz-key"), st.binary(max_size=80),
)
"""Payloads that claim to be encrypted with the worker's key (an unknown key id makes the
run wait for its key instead, by design: see the README's encryption section)."""


async def test_forged_references_and_ciphertexts_never_wedge_a_run(
    client: Client, tmp_path: Path
) -> None:
    """A worker with a payload store and encryption: what its store and codec read."""
    loop = asyncio.get_running_loop()
    codec = EncryptionCodec(StaticKeys({"fuzz-key": os.urandom(32)}, current="fuzz-key"))
    guarded = with_towline(client, [agent], encryption=codec,
                           payload_store=PayloadStore(f"file://{tmp_path}", missing_after=0))
    queue = f"tq-forged-{uuid.uuid4().hex[:8]}"
    seen: dict[str, int] = {}
    async with Worker(guarded, task_queue=queue):
        session = await guarded.start_workflow(
            "AgentRun", {"agent": "fuzz", "prompt": "hi", "session": True},
            id=f"fuzz-forged-{uuid.uuid4().hex[:8]}", task_queue=queue)
        await until_state(session, "waiting", timeout=WAIT * 3)  # its first answer given

        async def case(payload: Payload, as_what: str) -> None:
            if as_what == "start":
                wid = f"fuzz-{uuid.uuid4().hex[:10]}"
                await client.start_workflow("AgentRun", RawValue(payload), id=wid,
                                            task_queue=queue)
                outcome = await _ends_safely(guarded.get_workflow_handle(wid), payload)
            elif as_what == "send":
                try:
                    await asyncio.wait_for(client.get_workflow_handle(session.id).execute_update(
                        "send", RawValue(payload)), WAIT)
                    outcome = "answered"
                except (WorkflowUpdateFailedError, RPCError):
                    outcome = "refused"
            else:
                await client.get_workflow_handle(session.id).signal(as_what, RawValue(payload))
                outcome = f"{as_what} signal"
            if as_what != "start":
                state = await asyncio.wait_for(session.query("state"), WAIT)
                assert state["status"] == "waiting", (as_what, payload, state)
                assert not await task_failures(session), (as_what, payload)
            seen[outcome] = seen.get(outcome, 0) + 1

        @settings(max_examples=CASES, deadline=None, database=None, suppress_health_check=_SLOW)
        @given(REFERENCES | ENCRYPTED, st.sampled_from(["start", "send", "cancel", "end"]))
        def each(payload: Payload, as_what: str) -> None:
            _on_loop(loop, case(payload, as_what))

        await asyncio.to_thread(each)
        # the session answered none of them, and still answers a good message
        answer = await asyncio.wait_for(session.execute_update("send", {"content": "again"}), WAIT)
        assert answer is not None
        await session.signal("end")
        assert await _ends_safely(session, "the session") == "completed"
    assert "answered" not in seen, seen
    print(f"\nforged references and ciphertexts: {seen}")


def test_the_failure_types_cover_the_documented_reasons() -> None:
    for reason in ("InvalidRunInput", "UnknownAgent", "Cancelled", "ModelRequestFailed"):
        assert reason in RUN_FAILURE_TYPES
