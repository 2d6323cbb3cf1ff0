"""The calculator tool: an arithmetic expression evaluated by `simpleeval` (a maintained evaluator that walks the
AST itself: no `eval`, no attribute access, no names but ours), with every operator bounded so that no expression
can build a huge number: integers stay within INT_BITS bits, exponents within what that allows, and the expression
within MAX_CHARS characters. Bounded operands bound the work, so an expression ends in microseconds; the caller's
timeout is a backstop."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from simpleeval import DEFAULT_OPERATORS, SimpleEval

MAX_CHARS = 1000
INT_BITS = 4096  # about 1,233 decimal digits


class CalculatorError(ValueError):
    """The expression is not one the calculator evaluates (a message the model can act on)."""


def _checked(value: Any) -> Any:
    if not isinstance(value, int | float):  # bool included (comparisons)
        raise CalculatorError("only numbers are supported")
    if isinstance(value, int) and value.bit_length() > INT_BITS:
        raise CalculatorError(f"number too large (over {INT_BITS} bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    return value


def _bounded(op: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        return _checked(op(*map(_checked, args)))

    return run


def _power(base: Any, exponent: Any) -> Any:
    base, exponent = _checked(base), _checked(exponent)
    integers = isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0
    # A lower bound of the result's size, checked before anything is computed.
    if integers and exponent * (abs(base).bit_length() - 1) > INT_BITS:
        raise CalculatorError(f"number too large (over {INT_BITS} bits)")
    try:
        return _checked(operator.pow(base, exponent))
    except OverflowError as exc:
        raise CalculatorError("result too large") from exc


def _shift(op: Callable[[int, int], int]) -> Callable[[int, int], int]:
    def run(value: int, by: int) -> int:
        if not isinstance(value, int) or not isinstance(by, int) or by < 0 or by > INT_BITS:
            raise CalculatorError(f"shifts take integers and a count between 0 and {INT_BITS}")
        return _checked(op(_checked(value), by))

    return run


_OPERATORS = {
    node: _bounded(fn)
    for node, fn in {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod,
        ast.USub: operator.neg,
        ast.UAdd: operator.pos,
        ast.Eq: operator.eq,
        ast.NotEq: operator.ne,
        ast.Lt: operator.lt,
        ast.LtE: operator.le,
        ast.Gt: operator.gt,
        ast.GtE: operator.ge,
    }.items()
}
_OPERATORS |= {ast.Pow: _power, ast.LShift: _shift(operator.lshift), ast.RShift: _shift(operator.rshift)}
assert set(_OPERATORS) <= set(DEFAULT_OPERATORS)  # nothing the library would not offer itself


def _function(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        try:
            return _checked(fn(*map(_checked, args)))
        except (OverflowError, ValueError) as exc:
            raise CalculatorError(f"{fn.__name__}: {exc}") from exc

    return run


_FUNCTIONS = {
    name: _function(fn)
    for name, fn in {
        "abs": abs,
        "round": round,
        "min": min,
        "max": max,
        "sqrt": math.sqrt,
        "exp": math.exp,
        "log": math.log,
        "log10": math.log10,
        "log2": math.log2,
        "sin": math.sin,
        "cos": math.cos,
        "tan": math.tan,
        "asin": math.asin,
        "acos": math.acos,
        "atan": math.atan,
        "floor": math.floor,
        "ceil": math.ceil,
        "hypot": math.hypot,
    }.items()
}
_NAMES = {"pi": math.pi, "e": math.e, "tau": math.tau}


def evaluate(expression: str) -> int | float:
    """The expression's value; CalculatorError with a clear message for anything else."""
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"expression longer than {MAX_CHARS} characters")
    evaluator = SimpleEval(operators=_OPERATORS, functions=_FUNCTIONS, names=_NAMES)
    try:
        value = evaluator.eval(expression)
    except CalculatorError:
        raise
    except ZeroDivisionError as exc:
        raise CalculatorError("division by zero") from exc
    except (SyntaxError, ValueError, TypeError, KeyError, AttributeError, RecursionError, OverflowError) as exc:
        raise CalculatorError(f"cannot evaluate: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # simpleeval's own errors (names, functions, features it does not allow)
        raise CalculatorError(f"cannot evaluate: {exc}") from exc
    return _checked(value)
