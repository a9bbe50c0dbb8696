"""The distillation report: held-out metrics per stage, each row naming what made its numbers.

One row per policy (the fair ceiling, the base model, the ablation, every stage): its
checkpoint (stage/version), the train_corpus snapshot behind it and that snapshot's source
(gated or unfiltered), what the stage trained on (dataset, rows, steps, tokens), and held-out
ASR, pass@1, pass@k and ASR per category, each ASR with its 95 % interval (`metrics.wilson_interval`
over problems), and three readings of why: the teacher-forced next-step match on the fair policy's
trajectories (`eval.step_match`, dense where ASR sits at the floor) and, from it, the share of
the fair policy's recommendations the policy makes with the same ids, the share of format-valid
episodes and the share of search words taken from the request (`metrics.search_grounding`).
`targets` checks the issue's goals against the rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shopdistill_assets.agent.metrics import wilson_interval

INTERVAL_NOTE = ("ASR intervals: 95 % Wilson score intervals with n = the number of held-out problems, not episodes: "
                 "the samples of one problem are correlated (the same request, the same searches), and a problem's "
                 "mean success lies in [0, 1], so treating problems as the units is conservative; a bootstrap over "
                 "problems was not chosen because it collapses to a zero-width interval at an ASR of 0 or 1. Step "
                 "match: the policy's next call after each prefix of the fair policy's held-out trajectory, scored "
                 "(1 + argument-key Jaccard + share of argument values matched) / 3, 0 for another tool; greedy "
                 "decoding; averaged over a problem's steps, then over problems. Recommendation right: the share of the fair "
                 "policy's recommend_product steps at which the policy, given the same prefix, recommends exactly the "
                 "same ids.")


def _interval(group: dict[str, Any]) -> list[float] | None:
    problems = group.get("problems") or (group.get("counts") or {}).get("problems")
    ci = wilson_interval(group.get("asr"), problems)
    return list(ci) if ci else None


def row(policy: str, summary: dict[str, Any], lineage: dict[str, Any] | None = None,
        corpus_source: str | None = None, note: str = "", step_match: dict[str, Any] | None = None) -> dict[str, Any]:
    """A report row from a policy_eval summary, (for checkpoints) the checkpoint's lineage and
    the policy's `eval.step_match` result."""
    lineage = lineage or {}
    checkpoint, dataset, training = lineage.get("checkpoint") or {}, lineage.get("dataset") or {}, lineage.get("training") or {}
    categories = {c: v for c, v in (summary.get("by_category") or {}).items() if isinstance(v, dict)}
    by_category = {c: v.get("asr") for c, v in categories.items()}
    return {
        "policy": policy, "note": note,
        "checkpoint": f"{checkpoint['stage']}/{checkpoint['version']}" if checkpoint else "",
        "corpus": (lineage.get("corpus") or {}).get("version") or "", "corpus_source": corpus_source or "",
        "dataset": f"{dataset.get('asset')} {dataset.get('version')}" if dataset else "",
        "rows": training.get("rows", 0 if training.get("trained") is False else None), "steps": training.get("steps"),
        "tokens": training.get("tokens"), "not_trained": training.get("reason") if training.get("trained") is False else None,
        "asr": summary.get("asr"), "pass_at_1": summary.get("pass_at_1"), "pass_at_k": summary.get("pass_at_k") or {},
        "asr_interval": _interval(summary),
        "by_category": by_category, "by_category_interval": {c: _interval(v) for c, v in categories.items()},
        "problems": (summary.get("counts") or {}).get("problems"),
        "samples": (summary.get("counts") or {}).get("samples"),  # episodes
        "step_match": (step_match or {}).get("step_match"), "step_match_steps": (step_match or {}).get("steps"),
        # the copy apart from the protocol: at the fair policy's recommendation, the right ids
        "recommendation_right": (((step_match or {}).get("by_tool") or {}).get("recommend_product") or {}).get("exact"),
        # why an ASR is what it is: well-formed episodes, and searches that read the request
        "format_valid": summary.get("format_valid_rate"),
        "search_words_from_request": (summary.get("search_grounding") or {}).get("word_share"),
    }


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _rate(value: float | None, interval: list[float] | None) -> str:
    """A rate in points with its interval: "12.5 [5.1–27.0]"."""
    if value is None or not interval:
        return _pct(value)
    return f"{_pct(value)} [{_pct(interval[0])}–{_pct(interval[1])}]"


def top_k(rows: list[dict[str, Any]]) -> str | None:
    ks = sorted({int(k) for r in rows for k in r["pass_at_k"]})
    return str(ks[-1]) if ks else None


def gap(r: dict[str, Any], k: str | None) -> float | None:
    if k is None or r["pass_at_k"].get(k) is None or r["pass_at_1"] is None:
        return None
    return r["pass_at_k"][k] - r["pass_at_1"]


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: metrics in points (%), then what each number was measured on."""
    k = top_k(rows)
    head = ["policy", "ASR [95 %]", "pass@1", f"pass@{k}", f"pass@{k} − pass@1", "Product", "Shop", "Voucher",
            "step match", "recommendation right (teacher-forced)", "format-valid episodes", "search words from the request", "checkpoint", "corpus (source)", "trained on", "steps", "tokens"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        corpus = f"`{r['corpus']}` ({r['corpus_source']})" if r["corpus"] else r["note"]
        trained = f"{r['dataset']} ({r['rows']} rows)" if r["dataset"] else ""
        cells = [r["policy"], _rate(r["asr"], r.get("asr_interval")), _pct(r["pass_at_1"]),
                 _pct(r["pass_at_k"].get(k) if k else None), _pct(gap(r, k)),
                 *[_rate(r["by_category"].get(c), (r.get("by_category_interval") or {}).get(c))
                   for c in ("Product", "Shop", "Voucher")],
                 _pct(r.get("step_match")), _pct(r.get("recommendation_right")), _pct(r.get("format_valid")),
                 _pct(r.get("search_words_from_request")),
                 f"`{r['checkpoint']}`" if r["checkpoint"] else "", corpus, trained,
                 "" if r["steps"] is None else str(r["steps"]), "" if r["tokens"] is None else f"{r['tokens']:,}"]
        if r.get("not_trained"):
            cells[-2:] = ["not trained", r["not_trained"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def targets(rows: list[dict[str, Any]], chain: list[str], base: str = "base", sft: str = "sft",
            resft: str = "resft", ablation: str = "sft_unfiltered") -> list[tuple[str, bool, str]]:
    """The issue's goals, each (goal, reached, the numbers)."""
    by = {r["policy"]: r for r in rows}
    k = top_k(rows)
    out = []
    if base in by and sft in by:
        gain = (by[sft]["asr"] - by[base]["asr"]) * 100
        out.append(("SFT >= +25 points held-out ASR over the base", gain >= 25, f"{gain:+.1f} points"))
    steps = [s for s in chain if s in by]
    drops = [f"{a} {_pct(by[a]['asr'])} -> {b} {_pct(by[b]['asr'])}" for a, b in zip(steps, steps[1:])
             if by[b]["asr"] < by[a]["asr"]]
    flat = "" if any(by[s]["asr"] for s in steps[1:]) else " (every stage at 0.0: vacuous)"
    out.append(("each later stage not below the one before", not drops, "; ".join(drops) or f"no drop{flat}"))
    if sft in by and resft in by and k:
        before, after = gap(by[sft], k), gap(by[resft], k)
        if before is not None and after is not None:
            out.append((f"pass@{k} − pass@1 narrowed after rejection re-SFT", after < before,
                        f"{_pct(before)} -> {_pct(after)} points"))
    if sft in by and ablation in by:
        out.append(gated_ahead(by[sft], by[ablation]))
    return out


def _separate(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The two ASR intervals do not overlap."""
    ia, ib = a.get("asr_interval"), b.get("asr_interval")
    return bool(ia and ib) and (ia[0] > ib[1] or ib[0] > ia[1])


def gated_ahead(gated: dict[str, Any], unfiltered: dict[str, Any]) -> tuple[str, bool, str]:
    """On ASR where the intervals separate, on step match otherwise (the issue's rule)."""
    goal = "gated corpus ahead of the unfiltered one (same token budget)"
    asr = f"ASR {_rate(gated['asr'], gated.get('asr_interval'))} vs {_rate(unfiltered['asr'], unfiltered.get('asr_interval'))}"
    if _separate(gated, unfiltered) or gated.get("step_match") is None or unfiltered.get("step_match") is None:
        return goal, gated["asr"] > unfiltered["asr"], asr
    return (goal, gated["step_match"] > unfiltered["step_match"],
            f"{asr} (intervals overlap); step match {_pct(gated['step_match'])} vs {_pct(unfiltered['step_match'])}")


def write(rows: list[dict[str, Any]], folder: Path, header: str, goals: list[tuple[str, bool, str]],
          extra: dict[str, Any]) -> dict[str, Path]:
    """report.md (header, table, goals), report.png, report.json in `folder`."""
    from shopdistill_assets.training.report import plot_stages

    folder.mkdir(parents=True, exist_ok=True)
    lines = [header.rstrip(), "", table(rows), "Goals:", ""]
    lines += [f"- [{'x' if ok else ' '}] {goal}: {numbers}" for goal, ok, numbers in goals]
    lines += ["", INTERVAL_NOTE]
    (folder / "report.md").write_text("\n".join(lines) + "\n")
    png = plot_stages(rows, folder / "report.png", title="Held-out ASR, pass@k and step match by stage (simulated arena)")
    (folder / "report.json").write_text(json.dumps({"rows": rows, "goals": goals, **extra}, indent=1, default=str))
    return {"markdown": folder / "report.md", "png": png, "json": folder / "report.json"}
