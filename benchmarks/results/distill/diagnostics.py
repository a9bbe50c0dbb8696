"""Per-policy diagnostics from a distill run's stored policy_eval snapshots (no new evaluation):
format-valid episodes, steps, recommendations, failure reasons, and how far the searches read the
request (`metrics.search_grounding`, recomputed from the stored episodes, so runs made before
the metric existed get it too). Usage: diagnostics.py LAKE_ROOT"""
import json
import sys
from types import SimpleNamespace

from resources.lake import LakeResource
from shopdistill_assets.agent.metrics import search_grounding

lake = LakeResource(root=sys.argv[1])
order = ["fair", "base", "sft_unfiltered", "sft", "resft", "teacher_sft", "kto", "dr_grpo"]
print("| policy | format-valid episodes | mean steps | episodes ending in a recommendation | search words from the "
      "request | searches made only of request words | failure reasons |")
print("|---|---|---|---|---|---|---|")
for name in order:
    snap = next((s for s in lake.list_snapshots("policy_eval") if s.startswith(f"{name}__")), None)
    if snap is None:
        continue
    s = lake.read_manifest("policy_eval", snap)["summary"]
    episodes = [SimpleNamespace(query=r["query"], messages=json.loads(r["messages"]))
                for r in lake.read_snapshot("policy_eval", snap).select("query", "messages").iter_rows(named=True)]
    g = search_grounding(episodes)
    fr = s["failure_reasons"]
    recommended = s["counts"]["successes"] + fr.get("item_mismatch", 0) + fr.get("too_few_products", 0)
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(fr.items(), key=lambda kv: -kv[1]))
    share = "–" if g["word_share"] is None else f"{100 * g['word_share']:.1f}% of {g['searches']}"
    whole = "–" if g["all_words_share"] is None else f"{100 * g['all_words_share']:.1f}%"
    print(f"| {name} | {100 * s['format_valid_rate']:.1f}% | {s['mean_steps']:.2f} | {recommended}/{s['counts']['samples']} "
          f"| {share} | {whole} | {reasons} |")
