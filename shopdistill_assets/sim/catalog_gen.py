"""A generated product catalog in ShoppingBench's documents shape.

Product types carry their own attribute keys and values; brands, sku colours, prices and
services are drawn so that every problem the generator states has a product that satisfies it
and look-alike products that do not.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

# type noun, base price (PHP), attribute key -> values
PRODUCT_TYPES: list[tuple[str, float, dict[str, list[str]]]] = [
    ("waist bag", 350, {"material": ["nylon", "polyester", "leather"], "closure": ["zipper", "buckle"]}),
    ("electric kettle", 900, {"capacity": ["1.5l", "1.7l", "2l"], "material": ["stainless steel", "glass", "plastic"]}),
    ("running shoes", 1800, {"size": ["eu:39", "eu:40", "eu:41", "eu:42"], "closure": ["lace-up", "slip-on"]}),
    ("crash cymbal", 2500, {"diameter": ["16 inch", "18 inch"], "material": ["b20 bronze", "brass"]}),
    ("chili powder", 120, {"pack_type": ["single", "bundle"], "packaging_type": ["bag", "bottle"]}),
    ("denim jeans", 700, {"jeans_fit_type": ["baggy fit", "skinny fit", "straight fit"], "waist_type": ["high", "mid"]}),
    ("face toner", 300, {"skin_type": ["oily", "dry", "sensitive"], "volume": ["100ml", "250ml"]}),
    ("pushcart wheel", 450, {"size": ["8 inch", "10 inch", "12 inch"], "material": ["rubber", "polyurethane"]}),
    ("phone case", 150, {"compatible_model": ["a12", "a31", "a5s"], "material": ["silicone", "tpu", "leather"]}),
    ("can opener", 180, {"operation": ["manual", "electric"], "material": ["stainless steel", "plastic"]}),
    ("crayon set", 250, {"type_of_inks": ["oil-based", "wax"], "count": ["24 shades", "50 shades"]}),
    ("rice cooker", 1500, {"capacity": ["1l", "1.8l", "2.2l"], "inner_pot": ["non-stick", "ceramic"]}),
    ("desk lamp", 600, {"light_color": ["warm white", "cool white"], "power_source": ["usb", "plug"]}),
    ("yoga mat", 500, {"thickness": ["6mm", "8mm", "10mm"], "material": ["tpe", "pvc", "rubber"]}),
    ("wireless mouse", 400, {"connectivity": ["bluetooth", "2.4ghz"], "dpi": ["1600 dpi", "3200 dpi"]}),
    ("backpack", 900, {"capacity": ["20l", "30l"], "material": ["nylon", "canvas", "polyester"]}),
    ("water bottle", 300, {"capacity": ["500ml", "750ml", "1l"], "material": ["stainless steel", "tritan"]}),
    ("bluetooth speaker", 1200, {"waterproof_rating": ["ipx5", "ipx7"], "battery": ["10 hours", "20 hours"]}),
    ("hair dryer", 800, {"power": ["1200w", "2000w"], "feature": ["ionic", "foldable"]}),
    ("laptop stand", 700, {"material": ["aluminum", "plastic"], "adjustable": ["yes", "no"]}),
    ("sports socks", 150, {"size": ["free size", "large"], "pack_type": ["3 pairs", "5 pairs"]}),
    ("coffee grinder", 1100, {"operation": ["manual", "electric"], "burr_type": ["ceramic", "steel"]}),
    ("sunscreen lotion", 450, {"spf": ["spf 30", "spf 50"], "skin_type": ["oily", "sensitive"]}),
    ("dog leash", 250, {"length": ["1.5m", "3m", "5m"], "material": ["nylon", "leather"]}),
    ("guitar strings", 350, {"gauge": ["light", "medium"], "material": ["phosphor bronze", "nickel"]}),
    ("wall clock", 500, {"display": ["analog", "digital"], "shape": ["round", "square"]}),
    ("baby wipes", 200, {"pack_type": ["single", "bundle"], "scent": ["unscented", "aloe"]}),
    ("led strip", 350, {"length": ["5m", "10m"], "power_source": ["usb", "plug"]}),
    ("umbrella", 300, {"operation": ["automatic", "manual"], "size": ["compact", "large"]}),
    ("kitchen knife", 650, {"blade_material": ["stainless steel", "ceramic", "damascus"], "length": ["6 inch", "8 inch"]}),
]
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
