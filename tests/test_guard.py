"""User hook code is watched like hand-written workflow code (the determinism guard).

Each run here is real: an agent on a worker of the session's dev server. A hook that
reads the clock, draws randomness, reads the environment, hashes a string or does I/O
fails the run with `NondeterministicHook` naming the capability, the hook and what it
touched, before the call takes effect; Temporal's deterministic `workflow.now()`,
`workflow.random()` and `workflow.uuid4()` keep working. Every kind of user code towline
calls from workflow code is covered: capability hooks, middleware, `wrap_model_call`,
reducers, completion checks, `in_workflow` tools, and tasks a hook starts.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, field_validator
from temporalio import activity, workflow
from temporalio.client import Client

from towline import (
    Agent,
    Capability,
    Middleware,
    ModelRequestState,
    ToolCall,
    ToolContext,
    tool,
)
from towline.capabilities import CompletionGate
from towline.client import run
from towline.errors import NondeterministicHook, RunError
from towline.messages import Message, ModelResponse, ToolCallPart
from towline.models import FunctionModel, ModelInfo
from towline.testing import towline_worker
from towline.workflows.guard import Guard, guarded_sync

HERE = os.path.relpath(__file__)
touched_files: list[str] = []


def answer(messages: list[Message], info: ModelInfo) -> str:
    return "done"


def _model(name: str) -> FunctionModel:
    return FunctionModel(answer, model_name=f"guard-{name}")


@dataclass(frozen=True)
class Doing(Capability):
    """Runs `action` in `before_model_request` (one capability class for every case)."""

    action: Callable[[], Any]
    name: str = "Doing"

    def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        self.action()
        return state


def _write_file() -> None:
    with open(os.devnull + "-not-written", "w") as f:
        touched_files.append(f.name)


CASES: dict[str, tuple[Callable[[], Any], str]] = {
    "time.time": (lambda: time.time(), "time.time()"),
    "datetime.now": (lambda: datetime.datetime.now(), "datetime.datetime.now()"),
    "date.today": (lambda: datetime.date.today(), "datetime.date.today()"),
    "random.random": (lambda: random.random(), "random.random()"),
    "random.randint": (lambda: random.randint(1, 6), "random.randint()"),
    "os.environ[]": (lambda: os.environ["PATH"], "os.environ[...]"),
    "os.environ.get": (lambda: os.environ.get("PATH"), "os.environ.get()"),
    "os.getenv": (lambda: os.getenv("PATH"), "os.getenv()"),
    "hash": (lambda: hash("abc"), "hash()"),
    "uuid4": (lambda: uuid.uuid4(), "uuid.uuid4()"),
    "urandom": (lambda: os.urandom(4), "os.urandom()"),
    "sleep": (lambda: time.sleep(0), "time.sleep()"),
    "open": (_write_file, "open()"),
    "os.listdir": (lambda: os.listdir("."), "os.listdir()"),
    "Path.read_text": (lambda: Path(__file__).read_text(), "pathlib.Path.read_text()"),
    "socket": (lambda: socket.create_connection(("127.0.0.1", 9)), "socket.create_connection()"),
    "subprocess": (lambda: subprocess.run(["true"], check=False), "subprocess.run()"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_capability_touching_the_outside_world_fails_the_run(
    client: Client, case: str
) -> None:
    action, touched = CASES[case]
    agent = Agent(name=f"guard-{case}", model=_model(case),
                  capabilities=[Doing(action, name="Nosy")])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as caught:
            await run(tc, agent, "hi", task_queue=queue)
    error = caught.value
    assert error.reason == "NondeterministicHook"
    assert error.message.startswith(f"Nosy.before_model_request called {touched} at {HERE}:")
    assert error.partial is not None and error.partial.counters.requests == 0  # no model call
    assert touched_files == []  # refused before it happened


async def test_a_hook_that_swallows_the_refusal_still_fails_the_run(client: Client) -> None:
    seen: list[str] = []

    def sneaky() -> None:
        try:
            time.time()
        except Exception as e:  # noqa: BLE001 - the point: the hook hides it
            seen.append(type(e).__name__)

    agent = Agent(name="guard-swallow", model=_model("swallow"), capabilities=[Doing(sneaky)])
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as caught:
            await run(tc, agent, "hi", task_queue=queue)
    assert seen == ["NondeterministicHook"]
    assert caught.value.reason == "NondeterministicHook"
    assert "time.time()" in caught.value.message and "<locals>.sneaky" in caught.value.message


@dataclass(frozen=True)
class Key:
    name: str

    def __hash__(self) -> int:
        return hash(self.name)  # hashing for a dict: allowed


def deterministic() -> dict[str, Any]:
    """What a hook may use instead: Temporal's replay-safe clock, random and uuid."""
    return {
        "now": workflow.now().isoformat(), "random": workflow.random().randint(1, 6),
        "uuid": str(workflow.uuid4()), "digest": hashlib.sha256(b"abc").hexdigest()[:8],
        "keyed": {Key("a"): 1}[Key("a")], "path": str(Path("a") / "b"),
        "profiler": getattr(sys.getprofile(), "__qualname__", None),
    }


async def test_workflow_now_random_and_uuid_keep_working(client: Client) -> None:
    found: list[dict[str, Any]] = []

    def record() -> None:
        found.append(deterministic())

    agent = Agent(name="guard-ok", model=_model("ok"), capabilities=[Doing(record)])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "hi", task_queue=queue)
    assert result.output == "done"
    assert found and found[0]["digest"] == "ba7816bf" and found[0]["keyed"] == 1
    assert found[0]["profiler"] == "_profiler.<locals>.profile"  # watched, in the workflow thread


async def test_sandbox_unrestricted_lets_a_call_through_on_purpose(client: Client) -> None:
    def on_purpose() -> None:
        with workflow.unsafe.sandbox_unrestricted():
            time.monotonic()

    agent = Agent(name="guard-unrestricted", model=_model("unrestricted"),
                  capabilities=[Doing(on_purpose)])
    async with towline_worker(client, [agent]) as (tc, queue):
        assert (await run(tc, agent, "hi", task_queue=queue)).output == "done"


# --- every kind of user code towline calls from workflow code --------------------------------


def tool_calling(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step == 1:
        return ModelResponse(parts=[ToolCallPart(tool_name="note", args={"text": "x"})])
    return "done"


@tool
def note(text: str) -> str:
    """Take a note."""
    return text


@tool(in_workflow=True)
async def stamp(text: str) -> str:
    """An in-workflow tool that reads the clock."""
    return f"{text} at {time.time()}"


def stamping(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    if info.run_step == 1:
        return ModelResponse(parts=[ToolCallPart(tool_name="stamp", args={"text": "x"})])
    return "done"


class BeforeTool(Capability):
    def before_tool_execute(self, ctx: ToolContext, call: ToolCall) -> ToolCall:
        datetime.datetime.utcnow()  # noqa: DTZ003 - the clock, under test
        return call


class AfterTool(Capability):
    def after_tool_execute(self, ctx: ToolContext, call: ToolCall, result: Any) -> None:
        os.environ.get("HOME")


class Wrapper(Capability):
    async def wrap_model_call(self, request: Any, next: Any) -> Any:
        response = await next(request)
        random.choice([1, 2])  # after the model call: the await resumed under the guard
        return response


async def _clock_in_a_task() -> float:
    await asyncio.sleep(0)
    return time.time()


class Spawner(Capability):
    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        await asyncio.gather(_clock_in_a_task())
        return state


def _append_with_clock(old: list[Any] | None, new: list[Any]) -> list[Any]:
    return [*(old or []), *new, time.time()]


def _late_check(text: str) -> bool:
    return bool(uuid.uuid1())


class Stamped(BaseModel):
    """An output type whose validator reads the clock."""

    text: str

    @field_validator("text")
    @classmethod
    def stamp(cls, value: str) -> str:
        return f"{value} at {time.time()}"


def structured(messages: list[Message], info: ModelInfo) -> ModelResponse:
    name = info.output_tools[0].name
    return ModelResponse(parts=[ToolCallPart(tool_name=name, args={"text": "x"}, kind="output")])


KINDS: dict[str, tuple[Callable[[], Agent], str]] = {
    "middleware before_model": (lambda: Agent(
        name="guard-mw-before", model=_model("mw-before"),
        capabilities=[Middleware("mw", before_model=lambda s: {"x": time.time_ns()},
                                 state_schema={"x": 0})]),
        "mw.before_model called time.time_ns()"),
    "middleware after_model": (lambda: Agent(
        name="guard-mw-after", model=_model("mw-after"),
        capabilities=[Middleware("late", after_model=lambda s: {"y": hash("k")},
                                 state_schema={"y": 0})]),
        "late.after_model called hash()"),
    "wrap_model_call": (lambda: Agent(
        name="guard-wrap", model=_model("wrap"), capabilities=[Wrapper()]),
        "Wrapper.wrap_model_call called random.choice()"),
    "reducer": (lambda: Agent(
        name="guard-reducer", model=_model("reducer"),
        capabilities=[Middleware("log", before_model=lambda s: {"log": ["a"]},
                                 state_schema={"log": ([], _append_with_clock)})]),
        "log.state_schema['log'] reducer called time.time()"),
    "completion check": (lambda: Agent(
        name="guard-gate", model=_model("gate"), capabilities=[CompletionGate(_late_check)]),
        "CompletionGate.check called uuid.uuid1()"),
    "before_tool_execute": (lambda: Agent(
        name="guard-before-tool", model=FunctionModel(tool_calling, model_name="guard-bt"),
        tools=[note], capabilities=[BeforeTool()]),
        "BeforeTool.before_tool_execute called datetime.datetime.utcnow()"),
    "after_tool_execute": (lambda: Agent(
        name="guard-after-tool", model=FunctionModel(tool_calling, model_name="guard-at"),
        tools=[note], capabilities=[AfterTool()]),
        "AfterTool.after_tool_execute called os.environ.get()"),
    "in_workflow tool": (lambda: Agent(
        name="guard-in-workflow", model=FunctionModel(stamping, model_name="guard-iw"),
        tools=[stamp]),
        "tool 'stamp' called time.time()"),
    "output_type validator": (lambda: Agent(
        name="guard-output", model=FunctionModel(structured, model_name="guard-out"),
        output_type=Stamped),
        "Stamped validation called time.time()"),
    "a task a hook starts": (lambda: Agent(
        name="guard-task", model=_model("task"), capabilities=[Spawner()]),
        "Spawner.before_model_request called time.time()"),
}


@pytest.mark.parametrize("kind", list(KINDS))
async def test_every_kind_of_user_code_is_watched(client: Client, kind: str) -> None:
    make, said = KINDS[kind]
    agent = make()  # defined inside a function: no module attribute names it
    async with towline_worker(client, [agent]) as (tc, queue):
        with pytest.raises(RunError) as caught:
            await run(tc, agent, "hi", task_queue=queue)
    assert caught.value.reason == "NondeterministicHook", caught.value
    assert caught.value.message.startswith(said), caught.value.message
    assert f"at {HERE}:" in caught.value.message


# --- real I/O from a hook: an activity --------------------------------------------------------


@activity.defn(name="guard-test.read-setting")
async def read_setting(name: str) -> str:
    """Activities own I/O: this one may read the environment."""
    return os.environ.get(name, "unset")


@dataclass(frozen=True)
class Configured(Capability):
    """Reads a setting through an activity, the documented way for a hook to do I/O."""

    activities = (read_setting,)

    async def before_model_request(self, state: ModelRequestState) -> ModelRequestState:
        from datetime import timedelta

        value = await workflow.execute_activity(
            read_setting, "GUARD_TEST_SETTING", start_to_close_timeout=timedelta(seconds=30))
        agent = state.agent.model_copy(update={"instructions": f"setting={value}"})
        return state.model_copy(update={"agent": agent})


def echo_instructions(messages: list[Message], info: ModelInfo) -> str:
    return str(messages[0].parts[0].content)  # pyright: ignore[reportAttributeAccessIssue]


async def test_a_hook_does_io_through_an_activity_its_capability_declares(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GUARD_TEST_SETTING", "from-the-worker")
    agent = Agent(name="guard-io", model=FunctionModel(echo_instructions, model_name="guard-io"),
                  capabilities=[Configured()])
    async with towline_worker(client, [agent]) as (tc, queue):
        result = await run(tc, agent, "hi", task_queue=queue)
    assert result.output == "setting=from-the-worker"


# --- the guard itself --------------------------------------------------------------------------


def test_the_previous_profiler_is_restored() -> None:
    calls: list[str] = []

    def mine(frame: Any, event: str, arg: Any) -> None:
        calls.append(event)

    sys.setprofile(mine)
    try:
        assert guarded_sync(Guard("Cap.hook"), lambda: len([1, 2])) == 2
        assert sys.getprofile() is mine
        with pytest.raises(NondeterministicHook):
            guarded_sync(Guard("Cap.hook"), lambda: time.time())
        assert sys.getprofile() is mine
    finally:
        sys.setprofile(None)
    assert calls  # it went on profiling after each guarded call


def test_library_code_is_not_watched_but_user_code_is() -> None:
    import httpx
    import opentelemetry.trace
    import pydantic

    from towline.workflows.guard import is_user_file

    assert is_user_file(__file__)
    assert is_user_file(httpx.__file__)  # a library not passed through the sandbox is watched
    assert not is_user_file(pydantic.__file__)
    # passed through the sandbox, and called by the engine inside a wrapped model call
    assert not is_user_file(opentelemetry.trace.__file__)
    assert not is_user_file(datetime.__file__)
    assert not is_user_file(workflow.__file__)
    assert not is_user_file(Guard.__init__.__code__.co_filename)
    assert not is_user_file("<frozen os>")
    stdlib = os.path.dirname(os.__file__)  # a Docker image's Python keeps site-packages there
    assert is_user_file(os.path.join(stdlib, "site-packages", "acme", "hooks.py"))
