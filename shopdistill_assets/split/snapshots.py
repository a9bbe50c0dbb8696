"""Choosing the rows of a train corpus snapshot and naming it.

One row per `trace_id` across the window (a later upload wins, even from a later day), an
optional deterministic sample, and a content hash that is the snapshot's version.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import xxhash

from shopdistill_assets.core.recency import latest_copy

SAMPLE_SPACE = 2**32


def latest_per_trace(keys: pl.DataFrame) -> pl.DataFrame:
    """keys: trace_id, updated_at, day, source_file, source_line (+ any columns) -> the winning
    row per trace_id (core/recency.py's rule), sorted by trace_id."""
    latest = latest_copy(keys)
    return keys.filter(latest == pl.Series(range(keys.height), dtype=latest.dtype)).sort("trace_id")


def sample_mask(trace_ids: pl.Series, fraction: float, seed: int) -> pl.Series:
    """Keep a trace when a seeded hash of its id falls below `fraction`: stable across runs and
    across window sizes (a trace in one snapshot is in every larger one with the same seed)."""
    cut = int(min(max(fraction, 0.0), 1.0) * SAMPLE_SPACE)
    return pl.Series([xxhash.xxh64_intdigest(t.encode(), seed=seed) % SAMPLE_SPACE < cut for t in trace_ids.to_list()],
                     dtype=pl.Boolean)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
