"""`towline rerun` and `towline eval`: today's agent against a recorded run, and durable evals.

    towline rerun tests/histories/history-tools.json --agent tests.history_agents:tools_agent
    towline rerun calc-1 --agent examples.calculator:agent --address localhost:7233
    towline eval examples/evals/calculator.yaml --agent examples.calculator:agent

`rerun` reads the recorded run (a JSON history, or a run on the server), runs today's
agent against its recorded model responses (and tool results, or the live tools) and
prints the first divergence and both ledgers: exit 0 when the runs are the same, 1 when
they differ. It runs on the server `--address` names, else on an embedded in-memory dev
server started for the command. `eval` runs every case of a dataset as a towline run
(deterministic workflow ids: running it again attaches to the runs already done) and
prints a table of scores, steps, tokens, cost and UI links.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

from towline.cli.args import Subcommands, add_json, add_ui_url, command, positive
from towline.cli.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    CliError,
    connect_client,
    load_agent,
    one_line,
    payload_store_of,
    target_of,
    ui_base,
)
from towline.cli.embedded import add_embedding, connect_or_embed
from towline.cli.render import print_out

__all__ = ["rerun_command", "eval_command", "register"]


async def rerun_command(args: Any) -> int:
    """`towline rerun RUN|HISTORY.json --agent M:A`."""
    from towline.testing import execution_histories
    from towline.testing.rerun import RerunError, load_histories, rerun_recording

    agent = load_agent(args.agent)
    target = target_of(args)
    store = payload_store_of(args.payload_store) if args.payload_store else target.payload_store
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)  # served failures are expected
    is_file = args.run.endswith(".json") or Path(args.run).is_file()
    async with AsyncExitStack() as stack:
        source = None if is_file else await connect_client(target)
        if args.address:  # the given server runs it; else an embedded, throwaway one
            client = source or await connect_client(target)
            base = ui_base(target, args.ui_url)
        else:
            from towline.testing.rerun import embedded_server

            try:
                client = await stack.enter_async_context(embedded_server())
            except (OSError, RuntimeError) as e:
                raise CliError(f"cannot start an embedded Temporal server: {one_line(e)}") from None
            base = None
        try:
            if is_file:
                try:
                    histories = load_histories(args.run)
                except (OSError, ValueError, KeyError, TypeError) as e:
                    raise CliError(f"cannot read the history {args.run}: {one_line(e)}", EXIT_USAGE) from None
            else:
                assert source is not None
                try:
                    histories = await execution_histories(source, args.run)
                except Exception as e:  # noqa: BLE001 - no such run, or the server refused
                    raise CliError(f"cannot read the run {args.run}: {one_line(e)}") from None
            report = await rerun_recording(
                histories, agent, client=client, tools=args.tools, payload_store=store,
                encryption=target.encryption, timeout=timedelta(seconds=args.timeout), ui_base=base)
        except RerunError as e:
            raise CliError(str(e), EXIT_USAGE) from None
    print_out(args.json, report.to_json(), report.text)
    return 0 if report.same else EXIT_FAILURE


async def eval_command(args: Any) -> int:
    """`towline eval DATASET --agent M:A`."""
    try:
        from towline.testing.evals import EvalError, load_dataset, run_eval
    except ImportError as e:
        raise CliError(f"towline eval needs the evals extra (pip install 'towline[evals]'): "
                       f"{one_line(e)}", EXIT_USAGE) from None
    agent = load_agent(args.agent)
    try:
        dataset = load_dataset(Path(args.dataset))
    except EvalError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    target = target_of(args)
    async with AsyncExitStack() as stack:
        client, base, _ = await connect_or_embed(
            args, target, [] if args.no_worker else [agent], stack)
        try:
            report = await run_eval(
                dataset, agent, client=client, task_queue=args.task_queue,
                concurrency=args.concurrency, worker=not args.no_worker, label=args.label,
                ui_base=base)
        except EvalError as e:
            raise CliError(str(e)) from None
    print_out(args.json, report.to_json(), report.text)
    return 0 if report.all_passed else EXIT_FAILURE


def register(sub: Subcommands) -> None:
    """`towline rerun` and `towline eval`."""
    p = command(
        sub, "rerun", rerun_command,
        help="run today's agent against a recorded run; report the first divergence",
        description="Run today's definition of an agent against a recorded run (a JSON history "
        "exported with `temporal workflow show --output json`, or a run on the server): model "
        "responses come from the recording, step by step, tool results too (or from the live "
        "tools). Prints the first step where today's agent departs from the recording (a "
        "different model request, tool call or outcome) and both ledgers. Exit 0 when the runs "
        "are the same, 1 when they differ. Hooks and capabilities may change freely: this is "
        "not Temporal replay. The rerun runs on the server --address names, else on an "
        "embedded in-memory dev server.")
    p.add_argument("run", metavar="RUN|HISTORY.json", help="a workflow id, or a history JSON file")
    p.add_argument("--agent", required=True, metavar="MODULE:ATTR", help="today's agent")
    p.add_argument("--tools", choices=("recorded", "live"), default="recorded",
                   help="tool results from the recording (default) or from the live tools")
    p.add_argument("--timeout", type=positive, default=120, metavar="S",
                   help="seconds today's run may take (default: 120)")
    p.add_argument("--payload-store", metavar="URL",
                   help="the store the recording's large payloads went to (default: "
                   "TOWLINE_PAYLOAD_STORE)")
    add_json(p, "print the report as one JSON object")
    add_ui_url(p)

    e = command(
        sub, "eval", eval_command, help="run a dataset's cases as durable runs and score them",
        description="Run every case of a dataset (YAML or JSON, pydantic-evals' format: name, "
        "inputs, expected_output, evaluators) as a towline run, concurrently, and score each "
        "with its evaluators (EqualsExpected, Equals, Contains, JsonSchema, Python, Judge, and "
        "the other pydantic-evals evaluators). Each case's workflow id is derived from the "
        "dataset's name, the case's name and a digest of the dataset and agent, so running the "
        "command again attaches to the runs already done. Exit 0 when every assertion passed.")
    e.add_argument("dataset", metavar="DATASET", help="the dataset file (.yaml, .yml or .json)")
    e.add_argument("--agent", required=True, metavar="MODULE:ATTR", help="the agent under test")
    e.add_argument("--concurrency", type=positive, default=8, metavar="K",
                   help="cases run at once (default: 8)")
    e.add_argument("--label", default="", metavar="TEXT",
                   help="part of the runs' ids: another label runs every case again")
    add_json(e, "print the report as one JSON object")
    add_embedding(e, "started when no server answers at a local address", "7233",
                  no_worker="do not run a worker in this process (workers elsewhere serve the "
                  "agent)")
