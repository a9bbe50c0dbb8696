"""The sandbox: ShoppingBench tools over a catalog, with their argument rules.

`Sandbox.call(name, arguments)` never raises on bad input: a rule violation, an unknown tool or
arguments no tool can use (wrong types, non-finite numbers, deep nesting) come back as
`ToolResult(ok=False, error=...)`, which is what an agent sees as the tool's answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shopdistill_assets.sandbox.catalog import SERVICES, Catalog
from shopdistill_assets.sandbox.math_worker import MathTimeout
from shopdistill_assets.sandbox.safe_math import UnsafeExpression, evaluate
from shopdistill_assets.sandbox.scorer import parse_product_ids, voucher_total
from shopdistill_assets.sandbox.search import MAX_PAGE, SORTS, SearchIndex

_PRICE = re.compile(r"^\s*(\d+(?:\.\d+)?)?\s*-\s*(\d+(?:\.\d+)?)?\s*$")
MAX_VIEW = 10
DESCRIPTION_CHARS = 1000


@dataclass
class ToolResult:
    ok: bool
    result: Any = None
    error: str | None = None

    def content(self) -> Any:
        """What the agent sees: the result, or an error message."""
        return self.result if self.ok else f"Error: {self.error}"


class ToolArgumentError(ValueError):
    pass


def _int_arg(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ToolArgumentError(f"{name} must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ToolArgumentError(f"{name} must be an integer")


def parse_price_range(value: Any) -> tuple[float | None, float | None] | None:
    """ "lo-hi", "lo-" or "-hi" -> (lo, hi); None/"" -> None; anything else is an error."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ToolArgumentError('price must be a string "lo-hi"')
    match = _PRICE.match(value)
    if not match or (match.group(1) is None and match.group(2) is None):
        raise ToolArgumentError(f'price must look like "100-500", "100-" or "-500", got {value[:40]!r}')
    lo = float(match.group(1)) if match.group(1) else None
    hi = float(match.group(2)) if match.group(2) else None
    if lo is not None and hi is not None and lo > hi:
        raise ToolArgumentError("price range lower bound is above the upper bound")
    return lo, hi


def parse_services(value: Any) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if not isinstance(value, str):
        raise ToolArgumentError("service must be a comma-joined string")
    names = [s.strip() for s in value.split(",") if s.strip() and s.strip() != "default"]
    unknown = [s for s in names if s not in SERVICES]
    if unknown:
        raise ToolArgumentError(f"unknown service {unknown[0][:30]!r}; choose from {', '.join(SERVICES)}")
    return tuple(names)


def _local_math(code: object) -> str:
    return str(evaluate(code))


class Sandbox:
    """The tools an agent may call, over one catalog and its search index. `math` evaluates
    `python_execute` code: in this process by default, in worker processes under a hard deadline
    when given `MathWorkers.evaluate` (the evaluation does)."""

    def __init__(self, catalog: Catalog, index: SearchIndex | None = None,
                 math: Callable[[object], str] | None = None) -> None:
        self.catalog = catalog
        self.index = index or SearchIndex(catalog)
        self.math = math or _local_math
        self._handlers = {
            "find_product": self._tool_find_product,
            "view_product_information": self._tool_view_product_information,
            "recommend_product": self._tool_recommend_product,
            "terminate": self._tool_terminate,
            "calculate_voucher": self._tool_calculate_voucher,
            "python_execute": self._tool_python_execute,
        }

    def call(self, name: Any, arguments: Any) -> ToolResult:
        handler = self._handlers.get(name) if isinstance(name, str) else None
        if handler is None:
            return ToolResult(False, error=f"unknown tool {str(name)[:40]!r}")
        if not isinstance(arguments, dict):
            return ToolResult(False, error="arguments must be a JSON object")
        try:
            return ToolResult(True, result=handler(arguments))
        except ToolArgumentError as exc:
            return ToolResult(False, error=str(exc))
        except (TypeError, ValueError, ArithmeticError, RecursionError, LookupError) as exc:
            # hostile arguments the rules above did not foresee: the agent's error, not ours
            return ToolResult(False, error=f"{name} cannot use these arguments ({type(exc).__name__})")

    # -- tools ---------------------------------------------------------------------------

    def _tool_find_product(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        q = args.get("q")
        if not isinstance(q, str) or not q.strip():
            raise ToolArgumentError("q must be a non-empty string")
        page = _int_arg(args.get("page", 1), "page")
        if not 1 <= page <= MAX_PAGE:
            raise ToolArgumentError(f"page must be between 1 and {MAX_PAGE}")
        sort = args.get("sort") or "default"
        if sort not in SORTS:
            raise ToolArgumentError(f"sort must be one of {', '.join(SORTS)}")
        shop_id = args.get("shop_id")
        if shop_id is not None and not isinstance(shop_id, (str, int)):
            raise ToolArgumentError("shop_id must be a string")
        return self.index.search(
            q[:500],
            page=page,
            shop_id=str(shop_id) if shop_id not in (None, "") else None,
            price=parse_price_range(args.get("price")),
            sort=sort,
            service=parse_services(args.get("service")),
        )

    def _ids(self, args: dict[str, Any]) -> list[str]:
        ids = parse_product_ids(args.get("product_ids"))
        if not ids:
            raise ToolArgumentError("product_ids must be comma-separated product ids")
        return ids

    def _tool_view_product_information(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for pid in self._ids(args)[:MAX_VIEW]:
            product = self.catalog.get(pid)
            if product is None:
                out.append({"product_id": pid, "error": "product not found"})
                continue
            view = {k: v for k, v in product.items() if k != "description"}
            view["description"] = product["description"][:DESCRIPTION_CHARS]
            out.append(view)
        return out

    def _tool_recommend_product(self, args: dict[str, Any]) -> str:
        self._ids(args)
        return "Recommended."

    def _tool_terminate(self, args: dict[str, Any]) -> str:
        return "Terminated."

    def _tool_calculate_voucher(self, args: dict[str, Any]) -> dict[str, Any]:
        products = [self.catalog.get(pid) for pid in self._ids(args)]
        if any(p is None for p in products):
            raise ToolArgumentError("unknown product id in product_ids")
        prices = [p["price"] for p in products]
        voucher = {k: args.get(k) for k in ("voucher_type", "threshold", "discount_type", "face_value", "discount", "cap")}
        for key in ("threshold", "face_value", "discount", "cap"):
            if voucher[key] is not None and not _finite_number(voucher[key]):
                raise ToolArgumentError(f"{key} must be a finite number")
        voucher["voucher_type"] = voucher["voucher_type"] or "platform"
        after = voucher_total(prices, [p["shop_id"] for p in products], voucher)
        return {
            "subtotal": round(sum(prices), 2),
            "voucher_applies": after is not None,
            "total_after_voucher": round(after if after is not None else sum(prices), 2),
        }

    def _tool_python_execute(self, args: dict[str, Any]) -> str:
        try:
            return self.math(args.get("code"))
        except UnsafeExpression as exc:
            raise ToolArgumentError(f"python_execute only evaluates arithmetic: {exc}") from None
        except MathTimeout as exc:
            raise ToolArgumentError(f"python_execute timed out: {exc}") from None


def _finite_number(value: Any) -> bool:
    """A number (or numeric text: some agents send "170") that is finite and of a price's size."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return False
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return False
    return math.isfinite(number) and abs(number) <= 1e15
