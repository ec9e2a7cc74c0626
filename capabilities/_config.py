"""Option checks shared by the built-in capabilities' constructors.

Each raises `ConfigurationError` naming the capability and the option, so a
wrong type (`max_messages="5"`, `timeout=30`) is reported when the capability
is built, not as a `TypeError` from a comparison or, worse, a failure inside
a running workflow.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any, cast

from towline.errors import ConfigurationError

__all__ = ["check_int", "check_str", "check_timeout", "check_names"]


def check_int(owner: str, name: str, value: Any, minimum: int) -> None:
    """`value` is an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"{owner}.{name} must be an integer, not {type(value).__name__} {value!r}"
        )
    if value < minimum:
        raise ConfigurationError(f"{owner}.{name} must be >= {minimum}, not {value}")


def check_str(owner: str, name: str, value: Any, *, empty: bool = True) -> None:
    """`value` is a string (non-empty unless `empty`)."""
    if not isinstance(value, str):
        raise ConfigurationError(f"{owner}.{name} must be a string, not {type(value).__name__}")
    if not empty and not value:
        raise ConfigurationError(f"{owner}.{name} must not be empty")


def check_timeout(owner: str, name: str, value: Any, *, optional: bool) -> None:
    """`value` is a positive `timedelta` (or None when `optional`)."""
    if value is None and optional:
        return
    if not isinstance(value, timedelta):
        allowed = "a timedelta or None" if optional else "a timedelta"
        raise ConfigurationError(
            f"{owner}.{name} must be {allowed} (e.g. timedelta(minutes=5)), "
            f"not {type(value).__name__} {value!r}"
        )
    if value <= timedelta(0):
        raise ConfigurationError(f"{owner}.{name} must be positive, not {value}")


def check_names(owner: str, name: str, value: Any) -> tuple[str, ...]:
    """`value` is a collection of non-empty names (a lone string is refused: it is not a list)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"{owner}.{name} must be a list of tool names, not {type(value).__name__} {value!r}"
        )
    names: tuple[Any, ...] = tuple(cast(Iterable[Any], value))
    if not all(isinstance(n, str) and n for n in names):
        raise ConfigurationError(f"{owner}.{name} must hold non-empty tool names, not {names!r}")
    return cast(tuple[str, ...], names)
