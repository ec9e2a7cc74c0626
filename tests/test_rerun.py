"""`towline rerun` / `towline.testing.rerun`: today's agent against a recorded run.

A committed history (`tests/histories/history-tools.json`) and a run recorded live in
the test are rerun with the unchanged agent (the same: exit 0) and after a capability
change (exit 1, naming the step and the difference), through the CLI as a subprocess
and through Python, with recorded and with live tools. The docs' commands and pytest
example run exactly as written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import TESTS_ON_PATH, towline
from history_agents import tools_agent
from readme import REPO, cli_env, readme
from rerun_agents import (
    LIVE_CALLS,
    brief_tools_agent,
    echo_agent,
    echo_agent_v2,
    no_flaky_tools_agent,
)
from temporalio.client import Client

from towline.client import run
from towline.testing import rerun, towline_worker
from towline.testing.rerun_report import normal_messages, request_differences

HISTORY = REPO / "tests" / "histories" / "history-tools.json"
DOCS = REPO / "docs" / "time-travel.md"


def test_requests_are_compared_without_their_ids() -> None:
    from towline.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPart
    from towline.runtime.request_chain import RequestDefinitions

    def convo(ids: tuple[str, str], call: str, city: str) -> list[Any]:
        return [ModelRequest(id=ids[0], parts=[UserPart(content="hi")]),
                ModelResponse(id=ids[1], parts=[ToolCallPart(tool_name="lookup", args={"city": city},
                                                             tool_call_id=call)]),
                ModelRequest(parts=[ToolReturnPart(tool_name="lookup", tool_call_id=call, content="ok")])]

    defs = RequestDefinitions()
    was = convo(("a1", "b1"), "call_x", "Paris")
    assert normal_messages(was) == normal_messages(convo(("a2", "b2"), "call_y", "Paris"))
    notes, diff = request_differences("m", was, defs, False, "m", convo(("a", "b"), "c", "Lyon"), defs)
    assert notes == ["messages (3 recorded, 3 today)"]
    assert any(line.startswith("-") and "Paris" in line for line in diff)
    assert any(line.startswith("+") and "Lyon" in line for line in diff)
    # a message the recording holds only by reference matches any message
    notes, _ = request_differences("m", ["ref", *was[1:]], defs, False, "other", was, defs)
    assert notes == ["model m -> other"]


async def test_committed_history_same_and_diverged_in_python(client: Client) -> None:
    same = await rerun(HISTORY, tools_agent, client=client)
    assert same.same, same.text()
    assert same.requests == (3, 3) and same.tool_calls == (3, 3)
    assert same.recorded_ledger is not None and same.today_ledger is not None
    assert same.today_ledger.total_tokens == same.recorded_ledger.total_tokens == 45

    brief = await rerun(HISTORY, brief_tools_agent, client=client)
    assert not brief.same
    assert brief.first is not None and (brief.first.kind, brief.first.step) == ("request", 1)
    assert "+[2] request system: {\"content\": \"Be brief.\"}" in brief.first.diff
    assert brief.today.status == "succeeded"  # the answers were served all the same

    refused = await rerun(HISTORY, no_flaky_tools_agent, client=client)
    first = refused.first
    assert first is not None and (first.kind, first.step) == ("tool", 1), refused.text()
    assert "flaky(n=3)" in first.summary and "not made today" in first.summary
    rows = {name: (was, now) for name, was, now in refused.ledger_rows()}
    assert rows["tool_calls"] == (3, 1)  # only lookup ran: flaky was refused at steps 1 and 2


async def test_cli_reruns_a_history_file_on_an_embedded_server() -> None:
    done = await readme(
        "towline rerun tests/histories/history-tools.json --agent tests.history_agents:tools_agent",
        env=cli_env(), timeout=120)
    assert done.code == 0, done
    assert "Same: 3 model requests, 3 tool calls" in done.out
    assert re.search(r"input_tokens\s+30\s+30", done.out), done.out

    env = cli_env(extra={"PYTHONPATH": TESTS_ON_PATH})
    diverged = await towline("rerun", str(HISTORY), "--agent", "rerun_agents:brief_tools_agent",
                             env=env, timeout=120)
    assert diverged.code == 1, diverged
    assert "DIVERGED at step 1: model request 1" in diverged.out
    assert '+[2] request system: {"content": "Be brief."}' in diverged.out


async def test_rerun_a_live_run_by_id_with_recorded_and_live_tools(client: Client, target: str) -> None:
    async with towline_worker(client, [echo_agent]) as (tclient, queue):
        result = await run(tclient, echo_agent, "hello", task_queue=queue)
    assert result.output == "echoed: HELLO"
    LIVE_CALLS.clear()
    same = await rerun(result.run_id, echo_agent, client=client)
    assert same.same and LIVE_CALLS == [], same.text()
    live = await rerun(result.run_id, echo_agent, client=client, tools="live")
    assert live.same and LIVE_CALLS == ["hello"], live.text()
    changed = await rerun(result.run_id, echo_agent_v2, client=client)
    assert changed.first is not None and changed.first.step == 1
    assert "-[0] request system: {\"content\": \"Echo the prompt.\"}" in changed.first.diff

    env = cli_env(target, extra={"PYTHONPATH": TESTS_ON_PATH})
    # on the given server (not an embedded one): today's run stays there to inspect
    done = await towline("rerun", result.run_id, "--agent", "rerun_agents:echo_agent_v2",
                         "--tools", "live", "--json", "--address", target, env=env, timeout=120)
    assert done.code == 1 and done.out, done
    report = json.loads(done.out)
    assert (report["first"]["kind"], report["first"]["step"]) == ("request", 1)
    assert report["tools"] == "live" and report["requests"] == {"recorded": 2, "today": 2}
    today = await client.get_workflow_handle(report["rerun_id"]).describe()
    assert today.status is not None and today.status.name == "COMPLETED"


async def test_docs_commands_rerun_a_run_of_the_server(target: str) -> None:
    env = cli_env(target)
    done = await readme('towline run examples.calculator:agent "What is 6 times 7?" --id calc-rerun',
                        env=env, timeout=120)
    assert done.code == 0, done
    done = await readme("towline rerun calc-rerun --agent examples.calculator:agent", env=env,
                        timeout=120)
    assert done.code == 0 and "Same: 2 model requests, 1 tool calls" in done.out, done
    done = await readme("towline rerun calc-rerun --agent examples.calculator:agent --tools live --json",
                        env=env, timeout=120)
    assert done.code == 0 and json.loads(done.out)["today"]["output"] == "6 times 7 is 42.", done


@pytest.mark.parametrize("page", [DOCS, REPO / "README.md"], ids=["docs", "readme"])
async def test_the_pytest_example_runs_as_written(monkeypatch: pytest.MonkeyPatch, page: Path) -> None:
    text = page.read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
               if "from towline.testing import rerun" in b]
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO))
    scope: dict[str, Any] = {}
    exec(compile(block, str(page), "exec"), scope)  # noqa: S102 - the page's example, as written
    tests = [v for k, v in scope.items() if k.startswith("test_")]
    assert len(tests) == 1
    await tests[0]()


def test_history_path_of_a_later_execution_finds_the_first(tmp_path: Path) -> None:
    from towline.testing.rerun import load_histories

    chain = load_histories(REPO / "tests" / "histories" / "history-continue-as-new.run2.json")
    assert len(chain) == 3
    assert not chain[0].events[0].workflow_execution_started_event_attributes.continued_execution_run_id
