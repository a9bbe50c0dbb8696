"""The per-stage report: held-out metrics of the base model and every stage's checkpoint.

Reads the `policy_eval` snapshots (`<policy>__<heldout version>`) of the newest held-out set,
one row per policy, in stage order; a markdown table and a PNG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

EVAL_ASSET = "policy_eval"
HELDOUT_ASSET = "heldout_eval_set"


def collect(lake: Any, policies: list[str]) -> list[dict[str, Any]]:
    from shopdistill_assets.heldout import newest_heldout_version

    snapshots = lake.list_snapshots(EVAL_ASSET)
    heldout = newest_heldout_version(sorted({s.split("__", 1)[1] for s in snapshots if "__" in s}),
                                     lambda v: lake.read_manifest(HELDOUT_ASSET, v).get("as_of_day", "")
                                     if v in lake.list_snapshots(HELDOUT_ASSET) else "")
    rows = []
    for policy in policies:
        name = f"{policy}__{heldout}"
        if name not in snapshots:
            continue
        manifest = lake.read_manifest(EVAL_ASSET, name)
        summary = manifest["summary"]
        checkpoint = (manifest.get("policy") or {}).get("checkpoint")
        rows.append({"policy": policy, "checkpoint": Path(checkpoint).name if checkpoint else "",
                     "heldout_version": heldout, "asr": summary["asr"], "pass_at_1": summary["pass_at_1"],
                     "pass_at_k": summary.get("pass_at_k", {}), "problems": len(manifest.get("problem_ids", [])),
                     "samples": (summary.get("counts") or {}).get("samples")})
    return rows


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def stages_table(rows: list[dict[str, Any]]) -> str:
    ks = sorted({int(k) for r in rows for k in r["pass_at_k"]})
    head = ["policy", "checkpoint", "ASR", "pass@1", *[f"pass@{k}" for k in ks if k != 1], "problems"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["policy"], f"`{r['checkpoint']}`" if r["checkpoint"] else "", _pct(r["asr"]), _pct(r["pass_at_1"]),
                 *[_pct(r["pass_at_k"].get(str(k))) for k in ks if k != 1], str(r["problems"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_stages(rows: list[dict[str, Any]], path: Path, title: str = "Held-out ASR by stage") -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ks = sorted({int(k) for r in rows for k in r["pass_at_k"]})
    top = str(ks[-1]) if ks else None
    fig = Figure(figsize=(1.6 + 1.1 * len(rows), 3.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    xs = range(len(rows))
    series = [("ASR", [r["asr"] or 0 for r in rows])]
    if top:
        series.append((f"pass@{top}", [r["pass_at_k"].get(top) or 0 for r in rows]))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        bars = ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], [100 * v for v in values], width,
                      label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(list(xs), [r["policy"] for r in rows], fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
