"""The `shopdistill` command line."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

from shopdistill_assets.sim.arena import DEFAULT_MIX, ArenaConfig


def _mix(text: str) -> dict[str, float]:
    mix = dict(DEFAULT_MIX)
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in DEFAULT_MIX:
            raise argparse.ArgumentTypeError(f"unknown agent style {key!r}; styles: {', '.join(DEFAULT_MIX)}")
        mix[key] = float(value)
    return mix


def cmd_simulate(args: argparse.Namespace) -> int:
    from shopdistill_assets.sim import simulate

    cfg = ArenaConfig(
        out=Path(args.out), start_day=date.fromisoformat(args.start_day), days=args.days,
        traces_per_day=args.traces_per_day, seed=args.seed, mix=args.mix, n_products=args.products,
        corrupt_share=args.corrupt_share, reupload_share=args.reupload_share,
        other_dialect_share=args.other_dialect_share,
    )
    summary = simulate(cfg)
    print(json.dumps(summary, indent=1))
    return 0


def _arena_dir(args: argparse.Namespace) -> Path:
    from shopdistill_assets.instance import project_home

    return Path(args.arena) if getattr(args, "arena", None) else project_home() / "arena"


def cmd_serve(args: argparse.Namespace) -> int:
    from shopdistill_assets.eval.server import serve_forever
    from shopdistill_assets.heldout import load_problems
    from shopdistill_assets.sandbox import load_catalog

    if args.policy in ("oracle", "random"):
        from shopdistill_assets.eval.policies import OraclePolicy, RandomPolicy

        if args.policy == "oracle":
            arena = _arena_dir(args)
            problems = load_problems(Path(args.suites) if args.suites else arena / "suites")
            policy = OraclePolicy(problems, load_catalog(Path(args.catalog) if args.catalog else arena / "catalog"))
        else:
            policy = RandomPolicy(seed=args.seed)
        name = args.model_name or args.policy
    elif args.checkpoint:
        from shopdistill_assets.eval.hf_policy import HFPolicy

        policy = HFPolicy(args.checkpoint, max_new_tokens=args.max_new_tokens)
        name = args.model_name or Path(args.checkpoint).name
    else:
        raise SystemExit("serve: give a CHECKPOINT path or --policy oracle|random")
    serve_forever(policy, host=args.host, port=args.port, model_name=name)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from shopdistill_assets.eval.rollout import RolloutConfig, evaluate
    from shopdistill_assets.heldout import default_heldout_path, load_problems
    from shopdistill_assets.sandbox import load_catalog

    heldout = Path(args.heldout) if args.heldout else default_heldout_path()
    problems = load_problems(heldout)
    if args.limit:
        problems = problems[: args.limit]
    catalog = load_catalog(Path(args.catalog) if args.catalog else _arena_dir(args) / "catalog")
    cfg = RolloutConfig(samples=args.samples, max_steps=args.max_steps, concurrency=args.concurrency,
                        request_timeout_s=args.timeout)
    result = evaluate(args.endpoint, args.model, problems, catalog, cfg)
    print(json.dumps(result.summary(), indent=1, default=str))
    return 0


CORPUS_ASSETS = ["raw_firehose", "normalized_traces", "agentic_traces", "subtask_traces", "gated_traces",
                 "rejected_traces", "leak_clusters", "split_traces"]


def print_funnel(runs) -> None:
    header = f"{'day':<11} {'lines':>8} {'traces':>8} {'agentic':>8} {'subtask':>8} {'gated':>8} {'rejected':>8}  conservation"
    print(header)
    for run in runs:
        m = run.metadata
        if not run.success and not m:
            print(f"{run.day:<11} FAILED: {run.error}")
            continue
        cells = [m.get("normalized_traces", {}).get("in"), m.get("normalized_traces", {}).get("kept"),
                 m.get("agentic_traces", {}).get("kept"), m.get("subtask_traces", {}).get("kept"),
                 m.get("gated_traces", {}).get("kept"), m.get("rejected_traces", {}).get("rejected")]
        verdict = {True: "ok", False: "FAILED"}.get(run.checks.get("conservation"), "-")
        print(f"{run.day:<11} " + " ".join(f"{c if c is not None else '-':>8}" for c in cells) + f"  {verdict}")
        if not run.success:
            print(f"{'':<11} FAILED: {run.error}")


def cmd_corpus(args: argparse.Namespace) -> int:
    from shopdistill_assets.definitions import build_resources
    from shopdistill_assets.runner import materialize_days

    resources = build_resources(firehose_root=args.firehose, lake_root=args.lake, endpoint_url=args.endpoint_url)
    ops = {"leak_clusters": {"decontaminate": [str(Path(p).resolve()) for p in args.decontaminate]}} \
        if args.decontaminate else None
    runs = materialize_days(resources, CORPUS_ASSETS, sorted(set(args.day)), ops=ops)
    print_funnel(runs)
    for run in runs:
        leak = run.metadata.get("leak_clusters", {})
        if leak:
            print(f"{run.day:<11} leak: {leak.get('dagster/row_count')} problems in {leak.get('clusters')} clusters "
                  f"(train {leak.get('side/train', 0)}, heldout {leak.get('side/heldout', 0)}, "
                  f"excluded {leak.get('side/excluded', 0)}; largest {leak.get('largest_cluster')})")
    return 0 if all(r.success for r in runs) else 1


DEMO_DAYS = 3


def cmd_demo(args: argparse.Namespace) -> int:
    """Simulate an arena, run the corpus path and the split through Dagster, evaluate two baselines."""
    from shopdistill_assets.definitions import build_resources
    from shopdistill_assets.instance import project_home
    from shopdistill_assets.policies_registry import PolicySpec, register
    from shopdistill_assets.runner import materialize_days, materialize_policies, materialize_unpartitioned
    from shopdistill_assets.sim import simulate

    home = project_home()
    arena = home / "arena"
    start = date.fromisoformat(args.start_day)
    print(f"[1/5] simulating {DEMO_DAYS} arena days x {args.traces_per_day} traces into {arena}")
    simulate(ArenaConfig(out=arena, start_day=start, days=DEMO_DAYS, traces_per_day=args.traces_per_day,
                         seed=args.seed, problems_per_day=60))
    resources = build_resources(firehose_root=str(arena / "firehose"), lake_root=str(home / "lake"))
    days = [d.isoformat() for d in ArenaConfig(out=arena, start_day=start, days=DEMO_DAYS).day_list()]
    print("[2/5] corpus path and leak split, one Dagster run per day")
    runs = materialize_days(resources, CORPUS_ASSETS, days)
    print_funnel(runs)
    print("[3/5] train_corpus and heldout_eval_set snapshots")
    snap = materialize_unpartitioned(resources, ["train_corpus", "heldout_eval_set"],
                                     ops={"heldout_eval_set": {"suites": [str(arena / "suites")]}})
    corpus, heldout = snap.metadata.get("train_corpus", {}), snap.metadata.get("heldout_eval_set", {})
    print(f"      train_corpus {corpus.get('version')}: {corpus.get('dagster/row_count')} traces over "
          f"{corpus.get('days')} days")
    print(f"      heldout_eval_set {heldout.get('version')}: {heldout.get('dagster/row_count')} problems")
    print("[4/5] held-out evaluation of the scripted baselines, served over HTTP")
    for name in ("oracle", "random"):
        register(PolicySpec(name=name, scripted=name), home)
    evals = materialize_policies(resources, ["oracle", "random"], ops={"policy_eval": {"samples": args.samples}})
    for run in evals:
        m = run.metadata.get("policy_eval", {})
        status = "" if run.success else f"  FAILED: {run.error}"
        print(f"      {run.day:<8} ASR {m.get('asr', float('nan')):.3f}  pass@1 {m.get('pass_at_1', float('nan')):.3f}  "
              f"over {m.get('problems')} problems x {args.samples} samples{status}")
    ok = all(r.success for r in [*runs, snap, *evals])
    if ok and not args.skip_training:
        from shopdistill_assets.cli_train import DEMO_OPS, run_stages
        from shopdistill_assets.train import STAGE_ORDER

        print("[5/5] five training stages on a tiny Qwen3 (DeepSpeed on CPU), each evaluated on the held-out set")
        run_stages(STAGE_ORDER, DEMO_OPS, evaluate=True, eval_samples=2, eval_limit=None)
        print(f"      lineage of the last checkpoint: shopdistill lineage dr_grpo    "
              f"checkpoints: {home / 'checkpoints'}")
    print(f"\nLake: {home / 'lake'}    Dagster home: {home / 'dagster'}\n"
          "See it in the UI: make dev  (then open http://127.0.0.1:3000)")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shopdistill", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="write a simulated SN15 arena (catalog, suites, firehose days)")
    sim.add_argument("--out", required=True, help="output folder")
    sim.add_argument("--start-day", default="2026-11-01", help="first day, YYYY-MM-DD")
    sim.add_argument("--days", type=int, default=1)
    sim.add_argument("--traces-per-day", type=int, default=1000)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--mix", type=_mix, default=dict(DEFAULT_MIX),
                     help="agent style shares, e.g. agentic=0.6,subtask=0.2 (styles: %s)" % ", ".join(DEFAULT_MIX))
    sim.add_argument("--products", type=int, default=4000, help="catalog size")
    sim.add_argument("--corrupt-share", type=float, default=0.005)
    sim.add_argument("--reupload-share", type=float, default=0.01)
    sim.add_argument("--other-dialect-share", type=float, default=0.04)
    sim.set_defaults(func=cmd_simulate)

    demo = sub.add_parser("demo", help="the main job on the embedded default: a simulated arena, end to end")
    demo.add_argument("--start-day", default="2026-11-01")
    demo.add_argument("--traces-per-day", type=int, default=400)
    demo.add_argument("--samples", type=int, default=4, help="samples per held-out problem")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--skip-training", action="store_true", help="stop after the baselines' evaluation")
    demo.set_defaults(func=cmd_demo)

    cor = sub.add_parser("corpus", help="run the corpus assets for days through Dagster and print the funnel")
    cor.add_argument("--firehose", help="firehose root: folder or s3://bucket/prefix (default HOME/arena/firehose)")
    cor.add_argument("--lake", help="lake root: folder or s3://bucket/prefix (default HOME/lake)")
    cor.add_argument("--day", action="append", required=True, help="YYYY-MM-DD; repeat for several days")
    cor.add_argument("--endpoint-url", help="S3-compatible endpoint for s3:// roots")
    cor.add_argument("--decontaminate", action="append", default=[], metavar="PATH",
                     help="public test set (ShoppingBench synthesize_*_test.jsonl, suite files, or a folder); "
                          "matching problems become side=excluded. Repeatable")
    cor.set_defaults(func=cmd_corpus)

    srv = sub.add_parser("serve", help="serve an OpenAI-compatible chat endpoint with tool calling")
    srv.add_argument("checkpoint", nargs="?", help="a transformers checkpoint folder")
    srv.add_argument("--policy", choices=["oracle", "random"], help="a scripted policy instead of a checkpoint")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--model-name", help="the model name the endpoint reports")
    srv.add_argument("--arena", help="simulated arena folder (default HOME/arena), for the oracle's suites and catalog")
    srv.add_argument("--suites", help="suite file or folder the oracle knows the answers of")
    srv.add_argument("--catalog", help="catalog folder or documents.jsonl.gz")
    srv.add_argument("--seed", type=int, default=0)
    srv.add_argument("--max-new-tokens", type=int, default=512)
    srv.set_defaults(func=cmd_serve)

    ev = sub.add_parser("eval", help="evaluate an endpoint on the held-out set; prints one JSON object")
    ev.add_argument("--endpoint", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    ev.add_argument("--model", required=True)
    ev.add_argument("--samples", type=int, default=8)
    ev.add_argument("--heldout", help="held-out set: a heldout_eval_set snapshot folder, or suite files (default: the latest snapshot in the project home)")
    ev.add_argument("--arena", help="simulated arena folder (default HOME/arena), for the catalog")
    ev.add_argument("--catalog", help="catalog folder or documents.jsonl.gz")
    ev.add_argument("--limit", type=int, help="evaluate only the first N problems")
    ev.add_argument("--max-steps", type=int, default=25)
    ev.add_argument("--concurrency", type=int, default=8)
    ev.add_argument("--timeout", type=float, default=120.0, help="per-request timeout, seconds")
    ev.set_defaults(func=cmd_eval)

    from shopdistill_assets.cli_train import add_parsers as add_training_parsers

    add_training_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from shopdistill_assets.cli_train import CliError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"shopdistill: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
