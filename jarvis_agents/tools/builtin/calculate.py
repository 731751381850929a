"""The `calculate` tool: arithmetic through an explicit AST walker, never `eval`.

The model's input is parsed with `ast.parse(mode="eval")` and only numbers, the
arithmetic operators and a short list of math functions and constants are walked.
Everything that could run code (names, attributes, calls of anything else) is
refused with a sentence, and everything that could run *long* (huge powers, huge
integers, deep trees) is refused before it is computed.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable

from jarvis_agents.errors import ToolError
from jarvis_agents.tools.base import ToolContext

Number = int | float

MAX_INPUT_CHARS = 500
# Why these bounds: with the length limit they allow a 250-term sum, yet keep the
# recursive walk far below Python's recursion limit.
MAX_NODES = 500
MAX_DEPTH = 250
# Why 10,000 digits: big enough for any arithmetic a person asks for, small enough that
# multiplying two such integers takes microseconds.
MAX_INT_DIGITS = 10_000
_MAX_INT_BITS = int(MAX_INT_DIGITS / math.log10(2)) + 1
# Why bound round()'s ndigits: int.__round__(n, -k) computes 10**k, which can hang.
MAX_ROUND_DIGITS = 100
# Integers longer than this are shown in scientific notation: str() on a very long int
# is slow (and refused past 4,300 digits), and the model gains nothing from the digits.
MAX_EXACT_DISPLAY_DIGITS = 1000

HINT = (
    "Use numbers, + - * / // % ** (or ^), parentheses, the functions "
    "sqrt, abs, round, log, ln, log10, log2, exp, sin, cos, tan, asin, acos, atan, "
    "floor, ceil and the constants pi, e, tau."
)

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > MAX_ROUND_DIGITS:
        raise ToolError(
            f"round() takes a whole number of digits between -100 and 100, not {ndigits}."
        )
    return round(x, ndigits)


# name -> (function, minimum args, maximum args)
FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int]] = {
    "sqrt": (math.sqrt, 1, 1),
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "log": (_log, 1, 2),
    "ln": (math.log, 1, 1),
    "log10": (math.log10, 1, 1),
    "log2": (math.log2, 1, 1),
    "exp": (math.exp, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1),
    "asin": (math.asin, 1, 1),
    "acos": (math.acos, 1, 1),
    "atan": (math.atan, 1, 1),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
}

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}

_THOUSANDS = re.compile(r"\b\d{1,3}(?:,\d{3})+(?:\.\d+)?\b")


class CalculateTool:
    """Evaluates one arithmetic expression and returns the number as text."""

    name = "calculate"
    description = (
        "Evaluate an arithmetic expression exactly, e.g. (1234 * 5.5) / 3 or sqrt(2) ^ 10. " + HINT
    )
    input_hint = "an arithmetic expression, e.g. 2 * (3 + 4) ^ 2"
    input_parameter = "expression"  # its schema: {"expression": string}, required
    # No I/O, and every input that could compute for long is refused first: the
    # registry runs it on the agent's own thread.
    blocking = False

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        return evaluate(tool_input)


def evaluate(expression: str) -> str:
    """Evaluate `expression` and format the result; ToolError for anything else."""
    text = _normalise(expression)
    tree = _parse(text)
    _check_size(tree)
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolError("Division by zero is undefined.") from None
    except OverflowError:
        raise ToolError("The result is too large to compute; try smaller numbers.") from None
    return format_number(value)


def _normalise(expression: str) -> str:
    text = expression.strip()
    if len(text) > MAX_INPUT_CHARS:
        raise ToolError(
            f"The expression is {len(text)} characters long; the limit is {MAX_INPUT_CHARS}. "
            "Split the calculation into smaller steps."
        )
    # Models often quote the input or end it with "="; none of that is arithmetic.
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`'\"":
        text = text[1:-1].strip()
    text = text.rstrip("=").strip()
    if not text:
        raise ToolError("Give an arithmetic expression to calculate, e.g. 2 * (3 + 4).")
    text = text.replace("×", "*").replace("÷", "/").replace("−", "-").replace("^", "**")
    # Why only without letters: in "log(8,100)" the comma separates arguments; a comma
    # can only be a thousands separator where there is no function call.
    if not re.search(r"[A-Za-z_]", text):
        text = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)
    return text


def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        reason = getattr(exc, "msg", None) or "not a valid expression"
        raise ToolError(f"Could not read {text[:80]!r} as arithmetic ({reason}). {HINT}") from None


def _check_size(tree: ast.Expression) -> None:
    nodes = 0
    stack: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += isinstance(node, ast.expr)  # operators and contexts are not work
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            raise ToolError("The expression is too complex; split it into smaller steps.")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _unsupported(what: str) -> ToolError:
    return ToolError(f"Only arithmetic is allowed: {what} is not supported. {HINT}")


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant):
        # bool is an int subclass; True + True is not arithmetic a person meant.
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return _checked(node.value)  # 1e999 parses as inf
        raise _unsupported(f"the value {node.value!r}")
    if isinstance(node, ast.BinOp):
        return _binary(node)
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.USub):
            return -_eval(node.operand)
        if isinstance(node.op, ast.UAdd):
            return +_eval(node.operand)
        raise _unsupported(f"the operator {type(node.op).__name__}")
    if isinstance(node, ast.Name):
        if node.id.lower() in CONSTANTS:
            return CONSTANTS[node.id.lower()]
        raise _unsupported(f"the name {node.id!r}")
    if isinstance(node, ast.Call):
        return _call(node)
    raise _unsupported(_describe(node))


def _binary(node: ast.BinOp) -> Number:
    left = _eval(node.left)
    right = _eval(node.right)
    if isinstance(node.op, ast.Pow):
        result = _power(left, right)
    elif type(node.op) in _BINARY:
        result = _BINARY[type(node.op)](left, right)
    else:
        raise _unsupported(f"the operator {type(node.op).__name__}")
    return _checked(result)


def _power(base: Number, exponent: Number) -> Number:
    # Why estimate first: 9 ** 387420489 would take minutes and gigabytes to compute;
    # its length is known in advance from exponent * log10(|base|).
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        digits = exponent * math.log10(abs(base))
        if digits > MAX_INT_DIGITS:
            raise ToolError(
                f"The result would have about {digits:,.0f} digits; the limit is "
                f"{MAX_INT_DIGITS:,}. Use smaller numbers or a float, e.g. 10.0 ** 300."
            )
    result = base**exponent
    if isinstance(result, complex):
        raise ToolError(
            "The result is not a real number (a negative number to a fractional power)."
        )
    return result


def _checked(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise ToolError(f"The result has more than {MAX_INT_DIGITS:,} digits; use smaller numbers.")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("The result is too large to represent; try smaller numbers.")
    return value


def _call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name):
        if isinstance(node.func, ast.Constant):
            raise ToolError("Write multiplication explicitly, e.g. 2 * (3) rather than 2(3).")
        raise _unsupported(_describe(node.func))
    name = node.func.id.lower()
    if name not in FUNCTIONS:
        raise _unsupported(f"calling {node.func.id!r}")
    if node.keywords:
        raise _unsupported("keyword arguments")
    function, low, high = FUNCTIONS[name]
    if not low <= len(node.args) <= high:
        expected = str(low) if low == high else f"{low} or {high}"
        raise ToolError(f"{name}() takes {expected} argument(s), not {len(node.args)}.")
    args = [_eval(arg) for arg in node.args]
    try:
        return _checked(function(*args))
    except (ValueError, ZeroDivisionError):
        shown = ", ".join(format_number(a) for a in args)
        raise ToolError(f"{name}({shown}) is not defined for real numbers.") from None


def _describe(node: ast.AST) -> str:
    names = {
        ast.Attribute: "attribute access",
        ast.Subscript: "indexing",
        ast.Lambda: "lambda",
        ast.Compare: "comparison",
        ast.BoolOp: "and/or",
        ast.IfExp: "if/else",
        ast.ListComp: "a comprehension",
        ast.GeneratorExp: "a comprehension",
        ast.SetComp: "a comprehension",
        ast.DictComp: "a comprehension",
        ast.JoinedStr: "text",
        ast.Starred: "unpacking",
        ast.NamedExpr: "assignment",
    }
    for kind, label in names.items():
        if isinstance(node, kind):
            return label
    return type(node).__name__


def format_number(value: Number) -> str:
    """Ints as ints, floats to 12 significant digits (0.1 + 0.2 → 0.3)."""
    if isinstance(value, int):
        if value.bit_length() * math.log10(2) < MAX_EXACT_DISPLAY_DIGITS:
            return str(value)
        return _approximate(value)
    rounded = float(f"{value:.12g}")
    if rounded == 0:
        return "0"
    if rounded.is_integer() and abs(rounded) < 1e15:
        return str(int(rounded))
    return f"{rounded:.12g}"


def _approximate(value: int) -> str:
    digits = int(value.bit_length() * math.log10(2))  # may be one short
    if abs(value) >= 10**digits:
        digits += 1
    head = abs(value) // 10 ** (digits - 13)
    text = str(head)
    sign = "-" if value < 0 else ""
    return f"{sign}{text[0]}.{text[1:]}e+{digits - 1} (an integer with {digits:,} digits)"
