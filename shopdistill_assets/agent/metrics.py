"""Evaluation metrics: ASR, unbiased pass@k, per category, and the validator's final score.

pass@k follows Chen et al. 2021 (HumanEval): with n samples of which c succeed,
pass@k = 1 - C(n-c, k) / C(n, k), computed as a running product (no huge binomials), averaged
over problems. ASR is the mean success over all samples; with the same n for every problem it
equals pass@1.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shopdistill_assets.agent.judge import reasoning_coefficient as oro_coefficient

CATEGORIES = ("Product", "Shop", "Voucher")
K_VALUES = (1, 2, 4, 8)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: 1 - C(n-c, k)/C(n, k), as 1 - prod_{i=n-c+1..n}(1 - k/i)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def wilson_interval(rate: float | None, n: int | None, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval (95 % at z = 1.96) for a success rate over n independent units.

    For an ASR pass n = the number of problems, not episodes: the samples of one problem are
    correlated, and a problem's mean success lies in [0, 1], so the mean over n problems has
    variance at most rate(1 - rate)/n; the interval is conservative, and unlike a bootstrap over
    problems it keeps its width at a rate of 0 or 1 (0 of 30 problems: 0 to 11.4 %)."""
    if rate is None or not n:
        return None
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * (rate * (1 - rate) / n + z * z / (4 * n * n)) ** 0.5
    # The interval holds the rate; at 0 or 1 the rounding of centre - half (+-1e-17) must not
    # put a bound on the wrong side of it (a plot's error bar below 0 is refused).
    return min(rate, max(0.0, centre - half)), max(rate, min(1.0, centre + half))


def reasoning_coefficient(q: float) -> float:
    """The validator's coefficient on a judge score q: 1.0 if q >= 0.8 else 0.3 + 0.875 q (ORO's,
    clamped and rounded as it does; it lives with the judge)."""
    return oro_coefficient(q)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _per_problem(episodes: Sequence[Any]) -> dict[str, tuple[int, int]]:
    n: Counter[str] = Counter()
    c: Counter[str] = Counter()
    for ep in episodes:
        n[ep.problem_id] += 1
        c[ep.problem_id] += int(bool(ep.success))
    return {pid: (n[pid], c[pid]) for pid in n}


def pass_at_k_table(episodes: Sequence[Any], ks: Sequence[int] = K_VALUES) -> dict[str, float]:
    """Mean pass@k over problems, for each k in ks that every problem's sample count allows."""
    counts = _per_problem(episodes)
    if not counts:
        return {}
    n_min = min(n for n, _ in counts.values())
    return {str(k): sum(pass_at_k(n, c, k) for n, c in counts.values()) / len(counts) for k in ks if 1 <= k <= n_min}


def _group(episodes: Sequence[Any], ks: Sequence[int]) -> dict[str, Any]:
    successes = sum(1 for ep in episodes if ep.success)
    return {
        "asr": successes / len(episodes) if episodes else None,
        "pass_at_k": pass_at_k_table(episodes, ks),
        "problems": len({ep.problem_id for ep in episodes}),
        "samples": len(episodes),
        "successes": successes,
    }


def _search_queries(messages: Any) -> list[str]:
    """The `q` of every find_product call in a conversation (the model's output: anything may be
    malformed; what does not parse to a text query is skipped)."""
    from shopdistill_assets.agent.tool_calls import parse_arguments

    out = []
    for message in messages if isinstance(messages, list) else []:
        calls = message.get("tool_calls") if isinstance(message, dict) and message.get("role") == "assistant" else None
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or function.get("name") != "find_product":
                continue
            raw = function.get("arguments")  # stored turns carry JSON text (tool_calls.arguments_text)
            arguments = parse_arguments(raw) if isinstance(raw, str) else None
            if arguments is not None and isinstance(arguments.get("q"), str):
                out.append(arguments["q"])
    return out


def search_grounding(episodes: Sequence[Any]) -> dict[str, Any]:
    """How far the searches read the request: the share of search words (find_product `q`, as
    the catalogue's search tokenizes them) that the request contains, over every search of every
    episode, and the share of searches made only of request words. A policy that ignores the
    request and searches for plausible products scores near 0 however well formed its calls."""
    from shopdistill_assets.sandbox.search import tokenize

    searches = words = found = whole = 0
    for ep in episodes:
        request = set(tokenize(ep.query or ""))
        for q in _search_queries(getattr(ep, "messages", None)):
            tokens = tokenize(q)
            searches += 1
            words += len(tokens)
            hits = sum(t in request for t in tokens)
            found += hits
            whole += int(bool(tokens) and hits == len(tokens))
    return {"searches": searches, "word_share": found / words if words else None,
            "all_words_share": whole / searches if searches else None}


def compute_metrics(episodes: Sequence[Any], ks: Sequence[int] = K_VALUES) -> dict[str, Any]:
    """All metrics of one evaluation as a JSON-ready dict (k keys are strings)."""
    overall = _group(episodes, ks)
    by_cat: dict[str, list[Any]] = defaultdict(list)
    for ep in episodes:
        by_cat[ep.category].append(ep)
    categories = list(CATEGORIES) + sorted(c for c in by_cat if c not in CATEGORIES)
    judged = [ep.reasoning_score for ep in episodes if getattr(ep, "reasoning_score", None) is not None]
    q = _mean(judged)
    coef = reasoning_coefficient(q) if q is not None else None
    asr = overall["asr"]
    return {
        "asr": asr,
        "pass_at_1": overall["pass_at_k"].get("1"),
        "pass_at_k": overall["pass_at_k"],
        "by_category": {cat: _group(by_cat.get(cat, []), ks) for cat in categories},
        "mean_rule_score": _mean([ep.rule_score for ep in episodes]),
        "mean_gt": _mean([ep.gt for ep in episodes]),
        "format_valid_rate": _mean([1.0 if ep.format_valid else 0.0 for ep in episodes]),
        "mean_steps": _mean([float(ep.steps) for ep in episodes]),
        "mean_latency_s": _mean([ep.latency_s for ep in episodes]),
        "failure_reasons": dict(sorted(Counter(ep.failure_reason for ep in episodes if ep.failure_reason).items())),
        "search_grounding": search_grounding(episodes),
        # The validator: final = success rate x coefficient of the (mean) judge score.
        "reasoning_q": q,
        "reasoning_coef": coef,
        "final_score": round(asr * coef, 4) if asr is not None and coef is not None else None,  # ORO rounds
        "counts": {"problems": overall["problems"], "samples": overall["samples"],
                   "successes": overall["successes"], "judged": len(judged)},
    }


def _metrics_of(result: Any) -> dict[str, Any]:
    return result.metrics if hasattr(result, "metrics") else result


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def metrics_table(results_by_policy: Mapping[str, Any]) -> str:
    """A markdown table, one row per policy (EvalResult or metrics dict); rates in %."""
    metrics = {name: _metrics_of(r) for name, r in results_by_policy.items()}
    ks = sorted({int(k) for m in metrics.values() for k in m["pass_at_k"]})
    head = ["policy", "ASR", *[f"pass@{k}" for k in ks], *CATEGORIES, "rule score", "format valid", "mean steps",
            "final", "samples"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in metrics.items():
        cells = [name, _pct(m["asr"]), *[_pct(m["pass_at_k"].get(str(k))) for k in ks],
                 *[_pct(m["by_category"].get(c, {}).get("asr")) for c in CATEGORIES],
                 _pct(m["mean_rule_score"]), _pct(m["format_valid_rate"]),
                 "–" if m["mean_steps"] is None else f"{m['mean_steps']:.2f}", _pct(m["final_score"]),
                 str(m["counts"]["samples"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_asr(results_by_policy: Mapping[str, Any], path: str | Path) -> Path:
    """A grouped bar chart (overall ASR and per category, per policy) written as PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # no pyplot: no global backend state, thread-safe

    metrics = {name: _metrics_of(r) for name, r in results_by_policy.items()}
    groups = ["overall", *CATEGORIES]
    fig = Figure(figsize=(1.8 + 1.6 * len(groups), 4.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(metrics))
    for i, (name, m) in enumerate(metrics.items()):
        values = [m["asr"] or 0.0] + [(m["by_category"].get(c, {}).get("asr") or 0.0) for c in CATEGORIES]
        xs = [g + (i - (len(metrics) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, [100 * v for v in values], width, label=name)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 105)
    ax.set_ylabel("ASR (%)")
    ax.set_title("Held-out ASR by policy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
