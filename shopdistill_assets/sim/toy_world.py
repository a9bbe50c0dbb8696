"""A small, self-consistent world (catalog + Product/Shop/Voucher problems) for tests and
benchmarks of the evaluation, until the simulator's suites replace it.

Every problem's reward ids pass the validator's rules in this catalog (checked on build), and
each target hides among same-type, same-brand distractors that fail a price, brand or shop
rule, so guessing rarely succeeds.
"""

from __future__ import annotations

import random

from shopdistill_assets.sandbox.catalog import Catalog
from shopdistill_assets.sandbox.problems import Problem
from shopdistill_assets.sandbox.scorer import score_recommendation, voucher_total

TYPES = ["waist bag", "electric kettle", "running shoes", "wireless earbuds", "yoga mat", "backpack",
         "desk lamp", "water bottle", "phone case", "rice cooker"]
BRANDS = ["hosport", "philips", "nike", "xiaomi", "deli", "tupperware"]
COLORS = ["black", "white", "red", "blue"]
SERVICES = ["official", "freeShipping", "COD", "flashsale"]


def _catalog(rng: random.Random, n_shops: int) -> list[dict]:
    products = []
    pid = 5035600000
    for type_ in TYPES:
        for brand in BRANDS:
            for color in COLORS:
                pid += rng.randint(1, 97)
                price = float(rng.randint(100, 3000))
                products.append({
                    "product_id": str(pid), "shop_id": f"s{rng.randrange(n_shops)}", "brand": brand,
                    "title": f"{brand} {type_} {color}", "price": price, "sold_count": rng.randint(0, 5000),
                    "service": rng.sample(SERVICES, rng.randint(0, 2)),
                    "attributes": {"brand": [brand], "color": [color]}, "sku_options": {"1": {"color": color}},
                    "description": f"A {color} {type_} by {brand}.",
                })
    return products


def _item(p: dict) -> dict:
    return {"product_id": p["product_id"], "title": [p["title"]], "attributes": [{"brand": [p["brand"]]}]}


def _product_problem(p: dict) -> dict:
    lo, hi = int(p["price"] * 0.97), int(p["price"] * 1.03) + 1
    type_ = p["title"].split(" ", 1)[1].rsplit(" ", 1)[0]
    color = p["attributes"]["color"][0]
    reward = {**_item(p), "price": [{"between": [lo, hi]}], "sku_options": [{"color": color}]}
    return {"query": f"Find a {color} {p['brand']} brand {type_} priced between {lo} and {hi} PHP.",
            "category": "Product", "reward": reward}


def _shop_problem(a: dict, b: dict) -> dict:
    return {"query": f"I want a {a['title']} and a {b['title']}, both from the same shop.",
            "category": "Shop", "reward": [_item(a), _item(b)]}


def _voucher_problem(a: dict, b: dict, rng: random.Random) -> dict:
    subtotal = a["price"] + b["price"]
    voucher = {"voucher_type": "platform", "threshold": float(int(subtotal * 0.8)), "discount_type": "fixed",
               "face_value": float(rng.choice([50, 100, 150])), "discount": None, "cap": None}
    after = voucher_total([a["price"], b["price"]], [a["shop_id"], b["shop_id"]], voucher)
    voucher["price_after_voucher"] = after
    voucher["budget"] = float(int(after) + 10)
    return {"query": (f"I need a {a['title']} and a {b['title']}. My budget is {voucher['budget']:.0f} PHP and I have "
                      f"a platform voucher: spend over {voucher['threshold']:.0f}, get {voucher['face_value']:.0f} off."),
            "category": "Voucher", "reward": [_item(a), _item(b)], "voucher": voucher}


def toy_world(seed: int = 0, n_problems: int = 21, n_shops: int = 12) -> tuple[Catalog, list[Problem]]:
    """A catalog of 240 products and `n_problems` problems, a third of each category."""
    rng = random.Random(seed)
    raw = _catalog(rng, n_shops)
    catalog = Catalog.from_products(raw)
    by_shop: dict[str, list[dict]] = {}
    for p in catalog:
        by_shop.setdefault(p["shop_id"], []).append(p)
    shops = sorted(s for s, ps in by_shop.items() if len(ps) >= 2)
    raws: list[dict] = []
    queries: set[str] = set()
    while len(raws) < n_problems:
        kind = len(raws) % 3
        if kind == 0:
            raws.append(_product_problem(rng.choice(list(catalog))))
        elif kind == 1:
            a, b = rng.sample(by_shop[rng.choice(shops)], 2)
            raws.append(_shop_problem(a, b))
        else:
            a, b = rng.sample(list(catalog), 2)
            raws.append(_voucher_problem(a, b, rng))
        if raws[-1]["query"] in queries:  # a repeated draw: ids come from the query text
            raws.pop()
        else:
            queries.add(raws[-1]["query"])
    problems = [Problem.from_dict(r) for r in raws]
    for problem in problems:  # the world must be solvable by its own ground truth
        ids = [item["product_id"] for item in problem.reward]
        assert score_recommendation(problem, ids, catalog).success, problem.query
    return catalog, problems
