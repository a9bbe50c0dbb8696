"""The ShoppingBench tools as OpenAI function schemas: the single source for the sandbox, the
normalizer's `tools` column, the format gate (which checks arguments against these limits) and
the policies under evaluation."""

from __future__ import annotations

from typing import Any

SORT_OPTIONS = ["priceasc", "pricedesc", "order", "default"]
_SERVICE = "official|freeShipping|COD|flashsale|default"


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required,
                           "additionalProperties": False},
        },
    }


_STR = {"type": "string"}
_IDS = {"type": "string", "description": "Comma-separated product ids (digit strings), e.g. \"123,456\"."}

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    t["function"]["name"]: t
    for t in (
        _tool(
            "find_product",
            "Search for products; returns up to 10 products a page, each with product_id, shop_id, title, "
            "price, service and sold_count.",
            {
                "q": {"type": "string", "minLength": 1, "description": "Search keywords, e.g. \"nike shoes\"."},
                "page": {"type": "integer", "minimum": 1, "maximum": 5, "description": "Result page, 1 to 5."},
                "shop_id": {"type": "string", "description": "Only products of this shop."},
                "price": {"type": "string", "pattern": r"^\d*(\.\d+)?-\d*(\.\d+)?$",
                          "description": 'Price range "lo-hi", e.g. "0-100", "1000-".'},
                "sort": {"type": "string", "enum": SORT_OPTIONS, "description": "Result order."},
                "service": {"type": "string", "pattern": rf"^({_SERVICE})(,({_SERVICE}))*$",
                            "description": "Comma-joined services: official, freeShipping, COD, flashsale, default."},
            },
            ["q", "page"],
        ),
        _tool("view_product_information",
              "Fetch descriptions, SKU options, attributes, price and shop of the given products.",
              {"product_ids": _IDS}, ["product_ids"]),
        _tool("recommend_product",
              "Recommend the products to the user, in the order the request lists them; use it exactly once.",
              {"product_ids": _IDS}, ["product_ids"]),
        _tool("terminate", "End the dialogue and declare the task's completion status.",
              {"status": {"type": "string", "enum": ["success", "failure"]}}, ["status"]),
        _tool(
            "calculate_voucher",
            "Compute a basket's total before and after a voucher, from the catalog prices of the products.",
            {
                "product_ids": _IDS,
                "voucher_type": {"type": "string", "enum": ["platform", "shop"]},
                "threshold": {"type": "number", "minimum": 0},
                "discount_type": {"type": "string", "enum": ["fixed", "percentage"]},
                "face_value": {"type": "number", "minimum": 0},
                "discount": {"type": "number", "minimum": 0, "description": "Percentage as a fraction (0.14) or percent (14)."},
                "cap": {"type": "number", "minimum": 0},
            },
            ["product_ids", "threshold", "discount_type"],
        ),
        _tool("python_execute",
              "Evaluate an arithmetic expression (numbers, + - * / // % **, parentheses, min, max, round, abs, sum). "
              "Nothing else runs.",
              {"code": _STR}, ["code"]),
        _tool("web_search", "Search the web for information.",
              {"q": {"type": "string", "minLength": 1}, "max_results": {"type": "integer", "minimum": 1, "maximum": 20}},
              ["q"]),
        _tool("check_product_match",
              "Check a product against requirements (a JSON object of attribute requirements).",
              {"product_id": _STR, "requirements": _STR}, ["product_id", "requirements"]),
        _tool("find_products_in_same_shop",
              "Find several products all sold by one shop (product_queries: JSON array of {q, price?, service?}).",
              {"product_queries": _STR}, ["product_queries"]),
    )
}

# The tools the sandbox serves to a policy under evaluation.
SANDBOX_TOOLS = ["find_product", "view_product_information", "recommend_product", "terminate",
                 "calculate_voucher", "python_execute"]


def tool_schemas(names: list[str] | None = None) -> list[dict[str, Any]]:
    return [TOOL_SCHEMAS[n] for n in (names or SANDBOX_TOOLS) if n in TOOL_SCHEMAS]
