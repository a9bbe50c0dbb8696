"""Round 4 pilot: an arena with PPD problems a day (benchmark defaults otherwise), the corpus path and
split through Dagster, the benchmark's base model, the real sft stage for STEPS steps, and policy_eval
on the first EVAL_LIMIT held-out problems x 2 samples (T 0.6), then the search grounding.
Env: BASE (another base model folder), POLICY (the eval partition's name), EXTRA (more benchmark
flags, e.g. --full-loss). A second call with the same OUT reuses its arena and corpus.
Usage: pilot.py OUT PPD STEPS [EVAL_LIMIT]"""
import sys, os, json
from pathlib import Path
REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO)); sys.path.insert(0, str(REPO / "benchmarks"))
import distill as D
out, ppd, steps = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
limit = int(sys.argv[4]) if len(sys.argv) > 4 else 20
args = D.parse_args(["--out", str(out), "--problems-per-day", str(ppd), "--sft-steps", str(steps), *os.environ.get("EXTRA", "").split()])
home = out.resolve()
os.environ.update(SHOPDISTILL_HOME=str(home), TOKENIZERS_PARALLELISM="false")
from datetime import date, timedelta
from shopdistill_assets.cli import CORPUS_ASSETS
from shopdistill_assets.policies_registry import PolicySpec, register
from shopdistill_assets.runner import materialize_days, materialize_policies, materialize_unpartitioned
from shopdistill_assets.sim import ArenaConfig, simulate
start = date(2026, 11, 1); days = [(start + timedelta(days=d)).isoformat() for d in range(args.days)]
if not (home / "models").exists():
    with D.phase("simulate"):
        s = simulate(ArenaConfig(out=home / "arena", start_day=start, days=args.days, seed=args.seed,
                                 traces_per_day=args.traces_per_day, problems_per_day=args.problems_per_day))
        print(s["products"], s["latent_problems"])
    res = D.resources_for(home)
    with D.phase("corpus"):
        for run in materialize_days(res, CORPUS_ASSETS, days, ops={"leak_clusters": {"heldout_share": args.heldout_share}}):
            D._checked(run, run.day)
        snap = D._checked(materialize_unpartitioned(res, ["train_corpus", "heldout_eval_set"]), "snap")
    gated = snap["train_corpus"]["version"]
    df = res["lake"].read_snapshot("train_corpus", gated)
    import polars as pl
    okr = df.filter(pl.col("score") >= 1)
    print("gated", df.height, "successful", okr.height, "distinct problems", okr["problem_id"].n_unique(), flush=True)
    with D.phase("base"):
        D.build_base_model(args, res["lake"], gated, home)
os.environ["SHOPDISTILL_BASE_MODEL"] = os.environ.get("BASE") or str(home / "models" / "qwen3-small")
res = D.resources_for(home)
if steps:
    with D.phase("sft"):
        D.train(res, ["sft_checkpoint"], {"sft_checkpoint": D.stage_ops(args, steps, args.sft_lr, only_successful=True)})
store = res["checkpoints"].store()
name = os.environ.get("POLICY", f"sft{steps}")
register(PolicySpec(name=name, checkpoint=str(store.local_path(store.latest("sft")))))
with D.phase("eval"):
    runs = materialize_policies(res, [name], ops={"policy_eval": {"samples": 2, "limit": limit, "max_steps": 10,
        "concurrency": 8, "batch_size": 8, "max_new_tokens": 160, **D.DEADLINES}})
    m = D._checked(runs[0], "eval").get("policy_eval", {})
    print("ASR", m.get("asr"), "pass@1", m.get("pass_at_1"))
import collections
from types import SimpleNamespace
from shopdistill_assets.eval.metrics import search_grounding
lake = res["lake"]
snap = max(s for s in lake.list_snapshots("policy_eval") if s.startswith(name + "__"))
df = lake.read_snapshot("policy_eval", snap)
print(search_grounding([SimpleNamespace(query=r["query"], messages=json.loads(r["messages"])) for r in df.iter_rows(named=True)]))
print(collections.Counter(df["failure_reason"].to_list()))
