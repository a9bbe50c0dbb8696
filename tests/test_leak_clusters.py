"""Leak clustering: canonical bags, clusters over days, side assignment, merge log, decontamination.

Figures (split rate, over-merge rate, shared clusters among the 900 real ShoppingBench test
queries, paraphrase recall) are printed: run with `pytest -s` to see them.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import xxhash
from conftest import shoppingbench_queries
from datasketch import MinHash, MinHashLSH

from shopdistill_assets.core.canonical import CanonConfig, canonical_tokens, canonical_version
from shopdistill_assets.split.decontaminate import PublicQuery, PublicTestSet, match_counts
from shopdistill_assets.split.leak_clusters import (
    BandIndex,
    LeakConfig,
    LeakIndex,
    LeakStateMismatch,
    ProblemRef,
    Signer,
    cluster_id_of,
    jaccard,
)

SHARED = Path(__file__).resolve().parents[2] / "shared"
SB_DIR = SHARED / "data" / "shoppingbench"

# ---------------------------------------------------------------- a generator of latent problems

NOUNS = """rubber wheel|waist bag|crash cymbal|chili powder|denim jeans|wireless earbuds|phone case|
desk lamp|rice cooker|electric kettle|yoga mat|hiking backpack|ceramic mug|steel water bottle|
running shoes|leather wallet|baby stroller|gaming mouse|mechanical keyboard|bluetooth speaker|
air fryer|bed sheet|wall clock|car charger|face serum|hair dryer|coffee grinder|kitchen knife|
camping tent|fishing rod|sunglasses|wrist watch|umbrella|pressure cooker|table fan|office chair|
notebook|paint brush|garden hose|dog leash""".replace("\n", "").split("|")
COLORS = "red blue black white green pink yellow purple orange gray brown navy".split()
MATERIALS = "cotton|leather|stainless steel|plastic|bamboo|silicone|wool|ceramic|glass|canvas".split("|")
BRANDS = "nike sakura hosport xiaomi philips tefal oem baseus anker realme crocs samsung".split()
SIZES = ["12 inch", "1.7 liter", "500 ml", "2 meter", "10 kg", "size XL", "size 42", "32 GB"]
SERVICES = ["free shipping", "cash on delivery", "LazMall service"]
FILLERS = ["I'm looking for", "Show me", "Can you find", "Find", "I need", "Looking for", "Please find me"]
PRICE_PHRASES = {
    "max": ["under {v} pesos", "below {v} PHP", "less than {v} php", "cheaper than ₱{v}", "priced under {v} PHP"],
    "min": ["above {v} pesos", "over {v} PHP", "more than {v} php", "priced above {v} pesos", "costing over {v} PHP"],
    "range": ["between {lo} and {hi} pesos", "from {lo} to {hi} PHP", "priced between {lo} and {hi} php"],
}
CLAUSES = {
    "color": ["in {x}", "{x} colored", "in the color {x}", "with a {x} color"],
    "material": ["made of {x}", "in {x}", "{x} material"],
    "brand": ["from {x}", "by {x}", "from the brand {x}", "{x} brand"],
    "size": ["{x}", "in {x}"],
    "service": ["with {x}", "that comes with {x}", "offering {x}"],
}
POOLS = {"color": COLORS, "material": MATERIALS, "brand": BRANDS, "size": SIZES, "service": SERVICES}


def latent_problems(n: int, seed: int) -> list[dict]:
    """Distinct latent problems: a noun, 2–3 attributes of different kinds, a price constraint."""
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        kinds = sorted(rng.sample(sorted(POOLS), rng.choice([2, 3])))
        attrs = tuple((k, rng.choice(POOLS[k])) for k in kinds)
        kind = rng.choice(["max", "min", "range", "none"])
        lo = rng.choice([60, 150, 450, 1200, 4000])
        price = (kind, lo, lo * 3)
        key = (rng.choice(NOUNS), attrs, kind, lo)
        if key not in seen:
            seen.add(key)
            out.append({"noun": key[0], "attrs": attrs, "price": price})
    return out


def render(problem: dict, rng: random.Random) -> str:
    """One phrasing: filler, attribute clauses reordered and reworded, price synonyms."""
    clauses = [rng.choice(CLAUSES[k]).format(x=x) for k, x in problem["attrs"]]
    kind, lo, hi = problem["price"]
    if kind != "none":
        clauses.append(rng.choice(PRICE_PHRASES[kind]).format(v=lo if kind != "max" else hi, lo=lo, hi=hi))
    rng.shuffle(clauses)
    joined = clauses[0]
    if len(clauses) > 1:
        joined = ", ".join(clauses[:-1]) + rng.choice([", and ", " and ", ", "]) + clauses[-1]
    article = rng.choice(["a ", "some ", "the ", ""])
    text = f"{rng.choice(FILLERS)} {article}{problem['noun']} {joined}{rng.choice(['.', '?', '', '!'])}"
    return text.upper() if rng.random() < 0.1 else text


def cluster_quality(index: LeakIndex, latent_of: dict[str, int]) -> tuple[float, float, int]:
    """(split rate, over-merge rate, largest cluster) against the latent problems."""
    rows = index.assignments()
    clusters_of, latents_in = defaultdict(set), defaultdict(set)
    for row in rows:
        latent = latent_of[row["problem_id"]]
        clusters_of[latent].add(row["leak_cluster_id"])
        latents_in[row["leak_cluster_id"]].add(latent)
    split = sum(len(c) > 1 for c in clusters_of.values()) / len(clusters_of)
    over = sum(any(len(latents_in[c]) > 1 for c in cs) for cs in clusters_of.values()) / len(clusters_of)
    return split, over, max(len(v) for v in latents_in.values())


# ---------------------------------------------------------------- canonicalization


def test_canonical_bags_of_paraphrases_are_equal():
    variants = [
        "I'm looking for a 12 inch heavy-duty rubber wheel for a pushcart under 500 pesos.",
        "Show me heavy duty rubber wheels, 12-inch, for a pushcart, below 500 PHP",
        "Can you find a pushcart rubber wheel (12 inches, heavy duty) less than 500 php?",
        "PLEASE find me a heavy-duty pushcart rubber wheel 12 inch cheaper than ₱500",
    ]
    bags = {canonical_tokens(v) for v in variants}
    assert bags == {frozenset({"12inch", "heavy", "duty", "rubber", "wheel", "pushcart", "price_max=b5"})}


def test_canonical_numbers_become_attributes():
    voucher = (
        "Looking for oil-based crayons.\n\nMy budget is only `425`, but I have a voucher with the following rules:\n"
        "1. The voucher applies to all products.\n2. It is valid only when the total price of the products "
        "exceeds `170`.\n3. It provides a fixed discount of `34`."
    )
    assert canonical_tokens(voucher) == {
        "oil", "bas", "crayon", "budget=b5", "threshold=b4", "discount=b3", "voucher_scope=all"
    }
    assert canonical_tokens("shoes priced between 180 and 505 PHP") == {"shoe", "price_min=b4", "price_max=b5"}
    assert canonical_tokens("a 1.7 liter kettle with 4.5 stars and up") == {"1.7l", "kettle", "rating_min=4.5"}
    # counts and non-price ranges stay plain numbers
    assert canonical_tokens("over 50 shades, usage between 1 and 500") == {"over", "50", "shade", "usage", "1", "500"}
    # "under 300" and "under 200" share a band (coarse on purpose), 300 and 3000 do not
    assert canonical_tokens("bag under 300 pesos") == canonical_tokens("bag under 200 pesos")
    assert canonical_tokens("bag under 300 pesos") != canonical_tokens("bag under 3000 pesos")
    for hostile in (None, 42, "", "!!!", "x" * 100_000):
        assert isinstance(canonical_tokens(hostile), frozenset)


def test_canonical_version_tracks_config():
    assert canonical_version() == canonical_version(CanonConfig())
    assert canonical_version(CanonConfig(price_bands_per_decade=3)) != canonical_version()
    assert canonical_version().startswith("canon-v3+")


def test_signer_equals_datasketch_bulk():
    cfg = LeakConfig()
    bags = [canonical_tokens(render(p, random.Random(i))) for i, p in enumerate(latent_problems(200, seed=5))]
    bags.append(frozenset())
    ours = Signer(cfg).sign(bags)
    theirs = MinHash.bulk([[t.encode() for t in b] for b in bags], num_perm=cfg.num_perm, seed=cfg.seed,
                          scheme=cfg.hash_scheme, hashfunc=xxhash.xxh32_intdigest)
    assert np.array_equal(ours, np.stack([m.hashvalues for m in theirs]))


def test_band_index_finds_what_minhash_lsh_finds():
    """Our numpy band index proposes exactly the candidates MinHashLSH's query-then-insert does."""
    cfg = LeakConfig()
    bags = [canonical_tokens(render(p, random.Random(i))) for i, p in enumerate(latent_problems(400, seed=8))]
    bags = list(dict.fromkeys(b for b in bags if b))
    sigs = Signer(cfg).sign(bags)
    half = len(bags) // 2
    lsh = MinHashLSH(threshold=cfg.lsh_threshold, num_perm=cfg.num_perm)
    bands = BandIndex(cfg.lsh_threshold, cfg.num_perm)
    sketch = [MinHash(num_perm=cfg.num_perm, seed=cfg.seed, scheme=cfg.hash_scheme, hashvalues=row) for row in sigs]
    for i in range(half):
        lsh.insert(i, sketch[i])
    bands.add(bands.band_keys(sigs[:half]), np.arange(half))
    theirs = set()
    for j in range(half, len(bags)):  # query then insert: later texts also meet earlier ones of the batch
        theirs |= {(j, c) for c in lsh.query(sketch[j])}
        lsh.insert(j, sketch[j])
    ours = bands.candidate_pairs(bands.band_keys(sigs[half:]), np.arange(half, len(bags)))
    assert {tuple(p) for p in ours.tolist()} == theirs and len(theirs) > 50


# ---------------------------------------------------------------- clustering on simulated variants


def test_simulated_variants_cluster_together_and_apart():
    rng = random.Random(11)
    latents = latent_problems(400, seed=3)
    index, latent_of = LeakIndex.new(), {}
    for day in range(3):  # variants arrive over three days
        refs = []
        for i, problem in enumerate(latents):
            for v in range(rng.choice([1, 2])):
                pid = f"p{i}-{day}-{v}"
                latent_of[pid] = i
                refs.append(ProblemRef(pid, render(problem, rng)))
        index.add_day(f"2026-03-0{day + 1}", refs)
    split, over, largest = cluster_quality(index, latent_of)
    sides = Counter(index.side.values())
    print(f"\n[simulated] latent={len(latents)} problems={len(latent_of)} clusters={len(index.members)} "
          f"split_rate={split:.4f} over_merge_rate={over:.4f} largest_cluster_latents={largest} sides={dict(sides)}")
    assert split == 0.0
    assert over <= 0.03  # merged latents differ by one attribute in a ~6-token bag (J ≥ 0.7)
    assert largest <= 2
    assert 0.05 <= sides[1] / len(index.members) <= 0.16  # heldout share ≈ 0.10


# ---------------------------------------------------------------- the real ShoppingBench test queries


_LEAD = re.compile(r"^(I'm looking for|Looking for|Show me|Find me|Find|Can you find|I need|I want)\b", re.I)
_PRICE_SWAPS = [
    (r"priced above (\d+) (?:PHP|pesos)", ["costing more than {0} php", "over {0} pesos", "with a price above ₱{0}"]),
    (r"priced between (\d+) and (\d+) (?:PHP|pesos)", ["costing from {0} to {1} php", "between {0} and {1} PHP"]),
    (r"(?:costs?|costing) (?:more than|over) (\d+) (?:PHP|pesos)", ["priced above {0} PHP", "above {0} pesos"]),
    (r"priced from (\d+) to (\d+) (?:PHP|pesos)", ["priced between {0} and {1} pesos", "from {0} to {1} PHP"]),
]


_EXTRA_PHRASES = ["for daily use", "in good condition", "for my home", "original", "for a gift"]


def _lexical_noise(head: str, rng: random.Random) -> str:
    """Real rewrites add or lose a word: append a phrase to the first sentence, or drop a word."""
    words = head.split(" ")
    if rng.random() < 0.5:
        end = next((i for i, w in enumerate(words) if w.endswith((".", "?", "!"))), len(words) - 1)
        words.insert(end + 1, rng.choice(_EXTRA_PHRASES) + words[end][-1:] if words[end][-1:] in ".?!" else "")
        words[end] = words[end].rstrip(".?!")
    else:
        droppable = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
        if droppable:
            del words[rng.choice(droppable)]
    return " ".join(w for w in words if w)


def paraphrase(query: str, rng: random.Random) -> str:
    """Rephrase a real query: other lead-in, price synonyms, reordered clauses, one word added or
    dropped, case/punctuation."""
    head, sep, tail = query.partition("\n\n")  # voucher rules stay as they are
    head = _LEAD.sub(lambda m: rng.choice(["Show me", "Can you find", "I'm looking for", "Please find"]), head, count=1)
    for pattern, choices in _PRICE_SWAPS:
        head = re.sub(pattern, lambda m: rng.choice(choices).format(*m.groups()), head)
    sentences = head.split(". ")
    first = sentences[0].split(", ")
    if len(first) > 2:  # keep the head noun phrase first, shuffle the attribute clauses after it
        rest = first[1:]
        rest[-1] = re.sub(r"^and ", "", rest[-1])
        rng.shuffle(rest)
        sentences[0] = ", ".join([first[0], *rest[:-1]]) + ", and " + rest[-1]
    head = ". ".join(sentences)
    head = _lexical_noise(head, rng)
    if rng.random() < 0.3:
        head = head.lower()
    return head.rstrip(".?!") + rng.choice(["", ".", "!"]) + sep + tail


def test_real_queries_stay_apart_and_paraphrases_rejoin():
    real = shoppingbench_queries()
    rng = random.Random(7)
    index = LeakIndex.new()
    index.add_day("2026-04-01", [ProblemRef(pid, q) for pid, q in real])
    sizes = Counter(r["leak_cluster_id"] for r in index.assignments())
    shared = [r for r in index.assignments() if sizes[r["leak_cluster_id"]] > 1]
    print(f"\n[shoppingbench] queries={len(real)} clusters={len(sizes)} in_shared_clusters={len(shared)} "
          f"({len(shared) / len(real):.2%})")
    for row in shared[:6]:
        print("   shared:", row["leak_cluster_id"], row["query"][:100].replace("\n", " "))
    bags = [canonical_tokens(q) for _, q in real]
    closest = max((jaccard(a, b), i, j) for i, a in enumerate(bags) for j, b in enumerate(bags[:i]))
    print(f"[shoppingbench] closest distinct pair: Jaccard {closest[0]:.3f} "
          f"(a link needs ≥ {index.cfg.verify_threshold}):\n"
          f"   {real[closest[1]][1][:90]}\n   {real[closest[2]][1][:90]}")
    assert len(shared) / len(real) <= 0.02  # they are 900 distinct problems; a few may be near-twins

    cluster_of = {r["problem_id"]: r["leak_cluster_id"] for r in index.assignments()}
    rewrites = {pid: paraphrase(q, rng) for pid, q in real}
    update = index.add_day("2026-04-02", [ProblemRef(f"para:{pid}", text) for pid, text in rewrites.items()])
    new_cluster = {r["problem_id"]: r["leak_cluster_id"] for r in update.assignments}
    hits = [new_cluster[f"para:{pid}"] == cluster_of[pid] for pid, _ in real]
    recall = sum(hits) / len(hits)
    misses = [(q, rewrites[pid]) for (pid, q), hit in zip(real, hits) if not hit][:3]
    print(f"[shoppingbench] paraphrase recall={recall:.4f} ({sum(hits)}/{len(hits)}) merges={len(update.merge_events)}")
    for orig, rewrite in misses:
        print(f"   missed: {orig[:90]!r}\n        as: {rewrite[:90]!r}")
    assert recall >= 0.9
    assert update.merge_events == []  # paraphrases join their original; they never bridge two originals


# ---------------------------------------------------------------- determinism, sides, merge log


def _days(seed: int = 1) -> list[tuple[str, list[ProblemRef]]]:
    rng = random.Random(seed)
    latents = latent_problems(120, seed=seed)
    return [
        (f"2026-05-0{d + 1}", [ProblemRef(f"p{i}-{d}", render(p, rng)) for i, p in enumerate(latents) if (i + d) % 3])
        for d in range(3)
    ]


def test_state_is_a_pure_function_of_the_days():
    days = _days()
    first, second = LeakIndex.new(), LeakIndex.new()
    for day, refs in days:
        first.add_day(day, refs)
        second.add_day(day, list(reversed(refs)) + refs[:5])  # other order, repeats
    assert first.to_state() == second.to_state()
    assert first.assignments() == second.assignments()
    # save / load between days gives the same bytes as one long run
    third = LeakIndex.new()
    for day, refs in days:
        third = LeakIndex.from_state(third.to_state())
        third.add_day(day, refs)
    assert third.to_state() == first.to_state()
    with pytest.raises(ValueError, match="not after"):
        first.add_day(days[0][0], days[0][1])


def test_state_refuses_a_mismatch():
    index = LeakIndex.new()
    index.add_day("2026-05-01", _days()[0][1])
    blob = index.to_state()
    for cfg in (LeakConfig(seed=2), LeakConfig(num_perm=64), LeakConfig(canon=CanonConfig(price_bands_per_decade=3)),
                LeakConfig(hash_scheme="affine64", hash_func="xxh64")):
        with pytest.raises(LeakStateMismatch, match="rebuild it from the first day"):
            LeakIndex.from_state(blob, cfg)
    with pytest.raises(LeakStateMismatch, match="bad magic"):
        LeakIndex.from_state(b"PK\x03\x04" + blob)


def _pid_on_side(prefix: str, heldout: bool) -> str:
    probe = LeakIndex.new()
    return next(f"{prefix}{i}" for i in range(10_000) if probe._heldout_draw(cluster_id_of(f"{prefix}{i}")) == heldout)


def test_heldout_cluster_linked_to_train_flips_and_is_logged():
    shared = "vintage brass table lamp adjustable arm marble base warm light dimmer switch"
    held, train = _pid_on_side("a", True), _pid_on_side("b", False)
    index = LeakIndex.new()
    index.add_day("2026-06-01", [
        ProblemRef(held, f"Show me a {shared} with usb port and touch sensor"),
        ProblemRef(train, f"Find a {shared} with fabric shade and wooden frame"),
    ])
    before = {r["problem_id"]: r for r in index.assignments()}
    assert before[held]["side"] == "heldout" and before[train]["side"] == "train"
    assert before[held]["leak_cluster_id"] != before[train]["leak_cluster_id"]
    # a new problem close to both bridges the two clusters
    update = index.add_day("2026-06-02", [ProblemRef("c0", f"I need a {shared} with usb port and fabric shade")])
    after = {r["problem_id"]: r for r in index.assignments()}
    survivor = cluster_id_of(min(held, train))  # same day: the smaller problem id is the older
    assert {r["leak_cluster_id"] for r in after.values()} == {survivor}
    assert {r["side"] for r in after.values()} == {"train"}
    [event] = update.merge_events
    assert event["kind"] == "merge" and event["side_after"] == "train"
    assert event["leak_cluster_id"] == survivor
    assert event["moved_heldout_to_train"] == [held]
    assert index.merge_log == [event]
    assert {r["problem_id"] for r in update.changed} == {held, train} - {min(held, train)} | {held}
    # and it survives a save/load
    assert LeakIndex.from_state(index.to_state()).merge_log == [event]


def test_exact_keys_link_without_lsh():
    index = LeakIndex.new()
    update = index.add_day("2026-06-01", [
        ProblemRef("x1", "Red cotton socks under 100 pesos"),
        ProblemRef("x2", "red cotton socks, under 100 PESOS!"),  # same normalized text
        ProblemRef("x3", None),  # hostile: no text at all
        ProblemRef("", "blue wool hat"),  # hostile: no id → derived from the text
    ])
    rows = {r["problem_id"]: r for r in update.assignments}
    assert rows["x1"]["leak_cluster_id"] == rows["x2"]["leak_cluster_id"] == cluster_id_of("x1")
    assert rows["x3"]["query"] == "" and any(pid.startswith("q_") for pid in rows)
    assert update.counts["known_texts"] == 1


# ---------------------------------------------------------------- decontamination


def _light_rewrite(query: str, rng: random.Random) -> str:
    head, sep, tail = query.partition("\n\n")
    parts = head.rstrip(".?!").split(", ")
    if len(parts) > 2:
        rest = parts[1:]
        rng.shuffle(rest)
        parts = [parts[0], *rest]
    head = ", ".join(parts).replace("'", "")
    head = head.upper() if rng.random() < 0.5 else head.lower()
    return head + rng.choice(["", " !", "?"]) + sep + tail


def test_decontamination_catches_public_queries():
    real = shoppingbench_queries()
    suite = SHARED / "samples" / "suite.json"  # the ORO suite shape: a JSON array
    public = PublicTestSet.from_paths([SB_DIR, suite] if suite.is_file() else [SB_DIR])
    print(f"\n[public] {public.counts()}")
    assert public.counts()["entries"] == 900 + 2 * suite.is_file() and public.counts()["skipped_records"] == 0
    rng = random.Random(5)
    planted = rng.sample([q for _, q in real], 60)
    verbatim = match_counts(public, planted)
    rewritten = match_counts(public, [_light_rewrite(q, rng) for q in planted])
    clean = match_counts(public, [render(p, rng) for p in latent_problems(300, seed=9)])
    print(f"[public] verbatim={verbatim} rewritten={rewritten} simulated(non-public)={clean}")
    assert verbatim["exact"] == 60
    assert rewritten["none"] <= 3
    assert clean["none"] >= 298

    # in the index: planted problems and everything clustered with them are excluded
    index = LeakIndex.new(public=public)
    refs = [ProblemRef(f"s{i}", render(p, rng)) for i, p in enumerate(latent_problems(100, seed=4))]
    refs += [ProblemRef(f"pub{i}", q) for i, q in enumerate(planted[:10])]
    index.add_day("2026-07-01", refs)
    update = index.add_day("2026-07-02", [ProblemRef("rewrite0", _light_rewrite(planted[0], rng))])
    rows = {r["problem_id"]: r for r in index.assignments()}
    assert all(rows[f"pub{i}"]["side"] == "excluded" for i in range(10))
    assert rows["rewrite0"]["side"] == "excluded"
    assert sum(r["side"] == "excluded" for r in rows.values()) == 11
    assert index.exclusions and update.counts["new_problems"] == 1
    # a state built with a public set cannot be continued without it, or with another one
    blob = index.to_state()
    assert LeakIndex.from_state(blob, public=public).assignments() == index.assignments()
    with pytest.raises(LeakStateMismatch, match="public test set"):
        LeakIndex.from_state(blob)


def test_public_files_are_read_defensively(tmp_path):
    (tmp_path / "a_test.jsonl").write_text('{"query": "red socks"}\nnot json\n{"query": 7}\n\n{"q": "x"}\n')
    (tmp_path / "b_suite.json").write_text('[{"query": "blue hat"}, null, {"query": ""}]')
    public = PublicTestSet.from_paths([tmp_path])
    assert public.counts() == {
        "entries": 2, "distinct_texts": 2, "skipped_records": 5,
        "by_source": {"a_test.jsonl": 1, "b_suite.json": 1},
    }
    assert public.match("RED SOCKS!").kind == "exact" and public.match(None) is None


def test_a_train_cluster_that_meets_a_public_query_is_excluded():
    query = ("Show me a vintage brass table lamp with adjustable arm, marble base, warm light, dimmer switch, "
             "usb port, touch sensor, fabric shade and wooden frame")
    public = PublicTestSet([PublicQuery("suite.json", 1, query)])
    near_miss = query.replace(" sensor, fabric shade and wooden frame", "")  # Jaccard 0.75: links, not public
    assert public.match(near_miss) is None
    pid = _pid_on_side("t", heldout=False)
    index = LeakIndex.new(public=public)
    index.add_day("2026-08-01", [ProblemRef(pid, near_miss)])
    assert index.assignments()[0]["side"] == "train"
    update = index.add_day("2026-08-02", [ProblemRef("verbatim", query)])
    [event] = update.merge_events
    assert event["kind"] == "exclusion" and event["moved_to_excluded"] == [pid]
    assert {r["side"] for r in index.assignments()} == {"excluded"}
    assert [r["problem_id"] for r in update.changed] == [pid]
    assert index.exclusions[1]["kind"] == "exact" and index.exclusions[1]["source"] == "suite.json"
