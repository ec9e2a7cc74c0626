"""The README's "Changing an agent safely" commands, run exactly as written.

Against a `towline dev` started as the README starts it (no worker of its own; state in a
temporary folder): build v1 of the calculator agents as a Worker Deployment version made
current with the `temporal` CLI, a run that waits for approval on it, build v2 deployed
beside it and made current, a new run served by v2 while the waiting run is approved and
finishes pinned to v1; then `towline replay` against the server and against an exported file.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from readme import Done, cli_env, read_until, readme, readme_process, stop_process
from temporalio.client import Client


async def _until_ok(command: Callable[[], Awaitable[Done]]) -> Done:
    """Repeat a command until it succeeds (a new build is current only once it has polled)."""
    done = await command()
    for _ in range(100):
        if done.code == 0:
            return done
        await asyncio.sleep(0.3)
        done = await command()
    raise AssertionError(f"never succeeded: {done}")


async def _build_of(client: Client, workflow_id: str) -> str:
    info = (await client.get_workflow_handle(workflow_id).describe()) \
        .raw_description.workflow_execution_info.versioning_info
    return info.deployment_version.build_id


def _hold_default_port() -> socket.socket | None:
    """Keep 7233 from `towline dev`: `towline replay` lists every run on its server, and a
    process of another checkout on this machine reaching for the default port would add its
    own runs (with other code) to this test's server."""
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 7233))
    except OSError:
        held.close()
        return None  # taken already: `towline dev` picks a free port either way
    return held


async def test_changing_an_agent_safely_as_the_readme_shows(tmp_path: Path) -> None:
    held = _hold_default_port()
    dev = await readme_process("towline dev", env=cli_env(), cwd=tmp_path)
    workers: list[asyncio.subprocess.Process] = []
    try:
        said = await read_until(dev.stderr, "Ctrl-C stops.")
        match = re.search(r"^Temporal server\s+(\S+)", said, flags=re.MULTILINE)
        assert match, said
        address = match.group(1)
        env = cli_env(address)

        workers.append(await readme_process(
            "towline worker --agent examples.calculator:agents --deployment-name calculator "
            "--build-id v1", env=env, cwd=tmp_path))
        started = await read_until(workers[-1].stderr, "Ctrl-C stops.")
        assert "Worker Deployment 'calculator', build 'v1'" in started
        assert "agents: calculator 2993d4f68fd0, careful-calculator ad42811455dd" in started
        await _until_ok(lambda: readme(
            "temporal worker deployment set-current-version --deployment-name calculator "
            "--build-id v1 --yes", env=env, cwd=tmp_path))
        pinned = await readme_process(
            'towline run examples.calculator:careful_agent "What is 6 times 7?" --no-worker '
            "--id pinned-1", env=env, cwd=tmp_path)
        await read_until(pinned.stderr, "towline approve pinned-1 call_1")

        workers.append(await readme_process(
            "towline worker --agent examples.calculator:agents --deployment-name calculator "
            "--build-id v2", env=env, cwd=tmp_path))
        await read_until(workers[-1].stderr, "Ctrl-C stops.")
        await _until_ok(lambda: readme(
            "temporal worker deployment set-current-version --deployment-name calculator "
            "--build-id v2 --yes", env=env, cwd=tmp_path))
        new = await readme('towline run examples.calculator:agent "What is 6 times 7?" '
                           "--no-worker --id new-1", env=env, cwd=tmp_path)
        assert new.code == 0 and new.out == "6 times 7 is 42.\n", new
        approved = await readme("towline approve pinned-1 call_1", env=env, cwd=tmp_path)
        assert approved.code == 0, approved
        out, err = await asyncio.wait_for(pinned.communicate(), 60)
        assert pinned.returncode == 0, err
        assert out.decode() == "6 times 7 is 42.\n"
        described = await readme("temporal workflow describe --workflow-id pinned-1",
                                 env=env, cwd=tmp_path)
        assert described.code == 0, described
        versioning = described.out.split("Versioning Info:", 1)[1].split("Results:", 1)[0]
        assert re.search(r"Behavior\s+Pinned", versioning), versioning
        assert re.search(r"BuildId\s+v1", versioning), versioning
        client = await Client.connect(address)
        assert (await _build_of(client, "pinned-1"), await _build_of(client, "new-1")) == (
            "v1", "v2")

        # Replay before the next deploy: the server's runs, and an exported history.
        calc = await readme('towline run examples.calculator:agent "What is (2 + 3) * 4?" '
                            "--id calc-1", env=env, cwd=tmp_path)
        assert calc.code == 0, calc
        replayed = await readme("towline replay --agent examples.calculator:agents",
                                env=env, cwd=tmp_path)
        assert replayed.code == 0, replayed.out
        lines = replayed.out.splitlines()
        assert lines[-1] == "3 replayed: 3 ok, 0 failed", replayed.out
        assert any(line.startswith("ok      pinned-1 (") and
                   line.endswith("agent careful-calculator version ad42811455dd")
                   for line in lines), lines
        exported = await readme(
            "temporal workflow show --workflow-id calc-1 --output json > calc-1.json",
            env=env, cwd=tmp_path)
        assert exported.code == 0 and (tmp_path / "calc-1.json").stat().st_size > 0
        from_file = await readme("towline replay --agent examples.calculator:agents calc-1.json",
                                 env=env, cwd=tmp_path)
        assert from_file.code == 0, from_file
        assert from_file.out.startswith("ok      calc-1 (")
    finally:
        for worker in workers:
            stop_process(worker)
        for worker in workers:
            await asyncio.wait_for(worker.wait(), 60)
        stop_process(dev)
        await asyncio.wait_for(dev.wait(), 60)
        if held is not None:
            held.close()
