"""Round 2 pilot evaluation on round 1's real held-out set (its heldout_eval_set snapshot and arena).
Usage: pilot_eval.py CHECKPOINT N_PROBLEMS SAMPLES TEMPERATURE [MAX_NEW_TOKENS]."""
import sys, json, time, collections, glob
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the repo root
import pyarrow.parquet as pq
from shopdistill_assets.sandbox import load_catalog, load_suite
from shopdistill_assets.eval.hf_policy import checkpoint_policy
from shopdistill_assets.eval.server import serve
from shopdistill_assets.eval.rollout import evaluate, RolloutConfig
ck = sys.argv[1]; n = int(sys.argv[2]); samples = int(sys.argv[3]); temp = float(sys.argv[4]); mnt = int(sys.argv[5]) if len(sys.argv) > 5 else 160
ARENA = Path("/tmp/dx/full/arena")
held = pq.read_table(glob.glob("/tmp/dx/full/lake/heldout_eval_set/.versions/*/*/part-00000.parquet")[0]).to_pylist()
ids = [h["suite_problem_id"] for h in held]
catalog = load_catalog(ARENA / "catalog")
byid = {p.problem_id: p for f in sorted((ARENA / "suites").glob("[psv]*.json")) for p in load_suite(f)}
problems = [byid[i] for i in ids if i in byid][:n]
print("held-out problems", len(problems), collections.Counter(p.category for p in problems), flush=True)
pol = checkpoint_policy(ck, max_new_tokens=mnt, batch_size=8)
t = time.time()
with serve(pol, model_name="m") as s:
    res = evaluate(s.url, "m", problems, catalog, RolloutConfig(samples=samples, concurrency=8, temperature=temp, max_steps=10, max_tokens=mnt))
su = res.summary()
print("eval s", round(time.time() - t), json.dumps({k: su[k] for k in ("asr", "pass_at_1", "pass_at_k")}))
print({k: (v["asr"], v["problems"]) for k, v in su["by_category"].items()})
print(collections.Counter(ep.failure_reason for ep in res.episodes))
for ep in res.episodes[:2]:
    print("----", ep.query[:100], ep.success, ep.failure_reason)
    for m in ep.messages[2:9]:
        print("  ", m["role"], (m.get("reasoning_content") or "")[:120], json.dumps(m.get("tool_calls") or m.get("content"))[:200])
