"""Schedules (docs/fleet.md, "Schedules"): the page's commands, exactly as written, against the
session's dev server, with a worker for the calculator on the default task queue. A fire is an
ordinary run: its id names the schedule, its start carries towline's search attributes, and
`towline runs --schedule` lists it."""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cli_helpers import assert_one_line_error, cli_env, json_of, towline, until
from readme import REPO, Done, readme
from temporalio.client import Client

from examples.calculator import agent as calculator
from towline.client import DEFAULT_TASK_QUEUE
from towline.errors import ConfigurationError
from towline.fleet.schedules import parse_every
from towline.testing import towline_worker

NAME = "hourly-sums"


def test_durations_read_as_written() -> None:
    assert parse_every("1h30m") == timedelta(minutes=90)
    assert parse_every("2d") == timedelta(days=2)
    assert parse_every("45s") == timedelta(seconds=45)
    for bad in ("5x", "h", "", "1h 2", "500ms"):  # 500ms: shorter than Temporal's second
        with pytest.raises(ConfigurationError):
            parse_every(bad)


def _started_attributes(events: list[Any]) -> dict[str, Any]:
    fields = events[0].workflow_execution_started_event_attributes.search_attributes.indexed_fields
    return {k: v.data.decode() for k, v in fields.items()}


async def test_a_schedule_fires_ordinary_runs(client: Client, target: str, namespace: str) -> None:
    env = cli_env(target, namespace)

    def ok(done: Done) -> Done:
        assert done.code == 0, done
        return done

    created = ok(await readme('towline schedule create hourly-sums --agent examples.calculator:agent '
                              '--prompt "What is 6 times 7?" --every 1h', env=env))
    assert f"Schedule {NAME} created: agent calculator, every 1h, overlap skip, next fire" in created.out

    again = await towline("schedule", "create", NAME, "--agent", "examples.calculator:agent",
                          "--prompt", "x", "--cron", "0 * * * *", env=env)
    assert_one_line_error(again, 1, f"a schedule named {NAME!r} exists already")
    too_often = await towline("schedule", "create", "too-often", "--agent",
                              "examples.calculator:agent", "--prompt", "x", "--every", "500ms", env=env)
    assert_one_line_error(too_often, 2, "shorter than a second")

    listed = ok(await readme("towline schedule list", env=env))
    row = next(line for line in listed.out.splitlines() if line.startswith(NAME))
    assert row.split()[:5] == [NAME, "calculator", "every", "1h", "active"], listed.out

    async with towline_worker(client, [calculator], task_queue=DEFAULT_TASK_QUEUE) as (towline_client, _):
        triggered = ok(await readme("towline schedule trigger hourly-sums", env=env))
        assert f"Schedule {NAME} triggered" in triggered.out
        runs = await until(lambda: readme("towline runs --schedule hourly-sums", env=env),
                           lambda d: d.code == 0 and "succeeded" in d.out, "the fire succeed")
        fire = runs.out.splitlines()[1].split()
        workflow_id = fire[0]
        assert re.fullmatch(rf"{NAME}-\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ", workflow_id), runs.out
        assert fire[1:3] == ["calculator", "succeeded"]
        handle = towline_client.get_workflow_handle(workflow_id)
        assert (await handle.result())["output"] == "6 times 7 is 42."
        started = _started_attributes([e async for e in handle.fetch_history_events()])
        # start_run's start attributes, set by the schedule's action: nothing to upsert for them
        assert started["TowlineAgent"] == '"calculator"' and started["TowlineStatus"] == '"running"'
        assert "TowlineAgentVersion" in started

    described = ok(await readme("towline schedule describe hourly-sums", env=env))
    assert "Prompt      What is 6 times 7?" in described.out
    assert "Fires       every 1h, overlap skip, task queue towline" in described.out
    assert workflow_id in described.out and "Fired       1 times" in described.out

    ok(await readme("towline schedule pause hourly-sums", env=env))
    paused = json_of(await towline("schedule", "describe", NAME, "--json", env=env))
    assert paused["paused"] is True and paused["recent_fires"][0]["workflow_id"] == workflow_id
    ok(await readme("towline schedule unpause hourly-sums", env=env))
    assert json_of(await towline("schedule", "list", "--json", env=env))[0]["paused"] is False
    ok(await readme("towline schedule delete hourly-sums", env=env))
    gone = await towline("schedule", "describe", NAME, env=env)
    assert_one_line_error(gone, 1, f"no schedule named {NAME!r}")
    still = await readme("towline runs --schedule hourly-sums", env=env)  # its runs stay
    assert workflow_id in still.out


async def test_a_cron_schedule_and_the_python_api(client: Client, target: str, namespace: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    env = cli_env(target, namespace)
    done = await readme('towline schedule create weekday-digest --agent examples.research:agent '
                        '--prompt "Summarise https://example.com" --cron "0 9 * * 1-5" '
                        "--overlap buffer --max-steps 10", env=env)
    assert done.code == 0, done
    digest = json_of(await towline("schedule", "describe", "weekday-digest", "--json", env=env))
    assert (digest["agent"], digest["when"], digest["overlap"]) == ("research", "cron 0 9 * * 1-5", "buffer")
    fires = [datetime.fromisoformat(t) for t in digest["next_fires"]]
    assert fires and all(t.weekday() < 5 and (t.hour, t.minute) == (9, 0) for t in fires)
    assert fires[0].astimezone(UTC) > datetime.now(UTC)

    # The page's Python block, run as written (its `connect()` reads TEMPORAL_ADDRESS).
    page = (REPO / "docs" / "fleet.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
                 if "create_schedule" in b)
    monkeypatch.setenv("TEMPORAL_ADDRESS", target)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", namespace)
    scope: dict[str, Any] = {}
    async with towline_worker(client, [calculator], task_queue=DEFAULT_TASK_QUEUE) as (towline_client, _):
        await eval(compile(block, "fleet.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), scope)
        runs = await until(lambda: towline("runs", "--schedule", "hourly-sums-py", "--json", env=env),
                           lambda d: d.code == 0 and '"succeeded"' in d.out, "the Python fire succeed")
        (fire,) = json_of(runs)
        result = await towline_client.get_workflow_handle(fire["workflow_id"]).result()
        assert result["output"] == "6 times 7 is 42."
    for name in ("weekday-digest", "hourly-sums-py"):
        await client.get_schedule_handle(name).delete()
