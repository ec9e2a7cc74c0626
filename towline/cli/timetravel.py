"""towline fork / towline reset: branch a run at a step, or rewind it (issue 22)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage]
    """Add this family's subcommands (none yet)."""
