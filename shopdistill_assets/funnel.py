"""What a stage asset shows in the UI: in / kept / rejected counts and a table of reasons."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from dagster import MetadataValue

from shopdistill_assets.core.reasons import REASONS

TOP_REASONS = 12


def reasons_table(ledger: Iterable[dict[str, Any]]) -> str:
    counts = Counter((row["stage"], row["reason"]) for row in ledger)
    if not counts:
        return "_nothing rejected_"
    lines = ["| stage | reason | count | meaning |", "|---|---|---:|---|"]
    for (stage, reason), n in counts.most_common(TOP_REASONS):
        lines.append(f"| {stage} | `{reason}` | {n} | {REASONS.get(reason, '')} |")
    if len(counts) > TOP_REASONS:
        lines.append(f"| … | {len(counts) - TOP_REASONS} more reasons | {sum(counts.values()) - sum(n for _, n in counts.most_common(TOP_REASONS))} | |")
    return "\n".join(lines)


def funnel_metadata(n_in: int, kept: int, ledger: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Numeric metadata (plotted across days by the UI) plus the reasons table."""
    by_reason = Counter(row["reason"] for row in ledger)
    meta: dict[str, Any] = {
        "dagster/row_count": kept,
        "in": n_in,
        "kept": kept,
        "rejected": len(ledger),
        "kept_share": round(kept / n_in, 4) if n_in else 0.0,
        "reasons": MetadataValue.md(reasons_table(ledger)),
    }
    for reason, n in by_reason.most_common(TOP_REASONS):
        meta[f"rejected/{reason}"] = n
    meta.update(extra)
    return meta
