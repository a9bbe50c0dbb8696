"""The per-day funnel: counts of every corpus table and the ledger's stages, day by day.

Plain data in, table rows and a PNG out; the asset (`day_funnel_assets.py`) gets the counts
from the lake with SQL and attaches what this module draws.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field

from shopdistill_assets.corpus.reasons import REASON_STAGE, Stage

TABLES = ("normalized_traces", "agentic_traces", "subtask_traces", "gated_traces", "rejected_traces")
STAGES = tuple(str(s) for s in Stage)
HEADER = ("day", "lines", "traces", "agentic", "subtask", "gated", "rejected", *STAGES)


@dataclass
class DayCounts:
    day: str
    tables: dict[str, int] = field(default_factory=dict)  # table -> rows
    stages: dict[str, int] = field(default_factory=dict)  # ledger stage -> rows
    reasons: dict[str, int] = field(default_factory=dict)  # ledger reason -> rows

    @property
    def complete(self) -> bool:
        return all(t in self.tables for t in ("gated_traces", "subtask_traces", "rejected_traces"))

    @property
    def lines(self) -> int | None:
        """Every line lands in exactly one of gated, sub-task or the ledger (conservation)."""
        if not self.complete:
            return None
        return self.tables["gated_traces"] + self.tables["subtask_traces"] + self.tables["rejected_traces"]

    def row(self) -> list:
        t = self.tables
        return [self.day, self.lines, t.get("normalized_traces"), t.get("agentic_traces"), t.get("subtask_traces"),
                t.get("gated_traces"), t.get("rejected_traces"), *(self.stages.get(s, 0) for s in STAGES)]


def reasons_long(days: list[DayCounts], last: int = 14) -> list[dict]:
    """(day, stage, reason, lines) rows for the last `last` days, codes that occurred only: long,
    so 90 days are 90 x a few rows, never 90 columns."""
    return [{"day": d.day, "stage": REASON_STAGE.get(code, "?"), "reason": code, "lines": n}
            for d in days[-last:] for code, n in sorted(d.reasons.items(), key=lambda kv: (-kv[1], kv[0])) if n]


def funnel_png(days: list[DayCounts], last: int = 60) -> bytes:
    """Stacked bars per day: gated, sub-task, then the ledger by stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [d for d in days[-last:] if d.complete]
    # ~1100 x 500 px: readable at the width of the UI's metadata panel, whatever the day count.
    fig, ax = plt.subplots(figsize=(max(10.0, 0.3 * len(shown) + 4), 4.6), dpi=110)
    bottom = [0] * len(shown)
    series = [("gated", [d.tables["gated_traces"] for d in shown]),
              ("sub-task", [d.tables["subtask_traces"] for d in shown]),
              *((f"rejected: {s}", [d.stages.get(s, 0) for d in shown]) for s in STAGES)]
    x = range(len(shown))
    for label, values in series:
        if any(values):
            ax.bar(x, values, bottom=bottom, label=label, width=0.8)
            bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(list(x), [d.day[5:] for d in shown], rotation=90 if len(shown) > 12 else 0, fontsize=9)
    ax.set_ylabel("lines", fontsize=10)
    ax.set_title("corpus funnel per day (lines: gated + sub-task + ledger by stage)", fontsize=11)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def png_markdown(png: bytes, alt: str = "corpus funnel per day") -> str:
    # The UI renders markdown metadata, data URIs included: the plot travels with the event.
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
