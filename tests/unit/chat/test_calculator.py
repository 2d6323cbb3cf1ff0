"""The calculator tool's evaluator: arithmetic and functions evaluate; anything that is not arithmetic, or that would
build a huge number, is refused with a message instead of running."""

from __future__ import annotations

import math

import pytest

from functions.chat.server_tools.calculator import CalculatorError, evaluate


@pytest.mark.parametrize(
    ("expression", "value"),
    [("2 + 3 * 4", 14), ("2 ** 10", 1024), ("7 // 2", 3), ("7 % 4", 3), ("sqrt(2) ** 2", pytest.approx(2)),
     ("sin(pi / 2)", 1.0), ("max(3, 9, 4)", 9), ("1 << 10", 1024), ("10 ** 300 // 10 ** 299", 10),
     ("log(e)", 1.0), ("3 > 2", True), ("round(2.675, 2)", 2.67)],
)  # fmt: skip
def test_arithmetic_evaluates(expression: str, value: object) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [("9 ** 9 ** 9", "too large"), ("10 ** 5000", "too large"), ("(10 ** 700) * (10 ** 700)", "too large"),
     ("1 << 100000", "shifts"), ("exp(1000)", "range"), ("1e308 * 10", "finite"), ("1 / 0", "division by zero"),
     ("__import__('os').system('id')", "cannot evaluate"), ("().__class__.__bases__", "cannot evaluate"),
     ("open('/etc/passwd')", "cannot evaluate"), ("[1] * 10 ** 9", "cannot evaluate"), ("'a' * 10 ** 9", "numbers"),
     ("lambda: 1", "cannot evaluate"), ("x", "cannot evaluate"), ("1 +", "cannot evaluate"),
     ("1" * 2000, "longer than")],
)  # fmt: skip
def test_everything_else_is_refused_with_a_reason(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)


def test_results_stay_finite_numbers() -> None:
    assert math.isfinite(evaluate("hypot(3, 4)")) and evaluate("hypot(3, 4)") == 5.0
