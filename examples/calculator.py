"""A calculator agent that runs offline: `towline run examples.calculator:agent "What is 6 times 7?"`.

The agent has three tools (`add`, `multiply`, `evaluate`); each call is a Temporal
activity, and the model request around them is one too. The model is a small
deterministic stand-in (`arithmetic_model`, a `FunctionModel`) so the example needs no
API key and gives the same answer every time: it reads the arithmetic in the prompt,
calls the matching tools (several in parallel if the prompt asks several things), and
phrases their results. To use the built-in `TestModel` instead, pass `model="test"`
(it calls every tool once with placeholder arguments and summarises the returns).
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable

from towline import Agent, ModelRetry, tool
from towline.capabilities import ToolApproval
from towline.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    RetryPart,
    ToolCallPart,
    ToolReturnPart,
    UserPart,
)
from towline.models import FunctionModel, ModelInfo

__all__ = ["agent", "careful_agent", "test_agent", "agents", "add", "multiply", "evaluate", "arithmetic_model"]


def _tidy(value: float) -> float:
    """`42.0` -> `42`, so answers read naturally; other values unchanged."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return _tidy(a + b)


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return _tidy(a * b)


_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def _eval(node: ast.expr) -> float:
    """Evaluate a parsed arithmetic expression (numbers, + - * / **, parentheses only)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval(node.left), _eval(node.right))
    raise ValueError(f"unsupported element {ast.dump(node)[:40]}")


@tool
def evaluate(expression: str) -> float:
    """Evaluate an arithmetic expression such as `(2 + 3) * 4` (numbers, + - * / ** and parentheses)."""
    try:
        return _tidy(_eval(ast.parse(expression, mode="eval").body))
    except SyntaxError as e:
        # The model is told and may try again (this consumes one of the tool's retries).
        raise ModelRetry(f"{expression!r} is not a valid arithmetic expression") from e
    except (ValueError, ZeroDivisionError, OverflowError) as e:
        raise ModelRetry(f"cannot evaluate {expression!r}: {e}") from e


# --- the offline stand-in model ---------------------------------------------------------

_NUMBER = r"-?\d+(?:\.\d+)?"
_OPERATION = re.compile(rf"({_NUMBER})\s+(plus|times|multiplied by)\s+({_NUMBER})", re.IGNORECASE)
_EXPRESSION = re.compile(r"[-\d(][\d\s.+\-*/()]*[\d)]")


def _number(text: str) -> float:
    """A number from the prompt: `6` -> 6, `2.5` -> 2.5."""
    return _tidy(float(text))


def _plan(prompt: str, offered: set[str]) -> list[ToolCallPart]:
    """The tool calls that answer `prompt`, in prompt order.

    "6 times 7" and "2 plus 3" become `multiply` / `add` calls; a symbolic expression such
    as "(2 + 3) * 4" becomes an `evaluate` call. Tools not offered in this request are
    never called.
    """
    found: list[tuple[int, ToolCallPart]] = []
    for match in _OPERATION.finditer(prompt):
        left, word, right = match.groups()
        name = "add" if word.lower() == "plus" else "multiply"
        if name in offered:
            args = {"a": _number(left), "b": _number(right)}
            found.append((match.start(), ToolCallPart(tool_name=name, args=args)))
    if "evaluate" in offered:
        for match in _EXPRESSION.finditer(prompt):
            expression = match.group(0).strip()
            if any(op in expression.lstrip("-") for op in "+-*/"):
                call = ToolCallPart(tool_name="evaluate", args={"expression": expression})
                found.append((match.start(), call))
    return [call for _, call in sorted(found, key=lambda item: item[0])]


_WORDS = {"add": "plus", "multiply": "times"}


def _phrase(call: ToolCallPart, result: ToolReturnPart | RetryPart) -> str:
    """One sentence about one tool call and its result."""
    if isinstance(result, RetryPart) or result.status != "succeeded":
        return f"I could not compute that: {result.content}"
    value = result.content
    if call.tool_name == "evaluate":
        return f"{call.args['expression']} = {value}"
    return f"{call.args['a']} {_WORDS[call.tool_name]} {call.args['b']} is {value}"


def arithmetic_model(messages: list[Message], info: ModelInfo) -> ModelResponse | str:
    """Deterministic offline model: plan tool calls from the prompt, then phrase the results."""
    starts = [
        i for i, m in enumerate(messages)
        if isinstance(m, ModelRequest) and any(isinstance(p, UserPart) for p in m.parts)
    ]
    if not starts:
        return "Ask me an arithmetic question."
    start = starts[-1]
    prompt = next(p.text for p in messages[start].parts if isinstance(p, UserPart))
    since = messages[start + 1:]
    calls = [c for m in since if isinstance(m, ModelResponse) for c in m.tool_calls]
    if not calls:
        planned = _plan(prompt, {t.name for t in info.tools})
        if not planned:
            return ("I am an offline demo model: I can add, multiply and evaluate arithmetic. "
                    "Try 'What is 6 times 7?' or 'What is (2 + 3) * 4?'.")
        # Ids as providers give them: unique in the conversation (call_1, call_2, ...).
        made = sum(len(m.tool_calls) for m in messages if isinstance(m, ModelResponse))
        numbered: list[ResponsePart] = [c.model_copy(update={"tool_call_id": f"call_{made + i + 1}"})
                                        for i, c in enumerate(planned)]
        return ModelResponse(parts=numbered, finish_reason="tool_calls")
    results: dict[str, ToolReturnPart | RetryPart] = {}
    for m in since:
        if isinstance(m, ModelRequest):
            for p in m.parts:
                if isinstance(p, ToolReturnPart | RetryPart) and p.tool_call_id:
                    results[p.tool_call_id] = p
    sentences = [_phrase(c, results[c.tool_call_id]) for c in calls if c.tool_call_id in results]
    return "; ".join(sentences) + "." if sentences else "I have no result to report."


agent = Agent(
    name="calculator",
    model=FunctionModel(arithmetic_model, model_name="calculator-offline"),
    instructions="You are a calculator. Use the tools for every computation; never guess.",
    tools=[add, multiply, evaluate],
)
"""The agent `towline run examples.calculator:agent "..."` runs (runs start it by name)."""

test_agent = Agent(
    name="calculator-test",
    model="test",
    instructions=agent.instructions,
    tools=agent.tools,
)
"""The same tools on the built-in `TestModel`: it calls each tool once with placeholder
arguments, then answers with a JSON summary of what they returned."""

careful_agent = Agent(
    name="careful-calculator",
    model=FunctionModel(arithmetic_model, model_name="calculator-offline"),
    instructions=agent.instructions,
    tools=agent.tools,
    capabilities=[ToolApproval(tools=["multiply"])],
)
"""The calculator, asking a human before every multiplication (`towline approve RUN CALL_ID`)."""

agents = [agent, careful_agent, test_agent]
"""Every calculator agent, for one worker: `towline dev --agent examples.calculator:agents`.

All workers polling one task queue must serve the same agents (a run whose agent the worker
that picks it up does not know fails with `UnknownAgent`)."""
