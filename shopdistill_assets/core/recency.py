""""Latest upload wins": the one rule, used by in-day dedupe and by train snapshots alike.

A copy of a run is later than another when its `updated_at` is later, compared as a UTC
microsecond integer (`updated_at_us`), never as text: "10:00:00.500000Z" is after
"10:00:00Z" although "." sorts before "Z". A missing or unreadable time counts as earliest
(MISSING_US). Ties go to the later day, then the later source file (by name), then the later
line; one (day, file, line) is one copy, so the order is total.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import polars as pl

MISSING_US = -(2**63)  # sorts before every real time
RECENCY_COLUMNS = ("updated_at_us", "day", "source_file", "source_line")  # compared in this order
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def updated_at_us(text: Any) -> int:
    """A canonical `updated_at` ("YYYY-MM-DDTHH:MM:SS[.ffffff]Z", or any ISO 8601 text; naive
    means UTC) -> microseconds since 1970-01-01 UTC; MISSING_US when absent or unreadable."""
    if not isinstance(text, str):
        return MISSING_US
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return MISSING_US
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    delta = when - _EPOCH  # exact integer arithmetic: no float, no overflow in years 1..9999
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def latest_copy(keys: pl.DataFrame) -> pl.Series:
    """For each row of `keys`, the row index of its trace's latest copy (its own index when it
    is the latest). Columns: trace_id, source_file, source_line, and `updated_at_us` or
    `updated_at` (text); `day` when the keys span days."""
    if "updated_at_us" not in keys.columns:
        keys = keys.with_columns(pl.Series("updated_at_us", [updated_at_us(v) for v in keys["updated_at"].to_list()],
                                           dtype=pl.Int64))
    day = pl.col("day") if "day" in keys.columns else pl.lit("", dtype=pl.String).alias("day")
    ranked = keys.select("trace_id", pl.col("updated_at_us").fill_null(MISSING_US), day, "source_file", "source_line") \
        .with_row_index("row")
    winners = ranked.sort(["trace_id", *RECENCY_COLUMNS]).group_by("trace_id", maintain_order=True) \
        .agg(pl.col("row").last().alias("latest"))
    return ranked.join(winners, on="trace_id", how="left").sort("row")["latest"]
