"""towline schedule ...: agents on Temporal Schedules (issue 23)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage]
    """Add this family's subcommands (none yet)."""
