"""The sandbox: ShoppingBench tools over a catalog, behaving as ORO's real ones.

`find_product` and `view_product_information` follow ORO's tool functions and search server
(`src/agent/agent.py`, `src/search_engine/server.py`): arguments travel as URL query text, a
page outside 1-5 or not in digits answers no products, an unknown sort, service or price part
filters nothing, services split on "," untrimmed, 10 products a page, the six search fields,
the five information fields, unknown ids skipped. `recommend_product` and `terminate` answer as
the reference agent's do.

`Sandbox.call(name, arguments)` never raises on bad input: an unknown tool or arguments no tool
can use (wrong types, unknown names, non-finite numbers, deep nesting) come back as
`ToolResult(ok=False, error=...)`, which is what an agent sees as the tool's answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shopdistill_assets.sandbox.catalog import SERVICES, Catalog
from shopdistill_assets.sandbox.math_worker import MathTimeout
from shopdistill_assets.sandbox.safe_math import UnsafeExpression, evaluate
from shopdistill_assets.sandbox.scorer import parse_product_ids, voucher_total
from shopdistill_assets.sandbox.search import MAX_PAGE, SearchIndex

INFORMATION_FIELDS = ("product_id", "short_description", "description", "sku_options", "attributes")
SEARCH_ARGUMENTS = frozenset({"q", "page", "shop_id", "price", "sort", "service"})
_SERVER_SORTS = frozenset({"order", "priceasc", "pricedesc"})


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


def query_param(value: Any) -> str | None:
    """The text the search server reads for one argument. ORO's tool functions send arguments
    as URL query parameters (`urlencode(..., doseq=True)`, then Flask's `args.get`): None is
    left out, a list (or object) sends its first element, anything else its `str`."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, dict)):
        return str(next(iter(value))) if value else None
    return str(value)


def server_page(text: str | None) -> int | None:
    """A page of 1 to 5 written in digits; anything else: None (the server answers no products)."""
    if not text or not text.isdigit():
        return None
    try:
        page = int(text)
    except ValueError:  # digits such as "²" pass isdigit but not int(): the server errors out
        return None
    return page if 1 <= page <= MAX_PAGE else None


def server_price(text: str | None) -> tuple[float | None, float | None] | None:
    """ "lo-hi", "lo-" or "-hi"; a part that is not a number bounds nothing (as the server reads it)."""
    if not text or "-" not in text:
        return None
    parts = text.split("-")
    if len(parts) != 2:
        return None
    lo, hi = (_float_or_none(part) for part in parts)
    return None if lo is None and hi is None else (lo, hi)


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def server_services(text: str | None) -> tuple[str, ...]:
    """Comma split, no trimming: " COD" is not a service and is dropped, as are unknown names."""
    out: list[str] = []
    for name in (text or "").split(","):
        if name in SERVICES and name not in out:
            out.append(name)
    return tuple(out)


def _without_default(service: Any) -> Any:
    """The tool drops "default" from the service list before it asks the server."""
    if service == "default":
        return None
    if isinstance(service, str) and "default" in service:
        return ",".join(part for part in service.split(",") if part != "default")
    return service


def _check_names(tool: str, args: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(args) - allowed)
    if unknown:  # the real tools are Python functions: an unknown keyword is a TypeError
        raise ToolArgumentError(f"{tool}() got an unexpected keyword argument {unknown[0][:40]!r}")


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
        """As ORO's `find_product` tool and search server: `q` must be text; every other
        argument is read as the server reads a query parameter, and one it cannot use filters
        nothing (sort, price, service) or answers no products (page)."""
        _check_names("find_product", args, SEARCH_ARGUMENTS)
        q = args.get("q")
        if not isinstance(q, str):
            raise ToolArgumentError("find_product() needs q, a string")
        page = server_page(query_param(args.get("page", 1)))  # the tool's default page is 1
        if page is None or not q.strip():
            return []
        sort = args.get("sort")
        sort = query_param(None if sort == "default" else sort)
        return self.index.search(
            q[:500],
            page=page,
            shop_id=query_param(args.get("shop_id")) or None,
            price=server_price(query_param(args.get("price"))),
            sort=sort if sort in _SERVER_SORTS else "default",
            service=server_services(query_param(_without_default(args.get("service")))),
        )

    def _server_ids(self, tool: str, args: dict[str, Any]) -> list[str]:
        _check_names(tool, args, frozenset({"product_ids"}))
        if "product_ids" not in args:
            raise ToolArgumentError(f"{tool}() missing 1 required argument: 'product_ids'")
        return (query_param(args["product_ids"]) or "").split(",")

    def _tool_view_product_information(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        """The five information fields of each known id, split on "," as the server splits
        (no trimming); unknown ids are skipped. Price, shop and title are not among them."""
        out = []
        for pid in self._server_ids("view_product_information", args):
            product = self.catalog.get(pid)
            if product is not None:
                out.append({k: product[k] for k in INFORMATION_FIELDS})
        return out

    def _tool_recommend_product(self, args: dict[str, Any]) -> str:
        _check_names("recommend_product", args, frozenset({"product_ids"}))
        if "product_ids" not in args:
            raise ToolArgumentError("recommend_product() missing 1 required argument: 'product_ids'")
        return recommend_reply(args["product_ids"])

    def _tool_terminate(self, args: dict[str, Any]) -> str:
        return terminate_reply(args.get("status", "success"))

    def _tool_calculate_voucher(self, args: dict[str, Any]) -> dict[str, Any]:
        """Two signatures: ORO's reference agent's (prices as text, the discount in percent)
        and ours (catalog ids and the problem's voucher fields)."""
        if "product_prices" in args:
            return reference_voucher(args)
        ids = parse_product_ids(args.get("product_ids"))
        if not ids:
            raise ToolArgumentError("product_ids must be comma-separated product ids")
        products = [self.catalog.get(pid) for pid in ids]
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


def recommend_reply(product_ids: Any) -> str:
    """What the real recommend_product answers."""
    return f"Having recommended the products to the user: {product_ids}."


def terminate_reply(status: Any) -> str:
    """What the real terminate answers."""
    return f"The interaction has been completed with status: {status}"


REFERENCE_VOUCHER_ARGUMENTS = ("product_prices", "voucher_type", "discount_value", "threshold", "budget", "cap")


def reference_voucher_arguments(prices: list[float], voucher: dict[str, Any], budget: float | None) -> dict[str, Any]:
    """A basket's prices and a voucher as a problem states it (`discount_type` fixed|percentage,
    `face_value`, `discount` as a rate or a percent, `cap`, `threshold`) -> the reference agent's
    calculate_voucher arguments, the signature the tool schemas carry."""
    fixed = voucher.get("discount_type") == "fixed"
    rate = float(voucher.get("discount") or 0)
    out: dict[str, Any] = {
        "product_prices": ",".join(f"{float(p):g}" for p in prices),
        "voucher_type": "fixed" if fixed else "percentage",
        "discount_value": float(voucher.get("face_value") or 0) if fixed else round(rate * 100 if rate < 1 else rate, 4),
        "threshold": float(voucher.get("threshold") or 0),
        "budget": float(budget or 0),
    }
    if not fixed and voucher.get("cap"):
        out["cap"] = float(voucher["cap"])
    return out


def reference_voucher(args: dict[str, Any]) -> dict[str, Any]:
    """The reference agent's voucher arithmetic: prices "100,50"; a fixed discount, or a
    percentage (42 means 42 %) capped when cap > 0; applied when the total reaches the threshold."""
    _check_names("calculate_voucher", args, frozenset(REFERENCE_VOUCHER_ARGUMENTS))
    missing = [k for k in REFERENCE_VOUCHER_ARGUMENTS[:5] if k not in args]
    if missing:
        raise ToolArgumentError(f"calculate_voucher() missing required argument {missing[0]!r}")
    numbers = {k: args.get(k, 0) for k in ("discount_value", "threshold", "budget", "cap")}
    for key, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite_number(value):
            raise ToolArgumentError(f"{key} must be a finite number")
    try:
        prices = [float(p.strip()) for p in str(args["product_prices"]).split(",")]
    except ValueError:
        return {"error": "product_prices must be comma-separated numbers, e.g. \"100,50,75\""}
    if not all(_finite_number(p) for p in prices):
        return {"error": "product_prices must be comma-separated numbers, e.g. \"100,50,75\""}
    total = sum(prices)
    applied = total >= numbers["threshold"]
    discount = 0.0
    if applied and args["voucher_type"] == "fixed":
        discount = float(numbers["discount_value"])
    elif applied and args["voucher_type"] == "percentage":
        discount = total * numbers["discount_value"] / 100.0
        discount = min(discount, numbers["cap"]) if numbers["cap"] > 0 else discount
    after = total - discount
    return {"prices": prices, "total_before": round(total, 2), "discount_amount": round(discount, 2),
            "total_after": round(after, 2), "within_budget": after <= numbers["budget"],
            "voucher_applied": applied, "budget": numbers["budget"]}


def _finite_number(value: Any) -> bool:
    """A number (or numeric text: some agents send "170") that is finite and of a price's size."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return False
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return False
    return math.isfinite(number) and abs(number) <= 1e15
