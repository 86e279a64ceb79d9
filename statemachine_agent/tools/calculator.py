"""Safe arithmetic for model-written expressions.

The expression comes from a model, and through it possibly from a hostile
prompt, so it is parsed to an AST and interpreted over a tiny whitelist, never
`eval`-ed. Python integers are unbounded, so `9**9**9` would otherwise take
minutes and gigabytes: every costly operation's result size is estimated and
refused *before* it is computed, so any input is answered in milliseconds.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from statemachine_agent.errors import Error

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_EXPRESSION_CHARS",
    "MAX_INT_DIGITS",
    "MAX_RESULT_BITS",
    "CalculationError",
    "evaluate",
]

MAX_EXPRESSION_CHARS = 500
MAX_INT_DIGITS = 100
"""Digits of one integer literal."""
MAX_EXPONENT = 1000
"""Largest |exponent| of `**`."""
MAX_RESULT_BITS = 10_000
"""Estimated size of an integer product or power (about 3,000 decimal digits)."""
MAX_DEPTH = 50
"""Nesting of parenthesised or right-hand operands and unary signs; a flat chain
like `1 + 2 + ... + 99` does not nest."""

Number = int | float

_INT_LITERAL_LIMIT = 10**MAX_INT_DIGITS

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number | complex]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}

_UNSUPPORTED_OPERATORS: dict[type[ast.AST], str] = {
    ast.BitXor: "'^' is not supported; use ** for powers",
    ast.BitAnd: "'&' is not supported",
    ast.BitOr: "'|' is not supported",
    ast.LShift: "'<<' is not supported",
    ast.RShift: "'>>' is not supported",
    ast.MatMult: "'@' is not supported",
    ast.Invert: "'~' is not supported",
    ast.Not: "'not' is not supported",
}

_ALLOWED = "numbers, + - * / // % ** and parentheses"


class CalculationError(Error, ValueError):
    """The expression is invalid, too large to compute safely, or undefined (x / 0)."""


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression, computed exactly where Python can.

    Raises `CalculationError` with a message meant for the model: what is
    wrong and what is allowed.
    """
    if not isinstance(expression, str):
        raise CalculationError(
            f"Expected the expression as a string, got {type(expression).__name__}"
        )
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculationError(
            f"Expression is {len(expression)} characters long; the limit is "
            f"{MAX_EXPRESSION_CHARS}. Split the calculation into smaller steps."
        )
    text = expression.strip()
    if not text:
        raise CalculationError(f"Empty expression; write one using {_ALLOWED}")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise _parse_error(exc) from None
    _check(tree.body)
    try:
        return _eval(tree.body)
    except ZeroDivisionError:
        raise CalculationError("Division by zero is undefined") from None
    except OverflowError as exc:
        raise CalculationError(f"Result is too large for a floating-point number ({exc})") from None


def _parse_error(exc: Exception) -> CalculationError:
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    if "integer string conversion" in message:
        # Python itself refuses integer literals of more than 4300 digits (3.11: in
        # ast.parse, as SyntaxError or ValueError depending on the patch release).
        return CalculationError(f"Integer literal has more than {MAX_INT_DIGITS} digits")
    if isinstance(exc, SyntaxError):
        where = f" at column {exc.offset}" if exc.offset else ""
        return CalculationError(f"Invalid syntax{where}: {message}. Only {_ALLOWED} are allowed.")
    return CalculationError(f"Expression cannot be parsed: {message or type(exc).__name__}")


def _check(root: ast.expr) -> None:
    """Whitelist every node and bound the nesting, iteratively, before computing anything."""
    stack: list[tuple[ast.expr, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise CalculationError(
                f"Expression is nested more than {MAX_DEPTH} levels deep; simplify it"
            )
        if isinstance(node, ast.Constant):
            _check_literal(node.value)
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY:
                raise CalculationError(_unsupported(node.op))
            # A left-hand chain (a + b + c) is flat; right-hand operands nest.
            stack.append((node.left, depth))
            stack.append((node.right, depth + 1))
        elif isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY:
                raise CalculationError(_unsupported(node.op))
            stack.append((node.operand, depth + 1))
        else:
            raise CalculationError(_unsupported(node))


def _check_literal(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculationError(f"{value!r} is not a number; only {_ALLOWED} are allowed")
    if isinstance(value, int) and abs(value) >= _INT_LITERAL_LIMIT:
        raise CalculationError(f"Integer literal has more than {MAX_INT_DIGITS} digits")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError("Number literal is too large for a floating-point number")


def _unsupported(node: ast.AST) -> str:
    known = _UNSUPPORTED_OPERATORS.get(type(node))
    if known:
        return f"{known}; only {_ALLOWED} are allowed"
    if isinstance(node, ast.Name):
        return (
            f"Unknown name {node.id!r}: variables and constants are not supported; use {_ALLOWED}"
        )
    if isinstance(node, ast.Call):
        return f"Function calls are not supported; use only {_ALLOWED}"
    if isinstance(node, ast.Compare):
        return f"Comparisons are not supported; use only {_ALLOWED}"
    return f"{type(node).__name__} is not supported; use only {_ALLOWED}"


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant):
        value = node.value
        assert isinstance(value, int | float)  # guaranteed by _check
        return value
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand))
    assert isinstance(node, ast.BinOp)  # guaranteed by _check
    left = _eval(node.left)
    right = _eval(node.right)
    if isinstance(node.op, ast.Pow):
        _check_power(left, right)
    elif isinstance(node.op, ast.Mult):
        _check_product(left, right)
    result = _BINARY[type(node.op)](left, right)
    if isinstance(result, complex):
        raise CalculationError(
            f"{_show(left)} ** {_show(right)} is not a real number "
            "(a negative base with a fractional exponent)"
        )
    if isinstance(result, float) and not math.isfinite(result):
        raise CalculationError("Result is too large for a floating-point number")
    return result


def _check_power(base: Number, exponent: Number) -> None:
    if abs(exponent) > MAX_EXPONENT:
        shown = _show(exponent, bare=True)
        raise CalculationError(
            f"Exponent {shown} is too large; the limit is |exponent| <= {MAX_EXPONENT}"
        )
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        bits = base.bit_length() * exponent
        if bits > MAX_RESULT_BITS:
            raise CalculationError(
                f"{_show(base)} ** {exponent} would have about {_digits_for_bits(bits)} digits; "
                f"the limit is about {_digits_for_bits(MAX_RESULT_BITS)}"
            )


def _check_product(left: Number, right: Number) -> None:
    if isinstance(left, int) and isinstance(right, int):
        bits = left.bit_length() + right.bit_length()
        if bits > MAX_RESULT_BITS:
            raise CalculationError(
                f"The product would have about {_digits_for_bits(bits)} digits; "
                f"the limit is about {_digits_for_bits(MAX_RESULT_BITS)}"
            )


def _digits_for_bits(bits: int) -> int:
    return int(bits * math.log10(2)) + 1


def _show(value: Number, *, bare: bool = False) -> str:
    """A number for a message, without printing thousands of digits.

    Parenthesised where it stands as an operand (`(-8) ** 0.5`) unless `bare`.
    """
    if isinstance(value, int) and value.bit_length() > 100:
        text = f"a {_digits_for_bits(value.bit_length())}-digit number"
        return text if bare else f"({text})"
    return f"({value!r})" if value < 0 and not bare else repr(value)
