"""The tools as OpenAI function schemas: the single source for the sandbox, the normalizer's
`tools` column, the format gate (which checks arguments against these types) and the policies
under evaluation.

They describe the real tools, as the validator runs them: ORO's reference agent
(src/agent/agent.py: find_product, view_product_information, recommend_product, terminate,
check_product_match, find_products_in_same_shop, calculate_voucher) over ORO's search server
(src/search_engine/server.py), and ShoppingBench's python_execute and web_search. `required`
lists the parameters without a default there (find_product's `page` defaults to 1, terminate's
`status` to "success"). A `type` is what the tool takes: catalogue parameters travel as query
text, so a string parameter also takes a number and `page` a string of digits (see
corpus/gates.py); a list of types means the tool takes either. Enums, ranges and patterns tell
the model what works; the server ignores what it does not understand (an unknown service or
sort, a page outside 1..5 gives no products), so the format gate does not reject on them.
"""

from __future__ import annotations

from typing import Any

SORT_OPTIONS = ["priceasc", "pricedesc", "order", "default"]


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
_NUMBER = {"type": "number", "minimum": 0}

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    t["function"]["name"]: t
    for t in (
        _tool(
            "find_product",
            "Search for products; returns up to 10 products a page, each with product_id, shop_id, title, "
            "price, service and sold_count.",
            {
                "q": {"type": "string", "minLength": 1, "description": "Search keywords, e.g. \"nike shoes\"."},
                "page": {"type": "integer", "minimum": 1, "maximum": 5, "description": "Result page, 1 to 5 (default 1)."},
                "shop_id": {"type": "string", "description": "Only products of this shop."},
                "price": {"type": "string", "description": 'Price range "lo-hi", e.g. "0-100", "1000-".'},
                "sort": {"type": "string", "enum": SORT_OPTIONS, "description": "Result order (default: relevance)."},
                "service": {"type": "string",
                            "description": "Comma-joined services: official, freeShipping, COD, flashsale, default."},
            },
            ["q"],
        ),
        _tool("view_product_information",
              "Fetch the product_id, short description, description, SKU options and attributes of the given "
              "products (unknown ids are skipped).",
              {"product_ids": _IDS}, ["product_ids"]),
        _tool("recommend_product",
              "Recommend the products to the user, in the order the request lists them; use it exactly once.",
              {"product_ids": _IDS}, ["product_ids"]),
        _tool("terminate", "End the dialogue and declare the task's completion status (default success).",
              {"status": {"type": "string", "enum": ["success", "failure"]}}, []),
        _tool(
            "calculate_voucher",
            "Compute a basket's total before and after a voucher, and whether it fits the budget.",
            {
                "product_prices": {"type": "string", "description": 'Comma-separated prices, e.g. "100,50,75".'},
                "voucher_type": {"type": "string", "enum": ["fixed", "percentage"]},
                "discount_value": {**_NUMBER, "description": "The amount off (fixed) or the percent off (percentage)."},
                "threshold": {**_NUMBER, "description": "The basket total from which the voucher applies."},
                "budget": {**_NUMBER, "description": "The most the user will pay."},
                "cap": {**_NUMBER, "description": "The most a percentage voucher takes off (0: no cap)."},
            },
            ["product_prices", "voucher_type", "discount_value", "threshold", "budget"],
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
              {"product_id": _STR, "requirements": {"type": ["string", "object"]}}, ["product_id", "requirements"]),
        _tool("find_products_in_same_shop",
              "Find several products all sold by one shop (product_queries: JSON array of {q, price?, service?}).",
              {"product_queries": {"type": ["string", "array"]}}, ["product_queries"]),
    )
}

# The tools the sandbox serves to a policy under evaluation.
SANDBOX_TOOLS = ["find_product", "view_product_information", "recommend_product", "terminate",
                 "calculate_voucher", "python_execute"]


def tool_schemas(names: list[str] | None = None) -> list[dict[str, Any]]:
    return [TOOL_SCHEMAS[n] for n in (names or SANDBOX_TOOLS) if n in TOOL_SCHEMAS]
