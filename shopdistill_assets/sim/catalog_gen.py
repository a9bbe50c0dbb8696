"""A generated product catalog in ShoppingBench's documents shape.

Product types carry their own attribute keys and values; brands, sku colours, prices and
services are drawn so that every problem the generator states has a product that satisfies it
and look-alike products that do not.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from shopdistill_assets.sandbox.product_types import PRODUCT_TYPES

BRANDS = ["hosport", "philips", "arborea", "hyco", "sakura", "speed", "tefal", "xiaomi", "anker", "baseus",
          "nike", "adidas", "deli", "hanabishi", "imarflex", "kyowa", "psph beauty", "ugreen", "remax", "joyroom",
          "lenovo", "logitech", "zebra", "uniqlo", "monoprice", "lumina", "kaiser", "orion", "vertex", "norden"]
ADJECTIVES = ["premium", "portable", "classic", "durable", "lightweight", "original", "heavy duty", "compact",
              "professional", "deluxe", "basic", "new"]
COLORS = ["black", "white", "silver", "blue", "red", "green", "pink", "grey", "04", "a2"]
SERVICES = ["official", "freeShipping", "COD", "flashsale"]


@dataclass(frozen=True)
class CatalogSpec:
    n_products: int = 4000
    n_shops: int = 300


def _product_id(rng: random.Random, used: set[str]) -> str:
    while True:
        pid = str(rng.randrange(1_000_000_000, 9_999_999_999))
        if pid not in used:
            used.add(pid)
            return pid


def generate_catalog(rng: random.Random, spec: CatalogSpec = CatalogSpec()) -> list[dict[str, Any]]:
    """Products spread over types, brands and shops. Each shop sells several types, so a Shop
    problem (items of different types from one shop) always has an answer."""
    shops = [str(3_000_000 + i * 7919) for i in range(spec.n_shops)]
    used: set[str] = set()
    products: list[dict[str, Any]] = []
    for i in range(spec.n_products):
        noun, base, attr_space = PRODUCT_TYPES[i % len(PRODUCT_TYPES)]
        brand = rng.choice(BRANDS)
        attributes = {key: [rng.choice(values)] for key, values in attr_space.items()}
        attributes["brand"] = [brand]
        colors = rng.sample(COLORS, rng.randint(1, 3))
        price = round(base * rng.lognormvariate(0, 0.35), 0)
        adjective = rng.choice(ADJECTIVES)
        detail = " ".join(v[0] for k, v in sorted(attributes.items()) if k != "brand")
        title = f"{brand.title()} {adjective} {noun} {detail}"
        products.append({
            "product_id": _product_id(rng, used),
            "shop_id": shops[(i * 31 + rng.randrange(4)) % spec.n_shops],
            "brand": brand,
            "category": f"Home & Living > {noun.title()}",
            "title": title,
            "short_description": f"{adjective} {noun} by {brand}",
            "description": f"{title}. {adjective.capitalize()} {noun} from {brand}, ships nationwide.",
            "specification": "",
            "price": max(price, 19.0),
            "sold_count": int(rng.paretovariate(1.2) * 10),
            "sku_options": {str(k + 1): {"color_family": c} for k, c in enumerate(colors)},
            "attributes": attributes,
            "service": sorted(rng.sample(SERVICES, rng.randint(0, 3)), key=SERVICES.index),
        })
    return products
