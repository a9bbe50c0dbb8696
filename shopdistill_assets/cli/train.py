"""`shopdistill train` and `shopdistill lineage`: the training stages and what made a checkpoint."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shopdistill_assets import settings
from shopdistill_assets.cli.checks import json_object
from shopdistill_assets.training.stages import STAGE_ORDER, STAGES

SNAPSHOT_ASSETS = ["train_corpus", "train_problems", "train_rollouts", "teacher_rollouts", "resft_dataset",
                   "teacher_sft_dataset", "kto_dataset", "grpo_dataset"]


# The demo's stages on the tiny model: a few optimizer steps each, small rollouts (CPU minutes).
DEMO_OPS: dict[str, Any] = {
    "sft_checkpoint": {"max_steps": 8, "learning_rate": 1e-3},
    "resft_checkpoint": {"max_steps": 4, "learning_rate": 1e-3},
    "teacher_sft_checkpoint": {"max_steps": 4, "learning_rate": 1e-3},
    "kto_checkpoint": {"max_steps": 2, "per_device_train_batch_size": 2},
    "dr_grpo_checkpoint": {"max_steps": 2, "num_generations": 2, "max_completion_length": 48,
                           "per_device_train_batch_size": 2},
    "train_problems": {"limit": 8},
    "train_rollouts": {"samples": 2, "max_new_tokens": 96, "max_steps": 4},
    "teacher_rollouts": {"samples": 1},
    "kto_dataset": {"max_rows": 64, "max_steps_per_trace": 2},
}


class CliError(Exception):
    """A one-line, actionable error for the command line."""


def _stage_ops(args: argparse.Namespace) -> dict[str, Any]:
    trainer: dict[str, Any] = {}
    if args.max_steps is not None:
        trainer["max_steps"] = args.max_steps
    if args.trainer_json:
        trainer["trainer_json"] = args.trainer_json
    if args.deepspeed:
        trainer["deepspeed"] = args.deepspeed
    ops: dict[str, Any] = {f"{s}_checkpoint": dict(trainer) for s in STAGES}
    if args.rollout_samples is not None:
        ops["train_rollouts"] = {"samples": args.rollout_samples}
    if args.problems is not None:
        ops["train_problems"] = {"limit": args.problems}
    return ops


def _first_line(error: str | None) -> str:
    text = (error or "run failed").strip()
    for marker in ("Failure: ", "Error: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.splitlines()[0][:400]


def run_stages(stages: list[str], ops: dict[str, Any], evaluate: bool, eval_samples: int,
               eval_limit: int | None) -> list[dict[str, Any]]:
    """Materialize the stages in order (each with its training data), then evaluate each."""
    from shopdistill_assets.cli.runner import materialize_policies, materialize_unpartitioned
    from shopdistill_assets.definitions import build_resources

    resources = build_resources()
    # The jobs' raw output goes to each stage's stage.log; the terminal gets one line a stage.
    from shopdistill_assets.training.launch import launcher_from_env

    resources["launcher"] = launcher_from_env(echo_output=False)
    from shopdistill_assets.cli.progress import Progress

    results = []
    for name in stages:
        stage = STAGES[name]
        selection = [*stage.rollouts, stage.asset]
        with Progress(f"train {name} ({stages.index(name) + 1}/{len(stages)} stages)"):
            run = materialize_unpartitioned(resources, selection, ops={k: v for k, v in ops.items() if k in selection})
        if not run.success:
            raise CliError(f"train --stage {name}: {_first_line(run.error)}")
        meta = run.metadata.get(stage.asset, {})
        print(f"{name:<12} {meta.get('status')}: checkpoint {name}/{meta.get('version')} from {meta.get('parent')} "
              f"on {meta.get('dataset')} ({meta.get('dataset_rows')} rows)"
              + (f"; {meta.get('steps')} steps, loss {meta.get('first_loss'):.4f} -> {meta.get('final_loss'):.4f}, "
                 f"{meta.get('tokens_per_s')} tokens/s" if meta.get("steps") else f"; {meta.get('reason')}"))
        results.append({"stage": name, **meta})
    if evaluate:
        names = (["base"] if "sft" in stages else []) + stages
        with Progress("policy_eval", total=len(names), unit="policies") as bar:
            evals = materialize_policies(resources, names, ops={"policy_eval": {"samples": eval_samples,
                                                                                "limit": eval_limit}}, progress=bar)
        for run in evals:
            m = run.metadata.get("policy_eval", {})
            if not run.success:
                raise CliError(f"policy_eval {run.day}: {_first_line(run.error)}")
            print(f"{run.day:<12} held-out ASR {m.get('asr', 0):.3f}  pass@1 {m.get('pass_at_1', 0):.3f}  "
                  f"over {m.get('problems')} problems x {eval_samples} samples")
        report = materialize_unpartitioned(resources, ["training_report"])
        if report.success:
            print(f"report: {report.metadata.get('training_report', {}).get('plot_file')}")
    return results


def cmd_train(args: argparse.Namespace) -> int:
    stages = STAGE_ORDER if args.all else args.stage
    if not stages:
        raise CliError("train: give --stage NAME (repeatable) or --all; stages: " + ", ".join(STAGE_ORDER))
    stages = sorted(set(stages), key=STAGE_ORDER.index)
    run_stages(stages, _stage_ops(args), evaluate=args.eval, eval_samples=args.eval_samples, eval_limit=args.eval_limit)
    return 0


def _store():
    """The checkpoint store and the lake the SHOPDISTILL_* variables name (outside a run)."""
    from resources.checkpoint_store import CheckpointStore
    from shopdistill_assets.corpus.lake_sql import lake_resource

    roots = settings.resolve_roots()
    return CheckpointStore(roots.checkpoints, endpoint_url=roots.endpoint_url), lake_resource()


def lineage_of(ident: str) -> dict[str, Any]:
    """The chain of a checkpoint: itself and its ancestors, and the days and files behind all of them."""
    from resources.checkpoint_store import CheckpointNotFound
    from shopdistill_assets.training.lineage import chain, merge_files

    store, _ = _store()
    try:
        ref = store.resolve(ident)
    except (CheckpointNotFound, ValueError) as exc:
        raise CliError(f"lineage: {exc}") from None
    links = chain(store.all_lineage(), ref.stage, ref.version)
    days = sorted({d for link in links for d in link.get("days", [])})
    files = merge_files(*[link.get("firehose_files", {}) for link in links])
    return {"checkpoint": ref.to_dict(), "chain": links, "days": days, "firehose_files": files}


def print_lineage(result: dict[str, Any]) -> None:
    for depth, link in enumerate(result["chain"]):
        ck, data, training = link["checkpoint"], link["dataset"], link.get("training", {})
        pad = "  " * depth + ("<- " if depth else "")
        status = (f"{training.get('steps')} steps, loss {training.get('final_loss')}" if training.get("trained", True)
                  else f"not trained: {training.get('reason')}")
        print(f"{pad}checkpoint {ck['stage']}/{ck['version']}  sha256 {ck['sha256'][:16]}…  ({status})")
        print(f"{'  ' * (depth + 1)}trained on {data.get('asset')} {data.get('version')} ({data.get('rows')} rows, "
              f"manifest sha256 {str(data.get('manifest_sha256'))[:12]}…)")
        if link["parent"].get("base_model"):
            print(f"{'  ' * (depth + 1)}<- base model {link['parent']['base_model']}")
    corpora = {(l.get("corpus") or {}).get("version"): l.get("corpus") for l in result["chain"] if l.get("corpus")}
    for corpus in corpora.values():
        print(f"corpus train_corpus {corpus['version']}  content sha256 {str(corpus.get('content_sha256'))[:16]}…  "
              f"manifest sha256 {str(corpus.get('manifest_sha256'))[:16]}…")
    print(f"days: {', '.join(result['days']) or 'none'}")
    print("firehose files:")
    for day, files in result["firehose_files"].items():
        for f in files:
            print(f"  {day}  {f['file']}  sha256 {f['sha256']}")


def uses_of(day: str) -> dict[str, Any]:
    from shopdistill_assets.training.lineage import uses_of_day

    store, lake = _store()
    manifests = [lake.read_manifest(asset, v) for asset in SNAPSHOT_ASSETS for v in lake.list_snapshots(asset)]
    return uses_of_day(store.all_lineage(), manifests, day)


def cmd_lineage(args: argparse.Namespace) -> int:
    if bool(args.checkpoint) == bool(args.day):
        raise CliError("lineage: give a CHECKPOINT (folder, stage/version or stage) or --day YYYY-MM-DD")
    if args.day:
        from datetime import date

        try:
            date.fromisoformat(args.day)
        except ValueError:
            raise CliError(f"lineage: --day {args.day!r} is not a date (YYYY-MM-DD)") from None
        result = uses_of(args.day)
        if args.json:
            print(json.dumps(result, indent=1))
            return 0
        print(f"day {args.day} fed {len(result['snapshots'])} snapshot(s) and {len(result['checkpoints'])} checkpoint(s)")
        for s in result["snapshots"]:
            print(f"  snapshot   {s['asset']} {s['version']} ({s['rows']} rows)")
        for c in result["checkpoints"]:
            how = "directly" if c["direct"] else "through its parent"
            print(f"  checkpoint {c['stage']}/{c['version']} (corpus {c['corpus_version']}, {how})")
        return 0
    result = lineage_of(args.checkpoint)
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        print_lineage(result)
    return 0


def add_parsers(sub: Any) -> None:
    tr = sub.add_parser("train", help="materialize training stages (each from the newest upstream checkpoint)")
    tr.add_argument("--stage", action="append", choices=STAGE_ORDER, default=[], help="repeatable; in chain order")
    tr.add_argument("--all", action="store_true", help="all five stages in order")
    tr.add_argument("--max-steps", type=int, help="optimizer steps per stage (default: one epoch)")
    tr.add_argument("--deepspeed", help="zero2 | zero3 | a JSON file (default: the launcher's)")
    tr.add_argument("--trainer-json", type=json_object,
                    help="more TRL config kwargs for every stage, a JSON object (checked before any run)")
    tr.add_argument("--rollout-samples", type=int, help="resft: rollouts per train problem (default 8)")
    tr.add_argument("--problems", type=int, help="roll out only the first N train-side problems")
    tr.add_argument("--no-eval", dest="eval", action="store_false", help="skip the held-out evaluation")
    tr.add_argument("--eval-samples", type=int, default=4, help="samples per held-out problem")
    tr.add_argument("--eval-limit", type=int, help="evaluate only the first N held-out problems")
    tr.set_defaults(func=cmd_train)

    li = sub.add_parser("lineage", help="what made a checkpoint (corpus, days, files), or what a day fed")
    li.add_argument("checkpoint", nargs="?", help="a checkpoint folder, stage/version, or stage (its newest)")
    li.add_argument("--day", help="YYYY-MM-DD: every corpus, dataset and checkpoint that used this day")
    li.add_argument("--json", action="store_true", help="print JSON")
    li.set_defaults(func=cmd_lineage)
