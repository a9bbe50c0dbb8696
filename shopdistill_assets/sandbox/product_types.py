"""The simulated marketplace's product types: each type's attribute keys and values (its public
schema, as `view_product_information` shows them). The catalogue generator draws products from
them; the fair policy reads the attribute names to parse a request."""

from __future__ import annotations

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
