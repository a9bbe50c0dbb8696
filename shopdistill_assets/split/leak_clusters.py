"""Leak clusters: group problems that are variants of one another, and keep the split leak-free.

A problem is a node; edges are exact keys (same problem_id, same normalized text) and verified
near matches: MinHash LSH over canonical token bags proposes candidates, and every candidate is
checked by exact Jaccard of the bags before it links anything (unverified buckets chain almost
everything together). Union-find over the edges gives the clusters.

The state is incremental and a pure function of the sequence of days:
- a cluster's id is that of its oldest member (first seen: day, then problem_id), so an older
  cluster's id survives a merge;
- a new cluster is held out by a salted hash of its id; a merge of held-out and train clusters
  is train-side from then on, logged in the merge log with the problems that moved;
- a cluster with any member matching a public test set is excluded (its members are variants
  of a public test query); exclusion wins over held-out and train.
Known texts are never hashed again, nor texts whose canonical bag is already known (linked by
identity); signatures are kept to rebuild the band index on load.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson
import xxhash

from shopdistill_assets.core.canonical import (
    DEFAULT_CANON,
    CanonConfig,
    canonical_tokens,
    canonical_version,
    text_key,
)
from shopdistill_assets.core.identity import MAX_QUERY_CHARS, problem_key
from shopdistill_assets.split.minhash import HASH_FUNCS, BandIndex, Signer, jaccard

__all__ = [  # the MinHash names are re-exported: callers imported them from here first
    "EXCLUDED", "HASH_FUNCS", "HELDOUT", "SIDES", "TRAIN", "BandIndex", "DayUpdate", "LeakConfig", "LeakIndex",
    "LeakStateMismatch", "ProblemRef", "PublicMatcher", "Signer", "cluster_id_of", "jaccard",
    "problem_key",  # the one identity rule lives in core.identity
]

SIDES = ("train", "heldout", "excluded")
TRAIN, HELDOUT, EXCLUDED = 0, 1, 2
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_COUNTS = ("problems", "new_problems", "new_texts", "known_texts", "same_bag", "lsh_candidates", "verified_links")


class LeakStateMismatch(ValueError):
    """A saved leak index was built with other hashing or canonicalization settings."""


@dataclass(frozen=True)
class LeakConfig:
    num_perm: int = 128
    seed: int = 1
    # LSH only proposes candidates; bands/rows are chosen so that a pair at the verify
    # threshold is a candidate with probability ≥ 0.99 (threshold 0.5 → 25 bands × 5 rows).
    lsh_threshold: float = 0.5
    verify_threshold: float = 0.7  # exact Jaccard of canonical bags needed to link
    heldout_share: float = 0.10
    salt: str = "shopdistill-leak-v1"
    hash_scheme: str = "affine32"
    hash_func: str = "xxh32"
    canon: CanonConfig = DEFAULT_CANON

    def identity(self) -> dict[str, Any]:
        """Everything a saved state depends on; a mismatch on load is refused."""
        ident = asdict(self)
        ident["canon"] = canonical_version(self.canon)
        return ident


@dataclass(frozen=True)
class ProblemRef:
    problem_id: str
    query: str
    category: str | None = None


@dataclass
class DayUpdate:
    day: str
    assignments: list[dict[str, Any]]  # one row per distinct problem given on this day
    changed: list[dict[str, Any]]  # earlier problems whose cluster id or side changed today
    merge_events: list[dict[str, Any]]
    counts: dict[str, int] = field(default_factory=dict)


class PublicMatcher(Protocol):
    def match(self, query: str) -> Any: ...

    def fingerprint(self) -> str: ...


def cluster_id_of(problem_id: str) -> str:
    return "lc_" + hashlib.sha1(problem_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _clean_ref(ref: ProblemRef) -> tuple[str, str, str]:
    """(problem key, query, text key) from hostile input: the one identity rule, bounded."""
    query = ref.query[:MAX_QUERY_CHARS] if isinstance(ref.query, str) else ""
    return problem_key(ref.problem_id, query), query, text_key(query)


class LeakIndex:
    """Incremental leak clustering state. Build with `new`, advance with `add_day`."""

    def __init__(self, cfg: LeakConfig, public: PublicMatcher | None = None) -> None:
        self.cfg = cfg
        self.public = public
        self.public_fingerprint = public.fingerprint() if public is not None else None
        self.signer = Signer(cfg)
        self.bands = BandIndex(cfg.lsh_threshold, cfg.num_perm)
        self.days: list[str] = []
        # problems, by ordinal in first-seen order
        self.problem_ids: list[str] = []
        self.queries: list[str] = []
        self.first_day: list[int] = []
        self.excluded: list[bool] = []
        self.exclusions: dict[int, dict[str, Any]] = {}
        self.ordinal: dict[str, int] = {}
        self.parent: list[int] = []
        self.members: dict[int, list[int]] = {}  # root → member ordinals
        self.side: dict[int, int] = {}  # root → side code
        # texts, by ordinal: distinct normalized texts, each owned by the problem that brought it
        self.text_of_digest: dict[bytes, int] = {}
        self.text_digests: list[bytes] = []
        self.text_owner: list[int] = []
        self.text_tokens: list[frozenset[str]] = []
        # a bag seen before links by identity; only a text with a new bag is signed and banded
        self.bag_owner: dict[frozenset[str], int] = {}
        self.banded_texts: list[int] = []
        self.signature_chunks: list[np.ndarray] = []  # rows of banded_texts
        self.merge_log: list[dict[str, Any]] = []

    @classmethod
    def new(cls, cfg: LeakConfig | None = None, public: PublicMatcher | None = None) -> LeakIndex:
        return cls(cfg or LeakConfig(), public)

    # ------------------------------------------------------------ union-find

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def _union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        keep, gone = min(ra, rb), max(ra, rb)  # the oldest member's cluster survives
        self.parent[gone] = keep
        self.members[keep].extend(self.members.pop(gone))
        self.side.pop(gone, None)

    # ------------------------------------------------------------ a day

    def add_day(self, day: str, problems: Iterable[ProblemRef]) -> DayUpdate:
        if not isinstance(day, str) or not _DAY.fullmatch(day):
            raise ValueError(f"day must be YYYY-MM-DD, got {day!r}")
        if self.days and day <= self.days[-1]:
            raise ValueError(f"day {day} is not after the last day in this state ({self.days[-1]}): days go in order")
        self.days.append(day)
        n_before = len(self.problem_ids)
        refs = sorted({_clean_ref(r) for r in problems}, key=lambda r: (r[0], r[2], r[1]))
        edges: list[tuple[int, int]] = []
        new_texts: list[int] = []
        to_band: list[int] = []
        todays: list[int] = []
        counts = dict.fromkeys(_COUNTS, 0)
        for pid, query, key in refs:
            p = self._problem(pid, query)
            todays.append(p)
            digest = xxhash.xxh3_128_digest(key.encode("utf-8", "surrogatepass"))
            t = self.text_of_digest.get(digest)
            if t is not None:
                counts["known_texts"] += 1
                edges.append((p, self.text_owner[t]))  # same normalized text
                continue
            t = self._text(digest, p, query)
            new_texts.append(t)
            self._decontaminate(p, query)
            bag = self.text_tokens[t]
            if bag and bag in self.bag_owner:
                counts["same_bag"] += 1
                edges.append((p, self.text_owner[self.bag_owner[bag]]))  # same canonical bag
            elif bag:
                self.bag_owner[bag] = t
                to_band.append(t)
        counts["problems"], counts["new_problems"] = len(set(todays)), len(self.problem_ids) - n_before
        counts["new_texts"] = len(new_texts)
        edges += self._near_edges(to_band, counts)
        update = self._apply(day, n_before, set(todays), edges)
        update.counts.update(counts)
        return update

    def _problem(self, pid: str, query: str) -> int:
        p = self.ordinal.get(pid)
        if p is None:
            p = self.ordinal[pid] = len(self.problem_ids)
            self.problem_ids.append(pid)
            self.queries.append(query)
            self.first_day.append(len(self.days) - 1)
            self.excluded.append(False)
            self.parent.append(p)
            self.members[p] = [p]
        return p

    def _text(self, digest: bytes, owner: int, query: str) -> int:
        t = len(self.text_owner)
        self.text_of_digest[digest] = t
        self.text_digests.append(digest)
        self.text_owner.append(owner)
        self.text_tokens.append(canonical_tokens(query, self.cfg.canon))
        return t

    def _decontaminate(self, p: int, query: str) -> None:
        if self.public is None or self.excluded[p]:
            return
        info = self.public.match(query)
        if info is not None:
            self.excluded[p] = True
            self.exclusions[p] = asdict(info) if hasattr(info, "__dataclass_fields__") else dict(info)

    def _near_edges(self, texts: list[int], counts: dict[str, int]) -> list[tuple[int, int]]:
        """Band the new texts, and link every candidate pair that passes the exact Jaccard check."""
        if not texts:
            return []
        sigs = self.signer.sign([self.text_tokens[t] for t in texts])
        ids = np.array(texts, dtype=np.int64)
        keys = self.bands.band_keys(sigs)
        pairs = self.bands.candidate_pairs(keys, ids)
        self.bands.add(keys, ids)
        self.banded_texts += texts
        self.signature_chunks.append(sigs)
        counts["lsh_candidates"] += len(pairs)
        edges, threshold, tokens = [], self.cfg.verify_threshold, self.text_tokens
        for t, c in pairs.tolist():
            if jaccard(tokens[t], tokens[c]) >= threshold:
                edges.append((self.text_owner[t], self.text_owner[c]))
        counts["verified_links"] += len(edges)
        return edges

    def _apply(self, day: str, n_before: int, todays: set[int], edges: list[tuple[int, int]]) -> DayUpdate:
        """Union the day's edges, then settle sides and log what moved."""
        old_roots = {self.find(p) for e in edges for p in e if p < n_before}
        old_roots |= {self.find(p) for p in todays if p < n_before}
        before = {r: (self.side[r], list(self.members[r])) for r in old_roots}
        for a, b in edges:
            self._union(a, b)
        groups: dict[int, list[int]] = {}
        for r in sorted(old_roots):
            groups.setdefault(self.find(r), []).append(r)
        for p in sorted(todays):
            groups.setdefault(self.find(p), [])
        events, changed = [], []
        for root, olds in sorted(groups.items()):
            side = self._settle(root, [before[o][0] for o in olds])
            event = self._event(day, root, olds, before, side)
            if event is not None:
                events.append(event)
                moved = {p for o in olds for p in before[o][1] if o != root or before[o][0] != side}
                changed += [self._row(p) for p in sorted(moved) if p not in todays]
        self.merge_log += events
        return DayUpdate(day, [self._row(p) for p in sorted(todays, key=self.problem_ids.__getitem__)], changed, events)

    def _settle(self, root: int, old_sides: list[int]) -> int:
        if any(self.excluded[m] for m in self.members[root]):
            side = EXCLUDED
        elif TRAIN in old_sides:
            side = TRAIN  # a held-out cluster linked to a train one has leaked: train from now on
        elif old_sides:
            side = HELDOUT
        else:
            side = HELDOUT if self._heldout_draw(cluster_id_of(self.problem_ids[root])) else TRAIN
        self.side[root] = side
        return side

    def _heldout_draw(self, cluster_id: str) -> bool:
        h = xxhash.xxh64_intdigest(f"{self.cfg.salt}\x1f{cluster_id}".encode("utf-8"))
        return h / 2.0**64 < self.cfg.heldout_share

    def _event(self, day: str, root: int, olds: list[int], before: dict, side: int) -> dict[str, Any] | None:
        if len(olds) < 2 and all(before[o][0] == side for o in olds):
            return None

        def moved(frm: int, to: int) -> list[str]:
            return sorted(self.problem_ids[p] for o in olds if before[o][0] == frm and side == to for p in before[o][1])
        return {
            "day": day,
            "kind": "merge" if len(olds) >= 2 else "exclusion",
            "leak_cluster_id": cluster_id_of(self.problem_ids[root]),
            "absorbed": sorted(cluster_id_of(self.problem_ids[o]) for o in olds if o != root),
            "sides_before": {cluster_id_of(self.problem_ids[o]): SIDES[before[o][0]] for o in olds},
            "side_after": SIDES[side],
            "moved_heldout_to_train": moved(HELDOUT, TRAIN),
            "moved_to_excluded": sorted(
                self.problem_ids[p] for o in olds if before[o][0] != EXCLUDED and side == EXCLUDED for p in before[o][1]
            ),
        }

    # ------------------------------------------------------------ reading

    def _row(self, p: int) -> dict[str, Any]:
        root = self.find(p)
        return {
            "problem_id": self.problem_ids[p],
            "query": self.queries[p],
            "leak_cluster_id": cluster_id_of(self.problem_ids[root]),
            "side": SIDES[self.side[root]],
            "first_day": self.days[self.first_day[p]],
        }

    def assignments(self) -> list[dict[str, Any]]:
        """One row per distinct problem, in first-seen order."""
        return [self._row(p) for p in range(len(self.problem_ids))]

    def clusters(self) -> dict[str, list[str]]:
        return {
            cluster_id_of(self.problem_ids[root]): [self.problem_ids[m] for m in sorted(members)]
            for root, members in sorted(self.members.items())
        }

    def signatures(self) -> np.ndarray:
        if len(self.signature_chunks) > 1:
            self.signature_chunks = [np.concatenate(self.signature_chunks)]
        if not self.signature_chunks:
            return np.empty((0, self.cfg.num_perm), dtype=self.signer.dtype)
        return self.signature_chunks[0]

    def to_state(self) -> bytes:
        """Deterministic bytes: a JSON header (config identity, ids, texts, log) + raw arrays."""
        return _dump(self)

    @classmethod
    def from_state(cls, blob: bytes, cfg: LeakConfig | None = None, public: PublicMatcher | None = None) -> LeakIndex:
        """Load a saved state; refuse one built with other hashing, canonicalizer or public set."""
        return _load(cls, blob, cfg or LeakConfig(), public)


# ---------------------------------------------------------------- persistence

_MAGIC = b"SDLEAKIX"
_FORMAT = "shopdistill.leak_index/v1"


def _probe(signer: Signer) -> list[int]:
    """A few signature values of a fixed bag: catches a datasketch whose permutations moved."""
    return [int(v) for v in signer.sign([frozenset({"leak-probe", "ŝhop", "price_max=b5"})])[0][:8]]


def _dump(index: LeakIndex) -> bytes:
    n = len(index.problem_ids)
    roots = np.fromiter((index.find(p) for p in range(n)), dtype=np.int64, count=n)
    vocab = sorted({t for bag in index.text_tokens for t in bag})
    token_id = {t: i for i, t in enumerate(vocab)}
    arrays = {
        "root": roots.astype("<i4"),
        "side": np.array([index.side[r] for r in roots.tolist()], dtype="<i1"),
        "first_day": np.array(index.first_day, dtype="<i4"),
        "excluded": np.array(index.excluded, dtype="<u1"),
        "text_owner": np.array(index.text_owner, dtype="<i4"),
        "text_digest": np.frombuffer(b"".join(index.text_digests), dtype="<u1"),
        "token_lengths": np.array([len(b) for b in index.text_tokens], dtype="<i4"),
        "token_ids": np.array([token_id[t] for b in index.text_tokens for t in sorted(b)], dtype="<i4"),
        "signatures": index.signatures().astype(index.signer.dtype.newbyteorder("<")),
    }
    layout, offset = {}, 0
    for name, arr in arrays.items():
        layout[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape), "offset": offset}
        offset += arr.nbytes
    header = {
        "format": _FORMAT,
        "identity": index.cfg.identity(),
        "probe": _probe(index.signer),
        "public_fingerprint": index.public_fingerprint,
        "days": index.days,
        "problem_ids": index.problem_ids,
        "queries": index.queries,
        "exclusions": {str(p): info for p, info in sorted(index.exclusions.items())},
        "merge_log": index.merge_log,
        "vocab": vocab,
        "arrays": layout,
    }
    head = orjson.dumps(header, option=orjson.OPT_SORT_KEYS)
    return b"".join([_MAGIC, len(head).to_bytes(8, "little"), head, *(a.tobytes() for a in arrays.values())])


def _check(header: dict, index: LeakIndex) -> None:
    problems = []
    saved, want = header.get("identity", {}), index.cfg.identity()
    for key in sorted(set(saved) | set(want)):
        if saved.get(key) != want.get(key):
            problems.append(f"{key}: saved {saved.get(key)!r}, expected {want.get(key)!r}")
    if not problems and header.get("probe") != _probe(index.signer):
        problems.append("MinHash probe differs: this datasketch hashes differently from the one that saved the state")
    if header.get("public_fingerprint") != index.public_fingerprint:
        saved_fp = header.get("public_fingerprint")
        problems.append(f"public test set: saved {saved_fp!r}, given {index.public_fingerprint!r}")
    if problems:
        detail = "\n  ".join(problems)
        raise LeakStateMismatch(
            f"leak index state does not match this configuration; rebuild it from the first day:\n  {detail}"
        )


def _load(cls: type[LeakIndex], blob: bytes, cfg: LeakConfig, public: PublicMatcher | None) -> LeakIndex:
    if not blob.startswith(_MAGIC):
        raise LeakStateMismatch("not a leak index state (bad magic)")
    head_len = int.from_bytes(blob[8:16], "little")
    header = orjson.loads(blob[16 : 16 + head_len])
    if header.get("format") != _FORMAT:
        raise LeakStateMismatch(f"unknown leak index format {header.get('format')!r}, expected {_FORMAT!r}")
    index = cls(cfg, public)
    _check(header, index)
    body = memoryview(blob)[16 + head_len :]
    arr = {}
    for name, spec in header["arrays"].items():
        count = int(np.prod(spec["shape"]))
        arr[name] = np.frombuffer(body, dtype=spec["dtype"], count=count, offset=spec["offset"]).reshape(spec["shape"])
    index.days, index.problem_ids, index.queries = header["days"], header["problem_ids"], header["queries"]
    index.ordinal = {pid: p for p, pid in enumerate(index.problem_ids)}
    index.first_day = arr["first_day"].tolist()
    index.excluded = [bool(x) for x in arr["excluded"].tolist()]
    index.exclusions = {int(p): info for p, info in header["exclusions"].items()}
    index.merge_log = header["merge_log"]
    index.parent = arr["root"].tolist()
    for p, (root, side) in enumerate(zip(index.parent, arr["side"].tolist())):
        index.members.setdefault(root, []).append(p)
        index.side[root] = side
    digests = arr["text_digest"].tobytes()
    index.text_digests = [digests[i : i + 16] for i in range(0, len(digests), 16)]
    index.text_of_digest = {d: t for t, d in enumerate(index.text_digests)}
    index.text_owner = arr["text_owner"].tolist()
    vocab, ids = header["vocab"], arr["token_ids"].tolist()
    ends = np.cumsum(arr["token_lengths"]).tolist()
    index.text_tokens = [frozenset(vocab[i] for i in ids[a:b]) for a, b in zip([0, *ends[:-1]], ends)]
    for t, bag in enumerate(index.text_tokens):  # the first text of each bag is the banded one
        if bag and bag not in index.bag_owner:
            index.bag_owner[bag] = t
            index.banded_texts.append(t)
    sigs = arr["signatures"].astype(index.signer.dtype)
    if len(sigs) != len(index.banded_texts):
        raise LeakStateMismatch(f"corrupt state: {len(sigs)} signatures for {len(index.banded_texts)} banded texts")
    index.signature_chunks = [sigs]
    ids = np.array(index.banded_texts, dtype=np.int64)
    index.bands.add(index.bands.band_keys(sigs), ids)
    return index
