"""The validator's success rule (contract section 5), applied to a recommendation.

Only the last `recommend_product` counts; its ids are comma-split, stripped, de-duplicated.
Item i is matched against reward item i: exact id, or every rule check passes (title
similarity, price range, services, attribute and sku pairs against the product's best sku).
Product: that item passes. Shop: every item passes and all come from one shop. Voucher: every
item passes and the basket fits the budget, directly or after the voucher.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shopdistill_assets.sandbox.catalog import Catalog
from shopdistill_assets.sandbox.problems import Problem
from shopdistill_assets.sandbox.similarity import LexicalTitleSimilarity, TitleSimilarity

_EPS = 1e-6


@dataclass
class ItemCheck:
    product_id: str | None
    expected_id: str
    exact: bool
    hits: int
    total: int
    passed: bool
    failed_rules: list[str] = field(default_factory=list)

    @property
    def rule_score(self) -> float:
        if self.exact:
            return 1.0
        return self.hits / self.total if self.total else 0.0


@dataclass
class ScoreResult:
    success: bool
    gt: float  # share of reward positions matched by exact id
    rule_score: float  # mean per-item rule score
    recommended_ids: list[str]
    items: list[ItemCheck]
    reason: str  # "ok" or why it failed, a short code

    @property
    def score(self) -> float:
        return 1.0 if self.success else 0.0


def parse_product_ids(value: Any) -> list[str]:
    """Comma-split, strip, de-duplicate (order kept). Lists of ids are accepted too."""
    if isinstance(value, list):  # ids are scalars: nested lists or objects name no product
        parts = [str(v) for v in value if isinstance(v, (str, int)) and not isinstance(v, bool)]
    elif isinstance(value, (str, int)):
        parts = str(value).split(",")
    else:
        return []
    seen: dict[str, None] = {}
    for part in parts:
        part = part.strip()
        if part:
            seen.setdefault(part, None)
    return list(seen)


def last_recommendation(tool_calls: Iterable[tuple[str, Any]]) -> list[str] | None:
    """The ids of the last `recommend_product` call among (name, arguments) pairs."""
    ids = None
    for name, arguments in tool_calls:
        if name == "recommend_product":
            ids = parse_product_ids(arguments.get("product_ids") if isinstance(arguments, dict) else None)
    return ids


def _price_hits(price: float, rules: list[Any]) -> tuple[int, int]:
    hits = total = 0
    for rule in rules:
        if not isinstance(rule, dict):
            continue
        for mode, bounds in rule.items():
            lo, hi = (list(bounds) + [None, None])[:2] if isinstance(bounds, list) else (None, None)
            total += 1
            if mode == "less than" and hi is not None and price <= float(hi) + _EPS:
                hits += 1
            elif mode == "greater than" and lo is not None and price >= float(lo) - _EPS:
                hits += 1
            elif mode == "between" and lo is not None and hi is not None and float(lo) - _EPS <= price <= float(hi) + _EPS:
                hits += 1
    return hits, total


def _pair_checks(product: dict[str, Any], expected: dict[str, Any]) -> tuple[int, int]:
    """Attribute and sku pairs, against the product's best sku (as the validator does)."""
    attrs = {(k, v) for k, vs in product["attributes"].items() for v in vs}
    wanted: list[tuple[str, str]] = []
    for option in expected.get("sku_options") or []:
        if isinstance(option, dict):
            wanted += [(str(k).lower(), str(v).lower()) for k, v in option.items()]
    for attr in expected.get("attributes") or []:
        if isinstance(attr, dict):
            for k, vs in attr.items():
                for v in vs if isinstance(vs, list) else [vs]:
                    wanted.append((str(k).lower(), str(v).lower()))
    if not wanted:
        return 0, 0
    skus = [set(option.items()) for option in product["sku_options"].values()] or [set()]
    best = max(sum(1 for pair in wanted if pair in sku or pair in attrs) for sku in skus)
    return best, len(wanted)


def check_item(
    product: dict[str, Any] | None, expected: dict[str, Any], similarity: TitleSimilarity
) -> ItemCheck:
    expected_id = str(expected.get("product_id", ""))
    if product is None:
        return ItemCheck(None, expected_id, False, 0, 0, False, ["unknown_product"])
    if product["product_id"] == expected_id:
        return ItemCheck(product["product_id"], expected_id, True, 0, 0, True)
    hits = total = 0
    failed: list[str] = []
    for title in expected.get("title") or []:
        total += 1
        if similarity.similarity(product["title"], str(title)) >= similarity.threshold:
            hits += 1
        else:
            failed.append("title")
    h, t = _price_hits(product["price"], expected.get("price") or [])
    hits, total = hits + h, total + t
    if h < t:
        failed.append("price")
    for serv in expected.get("service") or []:
        total += 1
        if serv in product["service"]:
            hits += 1
        elif "service" not in failed:
            failed.append("service")
    h, t = _pair_checks(product, expected)
    hits, total = hits + h, total + t
    if h < t:
        failed.append("attributes")
    passed = total > 0 and hits == total
    return ItemCheck(product["product_id"], expected_id, False, hits, total, passed, failed)


def voucher_total(prices: list[float], shops: list[str], voucher: dict[str, Any]) -> float | None:
    """The basket total after the voucher, or None when the voucher does not apply."""
    subtotal = sum(prices)
    if voucher.get("voucher_type") == "shop" and len(set(shops)) != 1:
        return None
    try:
        threshold = float(voucher.get("threshold") or 0)
    except (TypeError, ValueError):
        return None
    if subtotal < threshold - _EPS:
        return None
    try:
        if voucher.get("discount_type") == "fixed":
            return subtotal - float(voucher.get("face_value") or 0)
        if voucher.get("discount_type") == "percentage":
            rate = float(voucher.get("discount") or 0)
            rate = rate / 100.0 if rate > 1 else rate  # "14" and 0.14 both mean 14 %
            cap = voucher.get("cap")
            capped = subtotal - float(cap) if cap is not None else subtotal * (1 - rate)
            return max(subtotal * (1 - rate), capped)
    except (TypeError, ValueError):
        return None
    return None


def score_recommendation(
    problem: Problem,
    recommended: list[str] | None,
    catalog: Catalog,
    similarity: TitleSimilarity | None = None,
) -> ScoreResult:
    similarity = similarity or LexicalTitleSimilarity()
    ids = recommended or []
    expected = list(problem.reward)
    if recommended is None:
        return ScoreResult(False, 0.0, 0.0, [], [], "no_recommendation")
    items = [
        check_item(catalog.get(ids[i]) if i < len(ids) else None, exp, similarity)
        for i, exp in enumerate(expected)
    ]
    gt = sum(1 for it in items if it.exact) / len(expected)
    rule = sum(it.rule_score for it in items) / len(items)
    reason = "ok"
    if len(ids) < len(expected):
        reason = "too_few_products"
    elif not all(it.passed for it in items):
        reason = "item_mismatch"
    elif problem.category == "Shop":
        if len({catalog.products[it.product_id]["shop_id"] for it in items}) != 1:
            reason = "not_one_shop"
    elif problem.category == "Voucher" and problem.voucher:
        basket = [catalog.products[it.product_id] for it in items]
        prices = [p["price"] for p in basket]
        budget = float(problem.voucher.get("budget") or 0)
        after = voucher_total(prices, [p["shop_id"] for p in basket], problem.voucher)
        if sum(prices) > budget + _EPS and (after is None or after > budget + _EPS):
            reason = "over_budget"
    return ScoreResult(reason == "ok", gt, rule, ids, items, reason)


def score_trace_calls(
    problem: Problem,
    tool_calls: Iterable[tuple[str, Any]],
    catalog: Catalog,
    similarity: TitleSimilarity | None = None,
) -> ScoreResult:
    """Score a trajectory given its (tool name, arguments dict) calls in order."""
    return score_recommendation(problem, last_recommendation(tool_calls), catalog, similarity)
