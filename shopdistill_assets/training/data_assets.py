"""Training inputs as assets: the problems rollouts run on, the rollouts, one dataset per stage.

    leak_clusters (newest day) + suites ─► train_problems     train-side problems with ground truth
    train_problems + sft checkpoint     ─► train_rollouts     k sandbox rollouts per problem, scored (a GPU job)
    train_problems + teacher endpoint   ─► teacher_rollouts   the teacher's rollouts, scored
    train_rollouts                      ─► resft_dataset      reward-1 rollouts (rejection sampling)
    teacher_rollouts                    ─► teacher_sft_dataset  the shortest success per problem
    train_corpus + train_rollouts       ─► kto_dataset        per-step desirable / undesirable rows
    teacher_sft_dataset                 ─► grpo_dataset       per-step prompts + the teacher's call

Every one of them (and `train_corpus`) carries the blocking check `train_side_only`: it fails
when any of its problems is held out, excluded or unknown to the newest leak split. Held-out
evaluation rollouts (`policy_eval`) are never an input here.
"""

# No `from __future__ import annotations`: Dagster reads the annotations of context and resources.
import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    Config,
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)
from pydantic import Field

from resources.checkpoint_store import CheckpointNotFound
from resources.checkpoints import CheckpointStoreResource
from resources.lake import LakeResource
from resources.launcher import TrainingLauncher
from shopdistill_assets import settings
from shopdistill_assets.corpus.corpus_parts import FINAL_OPTIONS
from shopdistill_assets.instance import project_home
from shopdistill_assets.split.assets import leak_clusters, train_corpus
from shopdistill_assets.split.heldout import HELDOUT_COLUMNS, GroundTruth, heldout_row, rows_to_problems
from shopdistill_assets.split.train_side import not_train_side, train_side_truths
from shopdistill_assets.training.lineage import merge_files
from shopdistill_assets.training.stages import STAGES
from shopdistill_assets.training.stages import rows as train_rows
from shopdistill_assets.training.stages.rollouts import rollout_rows

GROUP = "training_data"



# -- snapshots ----------------------------------------------------------------------------

def write_training_snapshot(lake: LakeResource, asset_name: str, table: pa.Table, manifest: dict[str, Any],
                            scratch: Path) -> tuple[str, str, str]:
    """Write a training snapshot (one Parquet part + manifest); (version, folder, content sha256).
    The version is the content hash: the same rows give the same version."""
    path = scratch / f"{asset_name}.parquet"
    pq.write_table(table, path, **FINAL_OPTIONS)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    version = f"v-{digest[:16]}"
    manifest = {"asset": asset_name, "version": version, "content_sha256": digest, "rows": table.num_rows,
                "created_at": datetime.now(UTC).isoformat(timespec="microseconds"), **manifest}
    folder = lake.write_snapshot_file(asset_name, version, path, manifest)
    path.unlink(missing_ok=True)
    return version, folder, digest


def latest_snapshot(context: AssetExecutionContext, lake: LakeResource, asset_name: str) -> tuple[str, dict[str, Any]]:
    """(version, manifest) of the snapshot an asset last materialized on this instance, or else
    the newest in the lake (by manifest `created_at`, then version)."""
    event = context.instance.get_latest_materialization_event(AssetKey(asset_name))
    mat = event.asset_materialization if event else None
    version = mat.metadata.get("version") if mat else None
    version = getattr(version, "value", version)
    known = lake.list_snapshots(asset_name)
    if version not in known:
        if not known:
            raise Failure(description=f"no {asset_name} snapshot in the lake: materialize {asset_name} first",
                          allow_retries=False)
        version = max(known, key=lambda v: (str(lake.read_manifest(asset_name, v).get("created_at", "")), v))
    return version, lake.read_manifest(asset_name, version)


def newest_leak_day(lake: LakeResource) -> str:
    days = lake.list_days("leak_clusters")
    if not days:
        raise Failure(description="no leak_clusters days in the lake: run the corpus and split assets first",
                      allow_retries=False)
    return days[-1]


def firehose_inventory(lake: LakeResource, days: list[str]) -> dict[str, list[dict[str, str]]]:
    return {d: lake.read_day("raw_firehose", d).select("file", "sha256").sort("file").to_dicts()
            for d in sorted(days) if lake.has_day("raw_firehose", d)}


def _provenance(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """Days and firehose files behind a derived snapshot: the union of its sources'."""
    days = sorted({d for m in manifests for d in m.get("days", [])})
    return {"days": days, "firehose_files": merge_files(*[m.get("firehose_files", {}) for m in manifests])}


def _snapshot_result(version: str, folder: str, digest: str, rows: int, **extra: Any) -> MaterializeResult:
    return MaterializeResult(data_version=DataVersion(digest), metadata={
        "dagster/row_count": rows, "version": version, "path": MetadataValue.path(folder), "content_sha256": digest,
        **extra})


# -- train_problems -----------------------------------------------------------------------

class TrainProblemsConfig(Config):
    as_of_day: str | None = Field(None, description="leak_clusters day to read (default: the newest)")
    suites: list[str] = Field(default_factory=lambda: settings.path_list(settings.SUITES),
                              description="suite files or folders with ground truth (default: HOME/arena/suites)")
    limit: int | None = Field(None, description="keep only the first N problems (by cluster id)")


@asset(group_name=GROUP, deps=[leak_clusters], kinds={"python", "parquet"},
       description="Train-side problems (newest leak split) that have ground truth: what rollouts run on.")
def train_problems(context: AssetExecutionContext, config: TrainProblemsConfig, lake: LakeResource) -> MaterializeResult:
    from shopdistill_assets.split.heldout import load_problems

    day = config.as_of_day or newest_leak_day(lake)
    leak = lake.read_day("leak_clusters", day)
    suite_paths = config.suites or [str(project_home() / "arena" / "suites")]
    ground_truth = GroundTruth([p for path in suite_paths for p in load_problems(Path(path))])
    train = leak.filter(pl.col("side") == "train")
    matched = train_side_truths(leak, ground_truth)  # one row per suite problem: its first phrasing
    # the problem under its one identity (the key leak_clusters files it under), as held-out rows are
    rows = [{**heldout_row(truth, leak_problem, cluster), "first_day": first_day}
            for truth, leak_problem, cluster, first_day in matched]
    frame = pl.DataFrame(rows, schema={**dict.fromkeys(HELDOUT_COLUMNS, pl.String), "first_day": pl.String})
    if config.limit is not None:
        frame = frame.head(config.limit)
    days = sorted({d for d in frame["first_day"].to_list() if d})
    manifest = {"as_of_day": day, "leak_clusters_day": day, "suites": suite_paths, "days": days,
                "firehose_files": firehose_inventory(lake, days), "train_side_problems_in_split": train.height}
    version, folder, digest = write_training_snapshot(lake, "train_problems", frame.to_arrow(), manifest,
                                                      lake.scratch_dir())
    return _snapshot_result(version, folder, digest, frame.height, as_of_day=day,
                            train_side_problems_in_split=train.height,
                            without_ground_truth=train.height - len(matched))


# -- rollouts -----------------------------------------------------------------------------

class RolloutsConfig(Config):
    samples: int = Field(8, description="rollouts per problem (k)")
    max_steps: int = Field(25, description="steps per episode")
    temperature: float = Field(0.7, description="sampling temperature")
    max_new_tokens: int = Field(512, description="per model turn (local checkpoints)")
    batch_size: int = Field(1, description="local checkpoints: concurrent turns decoded together")
    concurrency: int = Field(8, description="episodes in flight")
    request_timeout_s: float = Field(300.0, description="per model call")
    episode_time_limit_s: float = Field(300.0, description="deadline per episode: all its calls and tools (raise it "
                                                          "for a CPU-served checkpoint on a loaded machine)")
    limit: int | None = Field(None, description="roll out only the first N problems")
    catalog: str | None = Field(None, description="catalog folder (default HOME/arena/catalog)")
    endpoint: str | None = Field(None, description="an OpenAI-compatible URL already serving the policy (vLLM); "
                                                   "default: serve it here")
    model: str | None = Field(None, description="the model name at `endpoint`")


class TeacherRolloutsConfig(RolloutsConfig):
    samples: int = Field(2, description="rollouts per problem")
    temperature: float = Field(0.6, description="sampling temperature")
    scripted: str | None = Field("oracle", description="a scripted teacher when no endpoint is given: oracle (knows "
                                                       "the answers) or fair (decides from tool results alone)")


def _catalog(config: RolloutsConfig):
    from shopdistill_assets.sandbox import load_catalog

    return load_catalog(Path(config.catalog) if config.catalog else project_home() / "arena" / "catalog")


def _rollout(context: AssetExecutionContext, lake: LakeResource, config: RolloutsConfig, policy_factory,
             name: str, problems_version: str, problems_manifest: dict[str, Any], extra: dict[str, Any]):
    """Run the rollouts and write them as a snapshot of canonical rows + outcome columns."""
    from shopdistill_assets.agent.rollout import RolloutConfig, evaluate
    from shopdistill_assets.agent.server import serve

    rows = lake.read_snapshot("train_problems", problems_version).to_dicts()
    problems = rows_to_problems(rows)[: config.limit]
    if not problems:
        raise Failure(description="train_problems is empty: no train-side problem has ground truth", allow_retries=False)
    catalog = _catalog(config)
    cfg = RolloutConfig(samples=config.samples, max_steps=config.max_steps, temperature=config.temperature,
                        concurrency=config.concurrency or 8, request_timeout_s=config.request_timeout_s,
                        episode_time_limit_s=config.episode_time_limit_s)
    if config.endpoint:
        result = evaluate(config.endpoint, config.model or name, problems, catalog, cfg)
    else:
        with serve(policy_factory(problems, catalog), model_name=name) as server:
            result = evaluate(server.url, name, problems, catalog, cfg)
    frame = pl.DataFrame(rollout_rows(result, problems, rows), infer_schema_length=None)
    return _rollouts_snapshot(context, lake, frame.to_arrow(), name, config.samples, len(problems), result.summary(),
                              problems_version, problems_manifest, extra)


def _rollouts_snapshot(context: AssetExecutionContext, lake: LakeResource, table: pa.Table, name: str, samples: int,
                       problems: int, summary: dict[str, Any], problems_version: str, problems_manifest: dict[str, Any],
                       extra: dict[str, Any], **metadata: Any) -> MaterializeResult:
    """The rollout rows as a snapshot; its manifest names the problems, the policy and the outcome."""
    manifest = {"train_problems": problems_version, "policy": name, "samples": samples,
                "summary": {k: v for k, v in summary.items() if k in ("asr", "pass_at_1", "pass_at_k")},
                **_provenance([problems_manifest]), **extra}
    version, folder, digest = write_training_snapshot(lake, context.asset_key.path[-1], table, manifest,
                                                      lake.scratch_dir())
    successes = sum(1 for ok in table.column("success").to_pylist() if ok)
    context.log.info(f"{name}: {problems} problems x {samples}: success rate {summary['asr']:.3f}")
    return _snapshot_result(version, folder, digest, table.num_rows, problems=problems, success_rate=summary["asr"],
                            successes=successes, policy=name, errors=MetadataValue.json(summary["errors"]), **metadata)


class TrainRolloutsConfig(RolloutsConfig):
    max_new_tokens: int | None = Field(None, description="per model turn (default: 512 with hf, 2048 with vllm)")
    concurrency: int | None = Field(None, description="episodes in flight (default: 8 with hf, 128 with vllm; "
                                    "with `endpoint`, 8)")
    backend: str | None = Field(None, description="how the rollout job serves the checkpoint: vllm (`vllm serve` "
                                "beside it, tensor-parallel over the node's GPUs) or hf (transformers generate: the "
                                "CPU path); default vllm where stages run in GPU pods, hf locally")
    tensor_parallel_size: int | None = Field(None, description="vllm: GPUs the model is sharded over (default: the "
                                             "node's)")
    vllm_args: list[str] = Field(default_factory=list, description="vllm: more `vllm serve` flags, e.g. "
                                 "['--max-model-len', '20480']")


@asset(group_name=GROUP, deps=[train_problems, "sft_checkpoint"], kinds={"python", "parquet"}, pool="gpu",
       description="k sandbox rollouts per train-side problem from the newest sft checkpoint, scored "
                   "(the material of rejection-sampled re-SFT and of KTO's undesirable rows): a job beside "
                   "the model (vLLM in a GPU pod, or HF generate locally), launched like a training stage.")
def train_rollouts(context: AssetExecutionContext, config: TrainRolloutsConfig, lake: LakeResource,
                   checkpoints: CheckpointStoreResource, launcher: TrainingLauncher) -> MaterializeResult:
    from shopdistill_assets.training import rollout_job

    store = checkpoints.store()
    try:
        ref = store.latest("sft")
    except CheckpointNotFound as exc:
        raise Failure(description=str(exc), allow_retries=False) from None
    version, manifest = latest_snapshot(context, lake, "train_problems")
    name, extra = f"sft-{ref.version}", {"checkpoint": ref.to_dict()}
    if config.endpoint:  # a server already running (vLLM, an API): rolled out from here, as for the teacher
        return _rollout(context, lake, config, None, name, version, manifest, extra)
    run_key = context.run.root_run_id or context.run.run_id
    catalog = Path(config.catalog) if config.catalog else project_home() / "arena" / "catalog"
    try:
        values = rollout_job.job_values(config, ref=ref, name=name, store=store, launcher=launcher,
                                        catalog_uri=rollout_job.catalog_uri(catalog, store, launcher),
                                        problems_uri=lake.snapshot_version_uri("train_problems", version),
                                        run_key=run_key, run_id=context.run.run_id)
    except rollout_job.RolloutJobError as exc:
        raise Failure(description=f"train_rollouts: {exc}", allow_retries=False) from None
    reported = rollout_job.launch(context, store, launcher, values, run_key, context.run.run_id)
    if reported.get("status") != "rolled_out":
        raise Failure(description=f"train_rollouts: the rollout job reported no rows ({reported})")
    table = rollout_job.read_rows(reported["uri"], store, lake.scratch_dir())
    summary = {"asr": reported["success_rate"], "pass_at_1": reported.get("pass_at_1"),
               "pass_at_k": reported.get("pass_at_k"), "errors": reported.get("errors") or {}}
    job = {k: reported[k] for k in ("backend", "uri", "sha256", "wall_s", "rollout_s", "episodes_per_s",
                                    "tensor_parallel_size") if k in reported}
    return _rollouts_snapshot(context, lake, table, name, config.samples, int(reported["problems"]), summary, version,
                              manifest, {**extra, "rollout_job": job}, backend=job["backend"],
                              rollout_wall_s=job.get("wall_s", 0.0), episodes_per_s=job.get("episodes_per_s", 0.0))


@asset(group_name=GROUP, deps=[train_problems], kinds={"python", "parquet"},
       description="Rollouts of the teacher (any OpenAI-compatible endpoint; the oracle on the simulated "
                   "arena) on train-side problems, scored.")
def teacher_rollouts(context: AssetExecutionContext, config: TeacherRolloutsConfig, lake: LakeResource) -> MaterializeResult:
    version, manifest = latest_snapshot(context, lake, "train_problems")
    if not config.endpoint and config.scripted not in ("oracle", "fair"):
        raise Failure(description="teacher_rollouts needs an `endpoint` (+ `model`) or scripted='oracle' | 'fair'",
                      allow_retries=False)

    def policy(problems, catalog):
        from shopdistill_assets.agent.policies import FairPolicy, OraclePolicy

        return FairPolicy() if config.scripted == "fair" else OraclePolicy(problems, catalog)

    name = config.model or (config.scripted if not config.endpoint else "teacher")
    return _rollout(context, lake, config, policy, name, version, manifest,
                    {"teacher": {"endpoint": config.endpoint, "model": config.model, "scripted": config.scripted}})


# -- per-stage datasets ---------------------------------------------------------------------

def _dataset_result(context, lake, table: pa.Table, sources: list[tuple[str, str, dict[str, Any]]],
                    extra_manifest: dict[str, Any] | None = None, **metadata: Any) -> MaterializeResult:
    manifest = {"sources": {asset_name: version for asset_name, version, _ in sources},
                **_provenance([m for _, _, m in sources]), **(extra_manifest or {})}
    version, folder, digest = write_training_snapshot(lake, context.asset_key.path[-1], table, manifest,
                                                      lake.scratch_dir())
    problems = len(set(table.column("problem_id").to_pylist())) if table.num_rows else 0
    return _snapshot_result(version, folder, digest, table.num_rows, problems=problems, **metadata)


@asset(group_name=GROUP, deps=[train_rollouts], kinds={"python", "parquet"},
       description="Rejection sampling: the rollouts of train_rollouts with reward 1, as SFT rows.")
def resft_dataset(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    version, manifest = latest_snapshot(context, lake, "train_rollouts")
    rollouts = lake.read_snapshot("train_rollouts", version)
    kept = rollouts.filter(pl.col("success")).unique("messages", keep="first", maintain_order=True)
    table = train_rows.to_table(train_rows.sft_rows(kept.to_dicts(), "train_rollouts"), train_rows.SFT_SCHEMA)
    context.log.info(f"resft: {kept.height} of {rollouts.height} rollouts have reward 1")
    return _dataset_result(context, lake, table, [("train_rollouts", version, manifest)],
                           {"checkpoint": manifest.get("checkpoint")}, rollouts=rollouts.height, kept=kept.height)


@asset(group_name=GROUP, deps=[teacher_rollouts], kinds={"python", "parquet"},
       description="The teacher's successful rollouts, the shortest per problem, as SFT rows.")
def teacher_sft_dataset(context: AssetExecutionContext, lake: LakeResource) -> MaterializeResult:
    version, manifest = latest_snapshot(context, lake, "teacher_rollouts")
    rollouts = lake.read_snapshot("teacher_rollouts", version)
    kept = (rollouts.filter(pl.col("success")).sort(["problem_id", "n_steps", "sample"])
            .unique("problem_id", keep="first", maintain_order=True))
    table = train_rows.to_table(train_rows.sft_rows(kept.to_dicts(), "teacher_rollouts"), train_rows.SFT_SCHEMA)
    return _dataset_result(context, lake, table, [("teacher_rollouts", version, manifest)],
                           rollouts=rollouts.height, kept=kept.height)


class KtoDatasetConfig(Config):
    min_reasoning_score: float = Field(0.8, description="corpus traces need this judge score to be desirable")
    max_steps_per_trace: int = Field(4, description="assistant steps taken from each trajectory (the last ones)")
    max_rows: int | None = Field(None, description="cap per label (deterministic: by trace id)")


@asset(group_name=GROUP, deps=[train_corpus, train_rollouts], kinds={"python", "parquet"},
       description="Unpaired KTO rows: steps of successful, well-reasoned trajectories (desirable) and of "
                   "failed ones (undesirable), from train_corpus and train_rollouts.")
def kto_dataset(context: AssetExecutionContext, config: KtoDatasetConfig, lake: LakeResource) -> MaterializeResult:
    columns = ["trace_id", "problem_id", "query", "category", "messages", "tools"]
    corpus_version, corpus_manifest = latest_snapshot(context, lake, "train_corpus")
    corpus = lake.read_snapshot("train_corpus", corpus_version)
    desirable = [corpus.filter((pl.col("score") >= 1.0) & (pl.col("reasoning_score").fill_null(1.0)
                                                           >= config.min_reasoning_score)).select(columns)]
    undesirable = [corpus.filter(pl.col("score") <= 0.0).select(columns)]
    sources = [("train_corpus", corpus_version, corpus_manifest)]
    if lake.list_snapshots("train_rollouts"):
        rollouts_version, rollouts_manifest = latest_snapshot(context, lake, "train_rollouts")
        rollouts = lake.read_snapshot("train_rollouts", rollouts_version)
        desirable.append(rollouts.filter(pl.col("success")).select(columns))
        undesirable.append(rollouts.filter(~pl.col("success")).select(columns))
        sources.append(("train_rollouts", rollouts_version, rollouts_manifest))
    rows, traces = [], {}
    for label, parts in ((True, desirable), (False, undesirable)):
        # `messages` is structured in train_corpus and JSON text in rollouts: rows() reads both
        chosen = sorted((r for part in parts for r in part.to_dicts()), key=lambda r: r["trace_id"])
        chosen = chosen[: config.max_rows] if config.max_rows is not None else chosen
        traces[label] = len(chosen)
        rows += train_rows.kto_rows(chosen, label, "desirable" if label else "undesirable", config.max_steps_per_trace)
    table = train_rows.to_table(rows, train_rows.KTO_SCHEMA)
    n_desirable = sum(1 for r in rows if r["label"])
    return _dataset_result(context, lake, table, sources, {"corpus": corpus_version},
                           desirable=n_desirable, undesirable=len(rows) - n_desirable,
                           desirable_traces=traces[True], undesirable_traces=traces[False])


class GrpoDatasetConfig(Config):
    max_steps_per_trace: int = Field(8, description="teacher steps used per trajectory")
    max_prompt_chars: int = Field(48_000, description="leave out longer prompts (TRL does not truncate GRPO "
                                                      "prompts; ~16k tokens of Qwen3 at 3 characters a token)")


@asset(group_name=GROUP, deps=[teacher_sft_dataset, teacher_rollouts], kinds={"python", "parquet"},
       description="Dr. GRPO prompts: each step of the teacher's successful trajectories, with the teacher's "
                   "call there (step reward) and the problem's ground truth (episode reward).")
def grpo_dataset(context: AssetExecutionContext, config: GrpoDatasetConfig, lake: LakeResource) -> MaterializeResult:
    version, manifest = latest_snapshot(context, lake, "teacher_rollouts")
    rollouts = lake.read_snapshot("teacher_rollouts", version)
    kept = (rollouts.filter(pl.col("success")).sort(["problem_id", "n_steps", "sample"])
            .unique("problem_id", keep="first", maintain_order=True))
    rows = list(train_rows.grpo_rows(kept.to_dicts(), "teacher_rollouts", config.max_steps_per_trace,
                                     config.max_prompt_chars))
    truth = dict(kept.select("trace_id", "problem_json").iter_rows())
    table = train_rows.to_table(rows, train_rows.GRPO_SCHEMA)
    table = table.append_column("problem_json", pa.array([truth[r["trace_id"]] for r in rows], pa.string()))
    return _dataset_result(context, lake, table, [("teacher_rollouts", version, manifest)], trajectories=kept.height)


# -- the train-side check -----------------------------------------------------------------

# Every asset a stage trains on or rebuilds first (the Stage registry's datasets and rollouts): each gets the check.
TRAINING_INPUTS = list(dict.fromkeys(name for stage in STAGES.values() for name in (stage.dataset, *stage.rollouts)))


def check_train_side(lake: LakeResource, asset_name: str, version: str) -> AssetCheckResult:
    """Fail when any problem of the snapshot is not on the train side of the newest split."""
    problems = lake.read_snapshot(asset_name, version).select("problem_id", "query")
    leak_day = newest_leak_day(lake)
    bad = not_train_side(problems, lake.read_day("leak_clusters", leak_day))
    by_side = {side: n for side, n in bad.group_by("side").len().iter_rows()}
    return AssetCheckResult(
        passed=bad.height == 0,
        description=None if bad.height == 0 else
        f"{bad.height} problem(s) of {asset_name} {version} are not train-side as of {leak_day}: {by_side}",
        metadata={"version": version, "leak_clusters_day": leak_day, "problems": problems["problem_id"].n_unique(),
                  "not_train_side": bad.height, **{f"side/{k}": v for k, v in sorted(by_side.items())},
                  "examples": MetadataValue.json(bad.head(10).select("problem_id", "query", "side").to_dicts())})


def _train_side_check(asset_name: str):
    @asset_check(asset=asset_name, name="train_side_only", blocking=True,
                 description="Every problem in this training input is on the train side of the newest leak split "
                             "(held-out, excluded or unknown problems fail the check and block what trains on it).")
    def _check(context, lake: LakeResource) -> AssetCheckResult:
        event = context.instance.get_latest_materialization_event(AssetKey(asset_name))
        version = event.asset_materialization.metadata.get("version") if event else None
        version = getattr(version, "value", version)
        if not version:
            return AssetCheckResult(passed=False, description=f"{asset_name} has no materialized version")
        return check_train_side(lake, asset_name, version)

    return _check


TRAINING_DATA_ASSETS = [train_problems, train_rollouts, teacher_rollouts, resft_dataset, teacher_sft_dataset,
                        kto_dataset, grpo_dataset]
TRAINING_DATA_CHECKS = [_train_side_check(name) for name in TRAINING_INPUTS]
