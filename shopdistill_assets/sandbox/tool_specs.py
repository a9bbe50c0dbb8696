"""The ShoppingBench tools as OpenAI function schemas: the single source for the sandbox,
the normalizer's `tools` column, the format gate and the served policies."""

from __future__ import annotations

from typing import Any

SORT_OPTIONS = ["priceasc", "pricedesc", "order", "default"]
SERVICE_OPTIONS = ["official", "freeShipping", "COD", "flashsale", "default"]


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


_IDS = {"type": "string", "description": "Comma-separated product ids, e.g. \"123,456\"."}

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "find_product": _fn(
        "find_product",
        "Search for products and return up to 10 products, each with product_id, shop_id, title, price, service and sold_count.",
        {
            "q": {"type": "string", "description": "The search query, e.g. \"nike shoes\"."},
            "page": {"type": "integer", "description": "Result page, 1 to 5."},
            "shop_id": {"type": "string", "description": "Search only within this shop."},
            "price": {"type": "string", "description": "Price range \"lo-hi\", e.g. \"0-100\", \"1000-\"."},
            "sort": {"type": "string", "enum": SORT_OPTIONS, "description": "Result order."},
            "service": {"type": "string", "description": "Comma-joined services: " + ", ".join(SERVICE_OPTIONS)},
        },
        ["q", "page"],
    ),
    "view_product_information": _fn(
        "view_product_information",
        "View the full information of products: attributes, sku options, description, price, shop.",
        {"product_ids": _IDS},
        ["product_ids"],
    ),
    "recommend_product": _fn(
        "recommend_product",
        "Recommend products to the user, in the order the request lists them. Only the last call counts.",
        {"product_ids": _IDS},
        ["product_ids"],
    ),
    "terminate": _fn(
        "terminate",
        "End the task.",
        {"status": {"type": "string", "enum": ["success", "failure"]}},
        ["status"],
    ),
    "calculate_voucher": _fn(
        "calculate_voucher",
        "Compute a basket's total before and after a voucher.",
        {
            "product_ids": _IDS,
            "voucher_type": {"type": "string", "enum": ["platform", "shop"]},
            "threshold": {"type": "number"},
            "discount_type": {"type": "string", "enum": ["fixed", "percentage"]},
            "face_value": {"type": "number"},
            "discount": {"type": "number", "description": "Percentage as a fraction (0.14) or percent (14)."},
            "cap": {"type": "number"},
        },
        ["product_ids", "threshold", "discount_type"],
    ),
    "python_execute": _fn(
        "python_execute",
        "Evaluate an arithmetic expression (numbers, + - * / // % **, parentheses, min, max, round, abs, sum). Nothing else runs.",
        {"code": {"type": "string"}},
        ["code"],
    ),
    "web_search": _fn("web_search", "Search the web.", {"query": {"type": "string"}}, ["query"]),
    "check_product_match": _fn(
        "check_product_match",
        "Check whether a product matches a requirement.",
        {"product_id": {"type": "string"}, "requirement": {"type": "string"}},
        ["product_id"],
    ),
    "find_products_in_same_shop": _fn(
        "find_products_in_same_shop",
        "Search within one shop for products.",
        {"shop_id": {"type": "string"}, "q": {"type": "string"}},
        ["shop_id", "q"],
    ),
}

# The tools the sandbox serves to a policy under evaluation.
SANDBOX_TOOLS = ["find_product", "view_product_information", "recommend_product", "terminate",
                 "calculate_voucher", "python_execute"]


def tool_schemas(names: list[str] | None = None) -> list[dict[str, Any]]:
    return [TOOL_SCHEMAS[n] for n in (names or SANDBOX_TOOLS) if n in TOOL_SCHEMAS]
