"""The `python_execute` stand-in: evaluates arithmetic over an AST whitelist. Never executes code.

Miner and policy content is hostile: only numeric literals, arithmetic operators and a few pure
functions are accepted; sizes are bounded so `9**9**9` or a 1 MB expression cannot stall a
worker.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_SOURCE = 2_000
MAX_ABS = 1e15
MAX_EXPONENT = 64

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
_FUNCS = {"min": min, "max": max, "round": round, "abs": abs, "sum": sum}


class UnsafeExpression(ValueError):
    """The expression uses something outside the arithmetic whitelist, or is too big."""


def _check(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or abs(value) > MAX_ABS:
        raise UnsafeExpression("result out of range")
    return value


def _eval(node: ast.AST):
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _check(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise UnsafeExpression("exponent too large")
        try:
            return _check(_BINOPS[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError) as exc:
            raise UnsafeExpression(str(exc)) from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, (ast.List, ast.Tuple)):
        if len(node.elts) > 1000:
            raise UnsafeExpression("list too long")
        return [_eval(e) for e in node.elts]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
        and len(node.args) <= 1000
    ):
        args = [_eval(a) for a in node.args]
        try:
            return _check(_FUNCS[node.func.id](*args))
        except TypeError as exc:
            raise UnsafeExpression(str(exc)) from None
    raise UnsafeExpression(f"not allowed: {type(node).__name__}")


def evaluate(source: str) -> float:
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
        return _eval(tree)
    except RecursionError:
        raise UnsafeExpression("expression too deep") from None
