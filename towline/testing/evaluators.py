"""towline's evaluators for `towline eval`, as pydantic-evals `Evaluator` dataclasses.

pydantic-evals brings exact matches (`EqualsExpected`, `Equals`), `Contains`, `IsInstance`
and more; these add what a dataset of agent runs needs besides:

- `JsonSchema(schema)`: the output (a JSON value, or text holding one) matches a JSON schema
  (no `$ref` to another document is fetched unless `remote_refs`);
- `Python(function)`: a check of your own, `module:function`, called with pydantic-evals'
  `EvaluatorContext` (inputs, output, expected output, metadata, and the run's facts in
  `attributes`), returning a bool, a number, a string label or a dict of them;
- `Judge(rubric, model)`: an LLM judge through any model string (`openai:gpt-4.1-mini`,
  `anthropic:...`, a model registered with the eval), itself a towline run of the
  `towline-eval-judge` agent with a workflow id derived from the case's run and the
  rubric, so an eval run again attaches to the verdicts already given (none is paid twice).
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext, EvaluatorOutput

from towline.agent import Agent

__all__ = ["JsonSchema", "Python", "Judge", "JUDGE_AGENT", "JudgeContext", "JUDGE_CONTEXT",
           "TOWLINE_EVALUATORS", "judge_prompt", "verdict"]

JUDGE_AGENT = Agent(
    name="towline-eval-judge", model="test",
    instructions=(
        "You grade the answer of an AI agent against a rubric. Reply with PASS on the first "
        "line if the answer satisfies the rubric, otherwise FAIL on the first line; then one "
        "short sentence saying why."
    ),
)
"""The agent a `Judge` runs (on the model the judge names, `RunInput.model`)."""


@dataclass(frozen=True)
class JudgeContext:
    """Where `Judge` runs its verdicts (set by `run_eval` for the evaluation)."""

    start: Callable[[str, str, str], Any]
    """`start(workflow_id, model, prompt)`: awaits the judge run's answer text."""


JUDGE_CONTEXT: contextvars.ContextVar[JudgeContext | None] = contextvars.ContextVar(
    "towline_judge", default=None)


def _as_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


@dataclass(repr=False)
class JsonSchema(Evaluator[Any, Any, Any]):
    """The output is valid against `schema` (text is parsed as JSON first)."""

    schema: dict[str, Any]
    """The JSON schema; a `$ref` resolves within it only, unless `remote_refs`."""
    remote_refs: bool = False
    """Let a `$ref` to another document (`https://...`, `file://...`) be fetched. Off: a
    dataset file is not trusted to make `towline eval` read files or call URLs."""

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluatorOutput:
        import jsonschema
        from jsonschema.exceptions import best_match  # pyright: ignore[reportUnknownVariableType]
        from jsonschema.validators import validator_for
        from referencing import Registry
        from referencing.exceptions import NoSuchResource, Unresolvable

        def refuse(uri: str) -> Any:
            raise NoSuchResource(ref=uri)

        try:
            if self.remote_refs:
                jsonschema.validate(_as_json(ctx.output), self.schema)
            else:
                kind: Any = validator_for(self.schema)
                kind.check_schema(self.schema)
                validator: Any = kind(self.schema, registry=Registry(retrieve=refuse))
                error: Any = best_match(validator.iter_errors(_as_json(ctx.output)))  # pyright: ignore[reportUnknownVariableType]
                if error is not None:
                    raise error
        except jsonschema.ValidationError as e:
            return EvaluationReason(False, f"not valid: {e.message}")
        except jsonschema.SchemaError as e:
            return EvaluationReason(False, f"the schema is invalid: {e.message}")
        except Unresolvable as e:
            return EvaluationReason(False, f"the schema's $ref {getattr(e, 'ref', '')!r} is not "
                                    "resolved: another document is fetched only with remote_refs: true")
        return EvaluationReason(True)


@dataclass(repr=False)
class Python(Evaluator[Any, Any, Any]):
    """A function of your own, `module:function`, called with the `EvaluatorContext`."""

    function: str

    async def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluatorOutput:
        module_name, sep, attr = self.function.partition(":")
        if not sep:
            raise ValueError(f"{self.function!r} is not module:function")
        fn: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            fn = getattr(fn, part)
        result = fn(ctx)
        if hasattr(result, "__await__"):
            result = await result
        return cast(EvaluatorOutput, result)

    def get_default_evaluation_name(self) -> str:
        return self.function.rpartition(":")[2]


def judge_prompt(rubric: str, ctx: EvaluatorContext[Any, Any, Any]) -> str:
    """What the judge is asked: the rubric, the case's input, the answer, the expected one."""
    parts = [f"Rubric: {rubric}", f"Input: {json.dumps(ctx.inputs, ensure_ascii=False, default=str)}",
             f"Answer: {json.dumps(ctx.output, ensure_ascii=False, default=str)}"]
    if ctx.expected_output is not None:
        parts.append(f"Expected answer: {json.dumps(ctx.expected_output, ensure_ascii=False, default=str)}")
    return "\n".join(parts)


def verdict(text: str) -> EvaluationReason:
    """A judge's answer as an assertion: PASS or FAIL on its first line, then why."""
    stripped = text.strip()
    first, _, rest = stripped.partition("\n")
    word = first.strip().upper()
    reason = (rest.strip() or first.strip())[:300]
    if word.startswith("PASS"):
        return EvaluationReason(True, reason)
    if word.startswith("FAIL"):
        return EvaluationReason(False, reason)
    return EvaluationReason(False, f"the judge answered neither PASS nor FAIL: {stripped[:200]}")


@dataclass(repr=False)
class Judge(Evaluator[Any, Any, Any]):
    """An LLM judge: `model` (any model string) grades the output against `rubric`."""

    rubric: str
    model: str = "test"

    async def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluatorOutput:
        where = JUDGE_CONTEXT.get()
        run_id = ctx.attributes.get("workflow_id")
        if where is None or not isinstance(run_id, str):
            raise RuntimeError("Judge runs inside towline.evals.run_eval")
        digest = hashlib.sha256(f"{self.model}\n{self.rubric}".encode()).hexdigest()[:8]
        text = await where.start(f"{run_id}-judge-{digest}", self.model, judge_prompt(self.rubric, ctx))
        return verdict(str(text))


TOWLINE_EVALUATORS: tuple[type[Evaluator[Any, Any, Any]], ...] = (JsonSchema, Python, Judge)
"""The evaluator types a dataset file may name besides pydantic-evals' own."""
