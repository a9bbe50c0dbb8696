"""The `python_execute` stand-in: evaluates arithmetic over an AST whitelist. Never executes code.

Miner and policy content is hostile: only numeric literals, arithmetic operators and a few pure
functions are accepted, and every operation's cost is bounded *before* it runs: operands are
numbers of magnitude <= MAX_ABS (never lists: `[0]*10**8` would allocate before any check),
exponents are small, `round`'s digits are small (`round(1, -10**8)` computes 10**(10**8)), lists
are literals of at most MAX_ITEMS numbers, and nesting is bounded.

Run as a script (`python -I -S safe_math.py`) it is the worker behind `math_worker.MathWorkers`:
one JSON request per line on stdin, one JSON answer per line on stdout, under a memory cap. It
then imports nothing but the standard library.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_SOURCE = 2_000
MAX_ABS = 1e15
MAX_EXPONENT = 64
MAX_NDIGITS = 20  # round(x, n): values are <= 1e15, so larger |n| changes nothing (and costs a lot)
MAX_ITEMS = 1000
MAX_DEPTH = 200

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class UnsafeExpression(ValueError):
    """The expression uses something outside the arithmetic whitelist, or is too big."""


def _number(value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnsafeExpression("arithmetic works on numbers only")
    if not math.isfinite(value) or abs(value) > MAX_ABS:
        raise UnsafeExpression("number out of range")
    return value


def _numbers(values: list[object]) -> list[int | float]:
    if not values:
        raise UnsafeExpression("empty list")
    return [_number(v) for v in values]


def _round(args: list[object]) -> int | float:
    if len(args) not in (1, 2):
        raise UnsafeExpression("round takes a number and optional digits")
    value = _number(args[0])
    if len(args) == 1:
        return round(value)
    digits = args[1]
    if isinstance(digits, bool) or not isinstance(digits, int) or abs(digits) > MAX_NDIGITS:
        raise UnsafeExpression(f"round's digits must be an integer between -{MAX_NDIGITS} and {MAX_NDIGITS}")
    return round(value, digits)


def _minmax(pick):
    def call(args: list[object]) -> int | float:
        items = args[0] if len(args) == 1 and isinstance(args[0], list) else args
        return pick(_numbers(items))
    return call


def _sum(args: list[object]) -> int | float:
    if len(args) != 1 or not isinstance(args[0], list):
        raise UnsafeExpression("sum takes one list of numbers")
    return sum(_numbers(args[0]))


def _abs(args: list[object]) -> int | float:
    if len(args) != 1:
        raise UnsafeExpression("abs takes one number")
    return abs(_number(args[0]))


_FUNCS = {"min": _minmax(min), "max": _minmax(max), "round": _round, "abs": _abs, "sum": _sum}


def _binop(op: ast.operator, left: int | float, right: int | float) -> int | float:
    if isinstance(op, ast.Pow) and abs(right) > MAX_EXPONENT:
        raise UnsafeExpression("exponent too large")
    try:  # operands are <= MAX_ABS and exponents <= MAX_EXPONENT: each result costs microseconds
        return _BINOPS[type(op)](left, right)
    except (ArithmeticError, ValueError) as exc:
        raise UnsafeExpression(str(exc) or type(exc).__name__) from None


def _eval(node: ast.AST, depth: int = 0) -> int | float | list:
    if depth > MAX_DEPTH:
        raise UnsafeExpression("expression too deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _number(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _number(_eval(node.left, depth + 1)), _number(_eval(node.right, depth + 1))
        return _number(_binop(node.op, left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_number(_eval(node.operand, depth + 1)))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        if len(node.args) > MAX_ITEMS:
            raise UnsafeExpression("too many arguments")
        return _number(_FUNCS[node.func.id]([_argument(a, depth + 1) for a in node.args]))
    if isinstance(node, (ast.List, ast.Tuple)):
        raise UnsafeExpression("a list is allowed only as the argument of min, max or sum")
    raise UnsafeExpression(f"not allowed: {type(node).__name__}")


def _argument(node: ast.AST, depth: int) -> int | float | list:
    """A function argument: a number, or a list/tuple literal of numbers (lists exist only here)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        if len(node.elts) > MAX_ITEMS:
            raise UnsafeExpression("list too long")
        return [_number(_eval(e, depth + 1)) for e in node.elts]
    return _eval(node, depth)


def evaluate(source: object) -> int | float:
    """Evaluate one arithmetic expression (the last line of `source` if several)."""
    if not isinstance(source, str) or len(source) > MAX_SOURCE:
        raise UnsafeExpression("expression missing or too long")
    lines = [ln for ln in source.strip().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        raise UnsafeExpression("empty expression")
    expr = lines[-1].strip()
    if expr.startswith("print(") and expr.endswith(")"):
        expr = expr[len("print(") : -1]
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise UnsafeExpression("not an arithmetic expression") from None
    try:
        return _number(_eval(tree.body))
    except RecursionError:
        raise UnsafeExpression("expression too deep") from None


def _serve(memory_bytes: int) -> None:
    """Worker loop: {"code": ...} per line in, {"ok": true, "value": "..."} or {"ok": false,
    "error": "..."} per line out. The memory cap is a second line of defence behind the checks."""
    import json
    import resource
    import sys

    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    for line in sys.stdin:
        try:
            answer = {"ok": True, "value": str(evaluate(json.loads(line).get("code")))}
        except UnsafeExpression as exc:
            answer = {"ok": False, "error": str(exc)[:200]}
        except Exception as exc:  # noqa: BLE001 - the worker answers every request
            answer = {"ok": False, "error": f"{type(exc).__name__}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    import sys

    _serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
