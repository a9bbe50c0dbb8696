"""Latent problems and their phrasings.

A *latent* problem is one shopping task (reward items, rules, voucher); the subnet asks it on
several days in different words: paraphrased openers and synonyms, attribute clauses
reordered. Every variant has its own `problem_id` and query text and the same ground truth, so
a leak guard must put them in one cluster.
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass
from typing import Any

from shopdistill_assets.sandbox.problems import Problem
from shopdistill_assets.sandbox.scorer import check_item
from shopdistill_assets.sandbox.similarity import LexicalTitleSimilarity

_NS = uuid.UUID("0f5c2d7a-8b1e-4c3d-9a6f-2e7b5d4c1a90")
_SIMILARITY = LexicalTitleSimilarity()

OPENERS = ["I'm looking for", "Find me", "Show me", "Can you find", "I need", "Looking for", "Please find",
           "Help me find", "I want to buy", "Search for"]
UNDER = ["under {hi} PHP", "below {hi} pesos", "less than {hi} php", "priced under {hi} PHP", "cheaper than {hi} pesos"]
OVER = ["over {lo} PHP", "above {lo} pesos", "more than {lo} php", "priced above {lo} PHP"]
BETWEEN = ["between {lo} and {hi} PHP", "from {lo} to {hi} pesos", "priced between {lo} and {hi} php"]
SERVICE_PHRASES = {
    "freeShipping": ["with free shipping", "that ships for free"],
    "COD": ["with cash on delivery", "with COD available"],
    "official": ["from a LazMall official store", "sold by an official LazMall store"],
    "flashsale": ["on flash sale", "in a LazFlash sale"],
}
SHOP_OPENERS = ["Find a shop that offers these items:", "Looking for a shop that sells these items:",
                "Which store has all of these items:", "I need one shop that sells these items:"]
SHOP_CLOSERS = ["The shop should sell all these products.", "All of them must come from the same shop.",
                "They must all be sold by one shop."]


@dataclass(frozen=True)
class LatentProblem:
    latent_id: str
    category: str
    difficulty: str
    items: tuple[dict[str, Any], ...]  # reward items, in order
    item_clauses: tuple[tuple[tuple[str, Any], ...], ...]  # per item: (kind, data) clauses
    voucher: dict[str, Any] | None
    n_variants: int

    def variant(self, index: int) -> Problem:
        """The index-th phrasing: a deterministic function of (latent problem, index)."""
        rng = random.Random(f"{self.latent_id}:{index}")
        if self.category == "Product":
            query = _render_item(rng, self.item_clauses[0], opener=True) + "."
        else:
            parts = [f"({i + 1}) {_render_item(rng, c, opener=False)}" for i, c in enumerate(self.item_clauses)]
            if self.category == "Shop":
                query = f"{rng.choice(SHOP_OPENERS)} {'; '.join(parts)}. {rng.choice(SHOP_CLOSERS)}"
            else:
                query = f"{rng.choice(OPENERS)} these items: {'; '.join(parts)}.\n\n{_voucher_text(self.voucher)}"
        raw = {
            "problem_id": str(uuid.uuid5(_NS, f"{self.latent_id}:{index}")),
            "query": query,
            "category": self.category,
            "difficulty": self.difficulty,
            "title": f"{self.category} {self.latent_id[-6:]}",
            "reward": self.items[0] if self.category == "Product" else list(self.items),
        }
        if self.voucher:
            raw["voucher"] = self.voucher
        return Problem.from_dict(raw)


def _render_item(rng: random.Random, clauses: tuple[tuple[str, Any], ...], opener: bool) -> str:
    head = None
    rest: list[str] = []
    for kind, data in clauses:
        if kind == "head":
            brand, noun = data
            head = rng.choice([f"a {brand} {noun}", f"a {noun} from {brand}", f"a {brand} brand {noun}"])
        elif kind == "attr":
            key, value = data
            words = key.replace("_", " ")
            rest.append(rng.choice([f"with {words} {value}", f"{words}: {value}", f"having {value} {words}"]))
        elif kind == "color":
            rest.append(rng.choice([f"in {data} color", f"color {data}", f"in the {data} colour option"]))
        elif kind == "price":
            mode, lo, hi = data
            pool = {"less than": UNDER, "greater than": OVER, "between": BETWEEN}[mode]
            rest.append(rng.choice(pool).format(lo=lo, hi=hi))
        elif kind == "service":
            rest.append(rng.choice(SERVICE_PHRASES[data]))
    rng.shuffle(rest)  # attribute clauses in another order
    text = ", ".join([head or "a product", *rest])
    return f"{rng.choice(OPENERS)} {text}" if opener else text


def _voucher_text(v: dict[str, Any] | None) -> str:
    if not v:
        return ""
    scope = ("The voucher applies to all products." if v["voucher_type"] == "platform"
             else "The voucher only applies to the products from the same shop.")
    if v["discount_type"] == "fixed":
        rule = f"It provides a fixed discount of `{v['face_value']}`."
    else:
        rule = f"It provides a percentage discount of `{round(v['discount'] * 100)}%` with a cap of `{v['cap']}`."
    return (f"My budget is only `{v['budget']}`, but I have a voucher with the following rules:\n1. {scope}\n"
            f"2. It is valid only when the total price of the products exceeds `{v['threshold']}`.\n3. {rule}")


def _item(rng: random.Random, product: dict[str, Any], n_rules: int) -> tuple[dict[str, Any], tuple]:
    """A reward item for `product` with up to n_rules checks, and the clauses that state it."""
    noun = product["category"].split(" > ")[-1].lower()
    brand = product["attributes"]["brand"][0]
    reward: dict[str, Any] = {"product_id": product["product_id"], "title": [product["title"]],
                              "attributes": [{"brand": [brand]}]}
    clauses: list[tuple[str, Any]] = [("head", (brand, noun))]
    kinds = ["attr", "color", "price", "service"]
    rng.shuffle(kinds)
    for kind in kinds[:n_rules]:
        if kind == "attr":
            key = rng.choice(sorted(k for k in product["attributes"] if k != "brand"))
            reward["attributes"].append({key: list(product["attributes"][key])})
            clauses.append(("attr", (key, product["attributes"][key][0])))
        elif kind == "color":
            color = rng.choice(sorted(o["color_family"] for o in product["sku_options"].values()))
            reward["sku_options"] = [{"color_family": color}]
            clauses.append(("color", color))
        elif kind == "price":
            price = product["price"]
            mode = rng.choice(["less than", "greater than", "between"])
            lo = int(math.floor(price * rng.uniform(0.5, 0.9)))
            hi = int(math.ceil(price * rng.uniform(1.1, 1.6)))
            bounds = {"less than": [None, hi], "greater than": [lo, None], "between": [lo, hi]}[mode]
            reward["price"] = [{mode: bounds}]
            clauses.append(("price", (mode, lo, hi)))
        elif kind == "service" and product["service"]:
            serv = rng.choice(product["service"])
            reward["service"] = [serv]
            clauses.append(("service", serv))
    return reward, tuple(clauses)


def states(product: dict[str, Any], clauses: tuple[tuple[str, Any], ...]) -> bool:
    """Does `product` satisfy every clause the request states (what a shopper can check)?"""
    for kind, data in clauses:
        if kind == "head":
            brand, noun = data
            if product["attributes"]["brand"][0] != brand or product["category"].split(" > ")[-1].lower() != noun:
                return False
        elif kind == "attr" and data[1] not in product["attributes"].get(data[0], []):
            return False
        elif kind == "color" and data not in {o["color_family"] for o in product["sku_options"].values()}:
            return False
        elif kind == "price":
            mode, lo, hi = data
            price = product["price"]
            if (mode != "greater than" and price > hi) or (mode != "less than" and price < lo):
                return False
        elif kind == "service" and data not in product["service"]:
            return False
    return True


def _identifiable(reward: dict[str, Any], clauses: tuple, product: dict[str, Any],
                  same_type: list[dict[str, Any]]) -> tuple[dict[str, Any], tuple]:
    """Learnable in principle: every product that satisfies the stated clauses must pass the
    item's checks (title similarity included), or the request cannot be solved from the tool
    results. While a look-alike would fail them, state one more of the target's attributes."""
    def lookalike_fails(reward, clauses) -> bool:
        return any(states(p, clauses) and not check_item(p, reward, _SIMILARITY).passed for p in same_type)

    stated = {data[0] for kind, data in clauses if kind == "attr"}
    for key in sorted(k for k in product["attributes"] if k != "brand" and k not in stated):
        if not lookalike_fails(reward, clauses):
            break
        reward = {**reward, "attributes": [*reward["attributes"], {key: list(product["attributes"][key])}]}
        clauses = (*clauses, ("attr", (key, product["attributes"][key][0])))
    return reward, clauses


def _voucher(rng: random.Random, basket: list[dict[str, Any]], shop_voucher: bool) -> dict[str, Any]:
    total = sum(p["price"] for p in basket)
    threshold = rng.randint(int(total * 0.3), int(total * 0.9))
    if rng.random() < 0.5:
        face = rng.randint(max(1, int(threshold * 0.1)), max(2, int(threshold * 0.4)))
        after = total - face
        v = {"discount_type": "fixed", "face_value": face, "discount": None, "cap": None}
    else:
        rate = rng.randint(10, 40) / 100
        cap = rng.randint(max(1, int(threshold * rate)), max(2, threshold))
        after = max(total * (1 - rate), total - cap)
        v = {"discount_type": "percentage", "face_value": None, "discount": rate, "cap": cap}
    budget = int(math.ceil(after + rng.uniform(0, 0.6) * (total - after)))
    return {"voucher_type": "shop" if shop_voucher else "platform", "threshold": threshold, **v,
            "price_after_voucher": round(after, 3), "budget": budget}


def generate_latent_problems(rng: random.Random, products: list[dict[str, Any]], n: int,
                             mix: tuple[float, float, float] = (0.5, 0.25, 0.25)) -> list[LatentProblem]:
    by_shop: dict[str, list[dict[str, Any]]] = {}
    by_type: dict[str, list[dict[str, Any]]] = {}
    for p in products:
        by_shop.setdefault(p["shop_id"], []).append(p)
        by_type.setdefault(p["category"], []).append(p)
    multi_type_shops = sorted(s for s, ps in by_shop.items() if len({p["category"] for p in ps}) >= 3)
    used_targets: set[str] = set()
    latent: list[LatentProblem] = []
    for i in range(n):
        category = rng.choices(["Product", "Shop", "Voucher"], weights=mix)[0]
        difficulty = rng.choice(["easy", "medium", "hard"])
        n_rules = {"easy": 1, "medium": 2, "hard": 3}[difficulty]
        if category == "Product":
            target = rng.choice(products)
            while target["product_id"] in used_targets and len(used_targets) < len(products):
                target = rng.choice(products)
            basket = [target]
        else:
            shop = rng.choice(multi_type_shops)
            pool = by_shop[shop] if (category == "Shop" or rng.random() < 0.5) else products
            basket, seen_types = [], set()
            for p in rng.sample(pool, min(len(pool), 8)):
                if p["category"] not in seen_types and len(basket) < rng.choice([2, 3]):
                    basket.append(p)
                    seen_types.add(p["category"])
            if len(basket) < 2:
                basket = by_shop[shop][:2]
        used_targets.update(p["product_id"] for p in basket)
        drawn = [_item(rng, p, n_rules if category == "Product" else max(1, n_rules - 1)) for p in basket]
        items, clauses = zip(*[_identifiable(r, c, p, by_type[p["category"]]) for (r, c), p in zip(drawn, basket)])
        voucher = None
        if category == "Voucher":
            voucher = _voucher(rng, basket, shop_voucher=len({p["shop_id"] for p in basket}) == 1 and rng.random() < 0.5)
        latent.append(LatentProblem(f"lp{i:06d}", category, difficulty, tuple(items), tuple(clauses),
                                    voucher, n_variants=rng.randint(1, 4)))
    return latent
