"""What a stage asset shows in the UI: in / kept / rejected counts and a table of reasons.

Every reason code gets a `rejected/<reason>` number on every materialization, zero included, so
the UI's plots across partitions have a point per day for every code (a missing entry is not
plotted as zero: it is not plotted at all).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from dagster import MetadataValue

from shopdistill_assets.corpus.reasons import REASON_STAGE, REASONS


def reasons_table(rejected: Mapping[tuple[str, str], int]) -> str:
    """Every (stage, reason) that occurred, most frequent first; codes are few, so none is cut."""
    counts = {key: n for key, n in rejected.items() if n}
    if not counts:
        return "_nothing rejected_"
    lines = ["| stage | reason | count | meaning |", "|---|---|---:|---|"]
    for (stage, reason), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"| {stage} | `{reason}` | {n} | {REASONS.get(reason, '')} |")
    return "\n".join(lines)


def reason_counts(by_reason: dict[str, int]) -> dict[str, int]:
    """`rejected/<code>` for every known code (zeros included), then any unknown code seen."""
    counts = {f"rejected/{code}": int(by_reason.get(code, 0)) for code in REASON_STAGE}
    counts.update({f"rejected/{code}": int(n) for code, n in sorted(by_reason.items()) if code not in REASON_STAGE})
    return counts


def funnel_metadata(n_in: int, kept: int, rejected: Mapping[tuple[str, str], int], **extra: Any) -> dict[str, Any]:
    """Numeric metadata (plotted across days by the UI) plus the reasons table; `rejected`:
    lines or traces stopped, per (stage, reason)."""
    by_reason: Counter = Counter()
    for (_, reason), n in rejected.items():
        by_reason[reason] += n
    meta: dict[str, Any] = {
        "dagster/row_count": kept,
        "in": n_in,
        "kept": kept,
        "rejected": sum(rejected.values()),
        "kept_share": round(kept / n_in, 4) if n_in else 0.0,
        "reasons": MetadataValue.md(reasons_table(rejected)),
        **reason_counts(by_reason),
    }
    meta.update(extra)
    return meta
