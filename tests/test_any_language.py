"""docs/any-language.md's TypeScript client, run as written: Node's official
`@temporalio/client` starts a `careful-calculator` run, queries its `state`, sends a wrong
`approve` (refused, naming the field) and a right one, and prints the result, against a
worker of this process on the session's server.

The packages come from npm once into a cached folder (`tests/npm_packages.py`); the page's
install command runs in that folder as written (already satisfied: no download), and the
compile-and-run command in a folder of the test's own.
"""

from __future__ import annotations

import re
from pathlib import Path

from npm_packages import node_env, node_project, npm_folder, npm_lock
from readme import REPO, readme
from temporalio.client import Client

from examples.calculator import agents
from towline.testing import towline_worker

PAGE = REPO / "docs" / "any-language.md"


def _blocks(fence: str) -> list[str]:
    return re.findall(rf"^```{fence}\n(.*?)^```", PAGE.read_text(encoding="utf-8"),
                      flags=re.DOTALL | re.MULTILINE)


async def test_the_typescript_client_of_the_docs_starts_queries_approves_and_reads_the_result(
    client: Client, target: str, namespace: str, tmp_path: Path
) -> None:
    folder = npm_folder("@temporalio/client", "typescript")
    with npm_lock(folder):
        installed = await readme("npm install @temporalio/client typescript", cwd=folder, env=node_env(), timeout=300)
    assert installed.code == 0, installed
    project = node_project(tmp_path / "client", folder)
    (script,) = _blocks("ts")
    (project / "run_agent.mts").write_text(script, encoding="utf-8")
    async with towline_worker(client, agents) as (tclient, queue):
        done = await readme(
            "npx tsc --strict --skipLibCheck --target es2022 --module nodenext run_agent.mts "
            "&& node run_agent.mjs", cwd=project, timeout=120, env=node_env({
            "TEMPORAL_ADDRESS": target, "TEMPORAL_NAMESPACE": namespace,
            "TOWLINE_TASK_QUEUE": queue}))
        assert done.code == 0, done
        lines = PAGE.read_text(encoding="utf-8").splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("started careful-"))
        expected = lines[first:lines.index("```", first)]  # the output the page shows
        printed = done.out.splitlines()
        assert len(printed) == len(expected), done.out
        workflow_id = printed[0].removeprefix("started ")
        assert re.fullmatch(r"careful-from-node-\d+", workflow_id), printed[0]
        assert printed[1:] == expected[1:], done.out
        # the run is an ordinary run: its history has the approval and the tool's result
        handle = tclient.get_workflow_handle(workflow_id)
        state = await handle.query("state")
        assert state["status"] == "succeeded" and state["counters"]["tool_calls"] == 1
