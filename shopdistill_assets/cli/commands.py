"""The `shopdistill` command line.

One function per command (`cmd_*`), registered in `build_parser`; `main` turns every error into
one line on stderr (what failed, where, how to fix it) and a non-zero exit. `--verbose` adds the
traceback and Dagster's own logs. Roots come from `settings` (SHOPDISTILL_* variables); options
such as `--firehose` and `--lake` set those same variables, so a run started here and one started
from the UI read the same places.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sys
import traceback
import warnings
from pathlib import Path

from shopdistill_assets import settings
from shopdistill_assets.cli import checks as cli_checks
from shopdistill_assets.cli.checks import CheckFailed, positive_int
from shopdistill_assets.cli.progress import Progress
from shopdistill_assets.core.days import DayError, check_days, parse_day
from shopdistill_assets.sim.arena import DEFAULT_MIX, ArenaConfig


class CLIError(Exception):
    """A user-facing failure: the message is the whole story, no traceback needed."""


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
        out=Path(args.out), start_day=parse_day(args.start_day), days=args.days,
        traces_per_day=args.traces_per_day, seed=args.seed, mix=args.mix, n_products=args.products,
        corrupt_share=args.corrupt_share, reupload_share=args.reupload_share,
        other_dialect_share=args.other_dialect_share,
    )
    with Progress("simulate", total=cfg.days, unit="days") as bar:
        summary = simulate(cfg, on_day=lambda day: bar.advance(note=f"{day} {cfg.traces_per_day} traces"))
    print(json.dumps(summary, indent=1))
    return 0


def _arena_dir(args: argparse.Namespace) -> Path:
    return Path(args.arena) if getattr(args, "arena", None) else Path(settings.resolve_roots().home) / "arena"


def _port_free(host: str, port: int) -> None:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CLIError(f"port {port} on {host} is already in use: stop what holds it or pick another "
                               f"with --port") from None
            raise CLIError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def _oracle(args: argparse.Namespace):
    from shopdistill_assets.agent.policies import OraclePolicy
    from shopdistill_assets.sandbox import load_catalog
    from shopdistill_assets.split.heldout import load_problems

    arena = _arena_dir(args)
    suites = Path(args.suites) if args.suites else arena / "suites"
    catalog = Path(args.catalog) if args.catalog else arena / "catalog"
    for what, path, flag in (("suites", suites, "--suites"), ("catalog", catalog, "--catalog")):
        if not path.exists():
            raise CLIError(f"the oracle needs the arena's {what}; nothing at {path}: pass {flag} PATH or --arena DIR, "
                           f"or write an arena first (`shopdistill simulate --out DIR` or `shopdistill demo`)")
    return OraclePolicy(load_problems(suites), load_catalog(catalog))


def cmd_serve(args: argparse.Namespace) -> int:
    from shopdistill_assets.agent.server import serve_forever

    if args.policy and args.checkpoint:
        raise CLIError("give a CHECKPOINT folder or --policy, not both")
    if args.policy == "oracle":
        policy, name = _oracle(args), args.model_name or "oracle"
    elif args.policy == "random":
        from shopdistill_assets.agent.policies import RandomPolicy

        policy, name = RandomPolicy(seed=args.seed), args.model_name or "random"
    elif args.checkpoint:
        checkpoint = Path(args.checkpoint)
        if not (checkpoint / "config.json").is_file():
            raise CLIError(f"no checkpoint at {checkpoint}: expected a transformers folder with config.json "
                           f"(e.g. HOME/checkpoints/<stage>/<version>)")
        from shopdistill_assets.agent.hf_policy import HFPolicy

        policy, name = HFPolicy(str(checkpoint), max_new_tokens=args.max_new_tokens), args.model_name or checkpoint.name
    else:
        raise CLIError("give a CHECKPOINT folder or --policy oracle|random")
    _port_free(args.host, args.port)
    print(f"serving {name} on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    serve_forever(policy, host=args.host, port=args.port, model_name=name)
    return 0


def _heldout_problems(args: argparse.Namespace):
    from shopdistill_assets.corpus.lake_sql import lake_resource
    from shopdistill_assets.split.heldout import HELDOUT_ASSET, load_problems, newest_heldout_version, rows_to_problems

    if args.heldout:
        path = Path(args.heldout)
        if not path.exists():
            raise CLIError(f"no held-out set at {path}: pass a heldout_eval_set snapshot folder or suite file(s)")
        return load_problems(path)
    lake = lake_resource()
    newest = newest_heldout_version(lake.list_snapshots(HELDOUT_ASSET),
                                    lambda v: lake.read_manifest(HELDOUT_ASSET, v).get("as_of_day", ""))
    if newest is None:
        raise CLIError(f"no {HELDOUT_ASSET} snapshot in the lake {lake.root}: run `shopdistill snapshot` "
                       f"(after `shopdistill corpus --day ...`), or pass --heldout PATH")
    return rows_to_problems(lake.read_snapshot(HELDOUT_ASSET, newest).to_dicts())


def cmd_eval(args: argparse.Namespace) -> int:
    from shopdistill_assets.agent.rollout import RolloutConfig, evaluate
    from shopdistill_assets.sandbox import load_catalog

    problems = _heldout_problems(args)
    if args.limit:
        problems = problems[: args.limit]
    catalog = Path(args.catalog) if args.catalog else _arena_dir(args) / "catalog"
    if not catalog.exists():
        raise CLIError(f"no catalog at {catalog}: pass --catalog PATH or --arena DIR")
    cli_checks.served_model(args.endpoint, args.model, timeout_s=min(args.timeout, 10.0))
    cfg = RolloutConfig(samples=args.samples, max_steps=args.max_steps, concurrency=args.concurrency,
                        request_timeout_s=args.timeout, episode_time_limit_s=args.episode_timeout,
                        tool_timeout_s=args.tool_timeout)
    with Progress(f"eval {len(problems)} problems x {args.samples} samples"):
        result = evaluate(args.endpoint, args.model, problems, load_catalog(catalog), cfg)
    summary = result.summary()
    print(json.dumps(summary, indent=1, default=str))
    errors = summary.get("errors", {})
    failed = errors.get("endpoint_error_episodes", 0)
    if result.episodes and failed == len(result.episodes):
        first = (errors.get("endpoint_errors") or ["no answer"])[0]
        raise CLIError(f"every one of {failed} episodes failed at the endpoint {args.endpoint} ({first}); "
                       f"is the server up and the model name right? (`shopdistill serve ...`)")
    return 0


CORPUS_ASSETS = ["raw_firehose", "normalized_traces", "agentic_traces", "subtask_traces", "gated_traces",
                 "rejected_traces", "leak_clusters", "split_traces"]
SNAPSHOT_ASSETS = ["train_corpus", "heldout_eval_set"]


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


def _days(args: argparse.Namespace) -> list[str]:
    """Every --day checked before any work, all problems reported at once."""
    problems, days = [], []
    for text in args.day:
        try:
            days += check_days([text], settings.start_date())
        except DayError as exc:
            problems.append(str(exc))
    if problems:
        raise CLIError("; ".join(problems))
    return sorted(set(days))


def cmd_corpus(args: argparse.Namespace) -> int:
    days = _days(args)
    from shopdistill_assets.cli.runner import materialize_days
    from shopdistill_assets.definitions import build_resources

    resources = build_resources(firehose_root=args.firehose, lake_root=args.lake, endpoint_url=args.endpoint_url)
    roots = settings.resolve_roots()
    cli_checks.firehose_days(roots.firehose, roots.endpoint_url, days)  # before any run: no day turns red
    ops = {"leak_clusters": {"decontaminate": [str(Path(p).resolve()) for p in args.decontaminate]}} \
        if args.decontaminate else None
    with Progress("corpus", total=len(days), unit="days") as bar:
        runs = materialize_days(resources, CORPUS_ASSETS, days, ops=ops, progress=bar)
    print_funnel(runs)
    for run in runs:
        leak = run.metadata.get("leak_clusters", {})
        if leak:
            print(f"{run.day:<11} leak: {leak.get('dagster/row_count')} problems in {leak.get('clusters')} clusters "
                  f"(train {leak.get('side/train', 0)}, heldout {leak.get('side/heldout', 0)}, "
                  f"excluded {leak.get('side/excluded', 0)}; largest {leak.get('largest_cluster')})")
    failed = [r.day for r in runs if not r.success]
    if failed:
        raise CLIError(f"{len(failed)} of {len(runs)} days failed: {', '.join(failed)} (FAILED lines above; "
                       f"--verbose for tracebacks; runbook: docs/operations.md)")
    if args.snapshot:
        return _snapshot(args)
    return 0


INGEST_SOURCES = ("oro-api", "folder", "s3")


def cmd_ingest(args: argparse.Namespace) -> int:
    """A day from a source into the corpus: `oro-api` lands it from ORO's public API first
    (oro_api_day writes the firehose day), `folder` / `s3` read the firehose root as it is."""
    import os

    days = _days(args)
    root = args.firehose or settings.resolve_roots().firehose
    if args.source in ("folder", "s3") and (args.source == "s3") != root.startswith("s3://"):
        raise CLIError(f"--source {args.source} wants a {'s3://' if args.source == 's3' else 'local'} firehose root, "
                       f"got {root!r} (pass --firehose)")
    from shopdistill_assets.cli.runner import materialize_days
    from shopdistill_assets.definitions import ORO_API_URL, ORO_LANDING, build_resources

    for var, value in ((ORO_API_URL, args.oro_api_url), (ORO_LANDING, args.landing)):
        if value:
            os.environ[var] = value if value.startswith(("http", "s3://")) else str(Path(value).resolve())
    resources = build_resources(firehose_root=args.firehose, lake_root=args.lake, endpoint_url=args.endpoint_url)
    assets = (["oro_api_day"] if args.source == "oro-api" else []) + CORPUS_ASSETS
    runs = materialize_days(resources, assets, days)
    for run in runs:
        landed = run.metadata.get("oro_api_day")
        if landed:
            print(f"{run.day:<11} oro-api: {landed.get('results_of_day')} results of the day, {landed.get('fetched')} "
                  f"artifacts fetched, {landed.get('already_landed')} already landed, "
                  f"{landed.get('dagster/row_count')} lines -> {landed.get('day_file')}")
    print_funnel(runs)
    failed = [r.day for r in runs if not r.success]
    if failed:
        raise CLIError(f"{len(failed)} of {len(runs)} days failed: {', '.join(failed)} (FAILED lines above; "
                       f"--verbose for tracebacks; docs/oro-api.md)")
    return 0


def _add_ingest_parser(sub) -> None:
    ing = sub.add_parser("ingest", help="a day from a source (ORO's public API, a folder, S3) through the corpus")
    ing.add_argument("--source", choices=INGEST_SOURCES, required=True)
    _roots(ing)
    ing.add_argument("--day", action="append", required=True, help="YYYY-MM-DD (UTC); repeat for several days")
    ing.add_argument("--oro-api-url", help="ORO API base URL (sets SHOPDISTILL_ORO_API_URL; "
                                           "the key comes from SHOPDISTILL_ORO_API_KEY only)")
    ing.add_argument("--landing", help="landing zone for ORO artifacts (sets SHOPDISTILL_ORO_LANDING; "
                                       "default <firehose root>/_oro_landing)")
    ing.set_defaults(func=cmd_ingest)


def _snapshot(args: argparse.Namespace) -> int:
    from shopdistill_assets.cli.runner import materialize_unpartitioned
    from shopdistill_assets.corpus.lake_sql import lake_resource
    from shopdistill_assets.definitions import build_resources

    resources = build_resources(lake_root=args.lake, endpoint_url=args.endpoint_url)
    lake = lake_resource()
    suites = args.suites or [p for p in os.environ.get(settings.SUITES, "").split(os.pathsep) if p]
    cli_checks.snapshot_inputs(lake, args.end_day, args.window_days, suites)
    train = {"window_days": args.window_days, **({"end_day": args.end_day} if args.end_day else {})}
    heldout = {"suites": [str(Path(p).resolve()) for p in args.suites]} if args.suites else {}
    with Progress("snapshot train_corpus + heldout_eval_set"):
        run = materialize_unpartitioned(resources, SNAPSHOT_ASSETS, ops={"train_corpus": train, "heldout_eval_set": heldout})
    for name in SNAPSHOT_ASSETS:
        m = run.metadata.get(name)
        if m:
            print(f"{name:<17} {m.get('version')}  {m.get('dagster/row_count')} rows  {m.get('path')}")
    if not run.success:
        raise CLIError(f"snapshot failed: {run.error}")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    if args.end_day:
        check_days([args.end_day], settings.start_date())
    return _snapshot(args)


def cmd_sql(args: argparse.Namespace) -> int:
    import duckdb

    from shopdistill_assets.corpus.lake_sql import connect, lake_resource

    settings.export_roots(lake=args.lake, endpoint_url=args.endpoint_url)
    con, tables = connect(lake_resource())
    if args.tables or not args.query:
        for name, parts in tables.items():
            print(f"{name}\t{parts} part files")
        return 0
    try:
        relation = con.sql(args.query)
    except duckdb.Error as exc:
        raise CLIError(f"query failed: {' '.join(str(exc).split())} (tables: {', '.join(tables) or 'none'})") from None
    if relation is None:
        return 0
    if args.format == "csv":
        relation.pl().write_csv(sys.stdout)
    elif args.format == "json":
        print(json.dumps(relation.pl().to_dicts(), default=str))
    else:
        relation.show(max_rows=args.max_rows, max_width=10_000)
    return 0


def cmd_policy(args: argparse.Namespace) -> int:
    from shopdistill_assets.agent.policies_registry import PolicySpec, register, registered

    if args.action == "list":
        for spec in registered():
            print(json.dumps(spec.__dict__, sort_keys=True))
        return 0
    if not args.name:
        raise CLIError("policy add NAME: give the policy a name")
    try:
        spec = PolicySpec(name=args.name, endpoint=args.endpoint, model=args.model, checkpoint=args.checkpoint,
                          scripted=args.scripted)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if spec.checkpoint:
        cli_checks.checkpoint_folder(spec.checkpoint)
    if spec.endpoint and not spec.model:
        raise CLIError("policy add --endpoint URL needs --model NAME (the model the endpoint serves)")
    path = register(spec, replace=args.replace)
    from shopdistill_assets.agent.policies_registry import policy_partitions
    from shopdistill_assets.instance import project_instance

    instance = project_instance()
    if spec.name not in instance.get_dynamic_partitions(policy_partitions.name):
        instance.add_dynamic_partitions(policy_partitions.name, [spec.name])
    print(f"policy {spec.name} registered at {path}; materialize policy_eval[{spec.name}] in the UI to evaluate it")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    print(settings.describe(settings.resolve_roots()))
    return 0


DEMO_DAYS = 3


def cmd_demo(args: argparse.Namespace) -> int:
    """Simulate an arena, run the corpus path and the split through Dagster, evaluate two baselines."""
    from shopdistill_assets.agent.policies_registry import PolicySpec, register
    from shopdistill_assets.cli.runner import materialize_days, materialize_policies, materialize_unpartitioned
    from shopdistill_assets.definitions import build_resources
    from shopdistill_assets.sim import simulate

    home = Path(settings.export_roots().home)
    arena = home / "arena"
    start = parse_day(args.start_day)
    print(f"[1/5] simulating {DEMO_DAYS} arena days x {args.traces_per_day} traces into {arena}")
    with Progress("      simulate", total=DEMO_DAYS, unit="days") as bar:
        simulate(ArenaConfig(out=arena, start_day=start, days=DEMO_DAYS, traces_per_day=args.traces_per_day,
                             seed=args.seed, problems_per_day=60), on_day=lambda day: bar.advance(note=str(day)))
    resources = build_resources(firehose_root=str(arena / "firehose"), lake_root=str(home / "lake"))
    days = [d.isoformat() for d in ArenaConfig(out=arena, start_day=start, days=DEMO_DAYS).day_list()]
    print("[2/5] corpus path and leak split, one Dagster run per day")
    with Progress("      corpus", total=len(days), unit="days") as bar:
        runs = materialize_days(resources, CORPUS_ASSETS, days, progress=bar)
    print_funnel(runs)
    print("[3/5] train_corpus and heldout_eval_set snapshots")
    with Progress("      snapshots"):
        snap = materialize_unpartitioned(resources, SNAPSHOT_ASSETS,
                                         ops={"heldout_eval_set": {"suites": [str(arena / "suites")]}})
    corpus, heldout = snap.metadata.get("train_corpus", {}), snap.metadata.get("heldout_eval_set", {})
    print(f"      train_corpus {corpus.get('version')}: {corpus.get('dagster/row_count')} traces over "
          f"{corpus.get('days')} days")
    print(f"      heldout_eval_set {heldout.get('version')}: {heldout.get('dagster/row_count')} problems")
    print("[4/5] held-out evaluation of the scripted baselines, served over HTTP")
    for name in ("oracle", "random"):
        register(PolicySpec(name=name, scripted=name), home, replace=True)
    with Progress("      policy_eval", total=2, unit="policies") as bar:
        evals = materialize_policies(resources, ["oracle", "random"], ops={"policy_eval": {"samples": args.samples}},
                                     progress=bar)
    for run in evals:
        m = run.metadata.get("policy_eval", {})
        status = "" if run.success else f"  FAILED: {run.error}"
        print(f"      {run.day:<8} ASR {m.get('asr', float('nan')):.3f}  pass@1 {m.get('pass_at_1', float('nan')):.3f}  "
              f"over {m.get('problems')} problems x {args.samples} samples{status}")
    ok = all(r.success for r in [*runs, snap, *evals])
    if ok and not args.skip_training:
        from shopdistill_assets.cli.train import DEMO_OPS, run_stages
        from shopdistill_assets.training.stages import STAGE_ORDER

        print("[5/5] five training stages on a tiny Qwen3 (DeepSpeed on CPU), each evaluated on the held-out set")
        run_stages(STAGE_ORDER, DEMO_OPS, evaluate=True, eval_samples=2, eval_limit=None)
        print(f"      lineage of the last checkpoint: shopdistill lineage dr_grpo    "
              f"checkpoints: {home / 'checkpoints'}")
    print(f"\nLake: {home / 'lake'}    Dagster home: {home / 'dagster'}\n"
          "See it in the UI: make dev  (then open http://127.0.0.1:3000)")
    return 0 if ok else 1


def _roots(p: argparse.ArgumentParser, firehose: bool = True) -> None:
    if firehose:
        p.add_argument("--firehose", help="firehose root: folder or s3://bucket/prefix (sets SHOPDISTILL_FIREHOSE)")
    p.add_argument("--lake", help="lake root: folder or s3://bucket/prefix (sets SHOPDISTILL_LAKE)")
    p.add_argument("--endpoint-url", help="S3-compatible endpoint for s3:// roots (sets SHOPDISTILL_S3_ENDPOINT_URL)")


def _snapshot_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--end-day", help="last day of the train window (default: the latest split day)")
    p.add_argument("--window-days", type=int, default=30, help="days in the train window")
    p.add_argument("--suites", action="append", default=[], metavar="PATH",
                   help="suite files or folders with ground truth (default SHOPDISTILL_SUITES or HOME/arena/suites)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shopdistill", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="tracebacks and Dagster's logs on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="write a simulated SN15 arena (catalog, suites, firehose days)")
    sim.add_argument("--out", required=True, help="output folder")
    sim.add_argument("--start-day", default="2026-11-01", help="first day, YYYY-MM-DD")
    sim.add_argument("--days", type=positive_int, default=1)
    sim.add_argument("--traces-per-day", type=positive_int, default=1000)
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

    cor = sub.add_parser("corpus", help="run the corpus and split assets for days through Dagster; print the funnel")
    _roots(cor)
    cor.add_argument("--day", action="append", required=True, help="YYYY-MM-DD; repeat for several days")
    cor.add_argument("--decontaminate", action="append", default=[], metavar="PATH",
                     help="public test set (ShoppingBench synthesize_*_test.jsonl, suite files, or a folder); "
                          "matching problems become side=excluded. Repeatable")
    cor.add_argument("--snapshot", action="store_true", help="then build train_corpus and heldout_eval_set")
    _snapshot_options(cor)
    cor.set_defaults(func=cmd_corpus)
    _add_ingest_parser(sub)

    snap = sub.add_parser("snapshot", help="build the train_corpus and heldout_eval_set snapshots from the lake")
    _roots(snap, firehose=False)
    _snapshot_options(snap)
    snap.set_defaults(func=cmd_snapshot)

    sql = sub.add_parser("sql", help="query the lake with DuckDB: one view per lake table")
    _roots(sql, firehose=False)
    sql.add_argument("query", nargs="?", help="SQL; without it, the tables are listed")
    sql.add_argument("--tables", action="store_true", help="list the views and their part files")
    sql.add_argument("--format", choices=["table", "csv", "json"], default="table")
    sql.add_argument("--max-rows", type=int, default=100, help="rows shown in table format")
    sql.set_defaults(func=cmd_sql)

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
    ev.add_argument("--heldout", help="held-out set: a heldout_eval_set snapshot folder, or suite files "
                                      "(default: the newest snapshot in the lake)")
    ev.add_argument("--arena", help="simulated arena folder (default HOME/arena), for the catalog")
    ev.add_argument("--catalog", help="catalog folder or documents.jsonl.gz")
    ev.add_argument("--limit", type=int, help="evaluate only the first N problems")
    ev.add_argument("--max-steps", type=int, default=25)
    ev.add_argument("--concurrency", type=int, default=8)
    ev.add_argument("--timeout", type=float, default=120.0,
                    help="per-request deadline, seconds: the whole reply, however slowly it arrives")
    ev.add_argument("--episode-timeout", type=float, default=300.0,
                    help="per-episode deadline, seconds: every request and tool call of one episode")
    ev.add_argument("--tool-timeout", type=float, default=10.0, help="per sandbox tool call deadline, seconds")
    ev.set_defaults(func=cmd_eval)

    pol = sub.add_parser("policy", help="register a policy for policy_eval (adds its Dagster partition)")
    pol.add_argument("action", choices=["add", "list"])
    pol.add_argument("name", nargs="?", help="letters, digits, _ . -")
    pol.add_argument("--endpoint", help="OpenAI-compatible base URL (with --model)")
    pol.add_argument("--model", help="model name at the endpoint")
    pol.add_argument("--checkpoint", help="a transformers checkpoint folder, served in-process")
    pol.add_argument("--scripted", choices=["oracle", "random"])
    pol.add_argument("--replace", action="store_true", help="overwrite a policy of the same name")
    pol.set_defaults(func=cmd_policy)

    env = sub.add_parser("env", help="print the roots every process resolves (SHOPDISTILL_* variables)")
    env.set_defaults(func=cmd_env)

    from shopdistill_assets.cli.train import add_parsers as add_training_parsers

    add_training_parsers(sub)
    return parser


def describe_error(exc: BaseException) -> str:
    """One line: the error's own words, with its kind where the words alone are not enough."""
    from shopdistill_assets.agent.policies_registry import PolicyExists
    from shopdistill_assets.cli.train import CliError

    if isinstance(exc, (CLIError, CliError, DayError, CheckFailed, PolicyExists)):
        text = str(exc)
    elif isinstance(exc, FileNotFoundError) and exc.filename:
        text = f"not found: {exc.filename}"
    elif type(exc).__module__.startswith("botocore"):
        text = f"S3: {exc}"
    else:
        text = f"{type(exc).__name__}: {exc} (run with --verbose for the traceback)"
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from shopdistill_assets.cli import runner

    runner.RUN_TAGS = {"shopdistill/command": args.command, "shopdistill/trigger": "cli"}
    if args.verbose:
        runner.LOG_LEVEL = "INFO"
    else:
        warnings.simplefilter("ignore")  # Dagster's beta/preview notices are not the user's problem
    try:
        if args.command != "env":
            settings.start_date()  # a bad SHOPDISTILL_START_DATE is named as such, before any work
        return args.func(args)
    except KeyboardInterrupt:
        print(f"shopdistill {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"shopdistill {args.command}: error: {describe_error(exc)}", file=sys.stderr)
        return 1
