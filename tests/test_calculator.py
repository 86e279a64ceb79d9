"""The safe calculator: correct arithmetic, and every cap refusing hostile input fast."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from statemachine_agent.tools import calculator
from statemachine_agent.tools.calculator import CalculationError, evaluate

FAST = 0.5
"""A generous bound: a safety check that nothing is computed, not a benchmark."""


@contextmanager
def quickly() -> Iterator[None]:
    started = time.perf_counter()
    yield
    assert time.perf_counter() - started < FAST


class TestArithmetic:
    @pytest.mark.parametrize(
        ("expression", "expected"),
        [
            ("1 + 2", 3),
            ("7 - 10", -3),
            ("6 * 7", 42),
            ("7 / 2", 3.5),
            ("7 // 2", 3),
            ("-7 // 2", -4),
            ("7 % 3", 1),
            ("2 ** 10", 1024),
            ("2 ** -2", 0.25),
            ("-3", -3),
            ("+3", 3),
            ("-(2 + 3) * 4", -20),
            ("2 * (3 + 4) ** 2", 98),
            ("2 ** 3 ** 2", 512),
            ("1.5 * 4", 6.0),
            ("0.1 + 0.2", 0.1 + 0.2),
            ("1_000 * 3", 3000),
            ("0x10 + 1", 17),
            ("  (1 + 2)  ", 3),
            ("2 ** 0.5", 2**0.5),
            ("1e3 / 4", 250.0),
        ],
    )
    def test_values(self, expression: str, expected: float) -> None:
        """Operators follow Python's semantics and precedence."""
        assert evaluate(expression) == expected

    def test_int_stays_int(self) -> None:
        """Integer arithmetic is exact, even for large numbers."""
        result = evaluate("2 ** 64 - 1")
        assert result == 18446744073709551615
        assert isinstance(result, int)

    def test_true_division_gives_float(self) -> None:
        """/ always gives a float, as in Python."""
        assert evaluate("6 / 2") == 3.0
        assert isinstance(evaluate("6 / 2"), float)

    def test_long_flat_sum_is_allowed(self) -> None:
        """A long left-to-right chain is not 'nesting' and is accepted."""
        assert evaluate("+".join(["1"] * 200)) == 200


class TestInvalidInput:
    @pytest.mark.parametrize(
        ("expression", "fragment"),
        [
            ("", "Empty expression"),
            ("   ", "Empty expression"),
            ("1 +", "Invalid syntax"),
            ("2 ^ 3", r"use \*\* for powers"),
            ("x + 1", "Unknown name 'x'"),
            ("sqrt(2)", "Function calls are not supported"),
            ("__import__('os')", "Function calls are not supported"),
            ("'a' * 3", "'a' is not a number"),
            ("True + 1", "True is not a number"),
            ("1j * 2", "1j is not a number"),
            ("1 < 2", "Comparisons are not supported"),
            ("[1, 2]", "List is not supported"),
            ("~1", "'~' is not supported"),
            ("1 << 4", "'<<' is not supported"),
            ("(1).real", "Attribute is not supported"),
            ("1 if 1 else 2", "IfExp is not supported"),
        ],
    )
    def test_rejected(self, expression: str, fragment: str) -> None:
        """Anything beyond numbers and arithmetic operators is refused with a clear reason."""
        with pytest.raises(CalculationError, match=fragment):
            evaluate(expression)

    def test_is_a_value_error(self) -> None:
        """CalculationError is a ValueError, so generic handlers still catch it."""
        assert issubclass(CalculationError, ValueError)

    def test_not_a_string(self) -> None:
        """A non-string argument is a CalculationError, not a crash."""
        with pytest.raises(CalculationError, match="string"):
            evaluate(12)  # type: ignore[arg-type]

    def test_never_evaluates_python(self) -> None:
        """Attribute access and dunder tricks are rejected, not executed."""
        with pytest.raises(CalculationError):
            evaluate("().__class__.__bases__[0].__subclasses__()")


class TestUndefinedAndOverflow:
    @pytest.mark.parametrize("expression", ["1 / 0", "1 // 0", "1 % 0", "0 ** -1", "1.0 / 0.0"])
    def test_division_by_zero(self, expression: str) -> None:
        """Division by zero is reported, not raised as ZeroDivisionError."""
        with pytest.raises(CalculationError, match="Division by zero"):
            evaluate(expression)

    @pytest.mark.parametrize("expression", ["1e308 * 10", "10.0 ** 400", "1e308 + 1e308"])
    def test_float_overflow(self, expression: str) -> None:
        """A float result that would be infinite is refused."""
        with pytest.raises(CalculationError, match="too large for a floating-point"):
            evaluate(expression)

    def test_float_literal_overflow(self) -> None:
        """A float literal that Python would read as infinity is refused."""
        with pytest.raises(CalculationError, match="too large"):
            evaluate("1e999")

    def test_huge_int_to_float(self) -> None:
        """Mixing a huge integer with a float is refused instead of overflowing."""
        with pytest.raises(CalculationError, match="too large"):
            evaluate("2 ** 1000 * 2 ** 1000 * 1.5")

    def test_complex_result(self) -> None:
        """A negative base with a fractional exponent has no real value."""
        with pytest.raises(CalculationError, match="not a real number"):
            evaluate("(-8) ** (1 / 3)")


class TestCaps:
    @pytest.mark.parametrize("expression", ["9**9**9", "10**10**10", "(2**1000)**1000"])
    def test_power_towers_refused_fast(self, expression: str) -> None:
        """The classic hostile powers are refused in milliseconds, before computing."""
        with quickly(), pytest.raises(CalculationError):
            evaluate(expression)

    def test_exponent_cap(self) -> None:
        """|exponent| above 1000 is refused; 1000 itself is fine for a small base."""
        assert evaluate("1 ** 1000") == 1
        with pytest.raises(CalculationError, match=r"Exponent 1001 is too large"):
            evaluate("1 ** 1001")
        with pytest.raises(CalculationError, match="Exponent -1001"):
            evaluate("2 ** -1001")

    def test_power_result_size_cap(self) -> None:
        """base.bit_length() * exponent above 10,000 bits is refused."""
        assert evaluate("3 ** 1000") == 3**1000  # 2 bits * 1000
        with pytest.raises(CalculationError, match="digits"):
            evaluate("(10**100) ** 100")  # 333 bits * 100

    def test_product_size_cap(self) -> None:
        """A product whose operands' bit lengths sum above 10,000 is refused."""
        assert evaluate("2**900 * 2**900") == 2**1800
        with quickly(), pytest.raises(CalculationError, match="product"):
            evaluate("(7**999 * 7**999 * 7**999) * (7**999 * 7**999 * 7**999)")

    def test_repeated_squaring_stays_bounded(self) -> None:
        """Chained products cannot grow past the cap one step at a time."""
        with quickly(), pytest.raises(CalculationError):
            evaluate(" * ".join(["(2**999)"] * 11))

    def test_integer_literal_cap(self) -> None:
        """Integer literals of more than 100 digits are refused; 100 digits are fine."""
        assert evaluate("9" * 100) == int("9" * 100)
        with pytest.raises(CalculationError, match="more than 100 digits"):
            evaluate("1" + "0" * 100)

    def test_hex_literal_cap(self) -> None:
        """The literal cap is on the value, so hex cannot smuggle in a bigger number."""
        with pytest.raises(CalculationError, match="more than 100 digits"):
            evaluate("0x" + "f" * 120)

    def test_expression_length_cap(self) -> None:
        """Expressions over 500 characters are refused, including a 10,000-digit literal."""
        assert evaluate("1" + " + 1" * 124) == 125  # 497 characters
        with quickly(), pytest.raises(CalculationError, match="limit is 500"):
            evaluate("1" * 10_000)

    def test_python_digit_limit_is_reported(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past the length cap, Python's own 4300-digit literal limit is still reported."""
        monkeypatch.setattr(calculator, "MAX_EXPRESSION_CHARS", 100_000)
        with quickly(), pytest.raises(CalculationError, match="more than 100 digits"):
            evaluate("1" * 10_000)

    def test_nesting_cap(self) -> None:
        """More than 50 levels of nesting is refused; 50 are fine."""
        assert evaluate("1 + (" * 50 + "1" + ")" * 50) == 51
        assert evaluate("-" * 50 + "1") == 1
        with pytest.raises(CalculationError, match="nested more than 50"):
            evaluate("-" * 51 + "1")
        with pytest.raises(CalculationError, match="nested more than 50"):
            evaluate("1 + (" * 51 + "1" + ")" * 51)

    def test_deep_parentheses_refused_fast(self) -> None:
        """Parentheses nested as deep as the length cap allows are refused promptly."""
        with quickly(), pytest.raises(CalculationError):
            evaluate("(" * 249 + "1" + ")" * 249)
