"""The validator's success rule, applied to a recommendation, as ORO scores it.

Facts from ORO's `src/agent/problem_scorer.py`, `rewards/orm.py` and `scoring.py` (and
ShoppingBench's `run_evaluate.py` for web problems), restated here:

- Only the last `recommend_product` whose arguments are an object counts (a call whose
  arguments are not an object is skipped, so an earlier recommendation stands). Its
  `product_ids` must be a string (a list or a number recommends nothing); it is comma-split,
  stripped, de-duplicated, order kept.
- The category is compared lower-cased: product, shop, voucher (web: ShoppingBench's rule);
  any other category is a clear `unsupported_category` failure.
- Item i is scored against reward item i: an exact id scores 1, otherwise the share of rule
  checks that hit (title similarity, price bounds, services, attribute and sku pairs against
  the product's best sku); no checks at all scores 0. Unknown ids are skipped (score 0).
- Success: the mean item score is 1; for shop also one shop across items that scored; for
  voucher also the budget, met directly or after the voucher.
`components` is ORO's score dict (less the format and length parts, which read the dialogue).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shopdistill_assets.sandbox.catalog import Catalog
from shopdistill_assets.sandbox.problems import Problem
from shopdistill_assets.sandbox.similarity import LexicalTitleSimilarity, TitleSimilarity

FIELDS = ("title", "price", "service", "sku & attrs")
TASKS = ("product", "shop", "voucher", "web")
WEB_TITLE_THRESHOLD = 0.8  # ShoppingBench's web rule is stricter than the 0.7 of the product rule


@dataclass
class ItemCheck:
    product_id: str | None
    expected_id: str
    exact: bool
    hits: int
    total: int
    passed: bool
    failed_rules: list[str] = field(default_factory=list)
    field_hits: Counter = field(default_factory=Counter)
    field_totals: Counter = field(default_factory=Counter)

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
    components: dict[str, float] = field(default_factory=dict)  # ORO's score dict

    @property
    def score(self) -> float:
        return 1.0 if self.success else 0.0


def split_product_ids(text: str) -> list[str]:
    """Comma-split, strip, de-duplicate (order kept)."""
    seen: dict[str, None] = {}
    for part in text.split(","):
        part = part.strip()
        if part:
            seen.setdefault(part, None)
    return list(seen)


def parse_product_ids(value: Any) -> list[str]:
    """The ids a tool argument names: text is comma-split; a bare number is one id. (The scorer
    is stricter: see `extract_recommendation`.)"""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return split_product_ids(value) if isinstance(value, str) else []


def extract_recommendation(tool_calls: Iterable[tuple[str, Any]]) -> tuple[list[str] | None, str]:
    """(ids, reason) of the last `recommend_product` whose arguments are an object, as ORO
    extracts them. ids is None when there is no such call; [] when its `product_ids` is not
    text (ORO recommends nothing then) or names no id."""
    found, value = False, None
    for name, arguments in tool_calls:
        if name == "recommend_product" and isinstance(arguments, dict):
            found, value = True, arguments.get("product_ids", "")
    if not found:
        return None, "no_recommendation"
    if not isinstance(value, str):
        return [], "product_ids_not_text"
    ids = split_product_ids(value)
    return ids, ("ok" if ids else "no_product_ids")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _price_checks(price: float, rules: Any) -> tuple[int, int]:
    """Price bounds, inclusive, exact (no tolerance, as ORO compares). A malformed bound is a
    miss: ORO would crash on it and leave the problem unscored, which fails it too."""
    hits = total = 0
    for rule in rules if isinstance(rules, list) else []:
        for mode, bounds in rule.items() if isinstance(rule, dict) else ():
            total += 1
            lo, hi = (list(bounds) + [None, None])[:2] if isinstance(bounds, list) else (None, None)
            lo, hi = _number(lo), _number(hi)
            if mode == "less than" and hi is not None and price <= hi:
                hits += 1
            elif mode == "greater than" and lo is not None and price >= lo:
                hits += 1
            elif mode == "between" and lo is not None and hi is not None and lo <= price <= hi:
                hits += 1
    return hits, total


def _wanted_pairs(expected: dict[str, Any]) -> list[tuple[str, str]]:
    wanted: list[tuple[str, str]] = []
    for option in expected.get("sku_options") or []:
        if isinstance(option, dict):
            wanted += [(str(k).lower(), str(v).lower()) for k, v in option.items()]
    for attr in expected.get("attributes") or []:
        if isinstance(attr, dict):
            for k, vs in attr.items():
                for v in vs if isinstance(vs, list) else [vs]:
                    wanted.append((str(k).lower(), str(v).lower()))
    return wanted


def _pair_checks(product: dict[str, Any], expected: dict[str, Any]) -> tuple[int, int]:
    """Attribute and sku pairs, against the product's best sku (as the validator does). The
    catalog stores these lower-cased, so the wanted pairs are lower-cased too."""
    wanted = _wanted_pairs(expected)
    if not wanted:
        return 0, 0
    attrs = {(k, v) for k, vs in product["attributes"].items() for v in vs}
    skus = [set(option.items()) for option in product["sku_options"].values()] or [set()]
    best = max(sum(1 for pair in wanted if pair in sku or pair in attrs) for sku in skus)
    return best, len(wanted)


def check_item(
    product: dict[str, Any] | None, expected: dict[str, Any], similarity: TitleSimilarity
) -> ItemCheck:
    """One recommended product against one reward item (ORO's `rule_score_reward`)."""
    expected_id = str(expected.get("product_id", ""))
    if product is None:
        return ItemCheck(None, expected_id, False, 0, 0, False, ["unknown_product"])
    hit, tot = Counter(), Counter()
    titles = expected.get("title") or []
    for title in titles if isinstance(titles, list) else [titles]:  # a bare title is one title
        tot["title"] += 1
        hit["title"] += similarity.similarity(product["title"], str(title)) >= similarity.threshold
    hit["price"], tot["price"] = _price_checks(product["price"], expected.get("price"))
    services = expected.get("service") or []
    for serv in services if isinstance(services, list) else [services]:
        tot["service"] += 1
        hit["service"] += serv in product["service"]
    hit["sku & attrs"], tot["sku & attrs"] = _pair_checks(product, expected)
    exact = product["product_id"] == expected_id
    hits, total = sum(hit.values()), sum(tot.values())
    failed = [] if exact else [_RULE_NAMES[f] for f in FIELDS if hit[f] < tot[f]]
    return ItemCheck(product["product_id"], expected_id, exact, hits, total,
                     exact or (total > 0 and hits == total), failed, hit, tot)


_RULE_NAMES = {"title": "title", "price": "price", "service": "service", "sku & attrs": "attributes"}


def voucher_total(prices: list[float], shops: list[str], voucher: dict[str, Any]) -> float | None:
    """The basket total after the voucher, or None when the voucher does not apply. Lenient
    for the `calculate_voucher` tool: a percentage given as 14 means 14 %."""
    subtotal = sum(prices)
    if voucher.get("voucher_type") == "shop" and len(set(shops)) != 1:
        return None
    try:
        if subtotal < float(voucher.get("threshold") or 0):
            return None
        if voucher.get("discount_type") == "fixed":
            return subtotal - float(voucher.get("face_value") or 0)
        if voucher.get("discount_type") == "percentage":
            rate = float(voucher.get("discount") or 0)
            rate = rate / 100.0 if rate > 1 else rate
            cap = voucher.get("cap")
            capped = subtotal - float(cap) if cap is not None else subtotal * (1 - rate)
            return max(subtotal * (1 - rate), capped)
    except (TypeError, ValueError):
        return None
    return None


def budget_met(total: float, n_shops: int, voucher: Any) -> bool:
    """ORO's budget rule, exactly: the total fits the budget, or a platform voucher (or a shop
    voucher over one shop) whose threshold the total reaches brings it within. Fields of the
    wrong type fail the budget (ORO would crash and leave the problem unscored)."""
    if not isinstance(voucher, dict):
        return False
    budget, threshold = _number(voucher.get("budget")), _number(voucher.get("threshold"))
    if budget is None:
        return False
    if total <= budget:
        return True
    kind = voucher.get("voucher_type")
    if not (kind == "platform" or (kind == "shop" and n_shops == 1)) or threshold is None or total < threshold:
        return False
    if voucher.get("discount_type") == "fixed":
        face = _number(voucher.get("face_value"))
        return face is not None and total - face <= budget
    if voucher.get("discount_type") == "percentage":
        rate, cap = _number(voucher.get("discount")), _number(voucher.get("cap"))
        return rate is not None and cap is not None and max(total * (1 - rate), total - cap) <= budget
    return False


def _field_means(items: list[ItemCheck], n: int) -> dict[str, float]:
    out = {"product": len(items) / n, "gt": sum(it.exact for it in items) / n,
           "rule": sum(it.rule_score for it in items) / n}
    for f in FIELDS:
        out[f] = sum(it.field_hits[f] / it.field_totals[f] for it in items if it.field_totals[f]) / n
    return out


def _score_items(problem: Problem, ids: list[str], catalog: Catalog, similarity: TitleSimilarity,
                 task: str) -> tuple[list[ItemCheck], dict[str, float]]:
    """Items that name a known product, position by position (product: the first id only)."""
    expected = problem.reward[:1] if task == "product" else problem.reward
    items = []
    for i, exp in enumerate(expected):
        product = catalog.get(ids[i]) if i < len(ids) else None
        if product is not None:  # ORO skips a missing or unknown id: it adds nothing
            items.append(check_item(product, exp, similarity))
    return items, _field_means(items, len(expected))


def _failure(ids: list[str], reason: str, components: dict[str, float] | None = None) -> ScoreResult:
    return ScoreResult(False, 0.0, 0.0, ids, [], reason, components or {})


def score_recommendation(
    problem: Problem,
    recommended: list[str] | None,
    catalog: Catalog,
    similarity: TitleSimilarity | None = None,
    *,
    no_ids_reason: str = "no_recommendation",
) -> ScoreResult:
    similarity = similarity or LexicalTitleSimilarity()
    task = problem.category.lower()
    if task not in TASKS:
        return _failure(recommended or [], "unsupported_category")
    if not recommended:
        return _failure([], no_ids_reason)
    if task == "web":
        return score_web(problem, recommended, catalog, similarity)
    items, comp = _score_items(problem, recommended, catalog, similarity, task)
    success = comp["rule"] >= 1
    reason = "ok" if success else ("too_few_products" if len(recommended) < len(problem.reward) and task != "product"
                                   else "item_mismatch")
    scored = [catalog.products[it.product_id] for it in items if it.rule_score > 0]
    if task == "shop":
        comp["shop"] = int(len(scored) == len(problem.reward) and len({p["shop_id"] for p in scored}) == 1)
        if success and not comp["shop"]:
            success, reason = False, "not_one_shop"
    elif task == "voucher":
        met = len(scored) == len(problem.reward) and budget_met(
            sum(p["price"] for p in scored), len({p["shop_id"] for p in scored}), problem.voucher)
        comp["budget"] = int(met)
        if success and not met:
            success, reason = False, "over_budget"
    return ScoreResult(success, comp["gt"], comp["rule"], recommended, items, reason, comp)


def score_web(problem: Problem, ids: list[str], catalog: Catalog, similarity: TitleSimilarity) -> ScoreResult:
    """ShoppingBench's web (knowledge) rule: the first id is the answer; it passes when it is the
    reward product, or its title or description names the key attribute and its title is
    close to the reward's (embedding cosine >= 0.8 there; our similarity at that threshold)."""
    expected = problem.reward[0]
    expected_id = str(expected.get("product_id", ""))
    product = catalog.get(ids[0])
    exact = product is not None and product["product_id"] == expected_id
    kw = str(expected.get("key_attribute") or problem.key_attribute).lower()
    kw_hit = title_hit = int(exact)
    if product is not None and not exact:
        kw_hit = int(bool(kw) and (kw in product["title"].lower() or kw in product["description"].lower()))
        closeness = similarity.similarity(product["title"], str(expected.get("title") or ""))
        title_hit = int(closeness >= WEB_TITLE_THRESHOLD)
    rule = (kw_hit + title_hit) / 2
    gt = int(bool(expected_id) and expected_id in ids[0])  # ShoppingBench tests a substring
    failed = [name for name, hit in (("key_attribute", kw_hit), ("title", title_hit)) if not hit]
    item = ItemCheck(product["product_id"] if product else None, expected_id, exact, kw_hit + title_hit, 2,
                     rule >= 1, failed)
    return ScoreResult(rule >= 1, float(gt), rule, ids, [item], "ok" if rule >= 1 else "item_mismatch",
                       {"gt": gt, "rule": rule, "kw": kw_hit, "title": title_hit})


def score_trace_calls(
    problem: Problem,
    tool_calls: Iterable[tuple[str, Any]],
    catalog: Catalog,
    similarity: TitleSimilarity | None = None,
) -> ScoreResult:
    """Score a trajectory given its (tool name, arguments) calls in order."""
    ids, reason = extract_recommendation(tool_calls)
    return score_recommendation(problem, ids, catalog, similarity, no_ids_reason=reason)
