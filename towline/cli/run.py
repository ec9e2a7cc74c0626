"""`towline run module:attr "prompt"`: start a run, follow it step by step, print the answer.

If no Temporal server answers at the configured address (and that address is on this
machine), the command starts the embedded dev server itself (SQLite under
``.towline/``, UI on 8233) for as long as it runs. Unless ``--no-worker`` is given, an
in-process worker for the agent executes the run. Progress goes to stderr, the answer
to stdout.

``--attach FILE`` (repeatable) sends files with the prompt, each a `BinaryContent`
whose media type is read from its content (`towline.media`). Their bytes ride in the
run's input, so past Temporal's 2 MiB payload limit they need a payload store (the
embedded server's, ``--payload-store`` or ``TOWLINE_PAYLOAD_STORE``): without one the
server refuses to start the run, and the command says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import TerminatedError, WorkflowAlreadyStartedError
from temporalio.service import RPCError
from temporalio.worker import Worker

from towline.agent import Agent
from towline.cli.args import Subcommands, add_json, command, json_object, model_string, positive
from towline.cli.attempts import FailedAttempt
from towline.cli.common import (
    GRACEFUL_SHUTDOWN,
    CliError,
    load_agent,
    load_deps,
    one_line,
    payload_store_of,
    read_prompt,
    say,
    stop_event,
    target_of,
    workflow_url,
)
from towline.cli.embedded import add_embedding, connect_or_embed
from towline.cli.fleet import priority_number, tenant_name
from towline.cli.observe import Observability, add_tracing_option, tracing
from towline.cli.progress import Progress, Session
from towline.cli.render import SESSION_ENDS, done_line, output_text, terminal_text
from towline.cli.watch import EventPrinter, add_thinking_option, follow_run
from towline.cli.worker_log import add_log_options, worker_logging
from towline.client import DEFAULT_TASK_QUEUE, own_task_queue, run_error, start_run, with_towline
from towline.errors import InvalidRunInput
from towline.events import EventType, RunEvent
from towline.media import UnknownMediaType, binary_content
from towline.messages import BinaryContent, UserContent
from towline.options import Limits
from towline.results import RunResult
from towline.runtime.ledger import format_cost
from towline.storage.payload_store import STORE_ENV
from towline.workflows.run_context import check_context

__all__ = ["run_command", "register"]


def attachments(paths: list[str]) -> list[UserContent]:
    """The files of `--attach`, each as a `BinaryContent` of the media type its content shows."""
    found: list[UserContent] = []
    for name in paths:
        try:
            data = Path(name).read_bytes()
        except OSError as e:
            raise CliError(f"cannot attach {name!r}: {e.strerror or one_line(e)}", 2) from None
        if not data:
            raise CliError(f"cannot attach {name!r}: the file is empty", 2)
        try:
            found.append(binary_content(data))
        except UnknownMediaType as e:
            raise CliError(f"cannot attach {name!r}: {e}", 2) from None
    return found


def _refused(e: RPCError, attached: list[UserContent], stored: bool) -> CliError:
    """Why the server refused to start the run: an input over its payload limit, said plainly."""
    if "size exceeds limit" not in e.message.lower():
        return CliError(f"cannot start the run: {e.message}")
    size = sum(len(a.data) for a in attached if isinstance(a, BinaryContent))
    what = f"with {size / 1_000_000:.1f} MB of attached files, " if size else ""
    cure = ("the payload store's threshold must be below Temporal's limit" if stored else
            "keep large payloads in a payload store: --payload-store file://DIR (or s3://, gs://) "
            "here and the same store on the worker, or TOWLINE_PAYLOAD_STORE; towline dev keeps "
            "one in .towline/payloads")
    return CliError(f"cannot start the run: its input ({what}base64 in JSON) is over the "
                    f"Temporal server's payload limit (2 MiB by default): {cure}")


def _limits(agent: Agent, max_steps: int | None) -> Limits | None:
    if max_steps is None:
        return None
    try:
        return Limits.model_validate({**agent.limits.model_dump(), "max_steps": max_steps})
    except ValidationError as e:
        raise CliError(f"invalid --max-steps: {e.errors()[0]['msg']}", 2) from None


def _check_context(agent: Agent, context: dict[str, Any] | None) -> None:
    """Refuse a `--context` the run would refuse (`InvalidRunInput`) before starting it."""
    try:
        check_context(agent, context)
    except InvalidRunInput as e:
        raise CliError(f"invalid --context: {e.message}", 2) from None


async def _duplicate(client: Client, workflow_id: str, allowed: bool) -> CliError:
    """The error for `--id` naming a run that exists (a live one, or any without the flag)."""
    try:
        desc = await client.get_workflow_handle(workflow_id).describe()
        status = desc.status.name if desc.status is not None else "UNKNOWN"
    except RPCError:
        status = "UNKNOWN"
    if allowed or status == "RUNNING":
        return CliError(f"run {workflow_id!r} is still running: a workflow id names one live run "
                        f"at a time (see it with towline show {workflow_id}, end it with "
                        f"towline cancel {workflow_id}, or choose another --id)")
    return CliError(f"a run with id {workflow_id!r} already exists ({status}; towline show "
                    f"{workflow_id}): choose another --id, or pass --allow-duplicate to start a "
                    "new run under the same id")


def _print_output(result: RunResult, as_json: bool) -> None:
    if as_json:
        print(terminal_text(result.model_dump_json(indent=2), in_json=True))
    else:
        print(output_text(result.output))
    sys.stdout.flush()


async def run_command(args: Any) -> int:
    """`towline run module:attr "prompt"`."""
    if args.session and args.json:
        raise CliError("--json prints a finished run's RunResult; a session's answers are printed "
                       "as they come (towline send --json prints one as JSON)", 2)
    worker_logging(args, attempts_told=not args.quiet)  # the progress tells of each attempt
    agent = load_agent(args.agent)
    text = read_prompt(args.prompt, args.prompt_file)
    attached = attachments(args.attach)
    prompt: str | list[UserContent] = [text, *attached] if attached else text
    limits = _limits(agent, args.max_steps)
    _check_context(agent, args.context)
    deps = load_deps(args.deps)
    target = target_of(args)
    if args.payload_store:  # a file store's driver makes its directory
        target.payload_store = payload_store_of(args.payload_store)
    obs = tracing(args.otel_endpoint, Observability())
    stop = stop_event()
    async with AsyncExitStack() as stack:
        stack.callback(obs.flush)  # the run's spans reach the collector before we exit
        client, base, embedded = await connect_or_embed(
            args, target, [agent], stack, timeout=args.connect_timeout, plugins=obs.plugins)
        if args.model or deps is not None:  # the in-process worker allows the model it was
            # asked to run, and hands its activities the worker-side dependencies
            client = with_towline(client, [agent], allowed_models=[args.model] if args.model
                                  else (), deps=deps)
        # Its own worker polls a queue of its own, so no other worker (`towline dev`'s, say)
        # takes the run's tasks; a queue the user names, or the fleet's, is kept.
        own = args.task_queue is None and not args.no_worker
        queue: str = own_task_queue() if own else args.task_queue or DEFAULT_TASK_QUEUE
        if not args.no_worker:
            await stack.enter_async_context(Worker(client, task_queue=queue,
                                                   graceful_shutdown_timeout=GRACEFUL_SHUTDOWN))
        reuse = (WorkflowIDReusePolicy.ALLOW_DUPLICATE if args.allow_duplicate
                 else WorkflowIDReusePolicy.REJECT_DUPLICATE)
        try:
            handle = await start_run(client, agent, prompt, task_queue=queue,
                                     id=args.id, limits=limits, session=args.session,
                                     context=args.context,
                                     id_reuse_policy=reuse, model=args.model, stream=args.stream,
                                     priority=args.priority, tenant=args.tenant)
        except WorkflowAlreadyStartedError:
            raise await _duplicate(client, args.id, args.allow_duplicate) from None
        except RPCError as e:
            raise _refused(e, attached, target.payload_store is not None) from None
        address = embedded.address if embedded else target.address
        url = workflow_url(base, target.namespace, handle.id)
        if url and embedded:  # dead once this command ends: said how to open it then
            url = embedded.later_link(url, args.state_dir)
        on = f", model {args.model}" if args.model else ""
        mine = " (this command's own)" if own else ""
        say(f"Run {handle.id} started (agent {agent.name}{on}, task queue {queue}{mine}, "
            f"server {address})")
        session = Session(handle.id) if args.session else None
        # streaming: an agent (or run) that streams is shown as its events come, text and all
        streamed = not args.quiet and (agent.settings.stream if args.stream is None else args.stream)
        show: Callable[[RunEvent], None]
        attempted: Callable[[FailedAttempt], None]
        if streamed:
            printer = EventPrinter(handle.id, sys.stderr, run_header=False, outcome=False,
                                   show_thinking=not args.hide_thinking)
            show, attempted = printer, printer.attempt
        else:
            progress = Progress(handle.id, quiet=args.quiet,
                                show_thinking=not args.hide_thinking, agent=agent)
            show, attempted = progress, progress.attempt

        def on_event(event: RunEvent) -> None:
            show(event)
            if event.type == EventType.ANSWER and session is not None:
                session.answered_with(event.field("output"))

        try:
            result = await follow_run(client, handle, stop, on_event, attempted)
        except WorkflowFailureError as e:
            err = run_error(e)
            if isinstance(e.cause, TerminatedError):  # no failure reason: nothing of it ran
                say(f"towline: run {handle.id} was terminated: {e.cause.message or 'no reason given'}")
            else:
                say(f"towline: run {handle.id} failed: {err.reason}: {err.message}")
            if url:
                say(f"UI: {url}")
            return 1
        if result is None:
            say(f"interrupted: run {handle.id} was not cancelled; it goes on when a worker for "
                f"{agent.name!r} polls task queue {queue} (towline worker --agent {args.agent} "
                f"--task-queue {queue}; towline show {handle.id}). Letting running calls finish "
                f"(up to {GRACEFUL_SHUTDOWN.total_seconds():g}s)...")
            return 130
        c = result.counters
        cost = f", cost {format_cost(c.cost_micros, c.unpriced_requests)}" if c.cost_micros is not None else ""
        say(done_line(c.run_step, c.tool_calls, c.requests, c.total_tokens, cost))
        if session is None or not session.answered:  # a session may end before it was seen waiting
            _print_output(result, args.json)
        if session is not None and (session.answered or result.session_end):
            say(f"Session {handle.id} ended: {SESSION_ENDS.get(result.session_end or '', 'done')}.")
        if url:
            say(f"UI: {url}")
        else:
            say(f"Workflow id: {handle.id} (set TOWLINE_UI_URL to print its UI address)")
    return 0


def register(sub: Subcommands) -> None:
    """`towline run`."""
    p = command(sub, "run", run_command, help="run an agent on a prompt and print the answer",
                description="Start a run and follow it step by step. If no server answers at the "
                "configured (local) address, an embedded dev server is started for the duration "
                "of the command; an in-process worker runs the agent unless --no-worker. Prints "
                "the answer (stdout) and the run's UI address.")
    p.add_argument("agent", metavar="MODULE:ATTR", help="the agent, e.g. examples.calculator:agent")
    p.add_argument("prompt", nargs="?", help="the user prompt")
    p.add_argument("--prompt-file", metavar="FILE", help="read the prompt from FILE ('-': stdin)")
    p.add_argument("--attach", action="append", default=[], metavar="FILE",
                   help="send FILE with the prompt (repeatable): an image (PNG, JPEG, GIF, WebP), "
                   "a PDF, audio (WAV, MP3, Ogg) or UTF-8 text, its type read from its content")
    p.add_argument("--payload-store", metavar="URL",
                   help="keep payloads of 64 KiB and more (attached files, long prompts) in this "
                   "store, not in the history: file://DIR, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX; "
                   f"a worker elsewhere needs the same (default: {STORE_ENV}, else the embedded "
                   "server's, or .towline/payloads against a local server)")
    p.add_argument("--id", metavar="WORKFLOW_ID", help="workflow id (default: <agent>-<random>)")
    p.add_argument("--allow-duplicate", action="store_true",
                   help="with --id: start even if a closed run already has that id")
    p.add_argument("--session", action="store_true",
                   help="keep the run open after its answer for `towline send` (a multi-turn "
                   "session); this command follows it until it ends (Ctrl-C leaves it open)")
    p.add_argument("--max-steps", type=positive, metavar="N",
                   help="override the agent's max_steps for this run")
    p.add_argument("--context", type=json_object, metavar="JSON",
                   help="the run's context, a JSON object: fields of the agent's context_type "
                   "(handed to its tools and instructions function) and initial state keys, "
                   "e.g. '{\"user_id\": 7}'")
    p.add_argument("--deps", metavar="MODULE:ATTR",
                   help="the in-process worker's dependencies (TowlinePlugin(deps=...)): the "
                   "object there, or what calling it returns (a class or a factory)")
    p.add_argument("--priority", type=priority_number, metavar="N",
                   help="Temporal priority of the run and all it schedules: 1 first ... 5 last "
                   "(default: 3), for a backlogged task queue")
    p.add_argument("--tenant", type=tenant_name, metavar="NAME",
                   help="the run's tenant: Temporal's fairness key, so one tenant's backlog "
                   "does not hold up another's")
    p.add_argument("--model", type=model_string, metavar="MODEL",
                   help="run the agent on this model instead of its own, e.g. "
                   "openai:gpt-4.1-mini, anthropic:claude-sonnet-4-6, ollama:llama3.2 (the worker "
                   "must allow it: the in-process one does)")
    streaming = p.add_mutually_exclusive_group()
    streaming.add_argument("--stream", dest="stream", action="store_true", default=None,
                           help="stream the model's text as it comes (the default when the "
                           "agent's ModelSettings.stream is on)")
    streaming.add_argument("--no-stream", dest="stream", action="store_false",
                           help="do not stream: show each step once it is done")
    add_json(p, "print the whole RunResult as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no step-by-step progress")
    add_thinking_option(p)
    p.add_argument("--connect-timeout", type=float, default=3.0, metavar="SECONDS",
                   help="how long to try reaching the server before embedding one (default: 3)")
    add_tracing_option(p)
    add_log_options(p)
    add_embedding(p, "only if no server answers", "the configured address's port",
                  ui_url=" (default: TOWLINE_UI_URL, or derived)", own_queue=True)
