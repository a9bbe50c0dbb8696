"""Leak guard recall: one problem phrased with its constraints in either word order must land in
one leak cluster, and different problems must stay apart.

Constraints of every kind (ratings, prices: bounds and ranges, quantities, shipping, payment)
are generated from templates that put the comparator and the unit before the number ("rating at
least 4.5", "under 500 pesos") or after it ("with at least 4.5 rating", "500 pesos or less"),
for many values. Measured: recall (every phrasing of a problem in one cluster) and over-merge
(a cluster holding two different problems), on generated problems and on the 900 real
ShoppingBench test problems rephrased. Run with `pytest -s` to see the figures.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import shoppingbench_queries

from shopdistill_assets.core.canonical import canonical_tokens
from shopdistill_assets.split.leak_clusters import LeakIndex, ProblemRef

SB_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "shoppingbench"

# (templates with the cue before the number, templates with the cue after it, values)
CONSTRAINTS: dict[str, tuple[list[str], list[str], list]] = {
    "rating": (
        ["rating at least {v}", "rated at least {v} stars", "a rating of {v} or higher", "minimum rating of {v}",
         "with a star rating of at least {v}", "rated {v} stars and up", "with ratings above {v}"],
        ["with at least {v} rating", "{v}+ stars", "at least a {v}-star rating", "{v} stars or more",
         "{v} star rating or better", "with {v} or more stars", "{v} stars minimum"],
        [3, 3.5, 4, 4.5],
    ),
    "price_max": (
        ["under {v} pesos", "below PHP {v}", "priced at most {v} php", "no more than ₱{v}",
         "with a price under {v} pesos", "costing less than {v} PHP", "for a maximum of {v} pesos"],
        ["{v} pesos or less", "{v} php max", "costing {v} pesos or below", "at {v} pesos maximum",
         "{v} PHP and under", "₱{v} at most", "{v} pesos tops"],
        [150, 450, 1200, 4000],
    ),
    "price_min": (
        ["above {v} pesos", "over {v} PHP", "at least {v} php", "priced no less than {v} pesos",
         "costing more than ₱{v}", "with a minimum price of {v} pesos", "priced higher than {v} PHP"],
        ["{v} pesos or more", "from {v} pesos up", "{v} php minimum", "{v}+ pesos", "{v} pesos and above",
         "₱{v} and up", "{v} PHP or higher"],
        [150, 450, 1200, 4000],
    ),
    "price_range": (
        ["between {lo} and {hi} pesos", "from {lo} to {hi} php", "priced {lo}-{hi} PHP",
         "with a price between ₱{lo} and ₱{hi}", "priced from {lo} to {hi} pesos"],
        ["{lo} to {hi} pesos", "in the {lo}-{hi} peso range", "{lo}-{hi} php", "₱{lo} to ₱{hi}",
         "{lo} pesos minimum and {hi} pesos maximum"],
        [(100, 300), (450, 900), (1200, 2500), (4000, 9000)],
    ),
    "quantity": (
        ["pack of {v}", "set of {v}", "bundle of {v}", "quantity of {v}", "a pack of {v} pieces"],
        ["{v}-pack", "{v} pieces", "{v} pcs", "{v}-piece set", "{v} per pack"],
        [2, 6, 12, 24, 50],
    ),
    "shipping": (
        ["with free shipping", "offering free delivery", "free of charge shipping", "with free shipping included"],
        ["that ships free", "where shipping is free", "with shipping free of charge", "delivered for free",
         "with no shipping fee", "with shipping at no cost"],
        [None],
    ),
    "payment": (
        ["with cash on delivery", "with COD available", "pay on delivery", "with cash-on-delivery payment"],
        ["payable upon delivery", "with payment by cash on delivery", "paid in cash upon delivery",
         "accepting payment on delivery", "with payment via COD", "with delivery and cash payment"],
        [None],
    ),
}
PRICE_KINDS = ("price_max", "price_min", "price_range")

NOUNS = """canvas tote bag|rubber wheel|waist bag|crash cymbal|chili powder|denim jeans|wireless earbuds|phone case|
desk lamp|rice cooker|electric kettle|yoga mat|hiking backpack|ceramic mug|water bottle|running shoes|leather wallet|
baby stroller|gaming mouse|mechanical keyboard|bluetooth speaker|air fryer|bed sheet|wall clock|car charger|
face serum|hair dryer|coffee grinder|kitchen knife|camping tent|fishing rod|sunglasses|wrist watch|umbrella|
pressure cooker|table fan|office chair|notebook|paint brush|garden hose|dog leash|baking tray|shower head|
flash drive|pillow case|toothbrush|lunch box|rain boots|bike helmet|cutting board""".replace("\n", "").split("|")
ATTRS = {
    "color": (["red", "blue", "black", "white", "green", "pink", "navy", "gray"], ["in {x}", "{x} colored", "with a {x} color"]),
    "material": (["cotton", "leather", "bamboo", "silicone", "wool", "glass", "stainless steel"],
                 ["made of {x}", "{x} material", "in {x}"]),
    "brand": (["nike", "sakura", "xiaomi", "philips", "tefal", "baseus", "anker", "realme"],
              ["from {x}", "by {x}", "from the brand {x}"]),
}
FILLERS = ["I'm looking for", "Show me", "Can you find", "Find", "I need", "Looking for", "Please find me"]


def clause(kind: str, value, order: str, rng: random.Random) -> str:
    pre, post, _ = CONSTRAINTS[kind]
    template = rng.choice(pre if order == "pre" else post)
    if kind == "price_range":
        return template.format(lo=value[0], hi=value[1])
    return template.format(v=f"{value:g}" if isinstance(value, float) else value)


def latent_problems(n: int, seed: int) -> list[dict]:
    """Distinct problems: a noun, one or two attributes, one to three constraints (one price at most)."""
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        kinds = rng.sample(["rating", rng.choice(PRICE_KINDS), "quantity", "shipping", "payment"], rng.choice([1, 2, 3]))
        constraints = tuple(sorted((k, rng.choice(CONSTRAINTS[k][2])) for k in kinds))
        attrs = tuple(sorted((a, rng.choice(ATTRS[a][0])) for a in rng.sample(sorted(ATTRS), rng.choice([1, 2]))))
        key = (rng.choice(NOUNS), attrs, constraints)
        if key not in seen:
            seen.add(key)
            out.append({"noun": key[0], "attrs": attrs, "constraints": constraints})
    return out


def render(problem: dict, orders: dict[str, str], rng: random.Random) -> str:
    parts = [rng.choice(ATTRS[a][1]).format(x=x) for a, x in problem["attrs"]]
    parts += [clause(k, v, orders[k], rng) for k, v in problem["constraints"]]
    rng.shuffle(parts)
    joined = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + rng.choice([", and ", " and ", ", "]) + parts[-1]
    return f"{rng.choice(FILLERS)} a {problem['noun']} {joined}{rng.choice(['.', '?', ''])}"


def variants(problem: dict, rng: random.Random) -> list[str]:
    """All cues before, all after, and two mixes."""
    kinds = [k for k, _ in problem["constraints"]]
    mixes = [dict.fromkeys(kinds, "pre"), dict.fromkeys(kinds, "post")]
    mixes += [{k: rng.choice(["pre", "post"]) for k in kinds} for _ in range(2)]
    return [render(problem, orders, rng) for orders in mixes]


def recall_and_over_merge(index: LeakIndex, latent_of: dict[str, int]) -> tuple[float, float, int]:
    clusters_of, latents_in = defaultdict(set), defaultdict(set)
    for row in index.assignments():
        latent = latent_of[row["problem_id"]]
        clusters_of[latent].add(row["leak_cluster_id"])
        latents_in[row["leak_cluster_id"]].add(latent)
    recall = sum(len(c) == 1 for c in clusters_of.values()) / len(clusters_of)
    over = sum(any(len(latents_in[c]) > 1 for c in cs) for cs in clusters_of.values()) / len(clusters_of)
    return recall, over, max(len(v) for v in latents_in.values())


# ---------------------------------------------------------------- one constraint, every phrasing


@pytest.mark.parametrize("kind", sorted(CONSTRAINTS))
def test_every_phrasing_of_a_constraint_gives_one_bag(kind):
    pre, post, values = CONSTRAINTS[kind]
    bags_by_value = {}
    for value in values:
        bags = defaultdict(list)
        for template in pre + post:
            text = clause(kind, value, "pre" if template in pre else "post", _Fixed(template))
            for frame in ("Find a canvas tote bag {c}.", "Show me {c} canvas tote bags", "canvas tote bag, {c}"):
                bags[canonical_tokens(frame.format(c=text))].append(frame.format(c=text))
        assert len(bags) == 1, f"{kind}={value}: {len(bags)} bags:\n" + "\n".join(
            f"  {sorted(bag)} <- {texts[0]!r}" for bag, texts in bags.items())
        [bag] = bags
        assert {"canva", "tote", "bag"} < bag and len(bag) > 3, bag  # the constraint left a token
        bags_by_value[value] = bag
    if len(values) > 1:  # values far apart stay apart (coarse bands may join near ones)
        first, last = bags_by_value[values[0]], bags_by_value[values[-1]]
        assert first != last, (kind, first)


# Phrasings written after the reader was built, to measure how it generalizes: each against the
# plain phrasing of the same constraint. (Before tuning: 36 of 40 matched; "pack with 12 pieces"
# still does not: "with" is not glue, on purpose.)
OTHER_PHRASINGS = {
    "rating at least 4.5": ["with a minimum 4.5-star rating", "4.5 stars and above", "not lower than 4.5 stars",
                            "rating no less than 4.5", "having 4.5 stars or higher", "at least 4.5 stars"],
    "under 450 pesos": ["costing at most ₱450", "a max price of 450 php", "450 php or cheaper",
                        "not exceeding 450 pesos", "within 450 pesos", "up to 450 pesos", "priced 450 php or lower",
                        "under ₱450"],
    "above 450 pesos": ["starting at 450 pesos", "no lower than ₱450", "450 pesos and over", "greater than 450 php",
                        "priced upwards of 450 pesos", "a minimum of 450 php"],
    "between 450 and 900 pesos": ["from ₱450 up to ₱900", "450 php - 900 php", "ranging from 450 to 900 pesos",
                                  "priced anywhere between 450 and 900 php", "between 450 php and 900 php"],
    "pack of 12": ["12 units", "pack with 12 pieces", "12 pcs per pack", "12 pieces in a set", "sold in packs of 12"],
    "with free shipping": ["free shipping available", "shipping included for free", "no delivery fee",
                           "that is delivered free of charge", "shipping costs waived"],
    "with cash on delivery": ["cash upon delivery", "payment upon arrival", "COD payment accepted",
                              "pay cash when delivered", "payment on arrival"],
}


def test_other_phrasings_mostly_agree():
    frame = "Find a canvas tote bag {c}"
    checked = [(ref, other, canonical_tokens(frame.format(c=ref)) == canonical_tokens(frame.format(c=other)))
               for ref, others in OTHER_PHRASINGS.items() for other in others]
    agree = sum(ok for _, _, ok in checked) / len(checked)
    print(f"\n[other phrasings] {sum(ok for *_, ok in checked)}/{len(checked)} agree ({agree:.3f}); misses: "
          + "; ".join(f"{o!r} vs {r!r}" for r, o, ok in checked if not ok))
    assert agree >= 0.95


class _Fixed(random.Random):
    """A Random whose choice() returns one given template."""

    def __init__(self, template: str) -> None:
        super().__init__(0)
        self.template = template

    def choice(self, seq):  # noqa: D102
        return self.template if self.template in seq else super().choice(seq)


# ---------------------------------------------------------------- generated problems, clustered


def test_generated_problems_in_both_orders_cluster_together_and_apart():
    rng = random.Random(21)
    latents = latent_problems(600, seed=4)
    index, latent_of, per_kind = LeakIndex.new(), {}, defaultdict(set)
    for day in range(2):  # the phrasings arrive over two days
        refs = []
        for i, problem in enumerate(latents):
            for v, text in enumerate(variants(problem, rng)):
                if v % 2 == day:
                    pid = f"g{i}-{v}"
                    latent_of[pid] = i
                    refs.append(ProblemRef(pid, text))
            for kind, _ in problem["constraints"]:
                per_kind[kind].add(i)
        index.add_day(f"2026-06-0{day + 1}", refs)
    recall, over, largest = recall_and_over_merge(index, latent_of)
    clusters_of = defaultdict(set)
    for row in index.assignments():
        clusters_of[latent_of[row["problem_id"]]].add(row["leak_cluster_id"])
    by_kind = {k: sum(len(clusters_of[i]) == 1 for i in ids) / len(ids) for k, ids in sorted(per_kind.items())}
    print(f"\n[generated] problems={len(latents)} phrasings={len(latent_of)} recall={recall:.4f} "
          f"over_merge={over:.4f} largest_cluster_problems={largest}")
    print("[generated] recall by constraint kind: " + ", ".join(f"{k} {v:.3f}" for k, v in by_kind.items()))
    assert recall >= 0.99 and min(by_kind.values()) >= 0.98
    assert over <= 0.05 and largest <= 3


# ---------------------------------------------------------------- the 900 real ShoppingBench problems


_CUR = r"(?:PHP|php|pesos?)"
# Real phrasings (cue before the number) and rewrites with the cue after it, or another before it.
_REWRITES = [
    (rf"(?:priced|costs?|costing|(?:with )?a price|price) (?:above|over|more than) (\d+) {_CUR}",
     ["{0} pesos or more", "{0} php and up", "{0}+ pesos", "₱{0} minimum", "at least {0} php", "{0} PHP or higher"]),
    (rf"(?:priced|costs?|costing|(?:with )?a price|price) (?:below|under|less than) (\d+) {_CUR}",
     ["{0} pesos or less", "{0} php max", "₱{0} at most", "under {0} pesos", "{0} PHP and under"]),
    (rf"(?:priced|costs?|costing|(?:with )?a price|price(?: range)?) (?:between|from|of|ranging from) (\d+) (?:and|to) (\d+)(?: {_CUR})?",
     ["{0} to {1} pesos", "in the {0}-{1} peso range", "₱{0} to ₱{1}", "between {0} and {1} php", "{0}-{1} php"]),
    (r"(?:with|offering|that (?:comes?|offers?) with) free shipping",
     ["that ships free", "where shipping is free", "with no shipping fee", "delivered for free"]),
    (r"(?:with|offering|and) cash on delivery", ["payable upon delivery", "with payment by cash on delivery",
                                                 "with COD payment", "paid in cash upon delivery"]),
]


def rephrase(query: str, rng: random.Random) -> tuple[str, int]:
    """(a rephrasing, how many constraints it rewrote): constraints in the other word order,
    another lead-in, case and final punctuation; voucher rules stay as they are."""
    head, sep, tail = query.partition("\n\n")
    changed = 0
    for pattern, choices in _REWRITES:
        head, n = re.subn(pattern, lambda m: rng.choice(choices).format(*m.groups()), head, flags=re.I)
        changed += n
    head = re.sub(r"^(I'm looking for|Looking for|Show me|Find|Can you find|I need)\b",
                  lambda m: rng.choice(["Show me", "Can you find", "I'm looking for", "Please find"]), head, count=1)
    if rng.random() < 0.3:
        head = head.lower()
    return head.rstrip(".?!") + rng.choice(["", ".", "!"]) + sep + tail, changed


def test_real_problems_rephrased_in_the_other_order_rejoin_and_stay_apart():
    real = shoppingbench_queries()
    rng = random.Random(5)
    index = LeakIndex.new()
    index.add_day("2026-04-01", [ProblemRef(pid, q) for pid, q in real])
    first = {r["problem_id"]: r["leak_cluster_id"] for r in index.assignments()}
    sizes = defaultdict(int)
    for cluster in first.values():
        sizes[cluster] += 1
    shared = sum(1 for c in first.values() if sizes[c] > 1) / len(real)
    rephrased = {pid: rephrase(q, rng) for pid, q in real}
    rewritten = [pid for pid, (_, n) in rephrased.items() if n]
    update = index.add_day("2026-04-02", [ProblemRef(f"re:{pid}", text) for pid, (text, _) in rephrased.items()])
    second = {r["problem_id"]: r["leak_cluster_id"] for r in update.assignments}
    hits = {pid: second[f"re:{pid}"] == first[pid] for pid, _ in real}
    recall = sum(hits[p] for p in rewritten) / len(rewritten)
    misses = [(dict(real)[p], rephrased[p][0]) for p in rewritten if not hits[p]][:4]
    print(f"\n[shoppingbench] problems={len(real)} in_shared_clusters={shared:.4f} rephrased_constraints="
          f"{len(rewritten)} recall={recall:.4f} merges={len(update.merge_events)}")
    for orig, text in misses:
        print(f"   missed: {orig[:100]!r}\n       as: {text[:100]!r}")
    assert len(rewritten) >= 400, "the rewrites must reach most real constraint phrasings"
    assert shared <= 0.02  # 900 distinct problems stay apart
    assert recall >= 0.97
    assert update.merge_events == []  # a rephrasing joins its own problem, never bridges two


def test_constraint_word_order_examples():
    """The brief's example and its relatives, as readable equalities."""
    same = [
        ("bag rating at least 4.5", "bag with at least 4.5 rating"),
        ("bag under 500 pesos", "bag 500 pesos or less"),
        ("bag above 375 pesos", "bag 375 pesos or more"),
        ("bag priced no higher than 500 php", "bag 500 php max"),
        ("bag pack of 12", "bag 12 pcs"),
        ("bag at least 12 pieces", "bag 12 pieces or more"),
        ("bag with free shipping", "bag, shipping is free"),
        ("bag with cash on delivery", "bag payable on delivery"),
    ]
    for a, b in same:
        assert canonical_tokens(a) == canonical_tokens(b), (a, b, canonical_tokens(a), canonical_tokens(b))
    different = [
        ("bag under 500 pesos", "bag over 500 pesos"), ("bag rating at least 3", "bag rating at least 4.5"),
        ("bag 6 pcs", "bag 24 pcs"), ("bag with free shipping", "bag with cash on delivery"),
        ("bag at least 12 pieces", "bag 12 pieces"),
    ]
    for a, b in different:
        assert canonical_tokens(a) != canonical_tokens(b), (a, b)
    # numbers that are not constraints stay plain: a count, an age, a model number
    assert canonical_tokens("over 50 shades") == {"over", "50", "shade"}
    for text in ("kids aged 8+ building blocks", "B20 cast bronze cymbals", "size 42 running shoes"):
        assert not [t for t in canonical_tokens(text) if "=" in t], text


def test_a_state_saved_by_another_canonicalizer_version_is_replayed_from_the_first_day(monkeypatch):
    """canon-v3 reads constraints differently from canon-v2: a day-1 state saved by v2 must not be
    built on; day 2 replays from day 1 and ends exactly where a fresh replay does."""
    import shopdistill_assets.core.canonical as canonical
    from shopdistill_assets.split.leak_replay import LeakState, build_state

    rng = random.Random(3)
    latents = latent_problems(40, seed=9)
    days = {f"2026-07-0{d + 1}": [ProblemRef(f"s{i}-{d}", variants(p, rng)[d]) for i, p in enumerate(latents)]
            for d in range(2)}
    first, second = sorted(days)
    cfg = LeakIndex.new().cfg
    monkeypatch.setattr(canonical, "CANONICALIZER_VERSION", "canon-v2")
    *_, saved_by_v2, _ = build_state(first, [], days.get, None, cfg, None)
    monkeypatch.undo()
    assert canonical.canonical_version().startswith("canon-v3+")
    saved_by_v2 = LeakState.from_bytes(saved_by_v2.to_bytes())  # as the lake returns it
    _, _, state, replayed = build_state(second, [first], days.get, saved_by_v2, cfg, None)
    assert replayed
    *_, fresh, _ = build_state(second, [first], days.get, None, cfg, None)
    assert state.to_bytes() == fresh.to_bytes()
    *_, saved_by_v3, _ = build_state(first, [], days.get, None, cfg, None)
    assert build_state(second, [first], days.get, saved_by_v3, cfg, None)[3] is False  # same version: built on


@pytest.mark.parametrize("hostile", [
    "9" * 20_000, "9" * 19_990 + "% off", "9" * 19_990 + " php off", "1 - 2 - " * 2_500, "under 5 php or more " * 1_000,
    "cash on delivery free shipping " * 640, "1." * 10_000, "between 1 and " * 1_400, "+" * 20_000,
    "at least at most " * 1_100 + "5", ("4.5 stars " * 2_000)[:20_000],
])
def test_hostile_texts_canonicalize_in_bounded_time(hostile):
    import time

    started = time.monotonic()
    bag = canonical_tokens(hostile)
    assert isinstance(bag, frozenset)
    # ~0.1 s here alone; the generous bound only has to catch the quadratic regex (minutes)
    assert time.monotonic() - started < 10.0, len(hostile)
