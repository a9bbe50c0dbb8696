"""A fair scripted shopper: it reads the request and the tool results, never the ground truth.

It is the learnability ceiling of the simulated arena (what a model trained on the arena can
hope to reach) and its careful miners' procedure. One pass over the request:

    parse_request(query)  -> Request: the items (search words, price range, services), the
                             same-shop rule, the budget and voucher; the arena's phrasings
    shop(request)         -> a generator of Actions (tool name, arguments, think); it is sent
                             each tool result and decides from those alone
    FairPolicy            -> the procedure as a stateless chat policy: every call replays the
                             generator over the tool results already in the conversation

The procedure: search each item with its words and its price and service filters, take the
first result whose title carries the item's brand, type and attribute words; items that must share a shop are searched inside the shop of a
candidate for the first item, trying up to three shops; check a voucher basket with
calculate_voucher; recommend; terminate.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from shopdistill_assets.sandbox.search import tokenize
from shopdistill_assets.sandbox.tools import reference_voucher_arguments

OPENERS = ("I'm looking for", "Find me", "Show me", "Can you find", "I need", "Looking for", "Please find",
           "Help me find", "I want to buy", "Search for")
SERVICE_WORDS = (("free shipping", "freeShipping"), ("ships for free", "freeShipping"), ("cash on delivery", "COD"),
                 ("cod available", "COD"), ("lazmall", "official"), ("flash sale", "flashsale"),
                 ("lazflash", "flashsale"))
_NUMBER = r"(\d+(?:\.\d+)?)"
_UPPER = re.compile(rf"\b(?:under|below|less than|cheaper than)\s+{_NUMBER}")
_LOWER = re.compile(rf"\b(?:over|above|more than)\s+{_NUMBER}")
_RANGE = re.compile(rf"\b(?:between|from)\s+{_NUMBER}\s+(?:and|to)\s+{_NUMBER}")
_ITEM_SPLIT = re.compile(r";\s*\(\d+\)\s*")
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
_BACKTICK_NUMBER = r"`" + _NUMBER + r"%?`"
MAX_SHOPS_TRIED = 3


@dataclass(frozen=True)
class ItemSpec:
    text: str                      # the item as the request states it
    head: tuple[str, ...]          # brand and type words
    values: tuple[str, ...] = ()   # attribute values stated ("nylon", "eu:40")
    color: str | None = None
    price: tuple[float | None, float | None] | None = None
    services: tuple[str, ...] = ()

    @property
    def words(self) -> tuple[str, ...]:
        """Search words: brand, type, attribute values, color (the catalog indexes all of them)."""
        return tuple(dict.fromkeys([*self.head, *(w for v in self.values for w in v.split()),
                                    *([self.color] if self.color else [])]))

    def title_words(self) -> set[str]:
        """Words a matching title carries: brand, type and the attribute values (titles list them)."""
        return set(tokenize(" ".join([*self.head, *self.values])))

    def search_arguments(self, shop_id: str | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"q": " ".join(self.words) or self.text[:60], "page": 1}
        if self.price:
            args["price"] = _range(self.price)
        if self.services:
            args["service"] = ",".join(self.services)
        if shop_id:
            args["shop_id"] = shop_id
        return args


@dataclass(frozen=True)
class Request:
    category: str                  # Product | Shop | Voucher (as read from the wording)
    items: tuple[ItemSpec, ...]
    same_shop: bool = False
    budget: float | None = None
    voucher: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    name: str
    arguments: dict[str, Any]
    think: str


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _range(price: tuple[float | None, float | None]) -> str:
    lo, hi = price
    return f"{_num(lo) if lo is not None else ''}-{_num(hi) if hi is not None else ''}"


@lru_cache(maxsize=1)
def _attribute_clauses() -> tuple[re.Pattern, ...]:
    """The marketplace's attribute names (its public schema, as view_product_information shows
    them) make the three ways an attribute is stated parseable."""
    from shopdistill_assets.sandbox.product_types import PRODUCT_TYPES

    keys = sorted({k.replace("_", " ") for _, _, attrs in PRODUCT_TYPES for k in attrs}, key=len, reverse=True)
    key = "(?:" + "|".join(re.escape(k) for k in keys) + ")"
    return (re.compile(rf"with {key} (?P<v>.+)"), re.compile(rf"{key}: (?P<v>.+)"),
            re.compile(rf"having (?P<v>.+) {key}"))


_COLOR = (re.compile(r"in the (?P<c>.+) colour option"), re.compile(r"in (?P<c>.+) color"),
          re.compile(r"color (?P<c>.+)"))
_HEAD = (re.compile(r"an? (?P<noun>.+) from (?P<brand>.+)"), re.compile(r"an? (?P<brand>.+) brand (?P<noun>.+)"),
         re.compile(r"an? (?P<both>.+)"))


def _strip_opener(text: str) -> str:
    for opener in OPENERS:
        if text.startswith(opener + " "):
            return text[len(opener) + 1:]
    return text


def _head(clause: str) -> tuple[str, ...]:
    for pattern in _HEAD:
        if m := pattern.fullmatch(clause):
            words = " ".join(v for v in (m.groupdict().get("brand"), m.groupdict().get("noun"), m.groupdict().get("both"))
                             if v)
            return tuple(words.split())
    return tuple(clause.split())


def _first(patterns: tuple[re.Pattern, ...], clause: str, group: str) -> str | None:
    return next((m.group(group) for p in patterns if (m := p.fullmatch(clause))), None)


def parse_item(text: str) -> ItemSpec:
    """One item's clauses ("a nike running shoes, size: eu:40, under 900 PHP, with COD available")."""
    clauses = [c.strip() for c in text.strip().rstrip(".").lower().split(", ") if c.strip()]
    values, color, price, services = [], None, None, []
    for clause in clauses[1:]:
        if m := _RANGE.search(clause):
            price = (float(m.group(1)), float(m.group(2)))
        elif m := _UPPER.search(clause):
            price = (None, float(m.group(1)))
        elif m := _LOWER.search(clause):
            price = (float(m.group(1)), None)
        elif codes := [code for phrase, code in SERVICE_WORDS if phrase in clause] or (["official"] if "official" in clause else []):
            services += codes
        elif (value := _first(_attribute_clauses(), clause, "v")) is not None:
            values.append(value)
        elif (found := _first(_COLOR, clause, "c")) is not None:
            color = found
        else:
            values.append(clause)
    head = _head(clauses[0]) if clauses else ()
    return ItemSpec(text, head, tuple(values), color, price, tuple(dict.fromkeys(services)))


def _voucher(text: str) -> tuple[float | None, dict[str, Any]]:
    budget = re.search(r"budget is only " + _BACKTICK_NUMBER, text)
    threshold = re.search(r"exceeds " + _BACKTICK_NUMBER, text)
    voucher: dict[str, Any] = {"voucher_type": "shop" if "same shop" in text else "platform",
                               "threshold": float(threshold.group(1)) if threshold else 0.0}
    if fixed := re.search(r"fixed discount of " + _BACKTICK_NUMBER, text):
        voucher.update(discount_type="fixed", face_value=float(fixed.group(1)))
    elif pct := re.search(r"percentage discount of " + _BACKTICK_NUMBER + r" with a cap of " + _BACKTICK_NUMBER, text):
        voucher.update(discount_type="percentage", discount=float(pct.group(1)) / 100, cap=float(pct.group(2)))
    return (float(budget.group(1)) if budget else None), voucher


def parse_request(query: str) -> Request:
    """The arena's phrasings: one item ("Find me a …, …."), or numbered items ("(1) …; (2) …")
    for one shop, or with a budget and a voucher."""
    text = " ".join(query.split()) if "\n" not in query else query.strip()
    start = text.find("(1)")
    if start < 0:
        return Request("Product", (parse_item(_strip_opener(text.split("\n")[0])),))
    body = text[start + 3:]
    end = _SENTENCE_END.search(body)
    items = tuple(parse_item(part) for part in _ITEM_SPLIT.split(body[: end.start()] if end else body) if part.strip())
    if "budget" in text and "voucher" in text:
        budget, voucher = _voucher(text[start:])
        return Request("Voucher", items, same_shop=voucher["voucher_type"] == "shop", budget=budget, voucher=voucher)
    return Request("Shop", items, same_shop=True)


# -- the procedure ------------------------------------------------------------------------

def _results(result: Any) -> list[dict[str, Any]]:
    return [r for r in result if isinstance(r, dict) and r.get("product_id")] if isinstance(result, list) else []


def matching(results: list[dict[str, Any]], item: ItemSpec) -> list[dict[str, Any]]:
    """Results whose title carries the item's brand, type and attribute values, in result order."""
    need = item.title_words()
    return [r for r in results if need <= set(tokenize(str(r.get("title", ""))))]


def _choose(results: list[dict[str, Any]], item: ItemSpec) -> dict[str, Any] | None:
    """The best-ranked result that matches (the search ranks by every stated word, color included)."""
    good = matching(results, item)
    return good[0] if good else None


def _cite(product: dict[str, Any]) -> str:
    return f"{product['product_id']} at {_num(float(product.get('price') or 0))} PHP"


def _search_think(request: Request, index: int, shop_id: str | None = None) -> str:
    item = f"item {index + 1} of {len(request.items)}" if len(request.items) > 1 else "the request"
    return f"Searching {item}{f' in shop {shop_id}' if shop_id else ''} with its words and filters."


def _pick_think(picks: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> str:
    """Cite each pick; compare the first with the runner-up of its search (the judge's gate 5)."""
    chosen, results = picks[0]
    other = next((r for r in results if r.get("product_id") != chosen["product_id"]), None)
    parts = [f"{_cite(chosen)} matches" + (f", better than {_cite(other)}" if other else "")]
    parts += [f"{_cite(p)} matches" for p, _ in picks[1:]]
    return "; ".join(parts) + "."


def _basket(request: Request, shop_id: str | None, first: tuple | None):
    """Search the items not yet picked (inside `shop_id` when set); (pick, its results) per item,
    or None when an item has no matching result."""
    picks = [first] if first else []
    for index in range(len(picks), len(request.items)):
        item = request.items[index]
        think = _search_think(request, index, shop_id)
        results = _results((yield Action("find_product", item.search_arguments(shop_id), think)))
        chosen = _choose(results, item)
        if chosen is None:
            return None
        picks.append((chosen, results))
    return picks


def shop(request: Request) -> Generator[Action, Any, None]:
    """The procedure; `send` it each tool result. It ends after `terminate`."""
    picks = None
    if request.same_shop and len(request.items) > 1:
        first = request.items[0]
        results = _results((yield Action("find_product", first.search_arguments(), _search_think(request, 0))))
        tried: set[str] = set()
        for candidate in matching(results, first) or results[:1]:
            if len(tried) >= MAX_SHOPS_TRIED or candidate.get("shop_id") in tried:
                continue
            tried.add(candidate.get("shop_id"))
            picks = yield from _basket(request, str(candidate.get("shop_id")), (candidate, results))
            if picks:
                break
    else:
        picks = yield from _basket(request, None, None)
    if not picks:
        yield Action("terminate", {"status": "failure"}, "No product matches every requirement; ending.")
        return
    ids = ",".join(str(p["product_id"]) for p, _ in picks)
    if request.budget is not None and request.voucher.get("discount_type"):
        prices = [float(p.get("price") or 0) for p, _ in picks]
        yield Action("calculate_voucher", reference_voucher_arguments(prices, request.voucher, request.budget),
                     f"Basket {ids}: checking the total against the budget of {_num(request.budget)} PHP.")
    yield Action("recommend_product", {"product_ids": ids}, _pick_think(picks))
    yield Action("terminate", {"status": "success"}, "Recommended; done.")
