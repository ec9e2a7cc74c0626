"""`towline schedule ...`: agents on Temporal Schedules (issue 23).

    towline schedule create nightly --agent examples.calculator:agent --prompt "..." --every 1h
    towline schedule list
    towline schedule describe nightly
    towline schedule trigger nightly
    towline schedule pause nightly / unpause nightly / delete nightly

Each fire is an ordinary run (`towline runs --schedule NAME` lists them); see
`towline.fleet.schedules`.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, ScheduleAlreadyRunningError
from temporalio.service import RPCError, RPCStatusCode

from towline.cli.args import Subcommands, add_json, command, positive
from towline.cli.common import EXIT_USAGE, CliError, connected, load_agent, one_line
from towline.cli.render import print_out, table, when
from towline.errors import ConfigurationError
from towline.fleet.routing import TENANT_MAX_BYTES
from towline.fleet.schedules import (
    OVERLAPS,
    ScheduleRow,
    create_schedule,
    describe_schedule,
    list_schedules,
)

__all__ = ["register", "priority_number", "tenant_name", "schedule_lines"]


def priority_number(text: str) -> int:
    """argparse type: a priority from 1 (first) to 5 (last)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a priority (1 first ... 5 last)") from None
    if not 1 <= value <= 5:
        raise argparse.ArgumentTypeError(f"{value} is not a priority (1 first ... 5 last)")
    return value


def tenant_name(text: str) -> str:
    """argparse type: a tenant (Temporal's fairness key: 1 to 64 bytes)."""
    if not text.strip() or len(text.encode()) > TENANT_MAX_BYTES:
        raise argparse.ArgumentTypeError(f"a tenant is 1 to {TENANT_MAX_BYTES} bytes, not {text!r}")
    return text


async def _client(args: Any) -> Client:
    client, _ = await connected(args)
    return client


def _missing(name: str, e: RPCError) -> CliError:
    if e.status == RPCStatusCode.NOT_FOUND:
        return CliError(f"no schedule named {name!r} (towline schedule list shows them)")
    return CliError(f"schedule {name!r}: {one_line(e.message)}")


async def create_command(args: Any) -> int:
    """`towline schedule create`."""
    agent = load_agent(args.agent)
    client = await _client(args)
    try:
        await create_schedule(
            client, args.name, agent, args.prompt, cron=args.cron, every=args.every,
            overlap=args.overlap, task_queue=args.task_queue, max_steps=args.max_steps,
            priority=args.priority, tenant=args.tenant)
    except ConfigurationError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    except ScheduleAlreadyRunningError:
        raise CliError(f"a schedule named {args.name!r} exists already (towline schedule "
                       f"describe {args.name}; delete it first to replace it)") from None
    except RPCError as e:
        code = EXIT_USAGE if e.status == RPCStatusCode.INVALID_ARGUMENT else 1
        raise CliError(f"cannot create schedule {args.name!r}: {one_line(e.message)}", code) from None
    row = await describe_schedule(client, args.name)
    nxt = f", next fire {when(row.next_fires[0])}" if row.next_fires else ""
    print(f"Schedule {args.name} created: agent {agent.name}, {row.when}, overlap {args.overlap}"
          f"{nxt}. Its runs: towline runs --schedule {args.name}")
    return 0


def schedule_lines(row: ScheduleRow) -> list[str]:
    """`towline schedule describe` as text."""
    lines = [
        f"Schedule    {row.name}" + ("  (paused)" if row.paused else ""),
        f"Agent       {row.agent or '-'}",
        f"Prompt      {row.prompt or '-'}",
        f"Fires       {row.when or '-'}, overlap {row.overlap or '-'}, task queue {row.task_queue or '-'}",
        f"Fired       {row.fires if row.fires is not None else '-'} times"
        + (f"; running now: {', '.join(row.running)}" if row.running else ""),
    ]
    if row.note:
        lines.append(f"Note        {row.note}")
    lines.append("Next fires  " + (", ".join(when(t) for t in row.next_fires) or "-"))
    lines.append("Recent runs" + ("" if row.recent_fires else "  -"))
    lines += [f"  {when(t)}  {w}" for t, w in row.recent_fires]
    lines.append(f"All its runs: towline runs --schedule {row.name}")
    return lines


async def list_command(args: Any) -> int:
    """`towline schedule list`."""
    rows = await list_schedules(await _client(args))
    print_out(args.json, [r.to_json() for r in rows], lambda: table(
        ("NAME", "AGENT", "FIRES", "STATE", "NEXT FIRE", "LAST RUN"), [
            (r.name, r.agent or "-", r.when or "-", "paused" if r.paused else "active",
             when(r.next_fires[0]) if r.next_fires and not r.paused else "-",
             r.recent_fires[-1][1] if r.recent_fires else "-")
            for r in rows]),
        "No schedules run agents here (towline schedule create makes one).")
    return 0


async def describe_command(args: Any) -> int:
    """`towline schedule describe NAME`."""
    client = await _client(args)
    try:
        row = await describe_schedule(client, args.name)
    except RPCError as e:
        raise _missing(args.name, e) from None
    print_out(args.json, row.to_json(), lambda: schedule_lines(row))
    return 0


async def action_command(args: Any) -> int:
    """`towline schedule trigger|pause|unpause|delete NAME`."""
    client = await _client(args)
    handle = client.get_schedule_handle(args.name)
    try:
        if args.action == "trigger":
            await handle.trigger()
            done = (f"triggered at {datetime.now(UTC).astimezone().strftime('%H:%M:%S')}: its run "
                    f"starts now, as its overlap policy allows (towline runs --schedule {args.name})")
        elif args.action == "pause":
            await handle.pause(note=args.note or "paused with towline schedule pause")
            done = "paused: it fires no more until towline schedule unpause"
        elif args.action == "unpause":
            await handle.unpause(note=args.note or "unpaused with towline schedule unpause")
            done = "unpaused: it fires again"
        else:
            await handle.delete()
            done = "deleted (its runs stay: towline runs --schedule NAME still lists them)".replace(
                "NAME", args.name)
    except RPCError as e:
        raise _missing(args.name, e) from None
    print(f"Schedule {args.name} {done}")
    return 0


def register(sub: Subcommands) -> None:
    """`towline schedule create|list|describe|trigger|pause|unpause|delete`."""
    top = sub.add_parser("schedule", help="run agents on Temporal Schedules",
                         description="Agents on Temporal Schedules: each fire is an ordinary run "
                         "whose workflow id names the schedule (towline runs --schedule NAME).")
    family = top.add_subparsers(dest="schedule_command", metavar="COMMAND", required=True)

    p = command(family, "create", create_command,
                help="create a schedule that runs an agent on a prompt",
                description="Create a Temporal Schedule whose every fire starts a run of the "
                "agent on the prompt. A worker for the agent must poll the task queue (towline "
                "worker --agent ...).")
    p.add_argument("name", metavar="NAME", help="the schedule's name (its fires' ids start with it)")
    p.add_argument("--agent", required=True, metavar="MODULE:ATTR", help="the agent to run")
    p.add_argument("--prompt", required=True, metavar="TEXT", help="the prompt of every run")
    when_group = p.add_mutually_exclusive_group(required=True)
    when_group.add_argument("--cron", metavar="EXPR", help="a cron expression, in UTC (e.g. '0 9 * * 1-5')")
    when_group.add_argument("--every", metavar="DURATION", help="an interval: 30s, 5m, 1h30m, 2d")
    p.add_argument("--overlap", choices=tuple(OVERLAPS), default="skip",
                   help="while the last fire's run is still going: skip this fire (default), "
                   "buffer one, or allow both")
    p.add_argument("--task-queue", default="towline", metavar="QUEUE",
                   help="task queue of its runs (default: towline)")
    p.add_argument("--max-steps", type=positive, metavar="N", help="override the agent's max_steps")
    p.add_argument("--priority", type=priority_number, metavar="N",
                   help="its runs' priority: 1 first ... 5 last (default: Temporal's, 3)")
    p.add_argument("--tenant", type=tenant_name, metavar="NAME",
                   help="its runs' tenant (Temporal's fairness key)")

    p = command(family, "list", list_command, help="list the schedules that run agents")
    add_json(p, "print them as a JSON list")

    p = command(family, "describe", describe_command,
                help="a schedule: agent, prompt, when, next and recent fires")
    p.add_argument("name", metavar="NAME")
    add_json(p, "print it as JSON")

    for action, text in (("trigger", "fire a schedule now (its overlap policy applies)"),
                         ("pause", "stop a schedule firing until unpaused"),
                         ("unpause", "let a paused schedule fire again"),
                         ("delete", "delete a schedule (its runs stay)")):
        p = command(family, action, action_command, help=text,
                    description=text[0].upper() + text[1:] + ".", action=action)
        p.add_argument("name", metavar="NAME")
        if action in ("pause", "unpause"):
            p.add_argument("--note", metavar="TEXT", help="why (shown by temporal schedule describe)")
