"""Canonical, order-free token bags of shopping problems, for leak clustering.

Two phrasings of one problem ("Show me X under 500 pesos, red, cotton" and "Can you find a
cotton X in red below 500 PHP?") must give nearly the same bag, and two different problems
must not. Word shingles fail on reordered paraphrases, so a problem becomes a *set* of
content tokens: filler and template words dropped, light stemming, a few synonyms, and
constraints turned into attribute tokens whatever their word order (`core/constraints.py`:
"rating at least 4.5" and "with at least 4.5 rating" are both `rating_min=4.5`; prices become
`price_max=b5`, bucketed on a coarse log scale, because splitting "under 300" from "under 200"
is the mistake that leaks; quantities `qty=12`; free shipping and cash on delivery services).

Nothing here trusts the text: any str goes in, it is capped in length, nothing is executed.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import asdict, dataclass

from shopdistill_assets.core.constraints import band, extract

# v3: constraints read around each number, in either word order (v2 read only some orders)
CANONICALIZER_VERSION = "canon-v3"


@dataclass(frozen=True)
class CanonConfig:
    # Log-scale bands per decade for money amounts: 2 → bands [100, 316), [316, 1000), …
    price_bands_per_decade: int = 2
    stem: bool = True
    # Longer texts are cut: a problem statement is never this long, a hostile one may be.
    max_chars: int = 20_000


DEFAULT_CANON = CanonConfig()


def canonical_version(cfg: CanonConfig = DEFAULT_CANON) -> str:
    """Version string of the canonicalizer *and* its config: changes when either does."""
    blob = json.dumps(asdict(cfg), sort_keys=True).encode()
    return f"{CANONICALIZER_VERSION}+{hashlib.sha1(blob).hexdigest()[:8]}"


def text_key(query: object) -> str:
    """Exact-duplicate key: NFKC, casefold, punctuation and spacing collapsed."""
    if not isinstance(query, str):
        return ""
    text = unicodedata.normalize("NFKC", query[: DEFAULT_CANON.max_chars]).casefold()
    return " ".join(_KEY_SEPARATORS.sub(" ", text).split())


def canonical_tokens(query: object, cfg: CanonConfig = DEFAULT_CANON) -> frozenset[str]:
    """The order-free bag of a problem text; empty for non-text or content-free input."""
    if not isinstance(query, str):
        return frozenset()
    text = _prepare(query[: cfg.max_chars])
    attrs: set[str] = set()
    has_digit = _DIGIT.search(text) is not None
    for triggers, pattern, emit in _ATTRIBUTE_RULES:  # the voucher rules' fixed phrasings first
        if (has_digit or emit is _voucher_scope) and any(t in text for t in triggers):
            text = pattern.sub(lambda m, emit=emit: _take(m, emit, attrs, cfg), text)
    text = extract(text, attrs, cfg.price_bands_per_decade, _open_ended)
    if has_digit:
        text = _NUM_UNIT.sub(lambda m: f" {_num(m.group(1))}{_UNITS[m.group(2)]} ", text)
    for phrase, replacement in _PHRASES:
        if phrase in text:
            text = text.replace(phrase, replacement)
    if "t shirt" in text:
        text = _T_SHIRT.sub("tshirt", text)
    words: set[str] = set()
    for raw in _words(text):
        word = _SYNONYMS.get(raw, raw)
        if word in _STOPWORDS:
            continue
        word = _stem(word) if cfg.stem else word
        if word and word not in _STOPWORDS:
            words.add(word)
    return frozenset(words | attrs)


# ---------------------------------------------------------------- text preparation

_NON_WORD = re.compile(r"[^\w.]+")
_KEY_SEPARATORS = re.compile(r"[\W_]+")
_DIGIT = re.compile(r"\d")


def _words(text: str) -> list[str]:
    """Word tokens; a dot survives only inside a number (1.7l), not at a sentence end."""
    out = []
    for word in _NON_WORD.sub(" ", text).split():
        if "." in word:
            word = word.strip(".")
            if "." in word and not _DIGIT.search(word):
                out += word.split(".")
                continue
        out.append(word)
    return out


# A number starts where a digit run starts: matching from inside a 20,000-digit run, then
# backtracking over it, made hostile texts quadratic (minutes of regex).
_NUM = r"(?<!\d)(\d+(?:\.\d+)?)"
_CUR = r"(?:php|pesos?)\b"


def _prepare(query: str) -> str:
    text = query.replace("₱", " php ")
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text)
        text = "".join(ch for ch in text if not unicodedata.combining(ch))  # épée → epee
    text = text.casefold().replace("`", " ").replace("’", "'")
    if "'" in text:
        text = _APOSTROPHE.sub("", text)  # women's → women, i'm → i
    if "-" in text:
        text = _HYPHEN.sub(" ", text)  # heavy-duty → heavy duty
    if _DIGIT.search(text):
        text = _THOUSANDS.sub("", text)  # 1,299 → 1299
        text = _LIST_MARKER.sub(" ", text)  # (1) … / "2. " at a line start
    return text


_APOSTROPHE = re.compile(r"'s?\b")
_HYPHEN = re.compile(r"(?<=[a-z])-(?=[a-z])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_LIST_MARKER = re.compile(r"\(\d+\)|^\s*\d+\.\s", re.M)


def _num(raw: str) -> str:
    value = float(raw)
    return str(int(value)) if value.is_integer() else f"{value:g}"


def _take(match: re.Match, emit, attrs: set[str], cfg: CanonConfig) -> str:
    if match.start() and match.string[match.start() - 1].isalnum():
        return match.group(0)  # inside a word or number: not ours
    tokens = emit(match, cfg)
    if tokens is None:  # not a money context after all: leave the text alone
        return match.group(0)
    attrs.update(tokens)
    return " "


# ---------------------------------------------------------------- attribute extraction

def _open_ended(word: str) -> bool:
    """A word that may follow a bare price bound ("under 500 for my mom"); "over 50 shades" is a count."""
    return word in _STOPWORDS and word not in _UNITS


def _money(name: str):
    def emit(m: re.Match, cfg: CanonConfig) -> list[str]:
        return [f"{name}={band(float(m.group('v')), cfg.price_bands_per_decade)}"]

    return emit


def _voucher_scope(m: re.Match, cfg: CanonConfig) -> list[str]:
    return ["voucher_scope=shop" if "shop" in m.group(0) else "voucher_scope=all"]


def _pct(m: re.Match, cfg: CanonConfig) -> list[str]:
    return [f"discount_pct={_num(m.group('v') or m.group('w'))}"]


def _rx(pattern: str) -> re.Pattern:
    return re.compile(pattern.replace("NUM", _NUM).replace("CUR", _CUR))


# The voucher rules of ShoppingBench: (trigger substrings, pattern, emitter). Their numbers are not
# prices, so they go before the constraint reader. A rule runs only when a trigger occurs in the
# text, and every pattern starts with a literal or a digit (no leading \\b: it disables the regex
# engine's prefix scan and costs 10x); the word boundary is checked in `_take` instead.
_ATTRIBUTE_RULES = [
    (("exceed", "spend"),
     _rx(r"(?:total price of the products exceeds|spend(?:ing)? (?:over|more than|at least|above)|"
         r"minimum spend of|min\.? spend(?: of)?)\s*(?:php\s*)?(?P<v>NUM)(?:\s*CUR)?"),
     _money("threshold")),
    (("%",), _rx(r"percentage discount of\s*(?P<v>NUM)\s*%|(?P<w>NUM)\s*%\s*(?:off|discount)\b"), _pct),
    (("cap",), _rx(r"cap(?:ped)?(?: of| at)\s*(?:php\s*)?(?P<v>NUM)(?:\s*CUR)?"), _money("cap")),
    (("discount",), _rx(r"(?:fixed |percentage )?discount of\s*(?:php\s*)?(?P<v>NUM)(?:\s*CUR)?"), _money("discount")),
    (("off",), _rx(r"(?P<v>NUM)\s*(?:CUR\s*)?off\b"), _money("discount")),
    (("voucher",), _rx(r"voucher applies to all products|platform voucher|voucher only applies to the products "
                      r"from the same shop|shop voucher"), _voucher_scope),
]

# ---------------------------------------------------------------- words

# Multi-word synonyms and boilerplate, as plain substring replacements (no regex: fast).
_PHRASES = (
    ("perks like guaranteed authenticity and easy returns", " "),
    ("perks like guaranteed authenticity and quick returns", " "),
    ("laz mall", " service_lazmall "),
    ("official store", " service_lazmall "),
    ("laz flash", " service_lazflash "),
    ("lazflash sale", " service_lazflash "),
    ("flash sale", " service_lazflash "),
    ("flashsale", " service_lazflash "),
)
_T_SHIRT = re.compile(r"\bt shirt")

_UNITS = {
    **dict.fromkeys(["inch", "inches", '"'], "inch"),
    **dict.fromkeys(["cm", "mm", "ml", "g", "kg", "gb", "tb", "mb", "mah", "w", "v", "hz", "oz", "ft"], None),
    **dict.fromkeys(["m", "meter", "meters", "metre", "metres"], "m"),
    **dict.fromkeys(["l", "liter", "liters", "litre", "litres"], "l"),
    **dict.fromkeys(["gram", "grams"], "g"),
    **dict.fromkeys(["kilo", "kilos", "kilogram", "kilograms"], "kg"),
    **dict.fromkeys(["pc", "pcs", "piece", "pieces"], "pc"),
    **dict.fromkeys(["watt", "watts"], "w"),
    **dict.fromkeys(["volt", "volts"], "v"),
    **dict.fromkeys(["feet", "foot"], "ft"),
}
_UNITS = {unit: (canon or unit) for unit, canon in _UNITS.items()}
_NUM_UNIT = re.compile(
    _NUM + r"\s*-?\s*(" + "|".join(sorted(map(re.escape, _UNITS), key=len, reverse=True)) + r")(?![a-z0-9])"
)

_SYNONYMS = {
    "pesos": "php", "peso": "php", "colour": "color", "colours": "color", "colors": "color", "grey": "gray",
    "shops": "shop", "store": "shop", "stores": "shop", "seller": "shop", "sellers": "shop",
    "items": "product", "item": "product", "products": "product",
    "cod": "service_cod", "lazmall": "service_lazmall", "official": "service_lazmall", "lazflash": "service_lazflash",
    "tee": "tshirt", "tees": "tshirt", "tshirts": "tshirt",
}

# Filler, pronouns, request templates and the ShoppingBench voucher / shop-query boilerplate.
# They carry no identity of the problem; keeping them would make distinct problems alike.
_STOPWORDS = frozenset(
    """
    a an the and or but nor of in on at to for from by with into onto as is are was were be been
    being am do does did it its this that these those there here what which who whom whose where when
    i im me my mine we us our you your yours he she they them their his her some any all each every
    both either one ones also too very just only really please kindly thanks thank hi hello
    can could would will shall should may might must want wanted need needs needed like love
    looking look searching search seek seeking find finding found show showing get getting buy buying
    purchase purchasing order ordering help recommend suggest give see browse check lookup
    something anything thing things option options choice choices type kind sort
    product shop offer offering offers offered sell sells selling sold available availability
    come comes coming feature features featuring include includes including provide provides
    preferably prefer preferred ideally maybe perhaps possibly good nice great
    price priced prices pricing cost costs costing php budget
    first second third fourth fifth sixth lastly last finally next another other plus
    additionally moreover furthermore then than so such etc
    voucher following rules rule valid total applies apply same
    should have has having had between made range ranging save brand color material service perk
    accept accepts accepting accepted included anywhere
    """.split()
)


def _stem(word: str) -> str:
    """Light stemming: plural s, then -ing / -ed (springs → spring → spr, running → run).
    Crude on purpose; what matters is that one word form always gives one stem."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeioulsz":
                word = word[:-1]  # running → runn → run
            break
    return word
