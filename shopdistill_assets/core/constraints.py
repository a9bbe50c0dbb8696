"""Constraints of a shopping problem as attribute tokens, whatever the word order.

"rating at least 4.5", "with at least 4.5 rating" and "4.5+ stars" are one constraint; so are
"under 500 pesos", "500 pesos or less" and "₱500 max". A regex per phrasing only catches the
orders someone thought of, and a problem whose twin is phrased the other way lands in another
leak cluster: one could be held out while the other trains. So constraints are read around
each number instead: a comparator right before or right after it (`under`, `at least` /
`or less`, `and up`, `+`), and a kind cue reached from it through glue words only (a currency
or price word, `rating`/`stars`, `pcs`/`pack`/`set of`). Kinds: price (bounds, ranges, plain
amounts; budget), rating, quantity. Shipping and payment services are words, not numbers: a
"free" cue near a shipping cue, or a payment cue near a delivery cue, in either order.

Everything matched is blanked out of the text and replaced by tokens (`price_max=b5`,
`rating_min=4.5`, `qty=12`, `service_cod`); the rest of the text flows on as words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

_DIGIT = re.compile(r"\d")
_TOKEN = re.compile(r"(?P<num>\d+(?:\.\d+)?)|(?P<word>[a-z]+)|(?P<sep>[,;.!?()\[\]\n])|(?P<sym>[+–-])")


class _Tok:
    __slots__ = ("kind", "text", "start", "end", "standalone")

    def __init__(self, kind: str, text: str, start: int, end: int, standalone: bool = True) -> None:
        self.kind = kind  # num | word | sep | sym
        self.text = text
        self.start, self.end = start, end
        self.standalone = standalone  # a number not glued to a word before it ("b20", "g1")


def tokenize(text: str) -> list[_Tok]:
    out = []
    for m in _TOKEN.finditer(text):
        start = m.start()
        kind = m.lastgroup
        glued = kind == "num" and start > 0 and text[start - 1].isalnum()
        out.append(_Tok(kind, m.group(), start, m.end(), not glued))
    return out


def band(value: float, per_decade: int) -> str:
    """Coarse log-scale bucket of a money amount: b{floor(log10(v) * per_decade)}."""
    if value <= 0 or not math.isfinite(value):
        return "b0"
    return f"b{math.floor(math.log10(value) * per_decade + 1e-9)}"


# ---------------------------------------------------------------- lexicons

def _phrases(key: int, **sides: str) -> dict[str, list[tuple[tuple[str, ...], str]]]:
    """(words, side) of every phrase, longest first ("no less than" before "less than"), indexed
    by the word at `key` (the last word of a phrase before the number, the first after it)."""
    out: dict[str, list[tuple[tuple[str, ...], str]]] = {}
    for side, text in sides.items():
        for phrase in text.split("|"):
            words = tuple(phrase.split())
            out.setdefault(words[key], []).append((words, side))
    return {w: sorted(ps, key=lambda x: len(x[0]), reverse=True) for w, ps in out.items()}


_BEFORE = _phrases(
    -1,
    max="under|below|less than|cheaper than|lower than|at most|no more than|not more than|no higher than|"
        "not higher than|no greater than|not over|not above|not exceeding|up to|max|maximum|maximum of|max of|"
        "within|no over",
    min="above|over|more than|higher than|greater than|at least|min|minimum|minimum of|min of|exceeding|"
        "starting at|starting from|no less than|not less than|no lower than|not lower than|not below|not under|"
        "upwards of|in excess of")
_AFTER = _phrases(
    0,
    max="or less|or lower|or below|or under|or cheaper|and below|and under|and less|and lower|max|maximum|"
        "at most|at the most|tops|or fewer|at max",
    min="or more|or higher|or above|or over|or better|or greater|and up|and above|and over|and higher|and more|"
        "plus|+|up|upwards|onwards|minimum|min|at least|or up|at minimum")

_CURRENCY = frozenset({"php", "peso", "pesos"})
_CUES = {
    **dict.fromkeys(["price", "prices", "priced", "pricing", "cost", "costs", "costing", "worth"], "price"),
    **dict.fromkeys(["budget"], "budget"),
    **dict.fromkeys(["rating", "ratings", "rated", "star", "stars"], "rating"),
    **dict.fromkeys(["pcs", "pc", "piece", "pieces", "pack", "packs", "set", "sets", "bundle", "bundles", "unit",
                     "units", "quantity", "qty"], "quantity"),
}
# Words a cue may be separated from its number by ("a pack of 12", "priced at 500", "budget is only 425").
_GLUE = frozenset({"of", "a", "an", "the", "per", "in", "is", "at", "only", "just", "for", "be", "range"})
_RANGE_SEPS = frozenset({"and", "to", "-", "–"})
_KIND_ORDER = {"currency": 0, "budget": 1, "rating": 2, "quantity": 3, "price": 4}
_MAX_REACH = 6


# ---------------------------------------------------------------- reading one constraint


@dataclass
class _Constraint:
    first: int  # token span of the numbers (and the range opener / separator)
    last: int
    values: tuple[float, ...]
    direction: str = ""  # max | min | range | ""
    consumed: set[int] | None = None


def _match_before(toks: list[_Tok], end: int) -> tuple[int, str] | None:
    """(start index, side) of a comparator phrase ending at token `end`, or None."""
    for phrase, side in _BEFORE.get(toks[end].text, ()):
        start = end - len(phrase) + 1
        if start >= 0 and all(toks[start + i].text == w for i, w in enumerate(phrase)):
            return start, side
    return None


def _match_after(toks: list[_Tok], start: int) -> tuple[int, str] | None:
    for phrase, side in _AFTER.get(toks[start].text, ()):
        end = start + len(phrase) - 1
        if end < len(toks) and all(toks[start + i].text == w for i, w in enumerate(phrase)):
            return end, side
    return None


def _passable(tok: _Tok) -> bool:
    return tok.kind == "sym" or (tok.kind == "word" and (tok.text in _GLUE or tok.text in _CURRENCY or tok.text in _CUES))


def _extend(toks: list[_Tok], c: _Constraint, taken: set[int]) -> tuple[list[int], list[int], set[int]]:
    """Walk out from the numbers through glue, currency and cue words, taking at most one
    comparator (before the number if there is one there); return the token indices passed on the
    left and on the right, and those of the comparator."""
    left, right, comparator = [], [], set()
    p = c.first - 1
    while p >= 0 and p not in taken and len(left) < _MAX_REACH:
        start, side = (_match_before(toks, p) or (None, "")) if not c.direction else (None, "")
        if start is not None and not taken & set(range(start, p + 1)):
            c.direction = side
            comparator |= set(range(start, p + 1))
            left += range(p, start - 1, -1)
            p = start - 1
        elif _passable(toks[p]):
            left.append(p)
            p -= 1
        else:
            break
    q = c.last + 1
    while q < len(toks) and q not in taken and len(right) < _MAX_REACH:
        end, side = (_match_after(toks, q) or (None, "")) if not c.direction else (None, "")
        if end is not None and not _number_follows(toks, end):
            c.direction = side
            comparator |= set(range(q, end + 1))
            right += range(q, end + 1)
            q = end + 1
        elif _passable(toks[q]):
            right.append(q)
            q += 1
        else:
            break
    return left, right, comparator


def _number_follows(toks: list[_Tok], end: int) -> bool:
    """ "500 pesos at least 4.5 stars": that "at least" is the next number's."""
    k = end + 1
    while k < len(toks) and toks[k].text in _CURRENCY:
        k += 1
    return k < len(toks) and toks[k].kind == "num"


def _kind(toks: list[_Tok], left: list[int], right: list[int]) -> str | None:
    """The nearest kind cue (a currency beats a price word at the same distance)."""
    best: tuple[int, int, str] | None = None
    for side in (left, right):
        for distance, i in enumerate(side):
            text = toks[i].text
            kind = "currency" if text in _CURRENCY else _CUES.get(text)
            if kind and (best is None or (distance, _KIND_ORDER[kind]) < best[:2]):
                best = (distance, _KIND_ORDER[kind], kind)
    return best[2] if best else None


def _consumed(toks: list[_Tok], side: list[int], kind: str, comparator: set[int]) -> list[int]:
    """The passed tokens up to the farthest one that belongs to this constraint."""
    keep = 0
    for n, i in enumerate(side):
        text = toks[i].text
        mine = i in comparator or text in _CURRENCY or toks[i].kind == "sym"
        mine = mine or (_CUES.get(text) == kind) or (kind == "currency" and _CUES.get(text) in ("price", "budget"))
        if mine:
            keep = n + 1
    return side[:keep]


def _ranges(toks: list[_Tok]) -> list[tuple[int, int, int]]:
    """(opener or lo index, lo index, hi index) of "between A and B", "from A (up) to B", "A-B", "A to B"."""
    out, i = [], 0
    while i < len(toks):
        if toks[i].kind == "num" and toks[i].standalone:
            j = i + 1
            while j < len(toks) and toks[j].text in _CURRENCY:
                j += 1
            sep_end = j + 1 if j + 1 < len(toks) and (toks[j].text, toks[j + 1].text) == ("up", "to") else j
            k = sep_end + 1
            while k < len(toks) and toks[k].text in _CURRENCY:
                k += 1
            is_sep = j < len(toks) and (toks[j].text in _RANGE_SEPS or sep_end > j)
            if is_sep and k < len(toks) and toks[k].kind == "num":
                p = i - 1
                while p >= 0 and toks[p].text in _CURRENCY:
                    p -= 1
                opener = toks[p].text if p >= 0 else ""
                if toks[j].text != "and" or opener == "between":
                    out.append((p if opener in ("between", "from") else i, i, k))
                    i = k + 1
                    continue
        i += 1
    return out


# ---------------------------------------------------------------- emitting


_SUFFIX = {"max": "_max", "min": "_min"}


def _tokens_for(kind: str, c: _Constraint, per_decade: int) -> list[str] | None:
    """Attribute tokens of a constraint of this kind, or None when its values do not fit it."""
    if kind in ("currency", "price", "budget"):
        if any(v <= 0 for v in c.values):
            return None
        bands = [band(v, per_decade) for v in sorted(c.values)]
        if kind == "budget":
            return [f"budget={bands[-1]}"]
        if c.direction == "range":
            return [f"price_min={bands[0]}", f"price_max={bands[1]}"]
        return [f"price{_SUFFIX.get(c.direction, '')}={bands[0]}"]
    if kind == "rating":  # ratings are floors in practice: a bare "4.5 stars" means at least
        if not all(0 < v <= 5 for v in c.values):
            return None
        values = sorted(math.floor(v * 2) / 2 for v in c.values)
        if c.direction == "range":
            return [f"rating_min={values[0]:g}", f"rating_max={values[1]:g}"]
        return [f"rating_{'max' if c.direction == 'max' else 'min'}={values[0]:g}"]
    if kind == "quantity":
        if not all(v.is_integer() and 1 <= v <= 100_000 for v in c.values):
            return None
        values = sorted(int(v) for v in c.values)
        if c.direction == "range":
            return [f"qty_min={values[0]}", f"qty_max={values[1]}"]
        return [f"qty{_SUFFIX.get(c.direction, '')}={values[0]}"]
    return None


def _read(toks: list[_Tok], c: _Constraint, taken: set[int], per_decade: int,
          open_ended: Callable[[str], bool]) -> list[str] | None:
    left, right, comparator = _extend(toks, c, taken)
    inside = [i for i in range(c.first, c.last + 1) if toks[i].text in _CURRENCY]  # "between ₱450 and ₱900"
    kind = "currency" if inside else _kind(toks, left, right)
    if kind is None and c.direction in ("max", "min"):
        after = max(right, default=c.last) + 1
        follow = toks[after] if after < len(toks) else None
        if follow is None or follow.kind == "sep" or (follow.kind == "word" and open_ended(follow.text)):
            kind = "price"  # "under 500": a bare bound is a price unless a word after it says otherwise
    emitted = _tokens_for(kind, c, per_decade) if kind else None
    if emitted:
        c.consumed = set(range(c.first, c.last + 1))
        c.consumed |= set(_consumed(toks, left, kind, comparator)) | set(_consumed(toks, right, kind, comparator))
    return emitted


def extract(text: str, attrs: set[str], per_decade: int, open_ended: Callable[[str], bool]) -> str:
    """The constraints of `text` into `attrs`; the text with their words blanked out."""
    services = any(w in text for w in _SERVICE_HINTS)
    numbers = _DIGIT.search(text) is not None
    if not services and not numbers:
        return text
    if services:
        for pattern, repl in _SERVICE_REWRITES:
            text = pattern.sub(repl, text)
    toks = tokenize(text)
    taken = _services(toks, attrs) if services else set()
    if numbers:
        taken |= _numeric(toks, taken, attrs, per_decade, open_ended)
    return _blank(text, toks, taken)


def _numeric(toks: list[_Tok], taken: set[int], attrs: set[str], per_decade: int,
             open_ended: Callable[[str], bool]) -> set[int]:
    """Price, rating and quantity constraints; the token indices they used."""
    taken = set(taken)
    units: list[_Constraint] = []
    for opener, lo, hi in _ranges(toks):
        units.append(_Constraint(opener, hi, (float(toks[lo].text), float(toks[hi].text)), "range"))
    in_range = {i for u in units for i in range(u.first, u.last + 1)}
    units += [_Constraint(i, i, (float(t.text),)) for i, t in enumerate(toks)
              if t.kind == "num" and t.standalone and i not in in_range]
    units.sort(key=lambda u: u.first)
    for unit in units:
        if taken & set(range(unit.first, unit.last + 1)):
            continue
        emitted = _read(toks, unit, taken, per_decade, open_ended)
        if emitted:
            attrs.update(emitted)
            taken |= unit.consumed
    return taken


def _blank(text: str, toks: list[_Tok], taken: set[int]) -> str:
    if not taken:
        return text
    pieces, pos = [], 0
    for i in sorted(taken):
        pieces += [text[pos : toks[i].start], " "]
        pos = toks[i].end
    pieces.append(text[pos:])
    return "".join(pieces)


# ---------------------------------------------------------------- shipping and payment

_SERVICE_REWRITES = (
    (re.compile(r"\bfree of (?:any )?charges?\b|\bat no (?:extra |additional )?(?:cost|charge)\b|\bfor free\b"), " free "),
    (re.compile(r"\b(?:no|zero|without(?: any)?)\s+(shipping|delivery)\s+(?:fees?|costs?|charges?)\b"), r" free \1 "),
    (re.compile(r"\b(shipping|delivery)\s+(?:fees?|costs?|charges?)\s+(?:waived|free)\b"), r" free \1 "),
)
_SHIP = frozenset({"shipping", "ship", "ships", "shipped", "delivery", "delivered", "deliver"})
_PAY = frozenset({"cash", "pay", "paying", "payment", "payments", "payable", "paid"})
_ARRIVAL = frozenset({"delivery", "delivered", "deliver", "arrival"})
_SERVICE_GLUE = frozenset({"on", "upon", "at", "in", "by", "via", "with", "and", "when", "is", "are", "the", "of",
                           "that", "where", "should", "be", "it", "its", "for", "a", "-", "included"})
_SERVICE_REACH = 3
_SERVICE_HINTS = ("ship", "deliver", "cod", "pay", "cash", "arrival")


def _services(toks: list[_Tok], attrs: set[str]) -> set[int]:
    """Cash on delivery and free shipping, in either order; the token indices they used."""
    taken: set[int] = set()
    for i, tok in enumerate(toks):
        if tok.text == "cod":
            attrs.add("service_cod")
            taken |= {i} | _near(toks, i, _PAY)
        elif tok.text in _PAY and (arrival := _near(toks, i, _ARRIVAL)):
            attrs.add("service_cod")
            taken |= {i} | arrival | _near(toks, i, _PAY)
    for i, tok in enumerate(toks):
        if tok.text == "free" and i not in taken and (ship := _near(toks, i, _SHIP) - taken):
            attrs.add("service_free_shipping")
            taken |= {i} | ship
    return _with_glue(toks, taken)


def _near(toks: list[_Tok], i: int, words: frozenset[str]) -> set[int]:
    """Indices of `words` reachable from i through service glue, within the same clause."""
    found = set()
    for step in (-1, 1):
        j, n = i + step, 0
        while 0 <= j < len(toks) and n < _SERVICE_REACH and toks[j].kind != "sep":
            if toks[j].text in words:
                found.add(j)
            elif toks[j].text not in _SERVICE_GLUE and toks[j].text not in _PAY and toks[j].text not in _SHIP:
                break
            j, n = j + step, n + 1
    return found


def _with_glue(toks: list[_Tok], taken: set[int]) -> set[int]:
    """Also blank the glue between two blanked words ("cash on delivery": the "on")."""
    out = set(taken)
    ordered = sorted(taken)
    for a, b in zip(ordered, ordered[1:]):
        if b - a <= _SERVICE_REACH and all(toks[k].text in _SERVICE_GLUE for k in range(a + 1, b)):
            out |= set(range(a + 1, b))
    return out
