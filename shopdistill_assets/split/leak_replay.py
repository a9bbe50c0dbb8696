"""The leak index of day D as a pure function of the problems of days first..D.

Each day's state is saved with the fingerprint of every day it consumed. Day D loads day
D-1's state only when that chain still matches the problems in the lake now; otherwise it
replays from the first day. So the split does not depend on the order in which partitions were
materialized, and re-materializing an earlier day invalidates every later state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shopdistill_assets.core.identity import problem_key
from shopdistill_assets.split.leak_clusters import LeakConfig, LeakIndex, LeakStateMismatch, ProblemRef, PublicMatcher

STATE_FORMAT = "shopdistill.leak_state/v1"


def day_problems(rows: Sequence[dict]) -> list[ProblemRef]:
    """Distinct (problem_id, query) of a day's traces, sorted: the day's input to the index.
    Distinct by problem id, or by text for records without one; a problem asked in several
    phrasings under one id keeps each phrasing (every text is matched against the others)."""
    seen: dict[tuple[str, str], ProblemRef] = {}
    for row in rows:
        pid, query = row.get("problem_id"), row.get("query")
        if isinstance(query, str) and query.strip():
            pid = pid if isinstance(pid, str) else ""
            seen.setdefault((problem_key(pid, query), query), ProblemRef(pid, query, row.get("category")))
    return [seen[k] for k in sorted(seen)]


def fingerprint(problems: Sequence[ProblemRef]) -> str:
    digest = hashlib.sha256()
    for p in problems:
        digest.update(f"{p.problem_id}\x1f{p.query}\x1e".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


@dataclass
class LeakState:
    """A saved index with the chain of (day, fingerprint) it was built from."""

    chain: list[tuple[str, str]]
    settings: str
    index_blob: bytes

    def to_bytes(self) -> bytes:
        header = json.dumps({"format": STATE_FORMAT, "chain": self.chain, "settings": self.settings},
                            sort_keys=True).encode()
        return len(header).to_bytes(8, "little") + header + self.index_blob

    @classmethod
    def from_bytes(cls, blob: bytes) -> LeakState:
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8 : 8 + n])
        if header.get("format") != STATE_FORMAT:
            raise LeakStateMismatch(f"not a {STATE_FORMAT} blob")
        return cls([tuple(x) for x in header["chain"]], header["settings"], blob[8 + n :])


def settings_key(cfg: LeakConfig, public: PublicMatcher | None) -> str:
    ident = {**cfg.identity(), "public": public.fingerprint() if public is not None else None}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def build_state(day: str, earlier_days: Sequence[str], problems_of: Callable[[str], list[ProblemRef]],
                previous: LeakState | None, cfg: LeakConfig, public: PublicMatcher | None):
    """(index after `day`, its state, whether it replayed) given the saved state of the day before."""
    settings = settings_key(cfg, public)
    memo: dict[str, list[ProblemRef]] = {}

    def problems(d: str) -> list[ProblemRef]:
        if d not in memo:
            memo[d] = problems_of(d)
        return memo[d]

    chain = [(d, fingerprint(problems(d))) for d in earlier_days]
    replayed = True
    index = None
    if previous is not None and previous.settings == settings and previous.chain == chain:
        try:
            index = LeakIndex.from_state(previous.index_blob, cfg, public)
            replayed = False
        except LeakStateMismatch:
            index = None
    if index is None:
        index = LeakIndex.new(cfg, public)
        for d in earlier_days:
            index.add_day(d, problems(d))
    todays = problems(day)
    update = index.add_day(day, todays)
    state = LeakState(chain + [(day, fingerprint(todays))], settings, index.to_state())
    return index, update, state, replayed
