"""The per-stage report: held-out metrics of the base model and every stage's checkpoint.

Reads the `policy_eval` snapshots (`<policy>__<heldout version>`) of the newest held-out set,
one row per policy, in stage order; a markdown table and a PNG shown inline in the UI, with
the scripted baselines (`random` below, `oracle` above, where evaluated) as reference lines and
the sample sizes (problems x samples per problem) beside every bar; where rows carry them, the ASR
interval as error bars and the step match as a third bar. Also the loss curve of one stage, inline.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

EVAL_ASSET = "policy_eval"
BASELINES = ("random", "oracle")  # scripted policies: the floor and the ceiling of the held-out set
HELDOUT_ASSET = "heldout_eval_set"


def collect(lake: Any, policies: list[str]) -> list[dict[str, Any]]:
    from shopdistill_assets.split.heldout import newest_heldout_version

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
                     "samples": (summary.get("counts") or {}).get("samples")})  # episodes: problems x k
    return rows


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def stages_table(rows: list[dict[str, Any]]) -> str:
    ks = sorted({int(k) for r in rows for k in r["pass_at_k"]})
    head = ["policy", "checkpoint", "ASR", "pass@1", *[f"pass@{k}" for k in ks if k != 1], "problems", "episodes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["policy"], f"`{r['checkpoint']}`" if r["checkpoint"] else "", _pct(r["asr"]), _pct(r["pass_at_1"]),
                 *[_pct(r["pass_at_k"].get(str(k))) for k in ks if k != 1], str(r["problems"]),
                 str(r.get("samples") or "–")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def png_markdown(fig, alt: str) -> str:
    """A figure as markdown with the PNG inline (a data URI): Dagster's UI renders it in place."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return f"![{alt}](data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()})"


def _n(r: dict[str, Any]) -> str:
    """The sample size beside a bar: problems x samples per problem (`samples` counts episodes)."""
    problems, episodes = r.get("problems"), r.get("samples")
    if problems and episodes and episodes % problems == 0:
        return f"n={problems}x{episodes // problems}"
    return f"n={problems or '?'} problems, {episodes or '?'} episodes"


def stages_figure(rows: list[dict[str, Any]], title: str = "Held-out ASR by stage"):
    """Bars per policy (ASR with its interval where the row has one, the largest pass@k, and the
    step match where measured), baselines as dashed lines, n under each name."""
    ks = sorted({int(k) for r in rows for k in r["pass_at_k"]})
    top = str(ks[-1]) if ks else None
    bars_rows = [r for r in rows if r["policy"] not in BASELINES]
    fig = _figure(1.6 + 1.1 * max(1, len(bars_rows)), 3.8)
    ax = fig.add_subplot(1, 1, 1)
    xs = range(len(bars_rows))
    series: list[tuple[str, list[float], Any]] = [("ASR", [r["asr"] or 0 for r in bars_rows], None)]
    if all(r.get("asr_interval") for r in bars_rows):  # 95 % interval as error bars, in points
        series[0] = ("ASR (95 % interval)", series[0][1],
                     [[100 * ((r["asr"] or 0) - r["asr_interval"][0]) for r in bars_rows],
                      [100 * (r["asr_interval"][1] - (r["asr"] or 0)) for r in bars_rows]])
    if top:
        series.append((f"pass@{top}", [r["pass_at_k"].get(top) or 0 for r in bars_rows], None))
    if any(r.get("step_match") is not None for r in bars_rows):
        series.append(("step match", [r.get("step_match") or 0 for r in bars_rows], None))
    width = 0.8 / len(series)
    for i, (label, values, errors) in enumerate(series):
        bars = ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], [100 * v for v in values], width,
                      label=label, yerr=errors, capsize=2 if errors else 0)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    for r, style in ((r, {"random": "tab:red", "oracle": "tab:green"}[r["policy"]]) for r in rows
                     if r["policy"] in BASELINES):
        ax.axhline(100 * (r["asr"] or 0), color=style, linestyle="--", linewidth=1,
                   label=f"{r['policy']} ASR ({_n(r)})")
    ax.set_xticks(list(xs), [f"{r['policy']}\n{_n(r)}" for r in bars_rows], fontsize=7)
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_stages(rows: list[dict[str, Any]], path: Path, title: str = "Held-out ASR by stage") -> Path:
    fig = stages_figure(rows, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def curve_markdown(stage: str, curve: list[list[float]]) -> str:
    """A stage's training loss by optimizer step, inline, with the numbers under it."""
    fig = _figure(5.0, 2.6)
    ax = fig.add_subplot(1, 1, 1)
    steps, losses = [p[0] for p in curve], [p[1] for p in curve]
    ax.plot(steps, losses, marker="." if len(curve) < 40 else None, linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"{stage}: training loss", fontsize=9)
    fig.tight_layout()
    return (png_markdown(fig, f"{stage} loss curve") +
            f"\n\n{len(curve)} points, step {steps[0]}..{steps[-1]}, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
