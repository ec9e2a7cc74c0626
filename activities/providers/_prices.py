"""Prices: a response's usage priced with `genai-prices`, its native tool uses included.

Unknown is not zero: a request whose price `genai-prices` does not know (or that used a
native tool whose price it does not know) is counted in `Usage.unpriced_requests`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from towline.messages import Usage

__all__ = ["priced", "NATIVE_PRICE_UNITS"]


NATIVE_PRICE_UNITS: dict[str, str] = {
    "web_search": "web_searches", "file_search": "storage_searches",
    "code_execution": "code_executions",
}
"""The `genai-prices` usage unit each native tool's uses are priced by (where it has one)."""


def priced(usage: Usage, model_ref: str, pricing: Mapping[str, str] | None) -> Usage:
    """`usage` with its cost from `genai-prices`, or counted unpriced when it is unknown.

    Native tool uses (`Usage.native_tool_uses`) are priced by the unit `NATIVE_PRICE_UNITS`
    names where the model's prices have one; a use of a tool without a known price leaves
    the request counted in `unpriced_requests` (its tokens and the known uses still cost)."""
    unpriced = usage.model_copy(update={"unpriced_requests": usage.requests, "cost": 0.0})
    if pricing is None:
        return unpriced
    try:
        prices = importlib.import_module("genai_prices")
    except ImportError:
        return unpriced
    units = {NATIVE_PRICE_UNITS[k]: n for k, n in usage.native_tool_uses.items()
             if n and k in NATIVE_PRICE_UNITS}
    tokens = prices.Usage(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens or None,
        cache_write_tokens=usage.cache_write_tokens or None, **units,
    )
    try:
        calc = prices.calc_price(tokens, model_ref, **pricing)
    except (LookupError, ValueError):
        return unpriced
    known = {unit for unit in units if getattr(calc.model_price, f"{unit}_kcount", None) is not None}
    unknown_tools = any(n and NATIVE_PRICE_UNITS.get(k) not in known
                        for k, n in usage.native_tool_uses.items())
    return usage.model_copy(update={"cost": float(calc.total_price),
                                    "unpriced_requests": usage.requests if unknown_tools else 0})
