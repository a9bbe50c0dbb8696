"""MinHash machinery of the leak clusters: signatures of token bags and a banded LSH index.

Both reproduce datasketch (`MinHash.bulk` signatures, `MinHashLSH`'s bands and rows) while
doing the per-token and per-band work in numpy; `jaccard` is the exact check every LSH
candidate must pass before it links anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np
import xxhash
from datasketch import MinHash, MinHashLSH  # MinHashLSH: only its (bands, rows) optimizer

# datasketch's scheme decides the width the hash function must have.
HASH_FUNCS = {("affine32", "xxh32"): xxhash.xxh32_intdigest, ("affine64", "xxh64"): xxhash.xxh64_intdigest}


class MinHashParams(Protocol):
    """The settings a `Signer` reads (`leak_clusters.LeakConfig` has them)."""

    num_perm: int
    seed: int
    hash_scheme: str
    hash_func: str


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class Signer:
    """MinHash signatures of token bags, equal to datasketch's `MinHash.bulk` on the same bags.

    A bag's signature is the element-wise min of its tokens' one-token signatures, so each
    distinct token is hashed once (by `MinHash.bulk` itself, with the xxhash function) and
    cached; a batch of bags is then one numpy gather and min-reduce.
    """

    def __init__(self, cfg: MinHashParams) -> None:
        key = (cfg.hash_scheme, cfg.hash_func)
        if key not in HASH_FUNCS:
            raise ValueError(f"unsupported hash scheme/function {key}; known: {sorted(HASH_FUNCS)}")
        self.minhash_kwargs = dict(
            num_perm=cfg.num_perm, seed=cfg.seed, scheme=cfg.hash_scheme, hashfunc=HASH_FUNCS[key]
        )
        empty = MinHash(**self.minhash_kwargs).hashvalues
        self.dtype, self.empty_value = empty.dtype, empty[0]
        self._row_of: dict[str, int] = {}
        self._rows = np.empty((0, cfg.num_perm), dtype=self.dtype)

    def _learn(self, tokens: Iterable[str]) -> None:
        missing = sorted({t for t in tokens if t not in self._row_of})
        if not missing:
            return
        sigs = MinHash.bulk([[t.encode("utf-8")] for t in missing], **self.minhash_kwargs)
        start = len(self._rows)
        self._rows = np.vstack([self._rows, np.stack([m.hashvalues for m in sigs])])
        self._row_of.update({t: start + i for i, t in enumerate(missing)})

    def sign(self, bags: Sequence[frozenset[str]], chunk: int = 4096) -> np.ndarray:
        """(len(bags), num_perm) signatures; an empty bag gets datasketch's empty signature."""
        out = np.full((len(bags), self._rows.shape[1]), self.empty_value, dtype=self.dtype)
        self._learn(t for bag in bags for t in bag)
        filled = [i for i, bag in enumerate(bags) if bag]
        for lo in range(0, len(filled), chunk):
            idx = filled[lo : lo + chunk]
            lengths = np.fromiter((len(bags[i]) for i in idx), dtype=np.int64, count=len(idx))
            ids = np.fromiter((self._row_of[t] for i in idx for t in bags[i]), dtype=np.int64, count=int(lengths.sum()))
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            out[idx] = np.minimum.reduceat(self._rows[ids], starts, axis=0)
        return out


class BandIndex:
    """Banded LSH over signature rows, in numpy.

    The scheme is MinHashLSH's (b bands of r rows, b and r from its own optimizer for the
    threshold; two texts are candidates when any band is identical), but each band is kept as a
    sorted array of 64-bit band keys, so a day's batch is queried, and a saved index rebuilt,
    with a few vectorized sorts. Through MinHashLSH the per-band Python calls dominated: about
    0.3 ms to insert one text, so ~30 s to rebuild 100k on load.
    """

    _MUL = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, threshold: float, num_perm: int) -> None:
        params = MinHashLSH(threshold=threshold, num_perm=num_perm)
        self.b, self.r = params.b, params.r
        self.keys = np.empty((self.b, 0), dtype=np.uint64)  # per band, sorted
        self.ids = np.empty((self.b, 0), dtype=np.int64)  # text ordinal of each key

    def __len__(self) -> int:
        return self.keys.shape[1]

    def band_keys(self, sigs: np.ndarray) -> np.ndarray:
        """(b, n) keys: an avalanching mix of each band's r values (a bijection per step, so
        different bands collide with probability ~2^-64; candidates are verified anyway)."""
        wide = sigs.astype(np.uint64)
        out = np.empty((self.b, len(sigs)), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for band in range(self.b):
                h = np.full(len(sigs), band + 1, dtype=np.uint64)
                for col in range(band * self.r, (band + 1) * self.r):
                    h = (h ^ wide[:, col]) * self._MUL
                    h ^= h >> np.uint64(29)
                out[band] = h
        return out

    def candidate_pairs(self, keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Unique (new id, other id) pairs sharing a band: batch × index, and within the batch."""
        found = []
        for band in range(self.b):
            old_keys, old_ids, new_keys = self.keys[band], self.ids[band], keys[band]
            lo = np.searchsorted(old_keys, new_keys, "left")
            counts = np.searchsorted(old_keys, new_keys, "right") - lo
            total = int(counts.sum())
            if total:
                starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
                found.append(np.stack([np.repeat(ids, counts), old_ids[np.arange(total) + starts]], axis=1))
            order = np.argsort(new_keys, kind="stable")
            sorted_keys = new_keys[order]
            starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
            ends = np.r_[starts[1:], len(sorted_keys)]
            sizes = ends - starts
            pair_starts = starts[sizes == 2]  # the common case, vectorized
            first, second = ids[order[pair_starts]], ids[order[pair_starts + 1]]
            found.append(np.stack([np.maximum(first, second), np.minimum(first, second)], axis=1))
            for start, end in zip(starts[sizes > 2].tolist(), ends[sizes > 2].tolist()):
                members = ids[order[start:end]]
                i, j = np.triu_indices(len(members), 1)
                found.append(np.stack([np.maximum(members[i], members[j]), np.minimum(members[i], members[j])], axis=1))
        if not found:
            return np.empty((0, 2), dtype=np.int64)
        pairs = np.concatenate(found)
        packed = np.unique((pairs[:, 0] << 32) | pairs[:, 1])  # 1-D unique is ~10× a row-wise one
        return np.stack([packed >> 32, packed & 0xFFFFFFFF], axis=1)

    def add(self, keys: np.ndarray, ids: np.ndarray) -> None:
        all_keys = np.concatenate([self.keys, keys], axis=1)
        all_ids = np.concatenate([self.ids, np.broadcast_to(ids, keys.shape)], axis=1)
        order = np.lexsort((all_ids, all_keys), axis=1) if all_keys.size else np.empty_like(all_ids)
        self.keys = np.take_along_axis(all_keys, order, axis=1)
        self.ids = np.take_along_axis(all_ids, order, axis=1)
