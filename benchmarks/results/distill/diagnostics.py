"""Per-policy diagnostics from a distill run's stored policy_eval manifests (no new evaluation)."""
import sys
from resources.lake import LakeResource

lake = LakeResource(root=sys.argv[1])
order = ["fair", "base", "sft_unfiltered", "sft", "resft", "teacher_sft", "kto", "dr_grpo"]
print("| policy | format-valid episodes | mean steps | episodes ending in a recommendation | failure reasons |")
print("|---|---|---|---|---|")
for name in order:
    snap = next(s for s in lake.list_snapshots("policy_eval") if s.startswith(f"{name}__"))
    s = lake.read_manifest("policy_eval", snap)["summary"]
    fr = s["failure_reasons"]
    recommended = s["counts"]["successes"] + fr.get("item_mismatch", 0) + fr.get("too_few_products", 0)
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(fr.items(), key=lambda kv: -kv[1]))
    print(f"| {name} | {100 * s['format_valid_rate']:.1f}% | {s['mean_steps']:.2f} | {recommended}/{s['counts']['samples']} | {reasons} |")
