"""The product catalog, in ShoppingBench's `documents.jsonl.gz` shape (contract section 4b).

One loader serves the real catalog (~2.5M products) and the simulator's. Products are kept as
plain dicts in the `product` shape; fields are coerced to the types the tools and the scorer
rely on, because even the real catalog has nulls and strings where numbers belong.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

SERVICES = ("official", "freeShipping", "COD", "flashsale")


def _as_str(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _as_float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return 0.0
    return out if out == out else 0.0  # NaN -> 0


def _as_int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return 0


def _lower_pairs(mapping: Any) -> dict[str, Any]:
    return mapping if isinstance(mapping, dict) else {}


def clean_product(raw: dict[str, Any]) -> dict[str, Any]:
    """Coerce one `product` record to the types the sandbox relies on (keys/values lower-cased
    in `sku_options` and `attributes`, as the real catalog stores them)."""
    skus: dict[str, dict[str, str]] = {}
    for sku_key, option in _lower_pairs(raw.get("sku_options")).items():
        if isinstance(option, dict):
            skus[_as_str(sku_key)] = {_as_str(k).lower(): _as_str(v).lower() for k, v in option.items()}
    attributes: dict[str, list[str]] = {}
    for key, values in _lower_pairs(raw.get("attributes")).items():
        vals = values if isinstance(values, list) else [values]
        attributes[_as_str(key).lower()] = [_as_str(v).lower() for v in vals if v is not None]
    service = raw.get("service")
    return {
        "product_id": _as_str(raw.get("product_id")),
        "shop_id": _as_str(raw.get("shop_id")),
        "brand": _as_str(raw.get("brand")),
        "category": _as_str(raw.get("category")),
        "title": _as_str(raw.get("title")),
        "short_description": _as_str(raw.get("short_description")),
        "description": _as_str(raw.get("description")),
        "specification": _as_str(raw.get("specification")),
        "price": _as_float(raw.get("price")),
        "sold_count": _as_int(raw.get("sold_count")),
        "sku_options": skus,
        "attributes": attributes,
        "service": [s for s in service if isinstance(s, str)] if isinstance(service, list) else [],
    }


def document_contents(product: dict[str, Any]) -> str:
    """The searchable text, as ShoppingBench builds it: title, sku values, attribute values."""
    sku_values = [v for option in product["sku_options"].values() for v in option.values()]
    attr_values = [v for values in product["attributes"].values() for v in values]
    return "\n".join([product["title"], " ".join(sku_values), " ".join(attr_values)])


@dataclass
class Catalog:
    """Products by id, with a shop index. Read-only once built."""

    products: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_products(cls, products: Iterable[dict[str, Any]]) -> Catalog:
        catalog = cls()
        for raw in products:
            product = clean_product(raw)
            if product["product_id"]:
                catalog.products[product["product_id"]] = product
        return catalog

    def __len__(self) -> int:
        return len(self.products)

    def get(self, product_id: str) -> dict[str, Any] | None:
        return self.products.get(product_id)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.products.values())


def iter_documents(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the `product` of each line of a documents file (.jsonl.gz or .jsonl)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            doc = orjson.loads(line)
            product = doc.get("product") if isinstance(doc, dict) else None
            if isinstance(product, dict):
                if not product.get("product_id") and doc.get("id"):
                    product = {**product, "product_id": doc["id"]}
                yield product


def load_catalog(path: str | Path) -> Catalog:
    """Load a catalog: a documents file, or a folder holding `documents.jsonl.gz`."""
    path = Path(path)
    if path.is_dir():
        path = path / "documents.jsonl.gz"
    if not path.exists():
        raise FileNotFoundError(f"no catalog at {path} (expected ShoppingBench documents.jsonl.gz)")
    return Catalog.from_products(iter_documents(path))


def write_catalog(products: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write products in the documents shape, byte-deterministically (gzip mtime 0)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    for raw in products:
        product = clean_product(raw)
        doc = {"id": product["product_id"], "contents": document_contents(product), "product": product}
        buf.write(orjson.dumps(doc) + b"\n")
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue())
    return path
