"""Agents of `test_retries_cli.py`, loaded by `towline run` / `towline worker` subprocesses:
OpenAI models (the fake provider answers for them), Temporal's retries quick."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from towline import Agent

flaky = Agent(
    name="retry-flaky", model="openai:gpt-4.1-mini",
    model_retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=1.0,
                                   maximum_attempts=5),
)
"""A model request the provider fails twice: Temporal retries it after 2 s each time (long
enough for a follower polling the run to see the retry wait)."""

lost = Agent(
    name="retry-lost", model="openai:gpt-4.1-mini", model_heartbeat_timeout=timedelta(seconds=4),
    model_retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200),
                                   backoff_coefficient=1.0, maximum_attempts=5),
)
"""A model request whose worker may be killed: its heartbeat times out after 4 s (at 2 s, a
worker just started on a loaded machine once missed its own heartbeats: a second loss)."""

quick = Agent(
    name="retry-quick", model="openai:gpt-4.1-mini",
    model_retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=10),
                                   backoff_coefficient=1.0, maximum_attempts=5),
)
"""A model request retried 10 ms after it failed: the retry starts and ends between two of a
follower's polls of the run."""
