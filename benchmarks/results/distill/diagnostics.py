"""Per-policy diagnostics from a distill run's stored policy_eval snapshots (no new evaluation):
format-valid episodes, steps, recommendations, failure reasons, and how far the searches read the
request (`metrics.search_grounding`, recomputed from the stored episodes, so runs made before
the metric existed get it too), and where an episode fails: how many episodes had an answer's
product id on a page a tool returned (the search found it) and how many recommended ids were ids
the episode had been shown (the copy). Usage: diagnostics.py LAKE_ROOT [POLICY ...] (policies evaluated
beside the run's own, e.g. a checkpoint registered by hand, after the run's)"""
import json
import re
import sys
from types import SimpleNamespace

from resources.lake import LakeResource
from shopdistill_assets.agent.metrics import search_grounding
from shopdistill_assets.evaluation.assets import heldout_version
from shopdistill_assets.split.heldout import HELDOUT_ASSET, rows_to_problems

lake = LakeResource(root=sys.argv[1])
answers = {p.problem_id: {str(r["product_id"]) for r in p.reward if isinstance(r, dict) and r.get("product_id")}
           for p in rows_to_problems(lake.read_snapshot(HELDOUT_ASSET, heldout_version(lake)).to_dicts())}
_SHOWN = re.compile(r'"product_id"\s*:\s*"([^"\\]+)"')


def shown_and_copied(problem_id: str, messages: list[dict]) -> tuple[bool | None, int, int]:
    """(an answer id was on a page the tools returned (None: the problem names no product),
    recommended ids, of them ids the episode had been shown)."""
    shown = {i for m in messages if m.get("role") == "tool" for i in _SHOWN.findall(str(m.get("content") or ""))}
    recommended = [i.strip() for m in messages for c in (m.get("tool_calls") or [])
                   if c.get("function", {}).get("name") == "recommend_product"
                   for i in str(json.loads(c["function"].get("arguments") or "{}").get("product_ids", "")
                                if c["function"].get("arguments", "").startswith("{") else "").split(",") if i.strip()]
    wanted = answers.get(problem_id)
    return (bool(wanted & shown) if wanted else None), len(recommended), sum(i in shown for i in recommended)


order = ["fair", "base", "sft_unfiltered", "sft", "resft", "teacher_sft", "kto", "dr_grpo", *sys.argv[2:]]
print("| policy | format-valid episodes | mean steps | episodes ending in a recommendation | search words from the "
      "request | searches made only of request words | episodes shown an answer | recommended ids shown "
      "before | failure reasons |")
print("|---|---|---|---|---|---|---|---|---|")
for name in order:
    snap = next((s for s in lake.list_snapshots("policy_eval") if s.startswith(f"{name}__")), None)
    if snap is None:
        continue
    s = lake.read_manifest("policy_eval", snap)["summary"]
    rows = list(lake.read_snapshot("policy_eval", snap).select("problem_id", "query", "messages").iter_rows(named=True))
    episodes = [SimpleNamespace(query=r["query"], messages=json.loads(r["messages"])) for r in rows]
    looks = [shown_and_copied(r["problem_id"], e.messages) for r, e in zip(rows, episodes, strict=True)]
    asked = [found for found, _, _ in looks if found is not None]
    ids_recommended, ids_copied = sum(n for _, n, _ in looks), sum(k for _, _, k in looks)
    g = search_grounding(episodes)
    fr = s["failure_reasons"]
    recommended = s["counts"]["successes"] + fr.get("item_mismatch", 0) + fr.get("too_few_products", 0)
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(fr.items(), key=lambda kv: -kv[1]))
    share = "–" if g["word_share"] is None else f"{100 * g['word_share']:.1f}% of {g['searches']}"
    whole = "–" if g["all_words_share"] is None else f"{100 * g['all_words_share']:.1f}%"
    print(f"| {name} | {100 * s['format_valid_rate']:.1f}% | {s['mean_steps']:.2f} | {recommended}/{s['counts']['samples']} "
          f"| {share} | {whole} | {sum(asked)}/{len(asked)} | {ids_copied}/{ids_recommended} | {reasons} |")
