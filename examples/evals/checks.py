"""A check of your own for `towline eval`: the `Python` evaluator calls it with the case's
`EvaluatorContext` (inputs, output, expected output, and the run's workflow id in
`ctx.attributes`)."""

from __future__ import annotations

from typing import Any

from pydantic_evals.evaluators import EvaluatorContext


def one_sentence(ctx: EvaluatorContext[Any, Any, Any]) -> bool:
    """The answer is a single sentence ending with a full stop."""
    text = str(ctx.output).strip()
    return text.endswith(".") and text.count(". ") == 0
