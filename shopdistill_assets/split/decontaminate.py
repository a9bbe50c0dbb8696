"""Public test sets, and matching problems against them (decontamination).

A problem that is a public test query, or a light rewrite of one, must neither train the model
nor sit in our held-out set: the leak index marks it (and its whole leak cluster) `excluded`.
Sets read: ShoppingBench `synthesize_*_test.jsonl` (one JSON object per line with "query") and
ORO suite files (a JSON array of objects with "query"). A match is, in order:
exact normalized text, the same canonical bag, or a near match (exact Jaccard of canonical
bags ≥ `near_threshold`, candidates from the same MinHash machinery as the leak index).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shopdistill_assets.core.canonical import canonical_tokens, canonical_version, text_key
from shopdistill_assets.split.leak_clusters import BandIndex, LeakConfig, Signer, jaccard

MATCH_KINDS = ("exact", "canonical", "near")


@dataclass(frozen=True)
class PublicQuery:
    source: str  # file name, not a path: fingerprints must not depend on where files live
    line: int  # 1-based line (jsonl) or position in the array (json)
    query: str


@dataclass(frozen=True)
class MatchInfo:
    kind: str  # one of MATCH_KINDS
    source: str
    line: int
    public_query: str
    jaccard: float


def read_public_queries(path: Path) -> tuple[list[PublicQuery], int]:
    """Queries of one test-set file, and how many records were skipped as unusable."""
    name, skipped, out = path.name, 0, []
    if path.suffix == ".jsonl":
        records = []
        # split on "\n" only: splitlines() also cuts at U+2028 and friends inside JSON strings
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").split("\n"), 1):
            try:
                records.append((number, json.loads(line)))
            except ValueError:
                skipped += bool(line.strip())
    else:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        if isinstance(data, dict):
            data = data.get("problems", [])
        records = list(enumerate(data if isinstance(data, list) else [], 1))
    for number, record in records:
        query = record.get("query") if isinstance(record, dict) else None
        if isinstance(query, str) and query.strip():
            out.append(PublicQuery(name, number, query))
        else:
            skipped += 1
    return out, skipped


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".json") and p.is_file())
        else:
            files.append(path)
    return files


class PublicTestSet:
    def __init__(
        self, entries: list[PublicQuery], cfg: LeakConfig | None = None, near_threshold: float = 0.8, skipped: int = 0
    ) -> None:
        self.cfg = cfg or LeakConfig()
        self.near_threshold = near_threshold
        self.entries = entries
        self.skipped = skipped
        self._by_key: dict[str, int] = {}
        self._by_bag: dict[frozenset[str], int] = {}
        self._bags = [canonical_tokens(e.query, self.cfg.canon) for e in entries]
        self._signer = Signer(self.cfg)
        self._bands = BandIndex(self.cfg.lsh_threshold, self.cfg.num_perm)
        for i, (entry, bag) in enumerate(zip(entries, self._bags)):
            self._by_key.setdefault(text_key(entry.query), i)
            if bag:
                self._by_bag.setdefault(bag, i)
        banded = sorted(self._by_bag.values())
        sigs = self._signer.sign([self._bags[i] for i in banded])
        self._bands.add(self._bands.band_keys(sigs), np.array(banded, dtype=np.int64))

    @classmethod
    def from_paths(
        cls, paths: Iterable[str | Path], cfg: LeakConfig | None = None, near_threshold: float = 0.8
    ) -> PublicTestSet:
        """Files or folders (their *.jsonl and *.json, sorted by name)."""
        entries, skipped = [], 0
        for path in _expand(paths):
            got, bad = read_public_queries(path)
            entries += got
            skipped += bad
        return cls(entries, cfg, near_threshold, skipped)

    def __len__(self) -> int:
        return len(self.entries)

    def _info(self, kind: str, i: int, score: float) -> MatchInfo:
        entry = self.entries[i]
        return MatchInfo(kind, entry.source, entry.line, entry.query, round(score, 4))

    def match(self, query: object) -> MatchInfo | None:
        if not isinstance(query, str):
            return None
        i = self._by_key.get(text_key(query))
        if i is not None:
            return self._info("exact", i, 1.0)
        bag = canonical_tokens(query, self.cfg.canon)
        if not bag:
            return None
        i = self._by_bag.get(bag)
        if i is not None:
            return self._info("canonical", i, 1.0)
        keys = self._bands.band_keys(self._signer.sign([bag]))
        pairs = self._bands.candidate_pairs(keys, np.array([len(self.entries)], dtype=np.int64))
        best = max(((jaccard(bag, self._bags[c]), -c) for c in pairs[:, 1].tolist()), default=None)
        if best is not None and best[0] >= self.near_threshold:
            return self._info("near", -best[1], best[0])
        return None

    def fingerprint(self) -> str:
        """Identity of what this set excludes: canonicalizer, threshold, and its distinct texts."""
        h = hashlib.sha1(f"{canonical_version(self.cfg.canon)}\x1f{self.near_threshold}".encode())
        for key in sorted(self._by_key):
            h.update(b"\x1f" + key.encode("utf-8"))
        return "pub_" + h.hexdigest()[:16]

    def counts(self) -> dict[str, object]:
        return {
            "entries": len(self.entries),
            "distinct_texts": len(self._by_key),
            "skipped_records": self.skipped,
            "by_source": dict(sorted(Counter(e.source for e in self.entries).items())),
        }


def match_counts(public: PublicTestSet, queries: Iterable[object]) -> dict[str, int]:
    """How many queries match the public set, by kind (and how many do not)."""
    counts = Counter({kind: 0 for kind in (*MATCH_KINDS, "none")})
    for query in queries:
        info = public.match(query)
        counts[info.kind if info else "none"] += 1
    return dict(counts)
